"""attnsvm.train.lipschitz_W, the certified step size of the global-convergence chapter."""

import pytest
import torch

from attnsvm import data, train


def _quotients(problem, seed, scale=3.0):
    """||grad L(W) - grad L(W')||_F / ||W - W'||_F for random pairs, far apart and close together."""
    d = problem.d
    W1, W2 = (train.uniform_init((2,) + problem.batch_shape + (d, d), seed=s) * scale for s in (seed, seed + 1))
    W2 = torch.cat([W2[:1], W1[1:] + 1e-4 * W2[1:]])
    dG = train.loss_gradient(problem, W1) - train.loss_gradient(problem, W2)
    return dG.norm(dim=(-2, -1)) / (W1 - W2).norm(dim=(-2, -1))


@pytest.mark.parametrize("make", [
    lambda: data.random_problem(4, 5, 6, seed=1, batch=20),
    lambda: data.equal_scores_problem(3, 4, 5, seed=2, batch=20),
])
def test_lipschitz_W_bounds_measured_difference_quotients(make):
    problem = make()
    L = train.lipschitz_W(problem)
    assert L.shape == problem.batch_shape and (L > 0).all()
    assert (_quotients(problem, seed=3) <= L).all()


def test_lipschitz_W_is_the_mean_of_the_per_sequence_formula():
    problem = data.random_problem(3, 4, 5, seed=4)
    values = problem.X @ problem.v  # v^T x_it, (n, T)
    rho = values.max(-1).values - values.min(-1).values
    A_norm = torch.linalg.matrix_norm(problem.X, ord=2) * problem.Z.norm(dim=-1)  # ||X_i||_2 ||z_i||
    expected = (A_norm**2 * (rho**2 / 16 + 1.25 * rho)).mean()
    assert torch.allclose(train.lipschitz_W(problem), expected, rtol=1e-12)


def test_lipschitz_W_names_its_argument():
    with pytest.raises(TypeError, match="problem"):
        train.lipschitz_W("not a problem")
    prompt = data.multi_input_problem(seed=0)  # paper B's prompt model: no queries z_i
    with pytest.raises(ValueError, match="problem.Z"):
        train.lipschitz_W(prompt)
