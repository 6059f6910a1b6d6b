"""Mirror descent with potential ||.||_p^p and sign descent (train.mirror_descent, train.sign_descent): against
normalized GD (p = 2), against autograd, against a straightforward loop (the authors' design, one problem at a
time), and the exactness under saturation that the authors' normalization lacks."""

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from attnsvm import data, model, svm, theory, train

# the benchmarks' straightforward reference, under its own name (tests/lib has a `reference` module of its own)
_SPEC = importlib.util.spec_from_file_location(
    "benchmark_reference", Path(__file__).resolve().parents[2] / "benchmarks" / "reference.py")
reference = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(reference)

EPS = train.OFFICIAL_EPS


def _problem(seed=0, batch=None, n=3, T=4, d=4):
    return data.random_problem(n=n, T=T, d=d, seed=seed, batch=batch)


def _start(shape, seed=1):
    return torch.randn(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def _mirror_map(W, p):
    """sign(W) |W|^(p - 1) entrywise, the gradient of ||W||_p^p / p; its inverse is the map of q = p / (p - 1)."""
    return torch.sign(W) * W.abs() ** (p - 1)


def test_p_two_is_normalized_gradient_descent():
    problem = _problem(batch=2)
    W0 = _start((2, 4, 4))
    mirror = train.mirror_descent(problem, p=2, steps=300, lr=0.1, init=W0, record_every=100)
    gd = train.gd(problem, steps=300, lr=0.1, init=W0, record_every=100, engine="torch")
    torch.testing.assert_close(mirror.W, gd.W, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("p", [1.5, 1.75, 3.0])
@pytest.mark.parametrize("param", ["W", "KQ"])
def test_matches_a_straightforward_loop_before_saturation(p, param):
    """The authors' loop with eps = 0 (autograd, ||g||_q, the mirror map in the primal) gives the same iterates."""
    problem = _problem(seed=2, batch=2)
    start = _start((2, 4, 4))
    init = start if param == "W" else (start, torch.zeros_like(start))
    run = train.mirror_descent(problem, p=p, steps=100, lr=0.02, param=param, init=init, record_every=25)
    for b in range(2):
        X, Y, Z, v = (getattr(problem, name)[b] for name in "XYZv")
        starts = {"W0": start[b]} if param == "W" else {"K0": start[b], "Q0": torch.zeros(4, 4, dtype=torch.float64)}
        W = reference.mirror_descent(X, Y, Z, v, p=p, steps=100, lr=0.02, eps=0.0, **starts)
        torch.testing.assert_close(run.W[:, b], W[::25], rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("param", ["W", "KQ"])
def test_the_official_rule_is_the_authors_loop(param):
    problem = _problem(seed=3)
    start = _start((4, 4), seed=4)
    init = start if param == "W" else (start, torch.zeros_like(start))
    run = train.mirror_descent(problem, p=1.75, steps=100, lr=0.05, param=param, init=init, record_every=50,
                               rule="official")
    starts = {"W0": start} if param == "W" else {"K0": start, "Q0": torch.zeros_like(start)}
    W = reference.mirror_descent(problem.X, problem.Y, problem.Z, problem.v, p=1.75, steps=100, lr=0.05, **starts)
    torch.testing.assert_close(run.W, W[::50], rtol=1e-9, atol=1e-9)


def test_the_official_rule_is_the_authors_loop_in_saturation():
    """On W deep in saturation (||G||_q below eps / 50 from step 250 on), where autograd's gradient is round-off
    and steers the steps: the same iterates as the authors' loop, while the exact gradient with their eps ends over
    1% of W's largest entry away."""
    problem = _problem(seed=3)
    start = _start((4, 4), seed=4)
    run = train.mirror_descent(problem, p=1.75, steps=1000, lr=0.5, init=start, record_every=250, rule="official")
    W = reference.mirror_descent(problem.X, problem.Y, problem.Z, problem.v, p=1.75, steps=1000, lr=0.5, W0=start)
    assert all(float(train.dual_norm(train.loss_gradient(problem, w), 1.75 / 0.75)) < 0.02 * EPS for w in run.W[1:])
    torch.testing.assert_close(run.W, W[::250], rtol=1e-9, atol=1e-9)
    exact = train.mirror_descent(problem, p=1.75, steps=1000, lr=0.5, init=start, record_every=250, eps=EPS)
    assert float((exact.W[-1] - run.W[-1]).abs().max()) > 0.01 * float(run.W[-1].abs().max())


@pytest.mark.parametrize("p", [1.75, 3.0])
def test_one_step_follows_the_autograd_gradient(p):
    """theta(1) = theta(0) - lr g / ||g||_q with g by autograd (no saturation at the start)."""
    problem = _problem(seed=5)
    W0 = _start((4, 4), seed=6)
    W1 = train.mirror_descent(problem, p=p, steps=1, lr=0.1, init=W0).W[1]
    leaf = W0.clone().requires_grad_(True)
    g, = torch.autograd.grad(reference._loss(problem.X, problem.Y, problem.Z, problem.v, leaf), leaf)
    q = p / (p - 1)
    theta = _mirror_map(W0, p) - 0.1 * g / torch.linalg.vector_norm(g, q)
    torch.testing.assert_close(W1, _mirror_map(theta, q), rtol=1e-12, atol=1e-12)


def _saturated_runs(p=2.0, steps=4000):
    problem = data.random_problem(n=2, T=3, d=4, seed=7)
    W0 = _start((4, 4), seed=8)
    exact = train.mirror_descent(problem, p=p, steps=steps, lr=0.5, init=W0, record_every=steps // 4)
    frozen = train.mirror_descent(problem, p=p, steps=steps, lr=0.5, init=W0, record_every=steps // 4, eps=EPS)
    return problem, exact, frozen


def test_the_exact_engine_does_not_freeze_where_the_eps_normalization_does():
    problem, exact, frozen = _saturated_runs()
    assert float(train.loss_gradient(problem, frozen.W[-1]).norm()) < EPS  # the true gradient is below eps
    moved = [float((run.W[-1] - run.W[-2]).norm()) for run in (exact, frozen)]
    assert moved[0] == pytest.approx(1000 * 0.5, rel=1e-9)  # p = 2: every step has length lr exactly
    assert moved[1] < 1e-3 * moved[0]


@pytest.mark.parametrize("p", [1.75, 3.0])
def test_every_exact_step_moves_the_dual_variable_by_lr_in_the_dual_norm(p):
    problem = data.random_problem(n=2, T=3, d=4, seed=7)
    run = train.mirror_descent(problem, p=p, steps=3001, lr=0.5, init=_start((4, 4), seed=8), record_every=3000)
    assert float(train.loss_gradient(problem, run.W[-2]).norm()) < EPS  # saturated: below the authors' eps
    theta = _mirror_map(run.W, p)
    step = train.dual_norm(theta[-1] - theta[-2], p / (p - 1))
    assert float(step) == pytest.approx(0.5, rel=1e-6)


@pytest.mark.parametrize("param", ["W", "KQ"])
def test_sign_descent_matches_a_straightforward_loop(param):
    problem = _problem(seed=9)
    start = _start((4, 4), seed=10)
    init = start if param == "W" else (start, start.flip(0))
    run = train.sign_descent(problem, steps=100, lr=0.01, param=param, init=init, record_every=100)
    params = [w.clone() for w in ((start,) if param == "W" else init)]
    for _ in range(100):
        leaves = [w.clone().requires_grad_(True) for w in params]
        W = leaves[0] if param == "W" else leaves[0] @ leaves[1].T
        grads = torch.autograd.grad(reference._loss(problem.X, problem.Y, problem.Z, problem.v, W), leaves)
        params = [w - 0.01 * torch.sign(g) for w, g in zip(params, grads)]
    W = params[0] if param == "W" else params[0] @ params[1].T
    torch.testing.assert_close(run.W[-1], W, rtol=1e-12, atol=1e-12)


def test_batched_equals_one_by_one():
    problems = _problem(seed=11, batch=3)
    W0 = _start((3, 4, 4))
    run = train.mirror_descent(problems, p=3, steps=100, lr=0.1, init=W0, record_every=100)
    for b in range(3):
        one = train.mirror_descent(problems[b], p=3, steps=100, lr=0.1, init=W0[b], record_every=100)
        torch.testing.assert_close(run.W[:, b], one.W, rtol=1e-13, atol=1e-13)
    eps = torch.tensor([0.0, EPS, 0.0], dtype=torch.float64)  # eps per problem
    mixed = train.mirror_descent(problems, p=3, steps=100, lr=0.1, init=W0, record_every=100, eps=eps)
    torch.testing.assert_close(mixed.W, run.W, rtol=1e-12, atol=1e-12)  # no underflow yet: the same


@pytest.mark.parametrize("p", [1.75, 2.0, 2.5, 3.0])
@pytest.mark.parametrize("param", ["W", "KQ"])
def test_the_compiled_loop_takes_the_torch_loops_steps(p, param):
    """The two engines agree to round-off, with eps per problem (0, the authors', a large one): on W into
    saturation (where eps = 0 runs on and the others slow down); on (K, Q), of width m = 3, with smaller steps (larger
    steps, and longer (K, Q) runs, amplify a round-off of 1e-15 to 1e-3 in the torch loop alone)."""
    problems = _problem(seed=15, batch=5)
    init, lr, steps = (_start((5, 4, 4), seed=16), 0.1, 3000) if param == "W" else ("uniform", 0.02, 200)
    eps = torch.tensor([0.0, EPS, 1e-3, 0.0, EPS], dtype=torch.float64)
    runs = [train.mirror_descent(problems, p=p, steps=steps, lr=lr, param=param, init=init, m=3, eps=eps,
                                 record_every=steps // 4, engine=engine) for engine in ("compiled", "torch")]
    if param == "W" and p <= 2:
        assert float(train.loss_gradient(problems[0], runs[1].W[-1, 0]).norm()) < EPS  # saturated
    for name in ("W", "probs", "loss") + (("K", "Q") if param == "KQ" else ()):
        torch.testing.assert_close(getattr(runs[0], name), getattr(runs[1], name), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("R", [35.0, 800.0])
@pytest.mark.parametrize("p", [1.75, 2.0, 3.0])
@pytest.mark.parametrize("param", ["W", "KQ"])
def test_one_compiled_step_deep_in_saturation_is_the_torch_loops(R, p, param):
    """From W0 = R W^mm (the other tokens' attention below e^-33 for R = 35; for R = 800 below e^-798, where the
    true gradient underflows to 0), or from (K0, Q0) = (U S^1/2, V S^1/2) of its SVD, one step of each engine, with
    lr half the smallest dual norm ||theta_0||_q so that the step changes W by a fraction of its size. Tolerance,
    relative to the largest entry: the step follows the logits through e^(logit differences), and each logit is
    known only to its round-off, about eps |logit|, so the two engines' steps may differ by a relative
    eps max|logit| (the mirror maps add a few ulps); 4 eps max|logit| (8e-14 at R = 35, 2e-12 at R = 800) is four
    times that and over 11 times the largest difference seen, while a wrong step (the faults `compiled_*` of
    tools/faults.py) is off by a relative O(1)."""
    problems = _problem(seed=18, batch=2)
    alpha = theory.optimal_tokens(problems)
    W0 = R * torch.as_tensor(svm.att_svm(problems, alpha))
    logits = model.logits(problems, W0)
    others = logits.masked_fill(torch.nn.functional.one_hot(alpha, 4).bool(), -torch.inf)
    assert float((others.logsumexp(-1) - logits.gather(-1, alpha[..., None])[..., 0]).max()) < -R + 2  # 1 - top prob
    if R == 800:
        assert float(train.loss_gradient(problems, W0).norm()) == 0.0  # the true gradient underflows
    U, S, Vh = torch.linalg.svd(W0)
    init = W0 if param == "W" else (U * S.sqrt()[..., None, :], Vh.transpose(-2, -1) * S.sqrt()[..., None, :])
    duals = [_mirror_map(w, p) for w in ((init,) if param == "W" else init)]
    lr = 0.5 * min(float(train.dual_norm(theta, p / (p - 1)).min()) for theta in duals)
    runs = [train.mirror_descent(problems, p=p, steps=1, lr=lr, param=param, init=init, engine=engine)
            for engine in ("compiled", "torch")]
    tol = 4 * torch.finfo(torch.float64).eps * float(logits.abs().max())
    for name in ("W",) + (("K", "Q") if param == "KQ" else ()):
        compiled, torch_loop = getattr(runs[0], name), getattr(runs[1], name)
        largest = torch_loop[1].abs().amax((-2, -1))
        assert ((torch_loop[1] - torch_loop[0]).abs().amax((-2, -1)) > 0.1 * largest).all()  # the step is not tiny
        assert ((compiled[1] - torch_loop[1]).abs().amax((-2, -1)) <= tol * largest).all()


@pytest.mark.parametrize("param", ["W", "KQ"])
def test_the_compiled_sign_descent_is_the_torch_loops(param):
    problems = _problem(seed=17, batch=3)
    runs = [train.sign_descent(problems, steps=500, lr=0.05, param=param, init="uniform", record_every=100,
                               engine=engine) for engine in ("compiled", "torch")]
    for name in ("W", "probs", "loss"):
        torch.testing.assert_close(getattr(runs[0], name), getattr(runs[1], name), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("q", [1.0, 4 / 3, 1.5, 2.0, 3.0, math.inf])
def test_dual_norm(q):
    G = _start((2, 3, 3), seed=12)
    expected = torch.linalg.vector_norm(G, q, dim=(-2, -1), keepdim=True)
    torch.testing.assert_close(train.dual_norm(G, q), expected, rtol=1e-13, atol=0)
    torch.testing.assert_close(train.dual_norm(G * 1e-300, q) / 1e-300, expected, rtol=1e-12, atol=0)


def test_bad_arguments_are_named():
    problem = _problem()
    for p in (1, 0.5, "2", None, True, float("nan")):
        with pytest.raises(ValueError, match=r"\bp\b"):
            train.mirror_descent(problem, p=p, steps=1, lr=0.1)
    with pytest.raises(ValueError, match="eps"):
        train.mirror_descent(problem, p=2, steps=1, lr=0.1, rule="official", eps=EPS)
    with pytest.raises(ValueError, match="eps"):
        train.mirror_descent(problem, p=2, steps=1, lr=0.1, eps=-1.0)
    with pytest.raises(ValueError, match="eps"):
        train.mirror_descent(problem, p=2, steps=1, lr=0.1, eps=[0.0, 1.0])
    with pytest.raises(ValueError, match="lr"):
        train.sign_descent(problem, steps=1, lr=-0.1)
    with pytest.raises(ValueError, match=r'^engine="compiled" cannot run this training: rule="official"'):
        train.mirror_descent(problem, p=2, steps=1, lr=0.1, rule="official", engine="compiled")
    with pytest.raises(ValueError, match="engine"):
        train.sign_descent(problem, steps=1, lr=0.1, engine="numba")


def test_a_zero_gradient_gives_no_step_with_or_without_eps():
    """From Q = 0 the gradient of K is exactly zero: K stays, Q moves, nothing is NaN (eps = 0 too)."""
    problem = _problem(seed=13)
    K0 = _start((4, 4), seed=14)
    for eps in (None, 0.0, EPS):
        run = train.mirror_descent(problem, p=1.75, steps=1, lr=0.1, param="KQ", init=(K0, torch.zeros(4, 4)),
                                   eps=eps)
        torch.testing.assert_close(run.K[1], K0, rtol=1e-14, atol=0)  # up to the mirror map's round-off
        assert torch.isfinite(run.W).all() and bool((run.Q[1] != 0).any())


@pytest.mark.parametrize("train_on", [lambda problem, **a: train.mirror_descent(problem, p=1.75, **a),
                                      lambda problem, **a: train.sign_descent(problem, **a),
                                      lambda problem, **a: train.gd(problem, engine="torch", **a)])
def test_an_all_zero_KQ_start_is_refused_like_init_zeros(train_on):
    """K0 = Q0 = 0 is the saddle point that init="zeros" names: such an explicit start used to run silently and
    stay at W = 0. Now it is refused, for one problem and for some problems of a batch; a start with only Q0 = 0
    still runs and moves."""
    problem, zeros = _problem(seed=13), torch.zeros(4, 4, dtype=torch.float64)
    with pytest.raises(ValueError, match=r'^init="zeros" is a saddle point'):
        train_on(problem, steps=2, lr=0.1, param="KQ", init="zeros")
    with pytest.raises(ValueError, match=r"^init=\(K0, Q0\) has K0 = Q0 = 0: like init=\"zeros\", a saddle "
                                         r"point .*use init=\"uniform\" or pass a nonzero \(K0, Q0\)$"):
        train_on(problem, steps=2, lr=0.1, param="KQ", init=(zeros, zeros.clone()))
    problems = _problem(seed=13, batch=3)
    K0 = _start((3, 4, 4), seed=14)
    K0[1] = 0
    with pytest.raises(ValueError, match=r"K0 = Q0 = 0 for problem 1:"):
        train_on(problems, steps=2, lr=0.1, param="KQ", init=(K0, torch.zeros(3, 4, 4)))
    K0[2] = 0
    with pytest.raises(ValueError, match=r"K0 = Q0 = 0 for problems \[1, 2\]:"):
        train_on(problems, steps=2, lr=0.1, param="KQ", init=(K0, torch.zeros(3, 4, 4)))
    run = train_on(problem, steps=2, lr=0.1, param="KQ", init=(_start((4, 4), seed=14), zeros))
    assert bool((run.Q[-1] != 0).any()) and bool((run.W[-1] != 0).any())


@pytest.mark.parametrize("a", [7 / 3, 4 / 3, 0.75, 3.3])
def test_compiled_powers_are_libms_to_an_ulp_whatever_the_row(a):
    """`_mirror._powers` for an exponent without a sqrt-and-products form (p = 1.75: q = 7/3, 1/(p-1) = 4/3) takes
    libmvec's 4-lane pow where it is loaded: within one ulp of numpy's (libm's) x ** a, zeros, subnormals and
    huge entries included, and an entry's value does not depend on the array's length (a tail shorter than a
    vector is padded) nor on its place in it, so a problem's digits are the same alone and in a lane."""
    from attnsvm.train import _mirror
    rng = np.random.default_rng(int(100 * a))
    x = np.abs(rng.standard_normal(103)) * 10.0 ** rng.integers(-320, int(300 / max(a, 1.0)), 103)
    x[::9] = 0.0
    whole = x.copy()
    _mirror._powers(whole, a)
    reference = x ** a
    assert (np.abs(whole - reference) <= np.spacing(reference)).all()
    for start, size in ((0, 1), (1, 2), (3, 3), (6, 5), (11, 6), (17, 7), (40, 63)):
        part = x[start:start + size].copy()
        _mirror._powers(part, a)
        assert np.array_equal(part, whole[start:start + size]), (start, size)
    grid = x[:96].reshape(4, 6, 4).copy()  # the loops' (rows, columns, lanes) scratch
    _mirror._powers(grid, a)
    assert np.array_equal(grid.reshape(-1), whole[:96])
