"""Prediction heads (`attnsvm.heads`): gradients against autograd, the exact loss gradient with a nonlinear head,
the linear head as the default, and the lambda-head's water-filling optimum against a convex solver."""

import cvxpy as cp
import numpy as np
import pytest
import torch

from attnsvm import data, heads, model, train


def _heads(d, batch):
    gen = torch.Generator().manual_seed(1)
    v = torch.randn(batch, d, generator=gen, dtype=torch.float64)
    return {"linear": heads.Linear(v), "relu": heads.random_relu(d, seed=2, batch=batch),
            "lambda": heads.Lambda(v, 0.7)}


@pytest.mark.parametrize("name", ["linear", "relu", "lambda"])
def test_head_gradient_is_the_gradient_of_its_value(name):
    head = _heads(5, 3)[name]
    a = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(head.value(a).sum(), a)
    torch.testing.assert_close(head.gradient(a.detach()), grad, rtol=1e-13, atol=1e-14)
    value, gradient = head.value_and_gradient(a.detach())  # the two together, as gradient descent asks
    torch.testing.assert_close(value, head.value(a.detach()), rtol=0, atol=0)
    torch.testing.assert_close(gradient, grad, rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("name", ["relu", "lambda"])
def test_exact_loss_gradient_with_a_nonlinear_head_equals_autograd(name):
    problem = data.random_problem(4, 5, 5, seed=3, batch=3)
    W = 0.5 * torch.randn(3, 5, 5, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    head = _heads(5, 3)[name]
    W_leaf = W.clone().requires_grad_()
    (expected,) = torch.autograd.grad(model.loss(problem, W_leaf, head=head).sum(), W_leaf)
    torch.testing.assert_close(train.loss_gradient(problem, W, head=head), expected, rtol=1e-11, atol=1e-14)


def test_the_linear_head_is_the_default():
    problem = data.random_problem(3, 4, 4, seed=5, batch=2)
    default = train.gd(problem, steps=50, lr=0.1, record_every=50)
    explicit = train.gd(problem, steps=50, lr=0.1, record_every=50, head=heads.Linear(problem.v))
    torch.testing.assert_close(explicit.W, default.W, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("lam", [0.05, 0.3, 1.0, 5.0])
def test_lambda_optimum_matches_a_convex_solver(lam):
    rng = np.random.default_rng(6)
    for _ in range(10):
        u = rng.standard_normal(6)
        s = cp.Variable(6)
        cp.Problem(cp.Maximize(u @ s - lam * cp.sum_squares(s)), [s >= 0, cp.sum(s) == 1]).solve(solver=cp.CLARABEL)
        ours = heads.lambda_optimum(torch.tensor(u), lam).numpy()
        np.testing.assert_allclose(ours, s.value, atol=1e-6)  # the solver's own accuracy
        assert abs(ours.sum() - 1) < 1e-14 and (ours >= 0).all()
        assert u @ ours - lam * ours @ ours >= u @ s.value - lam * s.value @ s.value - 1e-12  # never worse


def test_lambda_optimum_by_hand_and_limits():
    u = torch.tensor([1.0, 0.5, 0.0], dtype=torch.float64)
    torch.testing.assert_close(heads.lambda_optimum(u, 0.5), torch.tensor([0.75, 0.25, 0.0], dtype=torch.float64))
    torch.testing.assert_close(heads.lambda_optimum(u, 0.0), torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64))
    kept = [(heads.lambda_optimum(u, lam) > 0).sum().item() for lam in (0.1, 0.5, 0.76)]
    assert kept == [1, 2, 3]  # all three once 2 lam > sum(u - min u) = 1.5
    with pytest.raises(ValueError, match="lam must"):
        heads.lambda_optimum(u, -1.0)


def test_orthonormal_problem_has_orthonormal_tokens():
    problem = data.orthonormal_problem(6, seed=0, batch=4)
    assert problem.X.shape == (4, 1, 6, 6) and (problem.Y == 1).all()
    gram = problem.X @ problem.X.transpose(-2, -1)
    torch.testing.assert_close(gram, torch.eye(6, dtype=torch.float64).expand(4, 1, 6, 6), rtol=0, atol=1e-13)
