"""attnsvm.train.regularization_path: iterates on the spheres, monotone loss, determinism, input checks, convergence
in direction to the Att-SVM, and a brute-force comparison on a tiny problem."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from attnsvm import data, model, svm, theory, train

RADII = [0.5, 1.0, 2.0, 4.0, 8.0]


@pytest.mark.parametrize("batch", [None, 3])
def test_W_path_lies_on_the_spheres(batch):
    problem = data.random_problem(4, 5, 6, seed=0, batch=batch)
    path = train.regularization_path(problem, RADII, steps=20)
    assert isinstance(path.radii, np.ndarray)
    np.testing.assert_array_equal(path.radii, RADII)
    assert path.W.shape == (5,) + problem.batch_shape + (6, 6) and path.loss.shape == (5,) + problem.batch_shape
    assert path.K is None and path.Q is None
    norms = path.W.norm(dim=(-2, -1))
    expected = torch.tensor(RADII, dtype=torch.float64).reshape((5,) + (1,) * len(problem.batch_shape))
    torch.testing.assert_close(norms, expected.expand_as(norms), rtol=1e-14, atol=0)
    for r in range(5):
        torch.testing.assert_close(path.loss[r], model.loss(problem, path.W[r]), rtol=0, atol=0)


def test_KQ_path_lies_on_the_spheres():
    problem = data.random_problem(4, 5, 6, seed=1, batch=3)
    path = train.regularization_path(problem, RADII, param="KQ", steps=20, m=4)
    assert path.K.shape == path.Q.shape == (5, 3, 6, 4) and path.W.shape == (5, 3, 6, 6)
    torch.testing.assert_close(path.W, path.K @ path.Q.transpose(-2, -1), rtol=0, atol=0)
    squared = path.K.norm(dim=(-2, -1)) ** 2 + path.Q.norm(dim=(-2, -1)) ** 2
    expected = 2 * torch.tensor(RADII, dtype=torch.float64)[:, None].expand_as(squared)
    torch.testing.assert_close(squared, expected, rtol=1e-14, atol=0)
    # ||K Q^T||_* <= (||K||^2 + ||Q||^2) / 2 = R
    nuclear = torch.linalg.matrix_norm(path.W, "nuc")
    assert (nuclear <= expected / 2 * (1 + 1e-12)).all()


@pytest.mark.parametrize("param", ["W", "KQ"])
@pytest.mark.parametrize("loss", ["logistic", "exponential"])
def test_path_loss_does_not_increase_with_the_radius(param, loss):
    problem = data.random_problem(6, 8, 10, seed=2, batch=4)
    path = train.regularization_path(problem, [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0], param=param, steps=30, loss=loss)
    assert (path.loss[1:] <= path.loss[:-1]).all()
    assert (path.loss[-1] < path.loss[0]).all()
    torch.testing.assert_close(path.loss[-1], model.loss(problem, path.W[-1], loss), rtol=0, atol=0)


def test_path_is_deterministic_and_seeded():
    problem = data.random_problem(4, 5, 6, seed=3, batch=2)
    a = train.regularization_path(problem, RADII, param="KQ", steps=15, seed=4)
    b = train.regularization_path(problem, RADII, param="KQ", steps=15, seed=4)
    assert torch.equal(a.W, b.W) and torch.equal(a.K, b.K) and torch.equal(a.loss, b.loss)
    c = train.regularization_path(problem, RADII[:1], param="KQ", steps=1, seed=5)
    assert not torch.equal(a.K[0], c.K[0])
    w1 = train.regularization_path(problem, RADII, steps=15)
    w2 = train.regularization_path(problem, RADII, steps=15)
    assert torch.equal(w1.W, w2.W)


def test_a_single_radius_is_accepted():
    problem = data.random_problem(4, 5, 6, seed=3)
    path = train.regularization_path(problem, 3.0, steps=10)
    np.testing.assert_array_equal(path.radii, [3.0])
    assert path.W.shape == (1, 6, 6)
    torch.testing.assert_close(path.W[0].norm(), torch.tensor(3.0, dtype=torch.float64), rtol=1e-14, atol=0)


@pytest.mark.parametrize("radii,pattern", [
    ([1.0, 1.0], r"radii must be increasing"), ([2.0, 1.0], r"radii must be increasing"),
    ([1.0, 4.0, 3.0], r"radii must be increasing"), ([0.0, 1.0], r"radii must be a finite number > 0"),
    ([-1.0, 1.0], r"radii must be a finite number > 0"), ([1.0, np.inf], r"radii must be a finite number > 0"),
    ([1.0, np.nan], r"radii must be a finite number > 0"), (["big"], r"radii must be a positive number"),
])
def test_bad_radii_raise(radii, pattern):
    problem = data.random_problem(3, 4, 5, seed=0)
    with pytest.raises(ValueError, match=pattern):
        train.regularization_path(problem, radii, steps=1)


def test_empty_radii_raise_naming_radii():
    """An empty list of radii is rejected with an error that names `radii`."""
    problem = data.random_problem(3, 4, 5, seed=0)
    with pytest.raises(ValueError, match=r"radii"):
        train.regularization_path(problem, [], steps=1)


@pytest.mark.parametrize("kwargs,pattern", [
    (dict(param="QK"), r"^param='QK' is not supported"), (dict(loss="hinge"), r"^loss='hinge' is not supported"),
    (dict(steps=0), r"^steps must be an integer >= 1"), (dict(candidates=0), r"^candidates must be an integer >= 1"),
    (dict(param="KQ", m=0), r"^m must be an integer >= 1"),
])
def test_bad_options_raise(kwargs, pattern):
    problem = data.random_problem(3, 4, 5, seed=0)
    with pytest.raises(ValueError, match=pattern):
        train.regularization_path(problem, [1.0], **kwargs)


def test_W_path_converges_in_direction_to_the_att_svm_of_its_selection():
    """Paper A's regularization-path theorem: W_R / R -> W^mm_alpha / ||W^mm_alpha|| for the tokens alpha it selects
    (the optimal ones on the global branch)."""
    problem = data.random_problem(6, 8, 10, seed=0, batch=4)
    radii = [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]
    path = train.regularization_path(problem, radii, steps=100)
    alpha = model.attention(problem, path.W[-1]).argmax(-1)
    correlation = theory.correlation(path.W[-1], svm.att_svm(problem.X, problem.Z, alpha))
    assert (correlation > 0.99).all()
    # the correlation grows along the path
    early = theory.correlation(path.W[2], svm.att_svm(problem.X, problem.Z, alpha))
    assert (correlation > early).all()


def test_W_path_beats_random_points_on_the_sphere():
    """Brute force on a tiny problem (n = 2, T = 3, d = 2): at each radius, W_R has a loss no larger than the best of
    100000 random points of the sphere ||W||_F = R, and it is a stationary point there (the gradient is normal to
    the sphere and points inwards: the constraint is active)."""
    problem = data.random_problem(2, 3, 2, seed=1)
    radii = [0.5, 1.0, 2.0, 4.0]
    path = train.regularization_path(problem, radii, steps=200)
    gen = torch.Generator().manual_seed(0)
    directions = torch.randn(100_000, 2, 2, generator=gen, dtype=torch.float64)
    directions = directions / directions.norm(dim=(-2, -1), keepdim=True)
    for r, R in enumerate(radii):
        assert path.loss[r] <= model.loss(problem, R * directions).min()
        G = train.loss_gradient(problem, path.W[r])
        normal = (G * path.W[r]).sum() / R**2 * path.W[r]
        assert (G - normal).norm() <= 1e-6 * G.norm()
        assert (G * path.W[r]).sum() < 0


def test_capped_simplex_projection_is_the_nearest_point():
    from attnsvm.train._path import _project_capped_simplex

    gen = torch.Generator().manual_seed(0)
    s = torch.sort(torch.rand(200, 6, generator=gen, dtype=torch.float64) * 3, descending=True).values
    for R in (0.5, 2.0, 100.0):
        p = _project_capped_simplex(s, R)
        assert (p >= 0).all() and (p.sum(-1) <= R * (1 + 1e-14)).all()
        inside = s.sum(-1) <= R
        assert torch.equal(p[inside], s[inside])
        # The nearest point of the set: no feasible random point is closer (the set is convex).
        others = torch.rand(200, 500, 6, generator=gen, dtype=torch.float64)
        others = others / others.sum(-1, keepdim=True) * R * torch.rand(200, 500, 1, generator=gen, dtype=torch.float64)
        assert ((others - s[:, None]).norm(dim=-1) >= (p - s).norm(dim=-1)[:, None] - 1e-12).all()


def test_KQ_path_is_balanced_and_stationary_on_the_nuclear_ball():
    """The factors are balanced (K^T K = Q^T Q), and W_R is a fixed point of projected gradient descent on
    {||W||_* <= R}: a first-order stationary point of the constrained problem."""
    from attnsvm.train._path import _nuclear_ball
    from attnsvm.train import loss_gradient

    problem = data.random_problem(4, 5, 6, seed=6, batch=3)
    path = train.regularization_path(problem, [0.5, 1.0, 2.0], param="KQ", steps=300)
    torch.testing.assert_close(path.K.transpose(-2, -1) @ path.K, path.Q.transpose(-2, -1) @ path.Q,
                               rtol=0, atol=1e-12)
    for r, R in enumerate(path.radii):
        W = path.W[r]
        G = loss_gradient(problem, W)
        moved = _nuclear_ball(W - 0.1 * R * G / G.norm(dim=(-2, -1), keepdim=True), R, problem.d)[0]
        assert ((moved - W).norm(dim=(-2, -1)) < 1e-6 * R).all()


PATH_ON_ONE_CODE_PATH = """
import attnsvm, json, numpy as np
from attnsvm import data, train
attnsvm.setup()
problems = data.random_problem(6, 8, 10, seed=0, batch=8)
radii = 2.0 ** np.arange(-1, 8)
W = train.regularization_path(problems, radii, steps=200).W, train.regularization_path(problems, radii, param="KQ",
                                                                                       steps=150).W
print(json.dumps([w.tolist() for w in W]))
"""


def test_path_is_the_same_on_another_cpu_code_path():
    """Chapter 2's paths (its radii and steps) computed with ATen's AVX2 kernels and with its default kernels,
    which round some sums and exponentials differently, as another processor would: the directions agree to
    1e-7, so the printed digits do not depend on the processor. (The (K, Q) path of Riemannian descent on the
    factors, which this replaced, differed in the second digit.)"""
    runs = []
    for capability in ("avx2", "default"):
        env = {**os.environ, "ATEN_CPU_CAPABILITY": capability}
        out = subprocess.run([sys.executable, "-c", PATH_ON_ONE_CODE_PATH], env=env, capture_output=True,
                             text=True, timeout=600, check=True).stdout
        runs.append([torch.tensor(w) for w in json.loads(out.splitlines()[-1])])
    for a, b in zip(*runs):
        assert (1 - theory.correlation(a, b)).max() < 1e-7


@pytest.mark.parametrize("param", ["W", "KQ"])
def test_starts_keep_the_lowest_loss_and_record_the_winner(param):
    """With ``starts``, every radius keeps the best end of the continuation and of R times each start: its loss is
    the smallest excess reached, and a start at the theorem's limit beats a branch stuck on other tokens."""
    problem = data.random_problem(6, 8, 10, seed=0, batch=20)[:8]
    opt = theory.optimal_tokens(problem)
    limit = svm.att_svm(problem.X, problem.Z, opt, norm="fro" if param == "W" else "nuc")
    radii = [32.0, 64.0]
    best = train.regularization_path(problem, radii, param=param, steps=30, starts=limit[None])
    assert best.start.shape == (2, 8) and best.excess.shape == (2, 2, 8)
    torch.testing.assert_close(best.excess.min(1).values, best.excess.gather(1, best.start[:, None])[:, 0])
    torch.testing.assert_close(best.loss[-1], model.loss(problem, best.W[-1]), rtol=0, atol=0)
    assert (model.attention(problem, best.W[-1]).argmax(-1) == opt).all()


@pytest.mark.parametrize("starts,pattern", [
    (torch.zeros(1, 5, 5, dtype=torch.float64), r"starts holds a zero matrix"),
    (torch.ones(1, 4, 4, dtype=torch.float64), r"starts must have shape"),
    (torch.ones(5, 5, dtype=torch.float64), r"starts must have shape"),
    (torch.full((1, 5, 5), float("nan"), dtype=torch.float64), r"starts contains"),
    (torch.full((1, 5, 5), float("inf"), dtype=torch.float64), r"starts contains"),
])
def test_bad_starts_raise_naming_starts(starts, pattern):
    problem = data.random_problem(3, 4, 5, seed=0)
    with pytest.raises(ValueError, match=pattern):
        train.regularization_path(problem, [1.0], steps=1, starts=starts)


@pytest.mark.parametrize("scale", [1e-320, 1e300])
def test_starts_of_extreme_scale_are_directions(scale):
    """Before: 1e300 entries overflowed the norm (an error blaming the radii), 1e-320 ones read as a zero matrix."""
    problem = data.random_problem(3, 4, 5, seed=0)
    direction = torch.eye(5, dtype=torch.float64)[None]
    wide = train.regularization_path(problem, [1.0, 2.0], steps=5, starts=direction * scale)
    plain = train.regularization_path(problem, [1.0, 2.0], steps=5, starts=direction)
    torch.testing.assert_close(wide.W, plain.W, rtol=1e-12, atol=0)


@pytest.mark.parametrize("param", ["W", "KQ"])
def test_a_batch_agrees_with_its_problems_alone_to_the_documented_tolerance(param):
    """The docstring's tolerance on chapter 2's problems, radii and steps: the batch of 20 against problems 2 and 14
    alone (where, of all 20, the (K, Q) and W paths differ most). Different starts (slices of one "uniform" draw)
    and round-off make them differ by more than round-off, but by at most 2e-3 R and 2e-6 in 1 - correlation."""
    problems = data.random_problem(6, 8, 10, seed=0, batch=20)
    radii = 2.0 ** np.arange(-1, 8)
    steps = {"W": 200, "KQ": 150}[param]
    batch = train.regularization_path(problems, radii, param=param, steps=steps)
    R = torch.tensor(radii)
    for i in (2, 14):
        alone = train.regularization_path(problems[i], radii, param=param, steps=steps)
        distance = (batch.W[:, i] - alone.W).norm(dim=(-2, -1)) / R
        assert distance.max() <= 2e-3 and distance.max() > 1e-10
        assert (1 - theory.correlation(batch.W[:, i], alone.W)).max() <= 2e-6
        selected = [model.attention(problems[i], W).argmax(-1) for W in (batch.W[-1, i], alone.W[-1])]
        assert torch.equal(*selected)
