"""attnsvm.train.regularization_path: iterates on the spheres, monotone loss, determinism, input checks, convergence
in direction to the Att-SVM, and a brute-force comparison on a tiny problem."""

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
@pytest.mark.parametrize("kind", ["logistic", "exponential"])
def test_path_loss_does_not_increase_with_the_radius(param, kind):
    problem = data.random_problem(6, 8, 10, seed=2, batch=4)
    path = train.regularization_path(problem, [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0], param=param, steps=30, loss=kind)
    assert (path.loss[1:] <= path.loss[:-1]).all()
    assert (path.loss[-1] < path.loss[0]).all()
    torch.testing.assert_close(path.loss[-1], model.loss(problem, path.W[-1], kind), rtol=0, atol=0)


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
