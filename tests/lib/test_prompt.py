"""Paper B's prompt model f(X) = <X v, softmax(X key p)>: the p-SVM (`svm.prompt_svm`, relaxed or not) checked by
its KKT conditions, against Clarabel and by hand, and gradient descent on p (`train.gd_prompt`) against autograd
(each engine) and on paper B's examples."""

import cvxpy as cp
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import nnls

import attnsvm
from attnsvm import data, svm, train

KEY = data.PROMPT_KEY


def _key_deltas(X, key, alpha):
    """Rows (k_{i alpha_i} - k_it) for t != alpha_i, ordered by (i, t), with k_it = key^T x_it; one problem."""
    keys = np.asarray(X) @ np.asarray(key)
    n, T, _ = keys.shape
    rows = [keys[i, alpha[i]] - keys[i, t] for i in range(n) for t in range(T) if t != alpha[i]]
    return np.array(rows)


def _check_psvm_kkt(X, key, alpha, p, relaxed=None, tol=1e-9):
    """min ||p|| s.t. D p >= h (h = 0 on relaxed sequences, else 1): feasibility, and p = D_active^T lam with lam >= 0
    on the active constraints (a certificate of optimality for this convex problem)."""
    n, T, _ = np.shape(X)
    relaxed = np.zeros(n, bool) if relaxed is None else np.asarray(relaxed, bool)
    D = _key_deltas(X, key, alpha)
    h = np.repeat(np.where(relaxed, 0.0, 1.0), T - 1)
    margins = D @ p
    assert margins.min() >= -tol and (margins - h).min() >= -tol
    if np.linalg.norm(p) == 0:
        assert (h == 0).all()  # only the all-relaxed problem has the solution 0
        return
    active = margins - h <= 1e-7
    lam, residual = nnls(D[active].T, p)
    assert residual <= tol * np.linalg.norm(p)


def _clarabel_psvm(X, key, alpha, relaxed=None):
    n, T, d = np.shape(X)
    relaxed = np.zeros(n, bool) if relaxed is None else np.asarray(relaxed, bool)
    D = _key_deltas(X, key, alpha)
    p = cp.Variable(d)
    cp.Problem(cp.Minimize(cp.sum_squares(p)), [D @ p >= np.repeat(np.where(relaxed, 0.0, 1.0), T - 1)]).solve(
        solver=cp.CLARABEL, tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10)
    return p.value


@st.composite
def psvm_cases(draw):
    """(X, key, alpha, relaxed) with n (T - 1) <= d constraints: generic data is feasible for every selection."""
    n, T = draw(st.integers(1, 3)), draw(st.integers(2, 4))
    d = draw(st.integers(n * (T - 1), n * (T - 1) + 2))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    X = rng.standard_normal((n, T, d))
    key = rng.standard_normal((d, d))
    alpha = rng.integers(0, T, n)
    relaxed = draw(st.one_of(st.none(), st.lists(st.booleans(), min_size=n, max_size=n)))
    return X, key, alpha, relaxed


# ------------------------------------------------------------------ the p-SVM

@settings(max_examples=40, derandomize=True, deadline=None)
@given(case=psvm_cases())
def test_prompt_svm_kkt_property(case):
    X, key, alpha, relaxed = case
    p = svm.prompt_svm(X, key, alpha, relaxed=relaxed)
    assert isinstance(p, np.ndarray) and p.shape == (X.shape[-1],)
    _check_psvm_kkt(X, key, alpha, p, relaxed)


@pytest.mark.parametrize("relaxed", [None, [False, True, False], [True, False, False]])
@pytest.mark.parametrize("seed", [0, 1])
def test_prompt_svm_agrees_with_clarabel(seed, relaxed):
    rng = np.random.default_rng(seed)
    X, key, alpha = rng.standard_normal((3, 3, 7)), rng.standard_normal((7, 7)), rng.integers(0, 3, 3)
    p = svm.prompt_svm(X, key, alpha, relaxed=relaxed)
    np.testing.assert_allclose(p, _clarabel_psvm(X, key, alpha, relaxed), rtol=0, atol=1e-7 * np.linalg.norm(p))


def test_relaxed_sequences_only_need_a_non_negative_margin():
    rng = np.random.default_rng(3)
    X, key, alpha = rng.standard_normal((3, 4, 9)), rng.standard_normal((9, 9)), rng.integers(0, 4, 3)
    relaxed = np.array([False, True, False])
    p = svm.prompt_svm(X, key, alpha, relaxed=relaxed)
    p_strict = svm.prompt_svm(X, key, alpha)
    margins = (_key_deltas(X, key, alpha) @ p).reshape(3, 3)
    assert margins[~relaxed].min() >= 1 - 1e-9 and margins[relaxed].min() >= -1e-9
    assert margins[relaxed].min() < 1 - 1e-3  # the relaxation is used
    assert np.linalg.norm(p) < np.linalg.norm(p_strict)  # fewer constraints, shorter solution
    assert (_key_deltas(X, key, alpha) @ p_strict).min() >= 1 - 1e-9
    np.testing.assert_array_equal(svm.prompt_svm(X, key, alpha, relaxed=[False] * 3), p_strict)
    np.testing.assert_array_equal(svm.prompt_svm(X, key, alpha, relaxed=[True] * 3), np.zeros(9))


def test_prompt_svm_batched_equals_loop():
    rng = np.random.default_rng(4)
    X, key = rng.standard_normal((2, 3, 3, 3, 7)), rng.standard_normal((7, 7))
    alpha, relaxed = rng.integers(0, 3, (2, 3, 3)), rng.random((2, 3, 3)) < 0.3
    p = svm.prompt_svm(torch.as_tensor(X), key, torch.as_tensor(alpha), relaxed=relaxed)
    assert p.shape == (2, 3, 7)
    for index in np.ndindex(2, 3):
        np.testing.assert_array_equal(p[index], svm.prompt_svm(X[index], key, alpha[index], relaxed=relaxed[index]))


def test_paper_b_single_input_svms():
    """Keys (-0.1, 1), (1, 0), (0, 0): selecting token 1 gives p^mm = (-0.1, 1)/1.01 (only (0, 0) is a support
    token); selecting token 2 gives (1, 0). The third coordinate (the score) is not seen by the key."""
    for global_case in (True, False):
        problem = data.single_input_problem(global_case=global_case)
        np.testing.assert_allclose(svm.prompt_svm(problem.X, KEY, [0]), np.array([-0.1, 1.0, 0.0]) / 1.01,
                                   rtol=0, atol=1e-15)
        np.testing.assert_allclose(svm.prompt_svm(problem.X, KEY, [1]), [1.0, 0.0, 0.0], rtol=0, atol=1e-15)
        margins = _key_deltas(problem.X, KEY, [0]) @ svm.prompt_svm(problem.X, KEY, [0])
        np.testing.assert_allclose(margins, [1.11 / 1.01, 1.0], rtol=1e-14)


@pytest.mark.parametrize("C", [0.5, 2.0, 10.0, 100.0])
def test_paper_b_loss_example_svm_does_not_depend_on_C(C):
    """Deltas (1, 1) and (1, -1): p^mm = (1, 0) whatever the scores (C only enters the head)."""
    problem = data.loss_example_problem(C)
    np.testing.assert_allclose(svm.prompt_svm(problem.X, KEY, [1, 1]), [1.0, 0.0, 0.0], rtol=0, atol=1e-15)


def _joint_example(tight):
    problem = data.joint_training_problem(tight=tight)
    return problem.X.numpy(), problem.Y.numpy()


def test_joint_training_example_svms():
    """By hand (deltas (1, 1), (1, -1), third): tight case, active deltas (1, -1) and (0.5, 1) with multipliers 7/9 and
    10/9 give p = (4/3, 1/3); non-tight case, unrelaxed: (1, -1) and (0.5, 1.5) with 7/8 and 3/4 give (1.25, 0.25);
    with input 3 relaxed only (1, 1) and (1, -1) bind: p = (1, 0)."""
    X, _ = _joint_example(tight=True)
    np.testing.assert_allclose(svm.prompt_svm(X, np.eye(2), [1, 1, 1]), [4 / 3, 1 / 3], rtol=0, atol=1e-14)
    X, _ = _joint_example(tight=False)
    np.testing.assert_allclose(svm.prompt_svm(X, np.eye(2), [1, 1, 1]), [1.25, 0.25], rtol=0, atol=1e-14)
    relaxed = svm.prompt_svm(X, np.eye(2), [1, 1, 1], relaxed=[False, False, True])
    np.testing.assert_allclose(relaxed, [1.0, 0.0], rtol=0, atol=1e-14)
    # the multipliers derived by hand reproduce p: p = sum lam_k delta_k
    np.testing.assert_allclose(7 / 9 * np.array([1.0, -1.0]) + 10 / 9 * np.array([0.5, 1.0]), [4 / 3, 1 / 3])
    np.testing.assert_allclose(7 / 8 * np.array([1.0, -1.0]) + 3 / 4 * np.array([0.5, 1.5]), [1.25, 0.25])


@pytest.mark.parametrize("tight,support", [(True, [True, True, True]), (False, [True, True, False])])
def test_joint_training_example_head_svm_gives_the_relaxed_sequences(tight, support):
    """v^mm = (0, 1) in both cases; input 3 is a support vector only in the tight case, and relaxing the others
    gives the p-SVM of joint training."""
    X, Y = _joint_example(tight)
    v, on_margin = svm.head_svm(X, Y, [1, 1, 1])
    np.testing.assert_allclose(v, [0.0, 1.0], rtol=0, atol=1e-14)
    np.testing.assert_array_equal(on_margin, support)
    expected = [4 / 3, 1 / 3] if tight else [1.0, 0.0]
    np.testing.assert_allclose(svm.prompt_svm(X, np.eye(2), [1, 1, 1], relaxed=~on_margin), expected, atol=1e-14)


def test_infeasible_prompt_svm_raises_with_the_instance():
    # tokens 1 and 2 differ only in the score coordinate, which the key removes: identical keys
    X = np.array([[[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]], [[[1.0, 0.0, 0.0], [1.0, 0.0, 5.0]]]])
    assert svm.prompt_svm(X[0], KEY, [0]).shape == (3,)
    with pytest.raises(attnsvm.InfeasibleSVM, match="batch instance 1") as info:
        svm.prompt_svm(X, KEY, [[0], [0]])
    assert info.value.instances == (1,)
    with pytest.raises(attnsvm.InfeasibleSVM):
        svm.prompt_svm(X[1], KEY, [1])
    # the relaxed constraint (margin >= 0) is met by every p
    np.testing.assert_array_equal(svm.prompt_svm(X[1], KEY, [0], relaxed=[True]), np.zeros(3))


@pytest.mark.parametrize("kwargs,pattern", [
    (dict(X=np.ones((2, 3))), r"X must have shape \(\.\.\., n, T, d\)"),
    (dict(X=np.ones((2, 1, 3)), alpha=[0, 0]), r"X must hold T >= 2 tokens"),
    (dict(key=np.eye(4)), r"key must have shape \(3, 3\)"),
    (dict(key=np.ones((3, 2))), r"key must have shape \(3, 3\)"),
    (dict(alpha=[0]), r"alpha must have shape \(2,\)"),
    (dict(alpha=[0, 2]), r"alpha holds token indices outside \[0, 1\]"),
])
def test_prompt_svm_rejects_bad_shapes(kwargs, pattern):
    args = {**dict(X=np.random.default_rng(0).standard_normal((2, 2, 3)), key=np.eye(3), alpha=[0, 1]), **kwargs}
    with pytest.raises(ValueError, match=pattern):
        svm.prompt_svm(**args)


@pytest.mark.parametrize("relaxed", [[True, False], np.zeros((3, 2), bool)])
def test_prompt_svm_rejects_relaxed_of_the_wrong_shape(relaxed):
    """relaxed must have the batch shape of alpha, (..., n); a wrong shape must not be reshaped silently."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((2, 3, 2, 6))
    with pytest.raises(ValueError, match=r"relaxed must have shape \(2, 3\)"):
        svm.prompt_svm(X, np.eye(6), np.zeros((2, 3), int), relaxed=relaxed)


# ------------------------------------------------------------------ gradient descent on p

REFERENCE_LOSSES = {"logistic": lambda m: F.softplus(-m), "exponential": lambda m: torch.exp(-m),
                    "linear": lambda m: -m}


def _reference_loss(problem, key, p, loss="logistic"):
    """(1/n) sum_i l(Y_i <X_i v, softmax(X_i key p)>), written out for autograd."""
    logits = torch.einsum("...ntd,de,...e->...nt", problem.X, torch.as_tensor(key, dtype=torch.float64), p)
    f = (torch.softmax(logits, -1) * torch.einsum("...ntd,...d->...nt", problem.X, problem.v)).sum(-1)
    return REFERENCE_LOSSES[loss](problem.Y * f).mean(-1)


def _reference_gradient(problem, key, p, loss="logistic"):
    p = torch.as_tensor(p, dtype=torch.float64).clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(_reference_loss(problem, key, p, loss).sum(), p)
    return grad


def _prompt_case(batch=None, seed=0):
    """A random problem used as a prompt problem (its Z is ignored), a random key and a moderate p."""
    problem = data.random_problem(4, 5, 6, seed=seed, batch=batch)
    gen = torch.Generator().manual_seed(seed + 50)
    key = torch.randn(6, 6, generator=gen, dtype=torch.float64)
    p = 0.7 * torch.randn(problem.batch_shape + (6,), generator=gen, dtype=torch.float64)
    return problem, key, p


@pytest.mark.parametrize("engine", ["compiled", "torch"])
@pytest.mark.parametrize("loss", list(REFERENCE_LOSSES))
@pytest.mark.parametrize("batch", [None, 3])
def test_gd_prompt_gradient_equals_autograd(loss, batch, engine):
    problem, key, p0 = _prompt_case(batch)
    traj = train.gd_prompt(problem, key, steps=1, lr=1.0, normalized=False, init=p0, loss=loss, engine=engine)
    gradient = p0 - traj.p[1]
    reference = _reference_gradient(problem, key, p0, loss)
    assert gradient.shape == p0.shape
    torch.testing.assert_close(gradient, reference, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("engine", ["compiled", "torch"])
def test_gd_prompt_plain_steps_are_minus_lr_gradient(engine):
    problem, key, p0 = _prompt_case(batch=2, seed=1)
    traj = train.gd_prompt(problem, key, steps=3, lr=0.7, normalized=False, init=p0, loss="exponential",
                           engine=engine)
    torch.testing.assert_close(traj.p[0], p0, rtol=0, atol=0)
    for k in range(3):
        expected = traj.p[k] - 0.7 * _reference_gradient(problem, key, traj.p[k], "exponential")
        torch.testing.assert_close(traj.p[k + 1], expected, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("engine", ["compiled", "torch"])
def test_gd_prompt_normalized_steps_have_length_lr(engine):
    problem, key, _ = _prompt_case(batch=4, seed=2)
    traj = train.gd_prompt(problem, key, steps=25, lr=0.3, engine=engine)
    moves = (traj.p[1:] - traj.p[:-1]).norm(dim=-1)
    torch.testing.assert_close(moves, torch.full_like(moves, 0.3), rtol=1e-12, atol=0)
    for k in (0, 10, 24):  # each step is along -gradient
        gradient = _reference_gradient(problem, key, traj.p[k])
        expected = -0.3 * gradient / gradient.norm(dim=-1, keepdim=True)
        torch.testing.assert_close(traj.p[k + 1] - traj.p[k], expected, rtol=1e-9, atol=1e-14)


@pytest.mark.parametrize("engine", ["compiled", "torch"])
@pytest.mark.parametrize("loss", list(REFERENCE_LOSSES))
def test_gd_prompt_records(loss, engine):
    problem, key, _ = _prompt_case(batch=3, seed=3)
    traj = train.gd_prompt(problem, key, steps=12, lr=0.2, record_every=5, loss=loss, engine=engine)
    np.testing.assert_array_equal(traj.steps, [0, 5, 10, 12])
    assert traj.p.shape == (4, 3, 6) and traj.probs.shape == (4, 3, 4, 5) and traj.loss.shape == (4, 3)
    assert traj.W is None and traj.K is None and traj.Q is None
    full = train.gd_prompt(problem, key, steps=12, lr=0.2, loss=loss, engine=engine)
    torch.testing.assert_close(traj.p, full.p[[0, 5, 10, 12]], rtol=0, atol=0)
    for r in range(4):
        logits = torch.einsum("bntd,de,be->bnt", problem.X, key, traj.p[r])
        torch.testing.assert_close(traj.probs[r], torch.softmax(logits, -1), rtol=0, atol=1e-15)
        torch.testing.assert_close(traj.loss[r], _reference_loss(problem, key, traj.p[r], loss), rtol=1e-13, atol=1e-15)
    torch.testing.assert_close(traj.selection(), traj.probs[-1].argmax(-1), rtol=0, atol=0)


def test_gd_prompt_init_handling():
    problem, key, p0 = _prompt_case(batch=3, seed=4)
    assert (train.gd_prompt(problem, key, steps=1, lr=0.1).p[0] == 0).all()  # default: zeros
    shared = torch.arange(6, dtype=torch.float64)
    traj = train.gd_prompt(problem, key, steps=2, lr=0.1, init=shared.numpy())
    torch.testing.assert_close(traj.p[0], shared.expand(3, 6), rtol=0, atol=0)  # one p for every problem
    before = p0.clone()
    traj = train.gd_prompt(problem, key, steps=2, lr=0.1, init=p0)
    torch.testing.assert_close(traj.p[0], before, rtol=0, atol=0)
    assert torch.equal(p0, before)  # the caller's init is not modified
    for b in range(3):  # a batch runs its problems independently
        single = train.gd_prompt(problem[b], key, steps=2, lr=0.1, init=p0[b])
        torch.testing.assert_close(single.p, traj.p[:, b], rtol=1e-13, atol=1e-15)


def test_gd_prompt_ignores_the_queries():
    problem, key, p0 = _prompt_case(seed=5)
    without = data.Problem(problem.X, problem.Y, None, problem.v)
    a = train.gd_prompt(problem, key, steps=5, lr=0.1, init=p0)
    b = train.gd_prompt(without, key, steps=5, lr=0.1, init=p0)
    assert torch.equal(a.p, b.p) and torch.equal(a.loss, b.loss)


def test_gd_prompt_rejects_a_bad_key_and_options():
    problem, key, _ = _prompt_case()
    with pytest.raises(ValueError, match=r"^key must have shape \(6, 6\)"):
        train.gd_prompt(problem, key[:5], steps=1, lr=0.1)
    with pytest.raises(ValueError, match=r"^loss='hinge' is not supported"):
        train.gd_prompt(problem, key, steps=1, lr=0.1, loss="hinge")
    with pytest.raises(ValueError, match=r"^steps must be an integer >= 0"):
        train.gd_prompt(problem, key, steps=-1, lr=0.1)
    with pytest.raises(ValueError, match=r"^lr must be a finite number > 0"):
        train.gd_prompt(problem, key, steps=1, lr=0.0)
    with pytest.raises(ValueError, match=r"^init contains 1 NaN"):
        train.gd_prompt(problem, key, steps=1, lr=0.1, init=[np.nan, 0, 0, 0, 0, 0])


@pytest.mark.parametrize("batch,init_shape", [(None, (5,)), (3, (2, 6))])
def test_gd_prompt_rejects_an_initial_p_of_the_wrong_shape(batch, init_shape):
    """A wrong initial p is rejected with an error that names `init` and the accepted shapes."""
    problem, key, _ = _prompt_case(batch)
    expected = r"\(6,\) or \(3, 6\)" if batch else r"\(6,\) or \(6,\)"
    with pytest.raises(ValueError, match=rf"^init must have shape {expected}"):
        train.gd_prompt(problem, key, steps=1, lr=0.1, init=np.zeros(init_shape))


def _stacked(problems):
    """One batched prompt problem from unbatched ones of equal sizes."""
    return data.Problem(torch.stack([p.X for p in problems]), torch.stack([p.Y for p in problems]), None,
                        torch.stack([p.v for p in problems]))


def test_paper_b_single_input_directions():
    """Normalized GD, lr 0.1, 1000 steps. From p(0) = 0 both cases converge in direction to the global p^mm (the
    third coordinate stays 0: the key removes it). From p(0) = (0, -1.5, 0) the local case converges to the locally
    optimal (1, 0, 0) (its token 2 is locally optimal: the support token (0, 0) has score 0 < 0.9), the global case
    still to p^mm."""
    cases = [data.single_input_problem(global_case=g) for g in (True, False)]
    problem = _stacked(cases + cases)
    init = torch.tensor([[0.0, 0.0, 0.0]] * 2 + [[0.0, -1.5, 0.0]] * 2, dtype=torch.float64)
    traj = train.gd_prompt(problem, KEY, steps=1000, lr=0.1, init=init)
    p = traj.p[-1].numpy()
    assert (p[:, 2] == 0).all()
    p_mm = svm.prompt_svm(cases[0].X, KEY, [0])
    cosine = p @ p_mm / (np.linalg.norm(p, axis=-1) * np.linalg.norm(p_mm))
    assert (cosine[:3] > 0.99).all()
    assert p[3] @ [1.0, 0.0, 0.0] / np.linalg.norm(p[3]) > 0.99
    np.testing.assert_array_equal(traj.selection().numpy(), [[0], [0], [0], [1]])


def test_paper_b_loss_example_with_the_linear_loss():
    """Linear loss: L(p) = -(C s(p1 + p2) + s(p1 - p2)) / 2 with s the sigmoid. Along p2, dL/dp2 = 0 where
    C s'(a) = s'(b) (a = p1 + p2, b = p1 - p2); as p1 grows s'(x) ~ exp(-x), so exp(-2 p2) = 1/C:
    p2 -> ln(C) / 2, while p1 grows by about lr per step."""
    Cs = [2.0, 10.0, 100.0]
    problem = _stacked([data.loss_example_problem(C) for C in Cs])
    traj = train.gd_prompt(problem, KEY, steps=1000, lr=0.1, loss="linear", record_every=1000)
    p = traj.p[-1].numpy()
    np.testing.assert_allclose(p[:, 1], 0.5 * np.log(Cs), rtol=0, atol=1e-3)
    assert (p[:, 0] > 95).all() and (p[:, 2] == 0).all()


def test_joint_gd_plain_step_is_minus_lr_autograd_gradient():
    problem = data.joint_training_problem(tight=False)
    p0, v0 = torch.tensor([0.3, -1.0], dtype=torch.float64), torch.tensor([-1.0, 0.2], dtype=torch.float64)
    run = train.gd_joint(problem, np.eye(2), steps=1, lr=0.1, init_p=p0, init_v=v0, normalized=False)
    p, v = p0.clone().requires_grad_(), v0.clone().requires_grad_()
    f = (torch.softmax(problem.X @ p, -1) * (problem.X @ v)).sum(-1)
    F.softplus(-problem.Y * f).mean().backward()
    torch.testing.assert_close(run.p[1], p0 - 0.1 * p.grad, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(run.v[1], v0 - 0.1 * v.grad, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("tight", [True, False])
def test_joint_gd_converges_to_the_head_svm_and_the_relaxed_p_svm(tight):
    """Paper B's Figure 3 setting: v -> v^mm = (0, 1); p -> the relaxed p-SVM, which differs from the unrelaxed
    one only in the non-tight case."""
    problem = data.joint_training_problem(tight=tight)
    run = train.gd_joint(problem, np.eye(2), steps=1000, lr=0.1, init_p=[0.0, -1.0], init_v=[-1.0, 0.0],
                         record_every=1000)
    X, Y = problem.X.numpy(), problem.Y.numpy()
    v_mm, support = svm.head_svm(X, Y, [1, 1, 1])
    p_relaxed = svm.prompt_svm(X, np.eye(2), [1, 1, 1], relaxed=~support)
    p_unrelaxed = svm.prompt_svm(X, np.eye(2), [1, 1, 1])
    cos = lambda a, b: float(np.dot(a, b) / np.linalg.norm(a) / np.linalg.norm(b))  # noqa: E731
    p, v = run.p[-1].numpy(), run.v[-1].numpy()
    assert cos(v, v_mm) > 0.999 and cos(p, p_relaxed) > 0.999
    if not tight:
        assert cos(p, p_unrelaxed) < cos(p, p_relaxed) - 0.01
