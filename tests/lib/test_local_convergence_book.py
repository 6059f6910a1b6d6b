"""The helpers Chapter 4 (local convergence) uses: model.support_gradient and model.min_margin."""

import numpy as np
import pytest
import torch

from attnsvm import data, model, svm, theory, train


def _loop_support_gradient(problem, W, alpha, support):
    """The sketch's sum, one sequence and one token at a time."""
    X, Z, Y = problem.X.numpy(), problem.Z.numpy(), problem.Y.numpy()
    s, u = model.attention(problem, W).numpy(), model.token_values(problem).numpy()
    total = np.zeros((problem.d, problem.d))
    for i in range(problem.n):
        c = 1 / (1 + np.exp(Y[i] * (s[i] @ u[i]))) / problem.n  # |l'| for the logistic loss
        a = int(alpha[i])
        for t in range(problem.T):
            if support[i, t]:
                gap = Y[i] * u[i, a] - Y[i] * u[i, t]
                total += c * s[i, t] * gap * np.outer(X[i, a] - X[i, t], Z[i])
    return total


def test_support_gradient_equals_the_explicit_sum():
    problem = data.random_problem(3, 5, 4, seed=3)
    alpha = torch.tensor([0, 2, 4])
    W = torch.randn(4, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    support = np.random.default_rng(1).random((3, 5)) < 0.5
    np.testing.assert_allclose(model.support_gradient(problem, W, alpha, support).numpy(),
                               _loop_support_gradient(problem, W, alpha, support), rtol=1e-12, atol=1e-15)


def test_support_gradient_batched_equals_one_by_one():
    problems = data.random_problem(2, 4, 3, seed=5, batch=3)
    alpha = data.random_selection(problems, seed=6)
    W = torch.randn(3, 3, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    support = np.random.default_rng(2).random((3, 2, 4)) < 0.5
    batched = model.support_gradient(problems, W, alpha, support)
    for b in range(3):
        one = model.support_gradient(problems[b], W[b], alpha[b], support[b])
        torch.testing.assert_close(batched[b], one, rtol=1e-12, atol=1e-15)


def test_all_tokens_differ_from_the_exact_gradient_by_the_second_order_term():
    """Exactly, -grad L = sum_i c_i sum_t s_it (Y_i f_i - gamma_it) (x_{i alpha_i} - x_it) z_i^T: the sketch
    writes gamma_{i alpha_i} for Y_i f_i, so with every token kept it misses only the term with their difference."""
    problem = data.random_problem(3, 5, 4, seed=7)
    alpha = theory.optimal_tokens(problem)
    W = torch.randn(4, 4, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    everything = np.ones((3, 5), dtype=bool)
    s, f = model.attention(problem, W), model.outputs(problem, W)
    c = torch.sigmoid(-problem.Y * f) / problem.n
    gamma = theory.token_scores(problem)
    rows = torch.arange(3)
    D = problem.X[rows, alpha][:, None] - problem.X
    missed = torch.einsum("n,nt,ntd,ne->de", c * (gamma[rows, alpha] - problem.Y * f), s, D, problem.Z)
    torch.testing.assert_close(model.support_gradient(problem, W, alpha, everything) - missed,
                               -train.loss_gradient(problem, W), rtol=1e-10, atol=1e-14)


def test_support_tokens_dominate_far_along_the_svm_direction():
    """The sketch's claim for optimal tokens: along R W^mm the support-token sum approaches -grad L."""
    problem = data.random_problem(2, 4, 6, seed=0)
    alpha = theory.optimal_tokens(problem)
    W_mm = svm.att_svm(problem.X, problem.Z, alpha)
    support = theory.support_tokens(problem, W_mm, alpha)
    errors = []
    for R in (4.0, 16.0, 64.0):
        W = torch.as_tensor(R * W_mm / np.linalg.norm(W_mm))
        G = train.loss_gradient(problem, W)
        errors.append(float((model.support_gradient(problem, W, alpha, support) + G).norm() / G.norm()))
    assert errors[0] > errors[1] > errors[2] and errors[2] < 1e-2


def test_support_gradient_checks_its_arguments():
    problem = data.random_problem(2, 3, 3, seed=0)
    W, alpha = torch.zeros(3, 3, dtype=torch.float64), [0, 1]
    with pytest.raises(ValueError, match="support"):
        model.support_gradient(problem, W, alpha, np.ones((2, 4), dtype=bool))
    with pytest.raises(ValueError, match="support"):
        model.support_gradient(problem, W, alpha, np.ones((2, 3)))
    with pytest.raises(ValueError, match="alpha"):
        model.support_gradient(problem, W, [0, 3], np.ones((2, 3), dtype=bool))
    with pytest.raises(ValueError, match="loss"):
        model.support_gradient(problem, W, alpha, np.ones((2, 3), dtype=bool), loss="hinge")


def test_min_margin_is_the_smallest_margin_off_the_selection():
    problems = data.random_problem(3, 5, 4, seed=1, batch=4)
    alpha = data.random_selection(problems, seed=2)
    W = torch.randn(4, 4, 4, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    mu = theory.margins(problems, W, alpha)
    off = np.arange(5) != alpha.numpy()[..., None]
    expected = np.array([mu[b][off[b]].min() for b in range(4)])
    np.testing.assert_allclose(model.min_margin(problems, W, alpha).numpy(), expected, rtol=0, atol=1e-14)


def test_min_margin_is_one_at_the_att_svm():
    problem = data.random_problem(2, 4, 6, seed=0)
    alpha = theory.optimal_tokens(problem)
    W_mm = svm.att_svm(problem.X, problem.Z, alpha)
    assert abs(float(model.min_margin(problem, W_mm, alpha)) - 1) < 1e-6


def test_min_margin_checks_its_arguments():
    one_token = data.random_problem(2, 1, 3, seed=0)
    with pytest.raises(ValueError, match="T >= 2"):
        model.min_margin(one_token, torch.zeros(3, 3, dtype=torch.float64), [0, 0])
    problem = data.random_problem(2, 3, 3, seed=0)
    with pytest.raises(ValueError, match="alpha"):
        model.min_margin(problem, torch.zeros(3, 3, dtype=torch.float64), [0])
