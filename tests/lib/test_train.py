"""attnsvm.train: the exact gradient (against autograd and a 50-digit reference) and gradient descent."""

import mpmath
import numpy as np
import pytest
import torch

from attnsvm import data, model, svm, theory, train

LOSSES = ["logistic", "exponential", "linear"]
ENGINES = ["compiled", "torch"]  # W trains on either; each W test runs on both


def _random_W(shape, seed, scale=0.5):
    return scale * torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _autograd(problem, W, loss="logistic"):
    W = W.clone().requires_grad_(True)
    model.loss(problem, W, loss).sum().backward()
    return W.grad


def _relative_error(got, reference):
    got, reference = np.asarray(got), np.asarray(reference)
    scale = np.abs(reference).max()  # so that tiny gradients do not underflow when squared
    got, reference = got / scale, reference / scale
    return np.linalg.norm(got - reference) / np.linalg.norm(reference)


# ------------------------------------------------------------------ the gradient

@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("batch", [None, 5])
def test_exact_gradient_equals_autograd_when_not_saturated(loss, batch):
    problem = data.random_problem(4, 6, 5, seed=2, batch=batch)
    W = _random_W(problem.batch_shape + (5, 5), seed=3)
    G = train.loss_gradient(problem, W, loss)
    assert G.shape == W.shape and G.dtype == torch.float64
    reference = _autograd(problem, W, loss)
    for b in np.ndindex(*problem.batch_shape):
        assert _relative_error(G[b], reference[b]) < 1e-10


def test_exact_gradient_accepts_numpy_and_default_loss():
    problem = data.random_problem(4, 6, 5, seed=2)
    W = _random_W((5, 5), seed=3)
    assert torch.equal(train.loss_gradient(problem, W.numpy()), train.loss_gradient(problem, W, "logistic"))


def _mp_gradient(problem, W):
    """dL/dW of the logistic risk in 50-digit arithmetic, from the float64 inputs taken as exact."""
    X, Z, Y, v, W = (np.asarray(a, dtype=np.float64) for a in (problem.X, problem.Z, problem.Y, problem.v, W))
    n, T, d = X.shape
    mp = mpmath.mp
    mpf = mp.mpf
    G = [[mpf(0)] * d for _ in range(d)]
    for i in range(n):
        Wz = [mp.fsum(mpf(W[a, b]) * mpf(Z[i, b]) for b in range(d)) for a in range(d)]
        logits = [mp.fsum(mpf(X[i, t, a]) * Wz[a] for a in range(d)) for t in range(T)]
        u = [mp.fsum(mpf(X[i, t, a]) * mpf(v[a]) for a in range(d)) for t in range(T)]
        top = max(logits)
        weights = [mp.exp(l - top) for l in logits]
        total = mp.fsum(weights)
        s = [w / total for w in weights]
        f = mp.fsum(s_t * u_t for s_t, u_t in zip(s, u))
        y = mpf(Y[i])
        c = -y / (1 + mp.exp(y * f))  # -Y sigmoid(-Y f)
        for t in range(T):
            coef = c * s[t] * (u[t] - f) / n
            for a in range(d):
                for b in range(d):
                    G[a][b] += coef * mpf(X[i, t, a]) * mpf(Z[i, b])
    return np.array([[float(G[a][b]) for b in range(d)] for a in range(d)])


def test_mp_reference_matches_autograd_when_not_saturated():
    """The 50-digit reference itself agrees with autograd where autograd is accurate."""
    problem = data.random_problem(3, 4, 3, seed=0)
    W = _random_W((3, 3), seed=1)
    with mpmath.workdps(50):
        reference = _mp_gradient(problem, W)
    assert _relative_error(_autograd(problem, W), reference) < 1e-12
    assert _relative_error(train.loss_gradient(problem, W), reference) < 1e-12


def test_exact_gradient_is_accurate_when_softmax_saturates():
    problem = data.random_problem(3, 4, 3, seed=0)
    alpha = theory.optimal_tokens(problem)
    W = 70.0 * torch.as_tensor(svm.att_svm(problem.X, problem.Z, alpha))  # every margin >= 70
    s = model.attention(problem, W)
    chosen = s.gather(-1, alpha[:, None])
    others = s.masked_fill(torch.nn.functional.one_hot(alpha, 4).bool(), 0.0)
    assert (chosen == 1.0).all()  # 1 - s_alpha is lost in float64
    assert 1e-40 < others.max() < 1e-28 and (others.sum(-1) > 1e-31).all()  # support tokens: exp(-70) ~ 4e-31
    with mpmath.workdps(50):
        reference = _mp_gradient(problem, W)
    assert np.abs(reference).max() < 1e-30  # a tiny gradient, still exactly representable
    exact = train.loss_gradient(problem, W)
    assert _relative_error(exact, reference) < 1e-8
    # autograd through softmax loses the x_alpha z^T term (it rounds s_alpha (1 - s_alpha) to 0)
    assert _relative_error(_autograd(problem, W), reference) > 1e-3


def test_exact_gradient_is_accurate_with_equal_scores():
    """Assumption B.2 (equal non-optimal scores), attention saturated on random tokens: for two tokens of equal
    value, u_t - f_i is far below the round-off of f_i, and computing it as such flipped gradients' signs."""
    errors = []
    for seed in range(12):
        problem = data.equal_scores_problem(2, 4, 3, seed=seed)
        W = _random_W((3, 3), seed=seed, scale=100.0)
        with mpmath.workdps(400):  # 50 digits are not enough where probabilities reach 1e-250
            reference = _mp_gradient(problem, W)
        errors.append(_relative_error(train.loss_gradient(problem, W), reference))
    assert all(error < 1e-10 for error in errors), errors


# ------------------------------------------------------------------ gradient descent

@pytest.mark.parametrize("engine", ENGINES)
def test_normalized_gd_on_W_moves_lr_each_step(engine):
    problem = data.random_problem(6, 8, 10, seed=0, batch=4)
    traj = train.gd(problem, steps=30, lr=0.1, engine=engine)
    np.testing.assert_array_equal(traj.steps, np.arange(31))
    moves = (traj.W[1:] - traj.W[:-1]).norm(dim=(-2, -1))
    torch.testing.assert_close(moves, torch.full_like(moves, 0.1), rtol=1e-12, atol=0)
    assert traj.K is None and traj.Q is None


def test_normalized_gd_on_KQ_moves_each_factor_by_lr():
    problem = data.random_problem(6, 8, 10, seed=0, batch=4)
    traj = train.gd(problem, param="KQ", steps=30, lr=0.05, record_every=1)
    for factor in (traj.K, traj.Q):
        moves = (factor[1:] - factor[:-1]).norm(dim=(-2, -1))
        torch.testing.assert_close(moves, torch.full_like(moves, 0.05), rtol=1e-12, atol=0)
    torch.testing.assert_close(traj.W, traj.K @ traj.Q.transpose(-2, -1), rtol=0, atol=0)


@pytest.mark.parametrize("engine", ENGINES)
def test_plain_gd_step_is_minus_lr_gradient(engine):
    problem = data.random_problem(4, 5, 6, seed=1, batch=3)
    W0 = _random_W((3, 6, 6), seed=2)
    traj = train.gd(problem, steps=2, lr=0.7, normalized=False, init=W0, loss="exponential", engine=engine)
    torch.testing.assert_close(traj.W[0], W0, rtol=0, atol=0)
    for k in range(2):
        expected = traj.W[k] - 0.7 * train.loss_gradient(problem, traj.W[k], "exponential")
        torch.testing.assert_close(traj.W[k + 1], expected, rtol=0, atol=1e-15)


def test_plain_gd_on_KQ_follows_the_chain_rule():
    problem = data.random_problem(4, 5, 6, seed=1)
    K0, Q0 = _random_W((6, 3), seed=4), _random_W((6, 3), seed=5)
    traj = train.gd(problem, param="KQ", steps=1, lr=0.3, normalized=False, init=(K0, Q0))
    K, Q = K0.clone().requires_grad_(True), Q0.clone().requires_grad_(True)
    model.loss(problem, K @ Q.T).backward()
    torch.testing.assert_close(traj.K[1], K0 - 0.3 * K.grad, rtol=0, atol=1e-14)
    torch.testing.assert_close(traj.Q[1], Q0 - 0.3 * Q.grad, rtol=0, atol=1e-14)


@pytest.mark.parametrize("steps,every,expected", [(20, 7, [0, 7, 14, 20]), (21, 7, [0, 7, 14, 21]),
                                                  (5, 10, [0, 5]), (3, 1, [0, 1, 2, 3]), (0, 4, [0])])
def test_recorded_steps_follow_record_every_and_include_the_last(steps, every, expected):
    problem = data.random_problem(3, 4, 5, seed=0, batch=2)
    traj = train.gd(problem, steps=steps, lr=0.1, record_every=every)
    np.testing.assert_array_equal(traj.steps, expected)
    assert traj.W.shape[0] == len(expected)
    # the records are the iterates of the every-step run
    full = train.gd(problem, steps=steps, lr=0.1)
    torch.testing.assert_close(traj.W, full.W[expected], rtol=0, atol=0)


@pytest.mark.parametrize("batch", [None, 3])
@pytest.mark.parametrize("param", ["W", "KQ"])
def test_trajectory_shapes(batch, param):
    problem = data.random_problem(4, 5, 6, seed=0, batch=batch)
    lead = problem.batch_shape
    traj = train.gd(problem, param=param, steps=10, lr=0.1, record_every=4, m=(2 if param == "KQ" else None))
    records = 4  # steps 0, 4, 8, 10
    assert traj.steps.shape == (records,)
    assert traj.W.shape == (records,) + lead + (6, 6)
    assert traj.probs.shape == (records,) + lead + (4, 5)
    assert traj.loss.shape == (records,) + lead
    assert traj.selection().shape == lead + (4,)
    if param == "KQ":
        assert traj.K.shape == traj.Q.shape == (records,) + lead + (6, 2)
        assert int(torch.linalg.matrix_rank(traj.W[-1].reshape(-1, 6, 6)).max()) <= 2
    else:
        assert traj.K is None and traj.Q is None


@pytest.mark.parametrize("loss", LOSSES)
def test_recorded_probs_loss_and_selection_match_the_model(loss):
    problem = data.random_problem(4, 5, 6, seed=0, batch=3)
    traj = train.gd(problem, steps=12, lr=0.2, record_every=5, loss=loss)
    for r in range(len(traj.steps)):
        torch.testing.assert_close(traj.probs[r], model.attention(problem, traj.W[r]), rtol=0, atol=1e-15)
        torch.testing.assert_close(traj.loss[r], model.loss(problem, traj.W[r], loss), rtol=1e-14, atol=1e-15)
    torch.testing.assert_close(traj.selection(), traj.probs[-1].argmax(-1), rtol=0, atol=0)


def test_init_options_for_W():
    problem = data.random_problem(3, 4, 5, seed=0, batch=2)
    zeros = train.gd(problem, steps=1, lr=0.1)  # default: zeros
    assert (zeros.W[0] == 0).all()
    torch.testing.assert_close(train.gd(problem, steps=1, lr=0.1, init="zeros").W, zeros.W, rtol=0, atol=0)
    uniform = train.gd(problem, steps=1, lr=0.1, init="uniform", seed=9)
    torch.testing.assert_close(uniform.W[0], train.uniform_init((2, 5, 5), 9), rtol=0, atol=0)
    assert uniform.W[0].abs().max() <= 1 / np.sqrt(5)
    W0 = np.random.default_rng(0).standard_normal((2, 5, 5))
    explicit = train.gd(problem, steps=1, lr=0.1, init=W0)
    np.testing.assert_array_equal(explicit.W[0].numpy(), W0)


def test_init_options_for_KQ():
    problem = data.random_problem(3, 4, 5, seed=0, batch=2)
    default = train.gd(problem, param="KQ", steps=1, lr=0.1, seed=3, m=4)  # default: uniform
    torch.testing.assert_close(default.K[0], train.uniform_init((2, 5, 4), 3), rtol=0, atol=0)
    torch.testing.assert_close(default.Q[0], train.uniform_init((2, 5, 4), 4), rtol=0, atol=0)
    uniform = train.gd(problem, param="KQ", steps=1, lr=0.1, seed=3, m=4, init="uniform")
    torch.testing.assert_close(uniform.W, default.W, rtol=0, atol=0)
    K0, Q0 = _random_W((2, 5, 3), seed=1), _random_W((2, 5, 3), seed=2)
    explicit = train.gd(problem, param="KQ", steps=1, lr=0.1, init=(K0.numpy(), Q0))
    torch.testing.assert_close(explicit.K[0], K0, rtol=0, atol=0)
    torch.testing.assert_close(explicit.Q[0], Q0, rtol=0, atol=0)
    torch.testing.assert_close(explicit.W[0], K0 @ Q0.transpose(-2, -1), rtol=0, atol=0)


def test_zeros_init_for_KQ_raises():
    problem = data.random_problem(3, 4, 5, seed=0)
    with pytest.raises(ValueError, match="saddle point"):
        train.gd(problem, param="KQ", steps=1, lr=0.1, init="zeros")


def test_uniform_init_is_seeded_and_bounded():
    a, b, c = train.uniform_init((4, 6, 6), 0), train.uniform_init((4, 6, 6), 0), train.uniform_init((4, 6, 6), 1)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert a.dtype == torch.float64 and a.abs().max() <= 1 / np.sqrt(6) and a.abs().max() > 0.9 / np.sqrt(6)


def test_gd_is_deterministic():
    problem = data.random_problem(4, 5, 6, seed=0, batch=3)
    a = train.gd(problem, param="KQ", steps=20, lr=0.1)
    b = train.gd(problem, param="KQ", steps=20, lr=0.1)
    assert torch.equal(a.W, b.W) and torch.equal(a.loss, b.loss)


@pytest.mark.parametrize("param", ["W", "KQ"])
def test_loss_decreases_along_normalized_gd(param):
    problem = data.random_problem(6, 8, 10, seed=0, batch=10)
    traj = train.gd(problem, param=param, steps=50, lr=0.1)
    assert (traj.loss[1:] <= traj.loss[:-1]).all()
    assert (traj.loss[-1] < traj.loss[0]).all()


@pytest.mark.parametrize("engine", ENGINES)
def test_normalized_step_of_a_gradient_whose_square_underflows(engine):
    """At W = 600 W^mm the gradient is ~1e-261: its squared norm underflows to 0, the step must still be lr."""
    problem = data.random_problem(3, 4, 3, seed=0)
    alpha = theory.optimal_tokens(problem)
    W0 = 600.0 * torch.as_tensor(svm.att_svm(problem.X, problem.Z, alpha))
    G = train.loss_gradient(problem, W0)
    assert 0 < G.abs().max() < 1e-250 and G.norm() == 0  # the naive norm underflows
    traj = train.gd(problem, steps=1, lr=0.1, init=W0, engine=engine)
    step = traj.W[1] - traj.W[0]
    torch.testing.assert_close(step.norm(), torch.tensor(0.1, dtype=torch.float64), rtol=1e-11, atol=0)
    unit = G / G.abs().max()
    # W1 - W0 is resolved to the round-off of W0's entries (~1e3)
    resolution = 4 * torch.finfo(torch.float64).eps * W0.abs().max()
    torch.testing.assert_close(step, -0.1 * unit / unit.norm(), rtol=0, atol=float(resolution))


@pytest.mark.parametrize("param", ["W", "KQ"])
def test_eps_normalization_is_paper_As_step(param):
    """Each step is -lr G / (||G||_F + eps), as in paper A's code; eps is made large here, so that it matters."""
    problem = data.random_problem(3, 4, 5, seed=2, batch=2)
    eps = 0.05
    traj = train.gd(problem, param=param, steps=5, lr=0.1, init="uniform", record_every=1, eps=eps)
    for k in range(5):
        params = [traj.W[k]] if param == "W" else [traj.K[k].clone(), traj.Q[k].clone()]
        leaves = [p.requires_grad_(True) for p in params]
        W = leaves[0] if param == "W" else leaves[0] @ leaves[1].transpose(-2, -1)
        grads = torch.autograd.grad(model.loss(problem, W).sum(), leaves)
        steps = [p.detach() - 0.1 * g / (g.norm(dim=(-2, -1), keepdim=True) + eps) for p, g in zip(params, grads)]
        expected = [traj.W[k + 1]] if param == "W" else [traj.K[k + 1], traj.Q[k + 1]]
        for got, want in zip(expected, steps):
            torch.testing.assert_close(got, want, rtol=0, atol=1e-14)
    shorter = (traj.W[1:] - traj.W[:-1]).norm(dim=(-2, -1)) if param == "W" else None
    if shorter is not None:
        assert (shorter < 0.1 - 1e-6).all()  # the steps really are shorter than lr


@pytest.mark.parametrize("engine", ENGINES)
def test_eps_stops_training_once_the_gradient_is_below_it(engine):
    """Far along W^mm the gradient is ~1e-261 (it underflows): with eps the step is 0, without it lr."""
    problem = data.random_problem(3, 4, 3, seed=0)
    W0 = 600.0 * torch.as_tensor(svm.att_svm(problem.X, problem.Z, theory.optimal_tokens(problem)))
    frozen = train.gd(problem, steps=3, lr=0.1, init=W0, eps=2.2e-16, engine=engine)
    assert (frozen.W == W0).all()
    moving = train.gd(problem, steps=1, lr=0.1, init=W0, eps=0, engine=engine)
    torch.testing.assert_close((moving.W[1] - W0).norm(), torch.tensor(0.1, dtype=torch.float64), rtol=1e-11, atol=0)
    with pytest.raises(ValueError, match="eps must be a finite number >= 0"):
        train.gd(problem, steps=1, lr=0.1, eps=-1e-16)


@pytest.mark.parametrize("engine", ENGINES)
def test_zero_gradient_gives_a_zero_normalized_step(engine):
    # v orthogonal to every token: the output, hence the gradient, is 0 for every W
    X = [[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]]
    problem = data.Problem(X, [1.0], [[1.0, 0.0, 0.0]], [0.0, 0.0, 1.0])
    traj = train.gd(problem, steps=3, lr=0.1, engine=engine)
    assert (traj.W == 0).all()


# ------------------------------------------------------------------ fidelity (the papers' experiment)

@pytest.mark.parametrize("engine", ENGINES)
def test_fidelity_normalized_gd_converges_to_att_svm_direction(engine):
    """E4.1: 100 problems (n=6, T=8, d=10), normalized GD on W, lr 0.1, 2000 steps: W(k) / ||W(k)|| -> W^mm of its
    own selection. The exact gradient gets there; autograd through saturated softmax is steered by round-off."""
    problem = data.random_problem(6, 8, 10, seed=0, batch=100)
    exact = train.gd(problem, steps=2000, lr=0.1, record_every=2000, engine=engine)
    np.testing.assert_array_equal(exact.steps, [0, 2000])
    W_mm = svm.att_svm(problem.X, problem.Z, exact.selection())
    correlation = theory.correlation(exact.W[-1], W_mm)
    assert correlation.shape == (100,)
    assert correlation.mean() >= 0.995

    naive = train.gd(problem, steps=2000, lr=0.1, record_every=2000, gradient="autograd")
    W_naive = svm.att_svm(problem.X, problem.Z, naive.selection())
    assert theory.correlation(naive.W[-1], W_naive).mean() < 0.98


def test_KQ_gd_prefers_the_nuclear_norm_svm():
    """GD on (K, Q) converges in direction to the nuclear-norm Att-SVM, not the Frobenius one."""
    problem = data.random_problem(6, 8, 10, seed=1, batch=20)
    traj = train.gd(problem, param="KQ", steps=1000, lr=0.1, record_every=1000)
    alpha = traj.selection()
    assert svm.feasible(problem.X, problem.Z, alpha).all()
    nuclear = theory.correlation(traj.W[-1], svm.att_svm(problem.X, problem.Z, alpha, norm="nuc"))
    frobenius = theory.correlation(traj.W[-1], svm.att_svm(problem.X, problem.Z, alpha, norm="fro"))
    assert nuclear.mean() > frobenius.mean()
    assert (nuclear > frobenius).mean() >= 0.9
