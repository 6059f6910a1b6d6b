"""attnsvm.linear: the hard-margin SVM, gradient descent on the exponential and logistic losses (plain and
normalized, exact under saturation), and the quantities of the prelude's theorems, against direct computations."""

import dataclasses
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsvm import linear, svm

LOSS_FUNCTIONS = {"exponential": lambda m: torch.exp(-m), "logistic": lambda m: torch.log1p(torch.exp(-m))}


def data(seed=0, n=8, d=3):
    return linear.separable(n, d, seed=seed)


def autograd_loss(X, y, w, loss):
    """L(w) and its gradient by autograd, directly from the definition (moderate margins only)."""
    w = torch.tensor(w, requires_grad=True)
    value = LOSS_FUNCTIONS[loss](torch.tensor(y) * (torch.tensor(X) @ w)).mean()
    (grad,) = torch.autograd.grad(value, w)
    return float(value.detach()), grad.numpy()


# ------------------------------------------------------------------ SVM

def test_svm_kkt_and_independent_solver():
    X, y = data(seed=3, n=12, d=4)
    sol = linear.svm(X, y)
    m = linear.margins(X, y, sol.w)
    assert m.min() > 1 - 1e-12 and (sol.alpha >= 0).all() and (sol.alpha[~sol.support] == 0).all()
    assert np.allclose((sol.alpha * y) @ X, sol.w, atol=1e-12)  # stationarity
    assert abs(sol.alpha.sum() - sol.w @ sol.w) < 1e-10  # complementary slackness
    assert np.abs(linear.svm(X, y, solver="clarabel").w - sol.w).max() < 1e-7
    assert np.isclose(sol.margin, 1 / np.linalg.norm(sol.w))


def test_svm_batch_equals_single_problems_and_scale_is_exact():
    Xs, ys = zip(*(data(seed=s) for s in range(3)))
    batch = linear.svm(np.stack(Xs), np.stack(ys))
    for b in range(3):
        single = linear.svm(Xs[b], ys[b])
        assert np.allclose(batch.w[b], single.w, atol=1e-13) and (batch.support[b] == single.support).all()
    X, y = Xs[0], ys[0]
    tiny = linear.svm(X * 2.0**-40, y)  # the data scaled by a power of two: w_hat scales back exactly
    assert np.allclose(tiny.w * 2.0**-40, linear.svm(X, y).w, rtol=1e-12)


def test_svm_degenerate_support_vector_and_infeasible_data():
    sol = linear.svm([[1.0, 0.0], [1.0, 1.0]], [1.0, 1.0])
    assert sol.support.all() and np.allclose(sol.alpha, [1, 0], atol=1e-12)
    with pytest.raises(svm.InfeasibleSVM, match="not linearly separable"):
        linear.svm([[1.0, 0.0], [1.0, 0.0]], [1.0, -1.0])
    Xb = np.array([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [1.0, 0.0]]])
    with pytest.raises(svm.InfeasibleSVM, match=r"problem \(1,\)"):
        linear.svm(Xb, np.array([[1.0, 1.0], [1.0, -1.0]]))


@settings(max_examples=30)
@given(st.integers(0, 10**6), st.integers(1, 12), st.integers(1, 4))
def test_max_margin_property(seed, n, d):
    """No direction has a larger normalized margin than w_hat, and the margin deficit bounds the distance
    (the prelude's Proposition 'the margin controls the direction'), for random data and directions."""
    X, y = linear.separable(n, d, seed=seed)
    sol = linear.svm(X, y)
    u_hat = sol.w * sol.margin
    U = np.random.default_rng(seed).standard_normal((200, d))
    U /= np.linalg.norm(U, axis=1, keepdims=True)
    gam = linear.normalized_margin(X, y, U)
    assert gam.max() <= sol.margin * (1 + 1e-12)
    assert (np.linalg.norm(U - u_hat, axis=1) ** 2 <= 2 * (sol.margin - gam) / sol.margin + 1e-10).all()


# ------------------------------------------------------------------ losses and their derivatives

@pytest.mark.parametrize("loss", linear.LOSSES)
def test_loss_gradient_hessian_weights_against_direct_formulas(loss):
    X, y = data()
    w = np.array([0.3, -0.2, 0.5])
    value, grad = autograd_loss(X, y, w, loss)
    assert abs(np.exp(linear.log_loss(X, y, w, loss)) - value) < 1e-14
    assert np.allclose(linear.gradient(X, y, w, loss), grad, rtol=1e-12, atol=1e-15)
    h = 1e-5
    columns = [(linear.gradient(X, y, w + h * e, loss) - linear.gradient(X, y, w - h * e, loss)) / (2 * h)
               for e in np.eye(3)]
    assert np.allclose(linear.hessian(X, y, w, loss), np.array(columns).T, atol=1e-8)
    q = linear.weights(X, y, w, loss)
    assert abs(q.sum() - 1) < 1e-14 and np.allclose(-grad, q @ (y[:, None] * X) * np.linalg.norm(grad)
                                                    / np.linalg.norm(q @ (y[:, None] * X)), atol=1e-14)


@pytest.mark.parametrize("function", [linear.gradient, linear.hessian, linear.margins, linear.normalized_margin])
def test_inputs_are_validated_once(function, monkeypatch):
    calls = []
    original = linear._data
    monkeypatch.setattr(linear, "_data", lambda *args: calls.append(1) or original(*args))
    function(*data(), [0.3, -0.2, 0.5])
    assert len(calls) == 1


@pytest.mark.parametrize("loss", linear.LOSSES)
def test_log_loss_is_exact_under_saturation(loss):
    X, y = np.array([[1.0], [2.0]]), np.ones(2)
    # L(w) = (e^-1000 + e^-2000) / 2 for the exponential loss (log1p(x) = x there for the logistic loss too)
    assert abs(linear.log_loss(X, y, [1000.0], loss) - (-1000 - np.log(2))) < 1e-12
    assert linear.weights(X, y, [1000.0], loss).tolist() == [1.0, 0.0]
    assert np.isfinite(linear.log_loss(X, y, [-1e300], loss))


def test_smoothness_bounds_the_hessian_on_the_sublevel_set():
    X, y = data(seed=5)
    radius = np.linalg.norm(X, axis=1).max()
    assert np.isclose(linear.smoothness(X, y), radius**2)
    assert np.isclose(linear.smoothness(X, y, loss="logistic"), radius**2 * np.log(2))
    w0 = np.array([0.5, -1.0, 0.2])
    beta = linear.smoothness(X, y, w0, loss="logistic")
    assert np.isclose(beta, radius**2 * np.exp(linear.log_loss(X, y, w0, "logistic")))


# ------------------------------------------------------------------ gradient descent

@pytest.mark.parametrize("loss", linear.LOSSES)
@pytest.mark.parametrize("normalized", [False, True])
def test_gd_steps_are_the_definition(loss, normalized):
    X, y = data(seed=1)
    run = linear.gd(X, y, lr=0.3, steps=5, loss=loss, normalized=normalized)
    for k in range(5):
        g = linear.gradient(X, y, run.w[k], loss)
        step = g / np.linalg.norm(g) if normalized else g
        assert np.allclose(run.w[k + 1], run.w[k] - 0.3 * step, rtol=1e-13, atol=1e-15)
    assert np.allclose(run.log_loss, linear.log_loss(X, y, run.w, loss), atol=1e-13)


def test_gd_schedule_recording_batch_and_init():
    X, y = data(seed=2)
    run = linear.gd(X, y, lr=0.5, steps=9, normalized=True, schedule="sqrt", init=np.ones(3))
    assert run.steps.tolist() == list(range(10)) and np.allclose(run.w[0], 1)
    assert np.allclose(np.linalg.norm(np.diff(run.w, axis=0), axis=1), 0.5 / np.sqrt(np.arange(1, 10)))
    every = linear.gd(X, y, lr=0.5, steps=10, record_every=4)
    assert every.steps.tolist() == [0, 4, 8, 10]
    at = linear.gd(X, y, lr=0.5, steps=10, record_at=[3, 10])
    assert at.steps.tolist() == [3, 10] and np.allclose(at.w, linear.gd(X, y, lr=0.5, steps=10).w[[3, 10]])
    Xs, ys = zip(*(data(seed=s) for s in range(3)))
    batch = linear.gd(np.stack(Xs), np.stack(ys), lr=0.5, steps=20, record_every=20)
    for b in range(3):
        assert np.allclose(batch.w[:, b], linear.gd(Xs[b], ys[b], lr=0.5, steps=20, record_every=20).w, atol=1e-14)


def test_normalized_gd_is_exact_far_out():
    """Far out every e^-m_i underflows; the direction of a step is still exact (it is shift invariant)."""
    X, y = data(seed=4)
    w_far = linear.svm(X, y).w * 5000  # every margin >= 5000
    step = linear.gd(X, y, lr=0.1, steps=1, normalized=True, init=w_far).w[-1] - w_far
    m = y * (X @ w_far)
    v = (np.exp(m.min() - m) * y) @ X
    assert np.allclose(step, 0.1 * v / np.linalg.norm(v), atol=1e-15) and np.isfinite(linear.log_loss(X, y, w_far))


@settings(max_examples=20)
@given(st.integers(0, 10**6), st.sampled_from(linear.LOSSES))
def test_descent_lemma_property(seed, loss):
    """With lr = 1 / smoothness(X, y, w0), every step decreases the loss by at least lr/2 ||grad||^2 (the
    prelude's descent lemma), from a random start."""
    X, y = linear.separable(6, 2, seed=seed)
    w0 = np.random.default_rng(seed).standard_normal(2)
    lr = 1 / linear.smoothness(X, y, w0, loss)
    run = linear.gd(X, y, lr=lr, steps=50, loss=loss, init=w0)
    L = np.exp(run.log_loss)
    g2 = (linear.gradient(X, y, run.w[:-1], loss) ** 2).sum(-1)
    assert (L[1:] <= (L[:-1] - lr / 2 * g2) * (1 + 1e-12) + 1e-300).all()


# ------------------------------------------------------------------ the theorem's quantities

def test_offset_and_residual():
    X, y = data(seed=3, n=12, d=4)
    sol = linear.svm(X, y)
    w_tilde = linear.offset(X, y, 0.25, solution=sol)
    assert np.allclose(linear.margins(X, y, w_tilde)[sol.support], np.log(0.25 / sol.alpha[sol.support]))
    w = np.array([[1.0, 2.0, 3.0, 4.0], [0.0, 1.0, 0.0, 1.0]])
    assert np.allclose(linear.residual(X, y, w, [1, 10], solution=sol), w - np.log([[1], [10]]) * sol.w)
    with pytest.raises(ValueError, match=r"hypothesis \(H\) fails for X, y, .*support vectors \[1\]"):
        linear.offset([[1.0, 0.0], [1.0, 1.0]], [1.0, 1.0])


@pytest.mark.parametrize("h", [1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8, 1e-9])
def test_offset_refuses_nearly_degenerate_data(h):
    """x1 = (1, 0), x2 = (1, h), y = (1, 1): w_hat = (1, 0) with unique multipliers (1, 0) for every h > 0, so (H)
    fails; the solvers' multipliers for x2 are off by up to ~eps / h^2, and offset must not read them as positive."""
    X, y = np.array([[1.0, 0.0], [1.0, h]]), np.ones(2)
    sol = linear.svm(X, y)
    assert sol.support.all() and np.allclose(sol.w, [1.0, 0.0], rtol=0, atol=1e-8)
    condition = np.linalg.cond(X)
    with pytest.raises(ValueError, match=r"hypothesis \(H\) fails for X, y, or float64 cannot tell") as error:
        linear.offset(X, y, solution=sol)
    message = str(error.value)
    assert "support vectors [1]" in message or "support vectors [0, 1]" in message
    assert f"condition number {condition:.1e}" in message


def test_offset_finds_the_multipliers_of_h_whatever_the_solver_returns():
    """Dependent support vectors: ex-pre-dependent ((H) holds for alpha = (1/3, 1/3, 1/3) only, the solver returns
    the vertex (1, 0, 0)) and a repeated point (alpha = (1/2, 1/2))."""
    X3, c = np.array([[1.0, 0.0], [1.0, 1.0], [1.0, -1.0]]), 0.2
    assert np.allclose(linear.svm(X3, np.ones(3)).alpha, [1, 0, 0], atol=1e-12)
    assert np.allclose(linear.offset(X3, np.ones(3), c), [np.log(3 * c), 0], rtol=0, atol=1e-12)
    assert np.allclose(linear.offset([[1.0, 0.0], [1.0, 0.0]], [1.0, 1.0], c), [np.log(2 * c), 0], atol=1e-12)


@settings(max_examples=40)
@given(st.integers(0, 10**6), st.integers(1, 10), st.integers(1, 5), st.booleans())
def test_offset_solves_the_equations_of_h(seed, n, d, repeat):
    """The alpha_i = c e^{-m_i(w_tilde)} are dual multipliers (stationarity), w_tilde is in the row space of the
    support vectors (minimum norm), and w_tilde does not depend on which multipliers the solver returned. The data
    are rotated into R^(d+1), so the support vectors never span the space and the minimum-norm check can fail."""
    X, y = linear.separable(n, d, seed=seed)
    rotation = np.linalg.qr(np.random.default_rng(seed).standard_normal((d + 1, d + 1)))[0]
    X = np.c_[X, np.zeros(n)] @ rotation
    if repeat:  # a repeated point: dependent support vectors whenever it is one
        X, y = np.r_[X, X[:1]], np.r_[y, y[:1]]
    sol = linear.svm(X, y)
    Z = (y[:, None] * X)[sol.support]
    assert np.linalg.matrix_rank(Z) < X.shape[1]  # a null space for a wrong w_tilde to have a component in
    w_tilde = linear.offset(X, y, 0.3, solution=sol)
    alpha = 0.3 * np.exp(-(Z @ w_tilde))
    assert np.abs(alpha @ Z - sol.w).max() <= 1e-10 * np.abs(sol.w).max()
    assert np.allclose(w_tilde, np.linalg.pinv(Z) @ (Z @ w_tilde), atol=1e-10)
    if not repeat and np.linalg.matrix_rank(Z) == len(Z):  # unique multipliers: the solver's
        assert np.allclose(alpha, sol.alpha[sol.support], rtol=1e-8)


def test_support_is_decided_at_the_accuracy_of_the_margins():
    """A point 5e-10 off the margin is not a support vector (the margins are exact to ~1e-15 here), so (H) is
    decided for the true support: it fails for the first data (alpha = (1, 0)) and gives w_tilde = (log 2, 0) for the
    second (alpha = (1/2, 1/2)); the interior-point solver, accurate to ~1e-9, finds the support vectors of
    random data that a fixed tolerance of 1e-9 missed."""
    X = np.array([[1.0, 0.0], [1.0, 1.0], [1 + 5e-10, -1.0]])
    assert linear.svm(X, np.ones(3)).support.tolist() == [True, True, False]
    with pytest.raises(ValueError, match=r"hypothesis \(H\) fails for X, y, .*support vectors \[1\]"):
        linear.offset(X, np.ones(3))
    X = np.array([[1.0, -1.0], [1.0, 1.0], [1 + 5e-10, 0.5]])
    assert linear.svm(X, np.ones(3)).support.tolist() == [True, True, False]
    assert np.allclose(linear.offset(X, np.ones(3)), [np.log(2), 0], rtol=0, atol=1e-12)
    for seed in (42, 77, 85, 117, 132, 189):
        X, y = data(seed=seed)
        exact, interior = linear.svm(X, y), linear.svm(X, y, solver="clarabel")
        assert (interior.support == exact.support).all()
        assert np.allclose(linear.offset(X, y, solution=interior), linear.offset(X, y, solution=exact), atol=1e-6)


@pytest.mark.parametrize("delta", [1e-6, 1e-8, 1e-9, 1e-10])
def test_an_inexact_solver_never_marks_a_point_off_the_margin_silently(delta):
    """x3 = (1 + delta, 0) is off the margin of x1, x2 = (1, -+0.1) (alpha = (1/2, 1/2, 0), w_tilde = (log 2, 0)).
    Clarabel gives x3 a multiplier of up to 0.3 for delta <= 1e-8; the face {x1, x2, x3} then fails the KKT conditions
    (x3's margin is not 1 under w_S) and svm answers from the face {x1, x2}, returning its w_S; offset refuses the
    solver's raw solution with x3 marked."""
    X, y = np.array([[1.0, -0.1], [1.0, 0.1], [1 + delta, 0.0]]), np.ones(3)
    exact = linear.svm(X, y)
    assert exact.support.tolist() == [True, True, False]
    assert np.allclose(linear.offset(X, y, solution=exact), [np.log(2), 0], rtol=0, atol=1e-12)
    interior = linear.svm(X, y, solver="clarabel")
    assert interior.support.tolist() == [True, True, False]
    assert np.abs(linear.margins(X, y, interior.w) - [1, 1, 1 + delta]).max() <= 1e-15
    w, alpha = linear._clarabel(y[:, None] * X)  # max ||x_i|| is 1 to within 2^(1/2): the rows svm solves
    if delta >= 1e-6:
        return
    assert alpha[2] > 1e-4  # the multiplier that marked x3 a support vector
    raw = linear.SVM(w=w, alpha=alpha, support=np.ones(3, bool), margin=1 / np.linalg.norm(w))
    with pytest.raises(ValueError, match=r"solution.support must mark .* misses \[\] and marks \[2\] off"):
        linear.offset(X, y, solution=raw)


@pytest.mark.parametrize("h, delta", [(1e-4, 1e-8), (1e-3, 1e-10), (1e-4, 1e-10), (0.1, 1e-6)])
def test_svm_answers_exactly_on_an_ill_conditioned_face(h, delta):
    """x3 = (1 + delta, 0, 1) is delta off the margin of x1, x2 = (1, -+h, 0) (w_hat = (1, 0, 0)); the face of all
    three has w_S = (1, 0, -delta) with x3's multiplier -delta, which a sign tolerance growing like cond^2 = 1/h^2
    accepted. Both solvers must mark x1, x2 only and return w with x3's margin 1 + delta to rounding."""
    X, y = np.array([[1, -h, 0], [1, h, 0], [1 + delta, 0, 1]]), np.ones(3)
    for solver in ("nnls", "clarabel"):
        sol = linear.svm(X, y, solver=solver)
        assert sol.support.tolist() == [True, True, False]
        assert abs(linear.margins(X, y, sol.w)[2] - 1 - delta) <= 1e-15


@pytest.mark.parametrize("h, deltas", [(1e-3, [3e-14, 1e-13]), (1e-5, [3e-14, 1e-12, 3e-11]),
                                       (1e-7, [3e-14, 1e-11, 1e-9])])
def test_exact_solver_decides_a_point_near_the_margin_of_dependent_points(h, deltas):
    """x3 = (1 + delta, 0) next to x1, x2 = (1, -+h), in the bands where the exact solver raised SolverError: it
    answers w = (1, 0) with x1, x2 marked and x3 not (its margin 1 + delta, delta >= 3e-14, is one float64 tells from
    1: the accuracy of a margin follows the point's own direction, not ||z_i|| / sigma_min(Z_A) ~ 1 / h), so offset
    gives (log 2, 0) to rounding, not the (log 3, 0) of x3 marked."""
    for delta in deltas:
        X, y = np.array([[1, -h], [1, h], [1 + delta, 0]]), np.ones(3)
        sol = linear.svm(X, y)
        assert sol.support.tolist() == [True, True, False] and np.allclose(sol.w, [1, 0], rtol=0, atol=1e-8)
        # w_tilde_2 = (log alpha_1 - log alpha_2) / (2 h) carries the rounding of the logs divided by h (see offset)
        assert (np.abs(linear.offset(X, y) - [np.log(2), 0]) <= [1e-12, 1e-15 / h]).all()


def padded(D, s, delta):
    """x1, x2 = (1, -+0.1, 0, ...), x3 = (1 + delta, 0, s, 0, ...) and the unit vectors e_j, j >= 3, all y = 1:
    w_hat = (1, 0, 0, 1, ..., 1) with x3 off the margin by delta; the face with x3 has the multiplier
    a_3 ~ -delta / s^2, within its rounding, and a w_S 23% from w_hat at D = 60, s = 1e-10, delta = 1.8e-10."""
    X = np.zeros((D, D))
    X[0, :2], X[1, :2], X[2, [0, 2]] = [1, -0.1], [1, 0.1], [1 + delta, s]
    X[range(3, D), range(3, D)] = 1.0
    return X, np.ones(D), np.r_[1.0, 0.0, 0.0, np.ones(D - 3)]


@pytest.mark.parametrize("D, s, delta", [(30, 1e-8, 1.8e-11), (60, 1e-8, 1e-10), (60, 1e-10, 1.8e-10)])
def test_svm_takes_the_smaller_face_when_a_multiplier_vanishes(D, s, delta):
    """On ``padded`` data the face {x1, x2, x3, e_j} passes the KKT conditions to rounding; x3's multiplier is ~ 0, so
    svm tries the face without x3, which passes too and has the smaller ||w||: both solvers return w_hat."""
    X, y, w_hat = padded(D, s, delta)
    for solver in ("nnls", "clarabel"):
        sol = linear.svm(X, y, solver=solver)
        assert sol.support[:3].tolist() == [True, True, False] and sol.support[3:].all()
        assert np.linalg.norm(sol.w - w_hat) <= 1e-14 * np.linalg.norm(w_hat)


def test_svm_keeps_a_support_vector_whose_multiplier_the_solver_put_on_a_parallel_point():
    """x0 = (1 + 1e-14) x5 (x5 the only support vector): the exact solver puts the multiplier on x0; the face
    {x0, x5} passes with a_5 ~ 0, but the face {x0} leaves x5 1e-14 below the margin, more than the rounding of its
    margin, so svm keeps x5 marked rather than answer from {x0}."""
    Z = np.array([[-0.02898042896636593, -0.13443353541668918, -0.12151306878134706, 0.0268094054555334],
                  [0.06907188743941316, -0.4282649874803255, 0.03296477948472644, -0.33342757614408597],
                  [0.030068645713947892, -0.7392703904362207, 0.1301411326815983, -0.15151826923630635],
                  [0.06885842312415237, -0.4277585261526088, 0.03271834263710531, -0.33304020196379375],
                  [0.4552064258219856, -0.23600298440817133, -0.47773998172281223, -0.7133401790901005],
                  [-0.028980428966365646, -0.13443353541668787, -0.12151306878134586, 0.02680940545553314]])
    sol = linear.svm(Z, np.ones(6))
    assert sol.support[5] and not sol.support[1:5].any()
    assert linear.margins(Z, np.ones(6), sol.w).min() >= 1 - 1e-15


def test_clarabel_refuses_a_face_farther_than_its_accuracy(monkeypatch):
    """Where the walk ends on a face whose w_S is farther from the interior-point solution than the solver's accuracy
    (from its duality gap), svm(solver="clarabel") refuses rather than return w_S: here the face with x3 of ``padded``
    data, forced (w_S 23% from w_hat)."""
    X, y, w_hat = padded(60, 1e-10, 1.8e-10)

    def wide(Z, w, alpha):
        w_S, a, _ = linear._face(Z, np.ones(len(Z), bool), alpha)
        return (np.ones(len(Z), bool), w_S, np.maximum(a, 0.0)), None

    monkeypatch.setattr(linear, "_support", wide)
    with pytest.raises(ValueError, match=r"solver='clarabel' cannot certify .* more than its accuracy .*solver='nnls'"):
        linear.svm(X, y, solver="clarabel")


def test_a_given_solution_whose_support_no_face_certifies_is_refused(monkeypatch):
    """offset and residual refuse a solution for which the walk over faces from its (w, alpha) ends without a face
    that satisfies the KKT conditions (forced here), naming the points near the margin and the fix."""
    X, y = data(seed=3)
    sol = linear.svm(X, y)
    monkeypatch.setattr(linear, "_support", lambda Z, w, alpha: (None, np.array([0, 2])))
    for call in (lambda: linear.offset(X, y, solution=sol), lambda: linear.residual(X, y, sol.w, 2.0, solution=sol)):
        with pytest.raises(ValueError, match=r"solution.support is ambiguous: the points \[0, 2\] .*solution=None"):
            call()


def test_svm_walk_does_not_cycle_between_faces():
    """Clarabel's solution of these points (x1 and x3 nearly equal, 9e-9 off the margin of x2, x3) starts the walk at
    {x1, x2, x3}, overdetermined; dropping x3 (farthest off) led to {x1, x2}, which re-added x3, a cycle that refused
    valid data. Dropping the point whose removal leaves the smallest residual and keeps it feasible, x1, and never
    re-adding a dropped point, both solvers answer the exact support {x2, x3}."""
    Z = np.array([[-0.2940378385092456, 0.14330338267113146], [-0.14588659379608432, -0.5180273420263898],
                  [-0.2940378100788135, 0.14330326643877886], [-0.6774446844992937, -0.1671446789528763],
                  [-0.038080047124628466, -0.9992746919696236]])
    exact, interior = linear.svm(Z, np.ones(5)), linear.svm(Z, np.ones(5), solver="clarabel")
    assert exact.support.tolist() == interior.support.tolist() == [False, True, True, False, False]
    assert np.allclose(interior.w, exact.w, rtol=0, atol=1e-12)


@pytest.mark.parametrize("Z, support", [
    ([[-0.118143553478974, 0.5243074839947023, 0.25778437735554266],
      [0.1127485831048964, -0.21330917323355306, 0.8012420031484748],
      [0.16131131450512695, -0.36844949086421436, 0.9155455381872216],
      [-0.11814355283872414, 0.5243074766554807, 0.2577843801320478],
      [0.02051931371122485, 0.6427980635815426, 0.542673204628597]], [False, True, False, True, False]),
    ([[0.07854961175619649, -0.3077181842255355, 0.0469890567202153, 0.4494527318644385],
      [0.18703490036688822, 0.29983445598265396, 0.935168289126435, 0.024031563883167698],
      [0.36375472548338783, -0.33635566038051407, -0.04751043005329383, 0.4224779806371578],
      [0.18703480479761522, 0.2998326640666996, 0.9351651705439993, 0.024032095545192003],
      [-0.3749176835226544, -0.2621854843173642, 0.1972403131314565, 0.4923417610264672]],
     [True, False, False, True, True])])
def test_clarabel_finds_the_face_where_its_walk_takes_a_wrong_turn(Z, support):
    """Near-duplicate points within Clarabel's accuracy of the margin: the walk drops a true support vector and may
    not add it back; trying every face of the points near the margin finds the exact support (rational KKT)."""
    Z = np.array(Z)
    exact, interior = linear.svm(Z, np.ones(5)), linear.svm(Z, np.ones(5), solver="clarabel")
    assert exact.support.tolist() == interior.support.tolist() == support
    np.testing.assert_allclose(interior.w, exact.w, rtol=1e-12)


def test_svm_walks_to_a_feasible_face():
    """The feasibility check: from a solution whose multipliers sit on x1 alone (w = (1, 0)), x2 = (1, -1) has
    margin 1 but x3 = (0.5, 1) has margin 0.5; only adding x3 gives the KKT conditions, and the support must say so."""
    Z = np.array([[1.0, 0.0], [1.0, -1.0], [0.5, 1.0]])
    exact = linear.svm(Z, np.ones(3))
    decided, _ = linear._support(Z, np.array([1.0, 0.0]), np.array([1.0, 0.0, 0.0]))
    assert decided is not None and (decided[0] == exact.support).all() and not decided[0][0] and decided[0][2]
    assert np.allclose(decided[1], exact.w, rtol=0, atol=1e-14)


def test_svm_decides_a_zero_multiplier_support_vector_with_either_solver():
    """A point planted on the margin in floating point, with multiplier 0 (the interior-point solver puts it 3e-5 off
    the margin): both solvers mark it, but in exact arithmetic on the data it lies off the margin (by 1e-14), so
    offset leaves it out, for both solutions, and returns the offset of the data without it."""
    X, y = data(seed=1, n=20, d=5)
    w_hat = linear.svm(X, y).w
    v = np.random.default_rng(1).standard_normal(5)
    v -= v @ w_hat / (w_hat @ w_hat) * w_hat
    X2, y2 = np.r_[X, [w_hat / (w_hat @ w_hat) + 3 * v / np.linalg.norm(v)]], np.r_[y, 1.0]
    exact, interior = linear.svm(X2, y2), linear.svm(X2, y2, solver="clarabel")
    assert exact.support[-1] and (interior.support == exact.support).all()
    without = linear.offset(X, y)
    for sol in (exact, interior):
        np.testing.assert_allclose(linear.offset(X2, y2, solution=sol), without, rtol=1e-9)


@pytest.mark.parametrize("solver", ["nnls", "clarabel"])
@pytest.mark.parametrize("ulps, expected", [(0, np.log(3)), (1, np.log(2)), (2, np.log(2)), (8, np.log(2)),
                                            (-1, 0.0), (-8, 0.0)])
def test_offset_decides_a_point_within_rounding_of_the_margin_exactly(ulps, expected, solver):
    """x = (1, 0.5), (1, -0.5), (x_1, 0) with x_1 ``ulps`` floats away from 1: exactly on the margin the three
    points share (H) (log 3); one float outside, the third is no support vector (log 2); one float inside, it alone
    is (w_tilde ~ 0). float64 cannot tell these margins from 1, so offset decides them in exact arithmetic."""
    x_1 = 1.0
    for _ in range(abs(ulps)):
        x_1 = np.nextafter(x_1, np.sign(ulps) * np.inf)
    X, y = np.array([[1.0, 0.5], [1.0, -0.5], [x_1, 0.0]]), np.ones(3)
    assert linear.svm(X, y).support.all()  # the support rule marks all three: rounding cannot tell
    solution = linear.svm(X, y, solver=solver)
    np.testing.assert_allclose(linear.offset(X, y, solution=solution), [expected, 0.0], rtol=0, atol=1e-12)


U = 2.0**-52


@pytest.mark.parametrize("X, expected", [
    ([[1, .5], [1, -.5], [1 + U, 0], [1 + U, .25]], [np.log(2), 0]),  # two points just outside the margin
    ([[1, .5], [1, -.5], [1 + U, 0], [1 + U, 0]], [np.log(2), 0]),  # a duplicate
    ([[1, .5], [1, -.5], [1 + 8 * U, 0], [1 + 3 * U, -.25]], [np.log(2), 0]),
    ([[1, .5], [1, -.5], [1 - 64 * U, 0]], [0, 0]),  # 64 floats inside: the third point alone is the support
    ([[1, .5], [1, -.5], [1 + 73 * U, -2]], [np.log(2), 0]),  # outside the support's cone
    ([[2, 0], [0, 1], [2, 2.0**-1074]], [np.log(2), 0]),  # a subnormal entry: its margin is 1 + 2^-1074, not 1
])
def test_offset_decides_several_points_near_the_margin_exactly(X, expected):
    """Points a few floats from the margin, found by reviewers where a point-by-point decision, or one on data
    scaled into subnormals, answered wrongly: a face near the support that certifies the SVM in exact arithmetic
    decides them."""
    np.testing.assert_allclose(linear.offset(np.array(X, float), np.ones(len(X))), expected, rtol=0, atol=1e-12)


PYRAMID = [[1, 1, 0], [1, -1, 0], [1, 0, 1], [1, 0, -1]]  # w_hat = (1, 0, 0), alpha = 1/4 each under (H)
HEXAGON = [[1, 1, 0], [1, .5, .75], [1, -.5, .75], [1, -1, 0], [1, -.5, -.75], [1, .5, -.75]]  # alpha = 1/6 each


@pytest.mark.parametrize("solver", ["nnls", "clarabel"])
@pytest.mark.parametrize("X, expected", [
    (PYRAMID + [[1 + U, .5, .5], [1 + U, -.5, .5], [1 + 2 * U, 0, -.5]], [np.log(4), 0, 0]),
    (HEXAGON + [[1 + U, 0, .25], [1 + U, .25, 0]], [np.log(6), 0, 0]),
    ([[1, .5], [1, -.5]] + [[1 + k * U, 0.01 * k] for k in range(1, 21)], [np.log(2), 0]),
])
def test_offset_decides_a_degenerate_support_far_from_the_solvers_face(X, expected, solver):
    """Dependent support vectors (four or six on the margin in R^3) and points one or two floats off the margin,
    which both solvers mark: the exact SVM's face is several points away from the solver's support, so no face
    within one point of it certifies the SVM. offset finds it by Lawson and Hanson's NNLS in exact arithmetic on
    the candidates (both solvers were refused before)."""
    X = np.array(X, float)
    solution = linear.svm(X, np.ones(len(X)), solver=solver)
    assert solution.support.sum() > np.linalg.matrix_rank(X) + 1  # marked: more than a face and one point
    np.testing.assert_allclose(linear.offset(X, np.ones(len(X)), solution=solution), expected, rtol=0, atol=1e-12)


def test_offset_computes_exact_margins_only_near_the_margin():
    """2000 points far from the margin and 24 within 20 floats of it (3 inside, 1 on it): float64 decides the far
    ones against its rounding bound (``_undecided``), as rational arithmetic does, and exact margins are computed
    only for the points float64 cannot tell from 1 (before, every face tried computed all of them exactly); with
    the 20 outside, offset answers log 2."""
    rng = np.random.default_rng(0)
    far = np.c_[1 + rng.uniform(1e-9, 3, 2000), rng.uniform(-1, 1, 2000)]
    near = np.array([[1 + k * U, 0.01 * k] for k in range(-3, 21)])
    Z = np.r_[[[1, .5], [1, -.5]], near, far]
    undecided, below = linear._undecided(Z, [Fraction(1), Fraction(0)])
    margins = np.array([Fraction(z[0]) for z in Z])  # exact, under w = (1, 0)
    assert below and (margins < 1).any()  # the points inside the margin
    assert (undecided[:2]).all() and not undecided[26:].any()  # on the margin: undecided; far: decided
    assert all(abs(m - 1) <= 21 * Fraction(U) for m in margins[undecided])
    assert (~undecided | (np.abs(Z[:, 0] - 1) <= 1e-14)).all()
    X = np.r_[[[1, .5], [1, -.5]], near[4:], far[:200]]  # k = 1, ..., 20 floats outside (svm is slow on 2000)
    np.testing.assert_allclose(linear.offset(X, np.ones(len(X))), [np.log(2), 0], rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_undecided_margins_are_on_the_side_float64_shows(seed):
    """``_undecided``'s rounding bound is valid: every point it decides has an exact margin other than 1, on the side
    of 1 its float64 margin is on (rows scaled to exact margins near 1, some moved by one float, w rational with
    62-bit terms and some entries near 2^-1060, rows near 2^-1000 with subnormal entries)."""
    rng = np.random.default_rng(seed)
    for trial in range(12):
        d, kind = int(rng.choice([1, 2, 20, 200])), trial % 4
        w = [Fraction(int(rng.integers(1, 2**62)) * int(rng.choice([-1, 1])), int(rng.integers(1, 2**62)))
             * Fraction(2.0 ** int(rng.integers(-30, 30))) * (Fraction(2) ** -1060 if kind == 3 and rng.random() < .5
                                                              else 1) for _ in range(d)]
        Z = rng.standard_normal((12, d)) * 2.0 ** rng.integers(-40, 40, (12, d))
        if kind == 2:
            Z *= 2.0**-1000
            Z[rng.random((12, d)) < .3] = 5e-324 * rng.integers(-50, 50)
        for row in Z:
            margin = sum((Fraction(a) * b for a, b in zip(row, w)), Fraction(0))
            if margin:
                with np.errstate(all="ignore"):
                    row /= float(margin)
                if rng.random() < .5:
                    i = rng.integers(d)
                    row[i] = np.nextafter(row[i], np.inf * rng.choice([-1, 1]))
        if not np.isfinite(Z).all():
            continue
        undecided, _ = linear._undecided(Z, w)
        floats = Z @ np.array([float(v) for v in w])
        for row, undecided_j, float_margin in zip(Z, undecided, floats):
            exact = sum((Fraction(a) * b for a, b in zip(row, w)), Fraction(0))
            assert undecided_j or (exact != 1 and (exact < 1) == (float_margin < 1)), (seed, trial, d)


def test_exact_rank_of_support_vectors():
    """The rank in exact arithmetic: 2 for (1, -h), (1, 2 h) at h = 1e-20 (float64's singular values say 1), 2 for a
    third row twice the first (exactly), 3 when one entry of it moves by one float."""
    assert linear._exact_rank(np.array([[1, -1e-20], [1, 2e-20]])) == 2
    rows = np.array([[0.1, 0.7, 0.3], [0.2, 0.9, -0.4], [0.2, 1.4, 0.6]])
    assert linear._exact_rank(rows) == 2
    assert linear._exact_rank(np.tile(rows, (11, 1))) is None  # 33 rows: more than EXACT_MAX, not decided
    rows[2, 1] = np.nextafter(1.4, 2)
    assert linear._exact_rank(rows) == 3


def test_offset_refuses_a_zero_multiplier_that_a_near_face_would_hide():
    """w_hat = (1, 0, 0) exactly with the third point on the margin and multiplier 0, so (H) fails; the face
    {x1, x2, x4} passes the KKT conditions to rounding (x4's exact multiplier is -2^-52) and leaves x3 off its
    margin by 2^-52. The exact certificate does not accept it, and offset refuses."""
    X = np.array([[1, .5, 0], [1, -.5, 0], [1, 0, 1], [1 + U, 0, -1]])
    with pytest.raises(ValueError, match=r"hypothesis \(H\) fails .*support vectors \[2\]"):
        linear.offset(X, np.ones(4))


def test_offset_names_the_points_it_cannot_decide():
    """More points near the margin than it decides exactly (EXACT_MAX): a clear refusal naming them."""
    X = np.array([[1, .5], [1, -.5]] + [[1 + k * U, 0.01 * k] for k in range(1, linear.EXACT_MAX + 1)])
    with pytest.raises(ValueError, match=r"offset cannot decide the support vectors .* the points \[0, 1, 2, "):
        linear.offset(X, np.ones(len(X)))


def test_offset_keeps_a_point_exactly_on_the_margin_and_refuses_its_zero_multiplier():
    """x = (1, 0), (1, 1): the second point lies exactly on the margin of w_hat = (1, 0) with multiplier 0, so (H)
    fails; the exact decision keeps it, and offset refuses."""
    with pytest.raises(ValueError, match=r"hypothesis \(H\) fails .*support vectors \[1\]"):
        linear.offset([[1.0, 0.0], [1.0, 1.0]], [1.0, 1.0])


def test_svm_output_is_accepted_or_refused_at_every_scale():
    """No function refuses svm's own output: svm refuses X so large that alpha ~ 1 / ||x||^2 would be subnormal,
    and at every scale it accepts, offset and residual accept its solution."""
    X, y = data(seed=24, n=10, d=2)
    for scale in [1e-150, 1.0, 1e150, 1e154, 1e156, 1e160]:
        if scale >= 1e156:
            with pytest.raises(ValueError, match="X is too large: the dual multipliers alpha"):
                linear.svm(X * scale, y)
            continue
        sol = linear.svm(X * scale, y)
        assert np.allclose(linear.offset(X * scale, y, solution=sol), linear.offset(X * scale, y), rtol=1e-12)
        assert np.isfinite(linear.residual(X * scale, y, np.ones(2), 10, solution=sol)).all()


def test_offset_and_residual_refuse_a_solution_that_is_not_the_svm():
    """A support vector missing from solution.support, a feasible w that is not optimal (with the old multipliers,
    or with multipliers that reproduce it but miss complementary slackness): clear errors, not a wrong w_tilde."""
    X, y = data(seed=42)
    sol = linear.svm(X, y)
    support = sol.support.copy()
    first = np.flatnonzero(sol.support)[0]
    support[first] = False
    with pytest.raises(ValueError, match=rf"solution.support must mark the points on the margin.*misses \[{first}\]"):
        linear.offset(X, y, solution=dataclasses.replace(sol, support=support))
    # a support vector with multiplier 0 dropped (item 2): w_tilde of the rest would be (0, 0), and (H) fails
    X2, y2 = np.array([[1.0, 0.0], [1.0, 1.0]]), np.ones(2)
    sol2 = linear.svm(X2, y2)
    assert sol2.alpha[1] == 0 and sol2.support.all()
    dropped = dataclasses.replace(sol2, support=np.array([True, False]))
    for call in (lambda: linear.offset(X2, y2, solution=dropped), lambda: linear.residual(X2, y2, [0.0, 0.0], 2,
                                                                                          solution=dropped)):
        with pytest.raises(ValueError, match=r"solution.support must mark .* misses \[1\] and marks \[\]"):
            call()
    extra = sol.support.copy()
    extra[np.flatnonzero(~sol.support)[0]] = True  # a point off the margin marked
    with pytest.raises(ValueError, match=r"solution.support must mark .* misses \[\] and marks \["):
        linear.offset(X, y, solution=dataclasses.replace(sol, support=extra))
    Z = y[:, None] * X
    w = sol.w + 0.3 * np.linalg.svd(Z[sol.support])[2][-1]  # moved off the row space of the support
    w /= (Z @ w).min()  # feasible, smallest margin 1, longer than w_hat
    alpha = np.linalg.lstsq(Z.T, w, rcond=None)[0]  # reproduces w, but not with alpha >= 0 and sum ||w||^2
    for fake, fails in [(dataclasses.replace(sol, w=w), "w = sum_i alpha_i y_i x_i"),
                        (dataclasses.replace(sol, w=w, alpha=alpha), "sum_i alpha_i = ||w||\\^2")]:
        for call in (lambda: linear.offset(X, y, solution=fake), lambda: linear.residual(X, y, w, 10, solution=fake)):
            with pytest.raises(ValueError, match=f"solution must be linear.svm.*fails.*{fails}"):
                call()


def test_offset_accuracy_is_as_documented():
    """offset's docstring: w_tilde is off by at most about ||Z_S^+|| max_i a / s_i (a = 10 k eps cond^2, s_i the
    multipliers' shares); for x = (1, -h), (1, h) the estimate is about 6e-12 at h = 0.1 and 6 at h = 1e-5, and the
    data are refused at h = 5e-8. Only the estimate is asserted: the actual error depends on the BLAS kernels
    (2e-9 on the pinned Haswell path at h = 1e-7, 8e4 on SkylakeX)."""
    def error_and_estimate(X, alpha):
        w_tilde, exact = linear.offset(X, np.ones(2)), np.linalg.solve(X, -np.log(alpha))
        sv = np.linalg.svd(X, compute_uv=False)
        estimate = 10 * 2 * np.finfo(float).eps * (sv[0] / sv[1]) ** 2 / (alpha / alpha.sum()).min() / sv[1]
        return np.abs(w_tilde - exact).max(), estimate
    for h in [1e-1, 1e-3, 1e-5, 1e-7]:
        for X, alpha in [(np.array([[1, -h], [1, h]]), np.array([0.5, 0.5])),
                         (np.array([[1, -h], [1, 2 * h]]), np.array([2, 1]) / 3)]:
            error, estimate = error_and_estimate(X, alpha)
            assert error <= estimate
    for h, estimate in [(1e-1, 6e-12), (1e-5, 6.0)]:
        assert np.isclose(error_and_estimate(np.array([[1, -h], [1, h]]), np.array([0.5, 0.5]))[1], estimate,
                          rtol=0.05)
    with pytest.raises(ValueError, match=r"hypothesis \(H\) fails for X, y, or float64 cannot tell"):
        linear.offset([[1, -5e-8], [1, 5e-8]], [1.0, 1.0])
    for delta in [1e-2, 1e-6, 1e-10, 1e-13]:  # a tiny multiplier alpha_2 = delta (1 - delta): share s_2 ~ delta
        X = np.array([[1, 0], [1 - delta, 1]])
        delta = 1 - X[1, 0]
        error, estimate = error_and_estimate(X, np.array([1 - (1 - delta) * delta, delta]))
        assert error <= estimate


def exact_offset_of_two(X, w_hat, c=1.0):
    """w_tilde and the condition number for two independent support vectors, the rows of X (2, 2) (labels 1), of
    w_hat, in rational arithmetic on the float64 data: alpha solves X^T alpha = w_hat, w_tilde solves
    X w = log(c / alpha) (the logs rounded once), cond from the exact Gram matrix."""
    (a, b), (p, q) = [[Fraction(v) for v in row] for row in X]
    w1, w2 = (Fraction(v) for v in w_hat)
    det = a * q - b * p
    alpha = [(q * w1 - p * w2) / det, (a * w2 - b * w1) / det]
    r1, r2 = (Fraction(np.log(c / float(v))) for v in alpha)
    w_tilde = np.array([float((q * r1 - b * r2) / det), float((a * r2 - p * r1) / det)])
    trace, gram_det = a * a + b * b + p * p + q * q, det * det  # of X X^T; its eigenvalues are sv^2
    root = float(trace * trace - 4 * gram_det) ** 0.5
    small = 2 * float(gram_det) / (float(trace) + root)
    return w_tilde, np.array([float(v) for v in alpha]), ((float(trace) + root) / 2 / small) ** 0.5, small**0.5


def test_offset_is_right_or_refuses_as_support_vectors_become_dependent():
    """x = (1, -h), (1, 2 h), y = (1, 1): independent support vectors for every h > 0 (w_hat = (1, 0),
    alpha = (2/3, 1/3)), nearly dependent as h -> 0. offset answers within its documented accuracy (checked against
    the rational answer) down to h = 1e-5 and refuses from h = 5e-8 down, for every smaller h (and in between,
    once it refuses, for every smaller h too). h <= 1e-16, where float64's singular values cannot tell the rows from
    dependent, was answered as if they were: (log 2, ~0) for (0.637, log 2 / (3 h))."""
    eps, refused = np.finfo(float).eps, False
    for h in sorted([10.0**-k for k in range(1, 31)] + [2.0**-k for k in (20, 40, 52, 53, 60, 100)], reverse=True):
        X = np.array([[1.0, -h], [1.0, 2 * h]])
        exact, alpha, cond, small = exact_offset_of_two(X, [1.0, 0.0])
        np.testing.assert_allclose(alpha, [2 / 3, 1 / 3], rtol=1e-15)
        try:
            w_tilde = linear.offset(X, np.ones(2))
        except ValueError as error:
            assert "float64 cannot tell" in str(error)
            if h <= 1e-16:  # the rank is 2 exactly, 1 to float64: the message says so, not that (H) fails
                assert "cannot compute the multipliers of (H)" in str(error), h
            refused = True
            continue
        assert not refused and h > 5e-8, h  # refused for every smaller h, and from 5e-8 down
        estimate = 10 * 2 * eps * cond**2 / alpha.min() * np.sum(alpha) / small  # offset's docstring
        assert np.abs(w_tilde - exact).max() <= estimate, h
        if h >= 1e-5:
            assert estimate <= 1e-3 * np.abs(exact).max()
    assert refused


def test_gd_residual_stays_bounded_on_nondegenerate_data():
    """The prelude's bounded-residual theorem on one instance: ||w(t) - w_hat log t - w_tilde|| does not grow
    over four decades (it shrinks here)."""
    X, y = data(seed=3, n=12, d=4)
    sol = linear.svm(X, y)
    lr = 1 / linear.smoothness(X, y)
    record = np.array([10, 100, 1000, 10_000, 100_000])
    run = linear.gd(X, y, lr=lr, steps=100_000, record_at=record)
    r = np.linalg.norm(linear.residual(X, y, run.w, record, solution=sol) - linear.offset(X, y, lr / len(y)), axis=1)
    assert (np.diff(r) < 0).all()
