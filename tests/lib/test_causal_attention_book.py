"""attnsvm.causal helpers of the chapter on causal attention: `total_slack`, `combine`, `selects_optimal`."""

import numpy as np
import pytest
import torch

import attnsvm.causal as causal


def _problems():
    return causal.next_token_problems(10, 5, 100, seeds=range(3))[0]


def test_combine_rebuilds_the_hard_margin_svm_from_its_multipliers():
    problem = causal.random_problem(n=4, T=6, d=10, seed=1, batch=3)
    W, lam = causal.att_svm(problem, return_multipliers=True)
    np.testing.assert_allclose(causal.combine(problem, lam), W, atol=1e-9)
    # entries off the constraints are ignored
    noisy = np.where(causal.separation_mask(problem).numpy(), lam, 7.0)
    np.testing.assert_allclose(causal.combine(problem, noisy), W, atol=1e-9)


def test_combine_matches_the_sum_of_constraint_matrices():
    problem = causal.random_problem(n=2, T=3, d=4, seed=5)
    lam = torch.rand(2, 3, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    alpha = torch.tensor([[0, 1, 0], [0, 0, 2]])
    X, mask = problem.X, causal.separation_mask(problem, alpha)
    expected = sum(float(lam[i, k, t]) * torch.outer(X[i, alpha[i, k]] - X[i, t], X[i, k])
                   for i, k, t in mask.nonzero().tolist())
    np.testing.assert_allclose(causal.combine(problem, lam, alpha), expected.numpy(), atol=1e-12)
    with pytest.raises(ValueError, match="lam"):
        causal.combine(problem, lam[:, :2])


def test_total_slack_is_the_hinge_sum_and_zero_at_the_hard_margin():
    problem = causal.random_problem(n=3, T=5, d=8, seed=2)
    W_mm = causal.att_svm(problem)
    assert float(causal.total_slack(problem, W_mm)) == pytest.approx(0.0, abs=1e-9)
    gaps = causal.margins(problem, 0.3 * W_mm)
    expected = sum(max(0.0, 1.0 - g) for g in gaps[~np.isnan(gaps)])
    assert float(causal.total_slack(problem, 0.3 * W_mm)) == pytest.approx(expected, rel=1e-12)
    assert float(causal.total_slack(problem, np.zeros((8, 8)))) == causal.separation_mask(problem).sum()


def test_selects_optimal_counts_copies_as_optimal():
    problems = _problems()
    opt = causal.optimal_tokens(problems)
    assert causal.selects_optimal(problems, opt).all()
    shifted = torch.zeros_like(opt)  # the first token: optimal only where it is a copy of the optimal one
    first = problems.X[..., :1, :].expand(problems.X.shape[:-2] + (problems.K, problems.d))
    best = torch.gather(problems.X, -2, opt[..., None].expand(opt.shape + (problems.d,)))
    expected = (first == best).all(-1)
    assert torch.equal(causal.selects_optimal(problems, shifted), expected)
    assert expected.any() and not expected.all()
