"""attnsvm.data: random problem instances and the Problem container."""

import numpy as np
import pytest
import torch

from attnsvm import data, theory


@pytest.mark.parametrize("batch", [None, 7])
def test_random_problem_shapes(batch):
    problem = data.random_problem(3, 4, 5, seed=0, batch=batch)
    lead = () if batch is None else (batch,)
    assert problem.X.shape == lead + (3, 4, 5)
    assert problem.Y.shape == lead + (3,)
    assert problem.Z.shape == lead + (3, 5)
    assert problem.v.shape == lead + (5,)
    assert problem.batch_shape == lead
    assert (problem.n, problem.T, problem.d) == (3, 4, 5)
    for tensor in (problem.X, problem.Y, problem.Z, problem.v):
        assert tensor.dtype == torch.float64


@pytest.mark.parametrize("batch", [None, 7])
def test_random_problem_unit_norms_and_labels(batch):
    problem = data.random_problem(4, 6, 8, seed=3, batch=batch)
    for tensor in (problem.X, problem.Z, problem.v):
        norms = tensor.norm(dim=-1)
        torch.testing.assert_close(norms, torch.ones_like(norms), rtol=0, atol=1e-14)
    labels = set(problem.Y.flatten().tolist())
    assert labels <= {-1.0, 1.0}
    if batch is not None:
        assert labels == {-1.0, 1.0}  # 4 * 7 = 28 labels drawn w.p. 1/2 each: both signs occur (seeded)


def test_random_problem_same_seed_identical_different_seed_different():
    a = data.random_problem(3, 4, 5, seed=11, batch=2)
    b = data.random_problem(3, 4, 5, seed=11, batch=2)
    c = data.random_problem(3, 4, 5, seed=12, batch=2)
    for name in "XYZv":
        assert torch.equal(getattr(a, name), getattr(b, name))
    for name in "XZv":
        assert not torch.equal(getattr(a, name), getattr(c, name))


def test_random_problem_batch_instances_are_independent_draws():
    problem = data.random_problem(3, 4, 5, seed=0, batch=2)
    assert not torch.equal(problem.X[0], problem.X[1])
    assert not torch.equal(problem.v[0], problem.v[1])


def _arrays(batch=()):
    rng = np.random.default_rng(0)
    X = rng.standard_normal(batch + (2, 3, 4))
    Y = np.where(rng.random(batch + (2,)) < 0.5, -1.0, 1.0)
    Z = rng.standard_normal(batch + (2, 4))
    v = rng.standard_normal(batch + (4,))
    return X, Y, Z, v


def test_problem_accepts_numpy_and_torch_alike():
    X, Y, Z, v = _arrays()
    from_numpy = data.Problem(X, Y, Z, v)
    from_torch = data.Problem(*(torch.tensor(a, dtype=torch.float32) for a in (X, Y, Z, v)))
    from_lists = data.Problem(X.tolist(), Y.tolist(), Z.tolist(), v.tolist())
    for name, array in zip("XYZv", (X, Y, Z, v)):
        assert getattr(from_numpy, name).dtype == torch.float64
        assert getattr(from_torch, name).dtype == torch.float64
        np.testing.assert_array_equal(getattr(from_numpy, name).numpy(), array)
        np.testing.assert_array_equal(getattr(from_lists, name).numpy(), array)
        np.testing.assert_array_equal(getattr(from_torch, name).numpy(), array.astype(np.float32).astype(np.float64))


def test_problem_integer_labels_are_accepted():
    X, Y, Z, v = _arrays()
    problem = data.Problem(X, Y.astype(np.int64), Z, v)
    assert problem.Y.dtype == torch.float64
    np.testing.assert_array_equal(problem.Y.numpy(), Y)


def test_problem_broadcasts_a_single_head_over_the_batch():
    X, Y, Z, _ = _arrays((5,))
    v = np.arange(1.0, 5.0)
    problem = data.Problem(X, Y, Z, v)
    assert problem.v.shape == (5, 4)
    for b in range(5):
        np.testing.assert_array_equal(problem.v[b].numpy(), v)


def test_problem_indexing_selects_batch_instances():
    problem = data.random_problem(3, 4, 5, seed=0, batch=6)
    one = problem[2]
    assert one.batch_shape == ()
    for name in "XYZv":
        assert torch.equal(getattr(one, name), getattr(problem, name)[2])
    some = problem[1:4]
    assert some.batch_shape == (3,)
    assert torch.equal(some.X, problem.X[1:4])
    assert torch.equal(some.v, problem.v[1:4])


def test_problem_indexing_without_batch_raises():
    problem = data.random_problem(3, 4, 5, seed=0)
    with pytest.raises(IndexError, match="no batch dimension"):
        problem[0]


def test_problem_to_cpu_keeps_values():
    problem = data.random_problem(3, 4, 5, seed=0, batch=2)
    moved = problem.to("cpu")
    assert isinstance(moved, data.Problem)
    for name in "XYZv":
        tensor = getattr(moved, name)
        assert tensor.device.type == "cpu"
        assert torch.equal(tensor, getattr(problem, name))


def test_problem_repr_mentions_sizes():
    assert repr(data.random_problem(3, 4, 5, seed=0, batch=2)) == "Problem(batch=(2,), n=3, T=4, d=5)"
    assert repr(data.random_problem(3, 4, 5, seed=0)) == "Problem(n=3, T=4, d=5)"


def test_unit_rows():
    rows = data.unit_rows(torch.tensor([[3.0, 4.0], [0.0, -2.0]], dtype=torch.float64))
    torch.testing.assert_close(rows, torch.tensor([[0.6, 0.8], [0.0, -1.0]], dtype=torch.float64), rtol=0, atol=1e-15)


@pytest.mark.parametrize("batch", [None, 4])
def test_random_selection_is_seeded_and_in_range(batch):
    problem = data.random_problem(5, 6, 7, seed=0, batch=batch)
    alpha = data.random_selection(problem, seed=3)
    assert alpha.shape == problem.batch_shape + (5,) and alpha.dtype == torch.int64
    assert (alpha >= 0).all() and (alpha < 6).all()
    assert torch.equal(alpha, data.random_selection(problem, seed=3))


def test_random_selection_differs_across_seeds():
    problem = data.random_problem(5, 6, 7, seed=0, batch=4)
    assert not torch.equal(data.random_selection(problem, seed=0), data.random_selection(problem, seed=1))


def test_planar_problem_layout():
    problem = data.planar_problem(seed=0, n=3, T=4)
    assert problem.X.shape == (3, 4, 2) and problem.batch_shape == ()
    np.testing.assert_array_equal(problem.Y.numpy(), [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(problem.v.numpy(), [1.0, 0.0])
    np.testing.assert_array_equal(problem.X[:, 0].numpy(), [[1.0, 0.5], [1.0, -0.5], [1.0, 0.5]])
    np.testing.assert_allclose(problem.Z.norm(dim=-1).numpy(), 1.0, rtol=0, atol=1e-15)
    # the first token is the optimal one: score 1 against -1 + noise for the others
    np.testing.assert_array_equal(theory.optimal_tokens(problem).numpy(), [0, 0, 0])
    assert torch.equal(problem.X, data.planar_problem(seed=0, n=3, T=4).X)
    assert not torch.equal(problem.X, data.planar_problem(seed=1, n=3, T=4).X)


def test_planar_problem_without_noise_puts_other_tokens_at_minus_e1():
    problem = data.planar_problem(seed=0, spread=0.0)
    np.testing.assert_array_equal(problem.X[:, 1:].numpy(), np.broadcast_to([-1.0, 0.0], (2, 4, 2)))
