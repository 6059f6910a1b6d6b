"""attnsvm.data: random problem instances and the Problem container."""

import numpy as np
import pytest
import torch

from attnsvm import data, model, theory, train


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


def test_random_problem_with_a_list_of_seeds_draws_each_problem_alone():
    seeds = [5, 2, 5, 40]
    problem = data.random_problem(3, 4, 5, seed=np.array(seeds))
    assert problem.batch_shape == (4,)
    for b, seed in enumerate(seeds):
        alone = data.random_problem(3, 4, 5, seed=seed)
        for name in "XYZv":
            assert torch.equal(getattr(problem, name)[b], getattr(alone, name)), (b, name)


@pytest.mark.parametrize("seed, batch, message", [
    ([1, 2], 2, "no batch"), ([], None, "non-empty list"), ("ab", None, "seed must be an integer or a list"),
])
def test_random_problem_rejects_a_bad_list_of_seeds(seed, batch, message):
    with pytest.raises(ValueError, match=message):
        data.random_problem(3, 4, 5, seed=seed, batch=batch)


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


def test_random_selection_covers_every_token():
    problem = data.random_problem(5, 6, 7, seed=0, batch=50)
    counts = np.bincount(data.random_selection(problem, seed=0).flatten().numpy(), minlength=6)
    assert counts.sum() == 250 and (counts > 250 / 6 / 2).all()  # roughly uniform over the 6 tokens (seeded)


# ------------------------------------------------------------------ the papers' example problems

def test_opposite_clusters_problem_layout():
    problem = data.opposite_clusters_problem()
    assert problem.X.shape == (2, 3, 2) and problem.batch_shape == ()
    np.testing.assert_array_equal(problem.Y.numpy(), [1.0, 1.0])
    np.testing.assert_allclose(problem.Z.norm(dim=-1).numpy(), 1.0, rtol=0, atol=1e-15)
    np.testing.assert_allclose(float(problem.v.norm()), 1.0, rtol=0, atol=1e-15)
    assert (problem.X[0, :, 0] < 0).all() and (problem.X[1, :, 0] > 0).all()  # the two clusters
    assert torch.equal(problem.X, data.opposite_clusters_problem(seed=1).X)  # the default seed is 1
    assert not torch.equal(problem.X, data.opposite_clusters_problem(seed=2).X)


def test_opposite_clusters_problem_without_noise():
    problem = data.opposite_clusters_problem(seed=3, spread=0.0)
    expected = np.broadcast_to(np.array([[[-1.0, 0.0]], [[1.0, 0.0]]]), (2, 3, 2)).copy()
    np.testing.assert_array_equal(problem.X.numpy(), expected)
    # the spread scales the same noise
    noisy = data.opposite_clusters_problem(seed=3, spread=0.3).X - torch.as_tensor(expected)
    doubled = data.opposite_clusters_problem(seed=3, spread=0.6).X - torch.as_tensor(expected)
    torch.testing.assert_close(doubled, 2 * noisy, rtol=1e-13, atol=1e-15)


E3 = [0.0, 0.0, 1.0]


def _is_prompt_problem(problem, n, T):
    assert problem.Z is None and problem.batch_shape == () and problem.X.shape == (n, T, 3)
    np.testing.assert_array_equal(problem.v.numpy(), E3)
    np.testing.assert_array_equal(problem.Y.numpy(), np.ones(n))


def test_prompt_key_keeps_the_positions_and_drops_the_score():
    np.testing.assert_array_equal(data.PROMPT_KEY.numpy(), np.diag([1.0, 1.0, 0.0]))


@pytest.mark.parametrize("global_case,score", [(True, 0.9), (False, 0.0)])
def test_single_input_problem(global_case, score):
    problem = data.single_input_problem(global_case=global_case)
    _is_prompt_problem(problem, 1, 3)
    np.testing.assert_array_equal(problem.X.numpy(), [[[-0.1, 1.0, 1.0], [1.0, 0.0, 0.9], [0.0, 0.0, score]]])
    np.testing.assert_array_equal(theory.token_scores(problem).numpy(), [[1.0, 0.9, score]])
    assert theory.optimal_tokens(problem).tolist() == [0]


@pytest.mark.parametrize("C", [2.0, 10.0, 100.0])
def test_loss_example_problem(C):
    problem = data.loss_example_problem(C)
    _is_prompt_problem(problem, 2, 2)
    np.testing.assert_array_equal(problem.X.numpy(), [[[0.0, 0.0, 0.0], [1.0, 1.0, C]], [[0.0, 0.0, 0.0], [1.0, -1.0, 1.0]]])
    assert theory.optimal_tokens(problem).tolist() == [1, 1]


def test_multi_input_problem_layout():
    problem = data.multi_input_problem()
    _is_prompt_problem(problem, 3, 7)
    np.testing.assert_array_equal(problem.X[..., 2].numpy(), np.broadcast_to([1.0] + [0.5] * 6, (3, 7)))
    assert theory.optimal_tokens(problem).tolist() == [0, 0, 0]
    centres = np.array([[1.0, 0.0]] + [[-1.0, 1.0]] * 3 + [[-0.5, -0.5]] * 3)
    exact = data.multi_input_problem(spread=0.0)
    np.testing.assert_array_equal(exact.X[..., :2].numpy(), np.broadcast_to(centres, (3, 7, 2)))
    noise = (problem.X[..., :2] - exact.X[..., :2]).numpy()
    assert 0 < np.abs(noise).max() < 5 * 0.2  # the default spread is 0.2
    assert torch.equal(problem.X, data.multi_input_problem(seed=0).X)
    assert not torch.equal(problem.X, data.multi_input_problem(seed=1).X)


# ------------------------------------------------------------------ prompt problems: Z = None

def _batched_prompt_problem():
    X = torch.randn(4, 3, 5, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    return data.Problem(X, torch.ones(4, 3), None, E3)


def test_problem_without_queries_indexes_and_moves():
    problem = _batched_prompt_problem()
    assert problem.Z is None and problem.batch_shape == (4,) and problem.v.shape == (4, 3)
    one = problem[2]
    assert one.Z is None and one.batch_shape == () and torch.equal(one.X, problem.X[2])
    some = problem[1:3]
    assert some.Z is None and some.batch_shape == (2,) and torch.equal(some.v, problem.v[1:3])
    moved = problem.to("cpu")
    assert moved.Z is None and torch.equal(moved.X, problem.X)
    assert repr(problem) == "Problem(batch=(4,), n=3, T=5, d=3)"
    np.testing.assert_array_equal(theory.token_scores(problem).numpy(), problem.X[..., 2].numpy())


MODEL_FUNCTIONS_NEEDING_Z = {
    "logits": lambda p: model.logits(p, np.eye(3)),
    "attention": lambda p: model.attention(p, np.eye(3)),
    "outputs": lambda p: model.outputs(p, np.eye(3)),
    "loss": lambda p: model.loss(p, np.eye(3)),
    "loss_gradient": lambda p: train.loss_gradient(p, np.eye(3)),
    "gd": lambda p: train.gd(p, steps=1, lr=0.1),
    "gd_KQ": lambda p: train.gd(p, param="KQ", steps=1, lr=0.1),
    "regularization_path": lambda p: train.regularization_path(p, [1.0], steps=1),
    "margins": lambda p: theory.margins(p, np.eye(3), np.zeros(p.batch_shape + (3,), int)),
    "support_tokens": lambda p: theory.support_tokens(p, np.eye(3), np.zeros(p.batch_shape + (3,), int)),
    "convergence": lambda p: theory.convergence(p, np.eye(3)),
}


@pytest.mark.parametrize("function", MODEL_FUNCTIONS_NEEDING_Z.values(), ids=MODEL_FUNCTIONS_NEEDING_Z.keys())
@pytest.mark.parametrize("batched", [False, True])
def test_functions_that_need_queries_reject_a_prompt_problem(function, batched):
    problem = _batched_prompt_problem() if batched else data.multi_input_problem()
    with pytest.raises(ValueError, match=r"no query tokens Z .*train\.gd_prompt"):
        function(problem)


def test_locally_optimal_rejects_a_prompt_problem_clearly():
    """A prompt problem has no queries Z: the error points to train.gd_prompt."""
    with pytest.raises(ValueError, match=r"no query tokens Z .*train\.gd_prompt"):
        theory.locally_optimal(data.multi_input_problem(), [0, 0, 0])
