"""attnsvm.tensor: paper C's tensor trick (row-major vec, Kronecker logits), its loss and closed-form gradient
against autograd, Lemma 3.13's bound, the book's polynomial bound and the empirical Lipschitz estimates."""

import math

import mpmath
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attnsvm.tensor as tensor
from attnsvm import data, model

SIZES = [(2, 2), (3, 4), (5, 3), (7, 2)]  # (n, d)


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _randn(*shape, seed=0):
    return torch.randn(shape, generator=_gen(seed), dtype=torch.float64)


def _setting(n, d, seed, batch=()):
    """A block A_j0, a point x, values h and targets b = +-1, all random."""
    Aj = tensor.row_block(_randn(*batch, n, d, seed=seed), _randn(*batch, n, d, seed=seed + 1), n // 2)
    x = _randn(*batch, d * d, seed=seed + 2) / d
    hv = _randn(*batch, n, seed=seed + 3)
    b = torch.where(_randn(*batch, seed=seed + 4) > 0, 1.0, -1.0) if batch else torch.tensor(-1.0).double()
    return Aj, x, hv, b


def _exact_hessian_norm(fn, x):
    H = torch.autograd.functional.hessian(fn, x)
    return torch.linalg.eigvalsh(H).abs().max()


# ------------------------------------------------------------------ vec, mat, Kronecker

def test_vec_is_row_major_and_mat_inverts_it():
    X = torch.arange(12.0).reshape(3, 4)
    assert torch.equal(tensor.vec(X), torch.arange(12.0))  # row i occupies entries 4 i .. 4 i + 3
    assert torch.equal(tensor.mat(tensor.vec(X), rows=3), X)
    S = _randn(2, 5, 5)
    assert torch.equal(tensor.mat(tensor.vec(S)), S)


@pytest.mark.parametrize("n1,d1,n2,d2", [(2, 3, 4, 5), (1, 1, 3, 2), (4, 2, 2, 4)])
def test_kron_matches_torch_kron_and_the_identity(n1, d1, n2, d2):
    A1, A2, X = _randn(n1, d1, seed=1), _randn(n2, d2, seed=2), _randn(d1, d2, seed=3)
    assert torch.equal(tensor.kron(A1, A2), torch.kron(A1, A2))
    expected = tensor.vec(A1 @ X @ A2.T)
    torch.testing.assert_close(tensor.kron_logits(A1, A2, X), expected, rtol=1e-13, atol=1e-13)


def test_kron_entries_follow_paper_c_indexing():
    A1, A2 = _randn(2, 3, seed=4), _randn(4, 5, seed=5)
    K = tensor.kron(A1, A2)
    for i1, j1, i2, j2 in [(0, 0, 0, 0), (1, 2, 3, 4), (1, 0, 2, 3)]:
        assert K[i1 * 4 + i2, j1 * 5 + j2] == A1[i1, j1] * A2[i2, j2]


def test_kron_batched_equals_loop():
    A1, A2 = _randn(3, 2, 3, seed=6), _randn(3, 4, 3, seed=7)
    K = tensor.kron(A1, A2)
    for k in range(3):
        assert torch.equal(K[k], torch.kron(A1[k], A2[k]))


def test_row_block_is_logit_row():
    n, d = 4, 3
    A1, A2, X = _randn(n, d, seed=8), _randn(n, d, seed=9), _randn(d, d, seed=10)
    for j0 in range(n):
        block = tensor.row_block(A1, A2, j0)
        assert torch.equal(block, torch.kron(A1, A2)[j0 * n:(j0 + 1) * n])
        torch.testing.assert_close(block @ tensor.vec(X), (A1 @ X @ A2.T)[j0], rtol=1e-13, atol=1e-13)


def test_u_alpha_f_h():
    Aj, x, hv, _ = _setting(5, 3, seed=11)
    u, a, fx = tensor.u(Aj, x), tensor.alpha(Aj, x), tensor.f(Aj, x)
    torch.testing.assert_close(fx, u / a, rtol=1e-14, atol=0)
    assert abs(fx.sum() - 1) < 1e-14 and (fx > 0).all()
    # Two different products (matrix-matrix in the library, matrix-vector here) round differently on some
    # processors: agreement to a few ulps is the promise, not bit-equality.
    torch.testing.assert_close(tensor.attention_row(Aj, x, "linear"), Aj @ x, rtol=1e-14, atol=1e-15)
    A3, Y = _randn(5, 3, seed=12), _randn(3, 3, seed=13)
    torch.testing.assert_close(tensor.h(A3, Y, 2), A3 @ Y[:, 2], rtol=1e-14, atol=1e-15)


def test_matrix_formula_entries_are_f_dot_h():
    """Att(X, Y) = D(X)^{-1} exp(A1 X A2^T) A3 Y with D(X) = diag(exp(A1 X A2^T) 1_n) of size n x n."""
    n, d = 5, 3
    A1, A2, A3 = (_randn(n, d, seed=s) for s in (14, 15, 16))
    X, Y = _randn(d, d, seed=17) / 2, _randn(d, d, seed=18)
    E = torch.exp(A1 @ X @ A2.T)
    D = torch.diag(E @ torch.ones(n, dtype=torch.float64))
    assert D.shape == (n, n)
    att = torch.linalg.solve(D, E) @ A3 @ Y
    for j0 in range(n):
        for i0 in range(d):
            entry = tensor.f(tensor.row_block(A1, A2, j0), tensor.vec(X)) @ tensor.h(A3, Y, i0)
            assert abs(entry - att[j0, i0]) < 1e-12


def test_translation_to_the_book():
    """C's sequence l0 is the book's i: A1 = A2 = A3 = X_i (self-attention, query row j0 = 0 is z_i = x_i1),
    C's X is W^T, y_i0 = v, b = Y_i. Then C's logits, <f, h> and mean logistic loss are the book's."""
    base = data.random_problem(4, 6, 3, seed=0)
    problem = data.Problem(base.X, base.Y, base.X[:, 0], base.v)
    W = _randn(3, 3, seed=19)
    x = tensor.vec(W.T)
    Y = torch.stack([problem.v] * 3, dim=1)  # any value matrix whose column i0 = 0 is v
    losses = []
    for i in range(problem.n):
        A = problem.X[i]
        logits_c = tensor.mat(tensor.kron_logits(A, A, W.T))[0]
        torch.testing.assert_close(logits_c, model.logits(problem, W)[i], rtol=1e-13, atol=1e-13)
        Aj, hv = tensor.row_block(A, A, 0), tensor.h(A, Y, 0)
        s = tensor.f(Aj, x) @ hv
        assert abs(s - model.outputs(problem, W)[i]) < 1e-13
        losses.append(tensor.loss(Aj, x, hv, problem.Y[i], loss="logistic"))
    assert abs(torch.stack(losses).mean() - model.loss(problem, W)) < 1e-13


# ------------------------------------------------------------------ loss and gradient

@pytest.mark.parametrize("n,d", SIZES)
@pytest.mark.parametrize("loss", tensor.LOSSES)
@pytest.mark.parametrize("attention", tensor.ATTENTIONS)
def test_gradient_matches_autograd(n, d, loss, attention):
    Aj, x, hv, b = _setting(n, d, seed=20 + n, batch=(3,))
    x = x.requires_grad_(True)
    value = tensor.loss(Aj, x, hv, b, loss=loss, attention=attention)
    auto = torch.autograd.grad(value.sum(), x)[0]
    closed = tensor.gradient(Aj, x.detach(), hv, b, loss=loss, attention=attention)
    assert ((closed - auto).norm() / auto.norm()) < 1e-12


def test_paper_lemma_is_the_gradient_for_unit_targets_only():
    Aj, x, hv, _ = _setting(5, 3, seed=30)
    for b in (1.0, -1.0):
        paper = tensor.paper_gradient(Aj, x, hv, torch.tensor(b, dtype=torch.float64))
        correct = tensor.gradient(Aj, x, hv, torch.tensor(b, dtype=torch.float64), loss="paper")
        assert ((paper - correct).norm() / correct.norm()) < 1e-12
        sigmoid = tensor.gradient(Aj, x, hv, torch.tensor(b, dtype=torch.float64), loss="sigmoid")
        torch.testing.assert_close(sigmoid, -correct, rtol=1e-14, atol=1e-16)
    paper = tensor.paper_gradient(Aj, x, hv, torch.tensor(2.0, dtype=torch.float64))
    correct = tensor.gradient(Aj, x, hv, torch.tensor(2.0, dtype=torch.float64), loss="paper")
    assert ((paper - correct).norm() / correct.norm()) > 1e-3


def test_paper_loss_rewards_a_smaller_margin():
    """A gradient step on C's g(b s) lowers the margin b s; on the corrected losses it raises it."""
    Aj, x, hv, b = _setting(5, 3, seed=31)
    margin = lambda z: b * (tensor.f(Aj, z) @ hv)  # noqa: E731
    for loss, sign in [("paper", -1), ("sigmoid", 1), ("logistic", 1)]:
        step = x - 0.01 * tensor.gradient(Aj, x, hv, b, loss=loss)
        assert sign * (margin(step) - margin(x)) > 0


def test_batched_gradient_equals_loop():
    Aj, x, hv, b = _setting(4, 3, seed=32, batch=(5,))
    got = tensor.gradient(Aj, x, hv, b)
    for k in range(5):
        torch.testing.assert_close(got[k], tensor.gradient(Aj[k], x[k], hv[k], b[k]), rtol=1e-14, atol=1e-15)


# ------------------------------------------------------------------ bounds

@pytest.mark.parametrize("n,R", [(5, 4.0), (2, 6.5), (10, 8.0)])
def test_log10_bound_matches_mpmath(n, R):
    mpmath.mp.dps = 30
    expected = mpmath.log10(3 * n ** 3 * mpmath.mpf(R) ** 7 * mpmath.exp(13 * mpmath.mpf(R) ** 2))
    assert abs(tensor.log10_bound(n, R) - float(expected)) < 1e-10


def test_log10_bound_example_and_vectorized():
    assert 97.0 < tensor.log10_bound(5, 4) < 97.2  # 3 * 125 * 16384 * e^208
    values = tensor.log10_bound(np.array([2, 5]), np.array([4.0, 8.0]))
    assert values.shape == (2,) and np.all(np.diff(values) > 0)
    with pytest.raises(OverflowError):  # why log space: M itself overflows float64 at R = 8
        3 * 5 ** 3 * 8.0 ** 7 * math.exp(13 * 8.0 ** 2)


@pytest.mark.parametrize("loss", tensor.LOSSES)
@pytest.mark.parametrize("attention", tensor.ATTENTIONS)
def test_lipschitz_bound_dominates_exact_hessian_everywhere(loss, attention):
    """The polynomial bound holds on all of R^{d^2}, far outside the R-ball too."""
    for seed in range(6):
        Aj, x, hv, b = _setting(4, 2, seed=40 + seed)
        bound = tensor.lipschitz_bound(Aj, hv, b, loss=loss, attention=attention)
        for scale in (0.0, 1.0, 5.0):
            fn = lambda z: tensor.loss(Aj, z, hv, b, loss=loss, attention=attention)  # noqa: E731
            assert _exact_hessian_norm(fn, scale * x) <= bound * (1 + 1e-12)


def test_linear_squared_bound_is_exact():
    Aj, x, hv, b = _setting(4, 3, seed=50)
    fn = lambda z: tensor.loss(Aj, z, hv, b, loss="squared", attention="linear")  # noqa: E731
    bound = tensor.lipschitz_bound(Aj, hv, b, loss="squared", attention="linear")
    assert abs(_exact_hessian_norm(fn, x) - bound) < 1e-10 * bound


def test_hessian_norm_is_a_converging_lower_bound():
    Aj, x, hv, b = _setting(5, 3, seed=51)
    fn = lambda z: tensor.loss(Aj, z, hv, b, loss="paper")  # noqa: E731
    exact = _exact_hessian_norm(fn, x)
    for iterations in (1, 3, 10):
        assert tensor.hessian_norm(fn, x, iterations=iterations) <= exact * (1 + 1e-12)
    assert abs(tensor.hessian_norm(fn, x, iterations=300) - exact) < 1e-8 * exact
    B = _randn(6, 6, seed=52)
    B = B + B.T
    quadratic = lambda z: 0.5 * (z @ B * z).sum(-1)  # noqa: E731
    got = tensor.hessian_norm(quadratic, _randn(6, seed=53), iterations=500)
    assert abs(got - torch.linalg.eigvalsh(B).abs().max()) < 1e-8


def test_sample_ball_and_into_ball():
    inst = tensor.random_instance(5, 3, 4.0, seed=0, batch=4)
    assert torch.allclose(torch.linalg.matrix_norm(inst.Aj, ord=2), torch.full((4,), 4.0, dtype=torch.float64))
    x = tensor.sample_ball(inst.Aj, 4.0, 50, seed=1)
    assert x.shape == (50, 4, 9)
    radius = (inst.Aj @ x[..., None])[..., 0].norm(dim=-1)
    assert (radius <= 4.0 * (1 + 1e-12)).all() and radius.max() > 3.0
    outside = 3 * x
    inside = tensor.into_ball(inst.Aj, outside, 4.0)
    assert ((inst.Aj @ inside[..., None])[..., 0].norm(dim=-1) <= 4.0 * (1 + 1e-12)).all()


@pytest.mark.parametrize("n,R", [(2, 4.0), (5, 5.0), (8, 6.0)])
def test_empirical_constants_below_both_bounds(n, R):
    inst = tensor.random_instance(n, 3, R, seed=n, batch=8)
    bound = tensor.lipschitz_bound(inst.Aj, inst.h, inst.b, loss="paper")
    est = tensor.empirical_lipschitz(inst, R, loss="paper", points=32, iterations=15)
    for value in est:
        assert value.shape == (8,) and (value > 0).all()
        assert (value <= bound * (1 + 1e-9)).all()
        assert (torch.log10(value) < tensor.log10_bound(n, R)).all()
    assert (bound < 1e4).all()  # polynomial in R, nowhere near exp(13 R^2)


def test_empirical_power_estimate_close_to_exact_sup_over_its_points():
    inst = tensor.random_instance(4, 2, 4.0, seed=3)
    est = tensor.empirical_lipschitz(inst, 4.0, loss="logistic", points=16, iterations=200, seed=5)
    x = tensor.sample_ball(inst.Aj, 4.0, 32, seed=5)[:16]
    fn = lambda z: tensor.loss(inst.Aj, z, inst.h, inst.b)  # noqa: E731
    exact = max(_exact_hessian_norm(fn, point) for point in x)
    assert abs(est.power - exact) < 1e-6 * exact


def test_hessian_grows_linearly_with_h():
    """Lemma 3.13's M does not involve h, but the gradient's Lipschitz constant does: at x = 0 with tied
    values the Hessian of g(b s) is exactly proportional to the scale of h."""
    inst = tensor.random_instance(5, 3, 4.0, seed=7)
    h0 = torch.tensor([1.0, -1.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    x0 = torch.zeros(9, dtype=torch.float64)
    norms = [tensor.hessian_norm(lambda z: tensor.loss(inst.Aj, z, c * h0, inst.b, loss="paper"), x0,
                                 iterations=200) for c in (1.0, 1e3)]
    assert abs(norms[1] / norms[0] - 1e3) < 1e-6 * 1e3


def test_descend_with_the_bound_as_step_decreases_the_loss():
    inst = tensor.random_instance(5, 3, 4.0, seed=8, batch=6)
    for loss in ("logistic", "squared"):
        for attention in tensor.ATTENTIONS:
            L = tensor.lipschitz_bound(*inst, loss=loss, attention=attention).max()
            x0 = torch.zeros(6, 9, dtype=torch.float64)
            losses, _ = tensor.descend(inst, x0, lr=1 / L.item(), steps=50, loss=loss, attention=attention)
            assert losses.shape == (51, 6) and (losses.diff(dim=0) <= 1e-15).all()
            assert (losses[-1] < losses[0]).all()


def test_step_one_over_M_changes_nothing():
    inst = tensor.random_instance(5, 3, 4.0, seed=9)
    x = tensor.sample_ball(inst.Aj, 4.0, 1, seed=0)[0]
    _, final = tensor.descend(inst, x, lr=10 ** -tensor.log10_bound(5, 4.0), steps=10, loss="sigmoid")
    assert torch.equal(final, x)


# ------------------------------------------------------------------ errors

def test_errors_name_the_argument():
    Aj, x, hv, b = _setting(4, 3, seed=60)
    with pytest.raises(ValueError, match="x must have shape"):
        tensor.loss(Aj, x[:-1], hv, b)
    with pytest.raises(ValueError, match="h must have shape"):
        tensor.gradient(Aj, x, hv[:-1], b)
    with pytest.raises(ValueError, match="loss='hinge' is not supported"):
        tensor.loss(Aj, x, hv, b, loss="hinge")
    with pytest.raises(ValueError, match="attention='relu' is not supported"):
        tensor.gradient(Aj, x, hv, b, attention="relu")
    with pytest.raises(ValueError, match="R must be >= 4"):
        tensor.log10_bound(5, 3.0)
    with pytest.raises(ValueError, match="T must be a positive integer"):
        tensor.log10_bound(2.5, 4.0)
    with pytest.raises(ValueError, match="j0 must be a query index"):
        tensor.row_block(_randn(3, 2), _randn(3, 2), 3)
    with pytest.raises(ValueError, match="not a square number"):
        tensor.mat(torch.zeros(6))
    with pytest.raises(ValueError, match="rows must divide"):
        tensor.mat(torch.zeros(6), rows=4)
    with pytest.raises(ValueError, match="X must have shape"):
        tensor.kron_logits(_randn(3, 2), _randn(3, 4), _randn(2, 3))
    with pytest.raises(ValueError, match="i0 must be a column index"):
        tensor.h(_randn(3, 2), _randn(2, 2), 2)
    with pytest.raises(ValueError, match="NaN or infinite"):
        tensor.f(Aj, torch.full_like(x, float("nan")))
    with pytest.raises(ValueError, match="exceeds R"):
        tensor.empirical_lipschitz(tensor.random_instance(3, 2, 5.0, seed=0), 4.0)
    with pytest.raises(ValueError, match="A1 must be a matrix"):
        tensor.kron(torch.zeros(3), torch.zeros(2, 2))


# ------------------------------------------------------------------ closed-form Hessian and its maximization

@pytest.mark.parametrize("loss", tensor.LOSSES)
@pytest.mark.parametrize("attention", tensor.ATTENTIONS)
def test_hessian_matches_autograd(loss, attention):
    Aj, x, hv, b = _setting(5, 3, seed=70, batch=(3,))
    for target in (b, 2.5 * b):  # |b| = 1 and a target that is not +-1
        closed = tensor.hessian(Aj, x, hv, target, loss=loss, attention=attention)
        for k in range(3):
            fn = lambda z: tensor.loss(Aj[k], z, hv[k], target[k], loss=loss, attention=attention)  # noqa: E731
            auto = torch.autograd.functional.hessian(fn, x[k])
            assert torch.allclose(closed[k], auto, rtol=1e-10, atol=1e-12)


def test_max_hessian_norm_is_a_lower_bound_attained_in_the_ball():
    inst = tensor.random_instance(5, 3, 4.0, seed=71, batch=6)
    for loss in ("logistic", "squared", "paper"):
        found = tensor.max_hessian_norm(inst, 4.0, loss=loss, starts=8, steps=60)
        radius = (inst.Aj @ found.point[..., None])[..., 0].norm(dim=-1)
        assert (radius <= 4.0 * (1 + 1e-9)).all()
        at_point = torch.linalg.eigvalsh(tensor.hessian(inst.Aj, found.point, inst.h, inst.b, loss=loss))
        assert torch.allclose(at_point.abs().max(-1).values, found.value, rtol=1e-10)
        assert (found.value <= tensor.lipschitz_bound(*inst, loss=loss) * (1 + 1e-12)).all()
        sampled = tensor.empirical_lipschitz(inst, 4.0, loss=loss, points=16, iterations=30)
        assert (found.value >= 0.999 * torch.maximum(sampled.pairs, sampled.power)).all()


def test_max_hessian_norm_finds_the_exact_linear_constant():
    """For linear attention the supremum over the ball is known: (1/4) ||A^T h||^2 at s = 0 (logistic) and
    2 ||A^T h||^2 everywhere (squared), which is what lipschitz_bound returns."""
    inst = tensor.random_instance(5, 3, 6.0, seed=72, batch=5)
    for loss in ("logistic", "squared"):
        found = tensor.max_hessian_norm(inst, 6.0, loss=loss, attention="linear", starts=4, steps=20)
        exact = tensor.lipschitz_bound(*inst, loss=loss, attention="linear")
        assert torch.allclose(found.value, exact, rtol=1e-10)


def test_max_hessian_norm_climbs_without_the_origin():
    """Without the start x = 0 (a maximizer for linear attention and the logistic loss) the random starts miss
    the exact constant, and the ascent must climb to it."""
    inst = tensor.random_instance(5, 3, 8.0, seed=8, batch=20)
    exact = tensor.lipschitz_bound(*inst, loss="logistic", attention="linear")
    kw = dict(loss="logistic", attention="linear", starts=16, seed=8, origin=False)
    start = tensor.max_hessian_norm(inst, 8.0, steps=0, **kw).value
    found = tensor.max_hessian_norm(inst, 8.0, steps=60, **kw).value
    assert ((exact - start) / exact).max() > 1e-2  # the starts alone are not a maximizer
    assert ((exact - found) / exact).max() < 1e-4
    assert ((found - start) / (exact - start)).min() > 0.9  # every instance climbs most of the way


@settings(max_examples=40)
@given(T=st.integers(1, 5), d=st.integers(1, 3), R=st.sampled_from([1.0, 4.0, 8.0]), seed=st.integers(0, 2**20),
       loss=st.sampled_from(tensor.LOSSES), attention=st.sampled_from(tensor.ATTENTIONS), origin=st.booleans(),
       k1=st.integers(0, 30), extra=st.integers(1, 30))
def test_max_hessian_norm_is_monotone_in_steps(T, d, R, seed, loss, attention, origin, k1, extra):
    """More steps never return less: the first k1 steps of a longer run are the same, and every visited point
    counts (the old search kept the best Rayleigh quotient, not the best norm, and lost up to 13% with more steps)."""
    inst = tensor.random_instance(T, d, R, seed=seed, batch=3)
    kw = dict(loss=loss, attention=attention, starts=3, seed=seed, origin=origin)
    fewer = tensor.max_hessian_norm(inst, R, steps=k1, **kw).value
    more = tensor.max_hessian_norm(inst, R, steps=k1 + extra, **kw).value
    assert (more >= fewer).all()


def test_max_hessian_norm_matches_a_dense_grid():
    """T = 3, d = 2: the logits fill a disc of dimension rank(A_j0) = 2, which a 401 x 401 grid covers."""
    inst = tensor.random_instance(3, 2, 4.0, seed=73, batch=3)
    found = tensor.max_hessian_norm(inst, 4.0, loss="logistic", starts=16, steps=200)
    U, S, Vh = torch.linalg.svd(inst.Aj, full_matrices=False)
    assert (S[:, 2:] < 1e-12 * S[:, :1]).all()  # rank 2
    grid = torch.linspace(-4.0, 4.0, 401, dtype=torch.float64)
    c = torch.stack(torch.meshgrid(grid, grid, indexing="ij"), -1).reshape(-1, 2)
    c = c[c.norm(dim=-1) <= 4.0]
    for k in range(3):
        x = (c / S[k, :2]) @ Vh[k, :2]  # the points x = V S^-1 c of the ball
        norms = torch.linalg.eigvalsh(tensor.hessian(inst.Aj[k], x, inst.h[k], inst.b[k])).abs().max(-1).values
        assert norms.max() * 0.999 <= found.value[k] <= norms.max() * 1.01
