"""The entrywise lp Att-SVM (svm.att_svm(..., norm=p)) against direct cvxpy formulations on small cases."""

import math
import re

import cvxpy as cp
import numpy as np
import pytest

from attnsvm import data, svm, theory

INF = float("inf")


def _problem(seed=1, n=4, T=3, d=4, batch=None):
    problem = data.random_problem(n=n, T=T, d=d, seed=seed, batch=batch)
    return problem, theory.optimal_tokens(problem)


def _norm(W, p):
    w = np.abs(np.asarray(W).reshape(-1))
    return w.max() if math.isinf(p) else (w**p).sum() ** (1 / p)


def _direct(A, p):
    """min ||w||_p s.t. A w >= 1, written out by hand (LP by epigraph variables for p = 1 and infinity)."""
    m = A.shape[1]
    w = cp.Variable(m)
    if p == 1:
        u = cp.Variable(m)
        problem = cp.Problem(cp.Minimize(cp.sum(u)), [A @ w >= 1, w <= u, -w <= u])
    elif math.isinf(p):
        u = cp.Variable()
        problem = cp.Problem(cp.Minimize(u), [A @ w >= 1, w <= u, -w <= u])
    else:
        problem = cp.Problem(cp.Minimize(cp.pnorm(w, p)), [A @ w >= 1])
    problem.solve(solver=cp.CLARABEL)
    return problem.value


@pytest.mark.parametrize("p", [1, 1.5, 1.75, 2, 3, 7.5, INF])
@pytest.mark.parametrize("seed", [1, 2])
def test_optimal_value_and_margins_match_a_direct_formulation(p, seed):
    problem, alpha = _problem(seed)
    A = svm.constraint_matrix(problem, alpha)
    W = svm.att_svm(problem, alpha, norm=p)
    assert (A @ W.reshape(-1)).min() >= 1 - 1e-12  # the acceptance rule (to round-off)
    assert _norm(W, p) == pytest.approx(_direct(A, p), rel=1e-6)


@pytest.mark.parametrize("p", [1, INF])
def test_highs_and_clarabel_agree_on_the_linear_programs(p):
    problem, alpha = _problem(3)
    W_c = svm.att_svm(problem, alpha, norm=p)
    W_h = svm.att_svm(problem, alpha, norm=p, solver="highs")
    assert _norm(W_h, p) == pytest.approx(_norm(W_c, p), rel=1e-7)
    assert (svm.constraint_matrix(problem, alpha) @ W_h.reshape(-1)).min() >= 1 - 1e-12


def test_p_two_is_the_frobenius_svm():
    problem, alpha = _problem(4)
    np.testing.assert_allclose(svm.att_svm(problem, alpha, norm=2), svm.att_svm(problem, alpha), atol=1e-7)
    np.testing.assert_allclose(svm.att_svm(problem, alpha, norm=2.0), svm.att_svm(problem, alpha), atol=1e-7)


@pytest.mark.parametrize("p", [1, 1.75, 3, INF])
def test_multipliers_give_a_subgradient_of_the_norm(p):
    """KKT: A^T lambda is a subgradient of ||.||_p at W, so <A^T lambda, W> = ||W||_p and ||A^T lambda||_q <= 1."""
    problem, alpha = _problem(5)
    W, lam = svm.att_svm(problem, alpha, norm=p, return_multipliers=True)
    A = svm.constraint_matrix(problem, alpha)
    keep = np.ones_like(lam, dtype=bool)
    keep[np.arange(len(alpha)), alpha] = False
    G = A.T @ lam[keep]
    q = INF if p == 1 else (1.0 if math.isinf(p) else p / (p - 1))
    assert G @ W.reshape(-1) == pytest.approx(_norm(W, p), rel=1e-5)
    assert _norm(G, q) <= 1 + 1e-5
    assert (lam[~keep] == 0).all() and (lam >= 0).all()


def test_batched_equals_one_by_one():
    problems, alpha = _problem(6, batch=3)
    W, lam = svm.att_svm(problems, alpha, norm=1.75, return_multipliers=True)
    for b in range(3):
        W_b, lam_b = svm.att_svm(problems.X[b], problems.Z[b], alpha[b], norm=1.75, return_multipliers=True)
        np.testing.assert_allclose(W[b], W_b, atol=1e-12)
        np.testing.assert_allclose(lam[b], lam_b, atol=1e-12)


def test_the_solution_scales_with_the_data():
    problem, alpha = _problem(7)
    X, Z = problem.X.numpy(), problem.Z.numpy()
    W = svm.att_svm(X, Z, alpha, norm=3)
    np.testing.assert_allclose(svm.att_svm(4 * X, Z, alpha, norm=3) * 4, W, atol=1e-4)  # power cone: ~1e-5
    np.testing.assert_allclose(svm.att_svm(X * 1e150, Z, alpha, norm=1) * 1e150, svm.att_svm(X, Z, alpha, norm=1),
                               rtol=0, atol=1e-9)


def test_larger_p_spreads_the_weight():
    """||W_p||_inf / ||W_p||_1 grows with p: the l1 solution is sparse, the l-infinity one flat."""
    problem, alpha = _problem(8, n=3, T=3, d=5)
    ratios = [_norm(W, INF) / _norm(W, 1) for W in (svm.att_svm(problem, alpha, norm=p) for p in (1, 2, INF))]
    assert ratios[0] > ratios[1] > ratios[2]


def test_infeasible_instances_are_named():
    X = np.array([[[1.0, 0.0], [1.0, 0.0]]])
    for p in (1, 1.75, INF):
        with pytest.raises(svm.InfeasibleSVM) as info:
            svm.att_svm(X, np.array([[1.0, 0.0]]), [0], norm=p)
        assert info.value.instances == (0,)
    problems, alpha = _problem(9, batch=2)
    X = problems.X.numpy().copy()
    X[1] = X[1][:, :1, :]  # in the second problem, every token of a sequence equal
    with pytest.raises(svm.InfeasibleSVM, match=r"batch instances \[1\]"):
        svm.att_svm(X, problems.Z, alpha, norm=1)


@pytest.mark.parametrize("norm,match", [(0.5, "p >= 1"), (float("nan"), "p >= 1"), (-1, "p >= 1"),
                                        (True, "is not supported"), ("l1", "is not supported")])
def test_bad_norms_are_named(norm, match):
    problem, alpha = _problem()
    with pytest.raises(ValueError, match=match):
        svm.att_svm(problem, alpha, norm=norm)


def test_highs_only_for_the_linear_programs():
    problem, alpha = _problem()
    with pytest.raises(ValueError, match="solver"):
        svm.att_svm(problem, alpha, norm=3, solver="highs")
    with pytest.raises(ValueError, match="solver"):
        svm.att_svm(problem, alpha, norm=1, solver="nnls")


@pytest.mark.parametrize("p", [1.5, 1.75, 2, 3])
def test_the_dual_solver_agrees_with_clarabel(p):
    problems, alpha = _problem(10, n=6, T=8, d=10, batch=3)
    W_c, lam_c = svm.att_svm(problems, alpha, norm=p, return_multipliers=True)
    W_d, lam_d = svm.att_svm(problems, alpha, norm=p, solver="dual", return_multipliers=True)
    for b in range(3):
        A = svm.constraint_matrix(problems[b], alpha[b])
        assert (A @ W_d[b].reshape(-1)).min() >= 1 - 1e-12
        assert _norm(W_d[b], p) == pytest.approx(_norm(W_c[b], p), rel=1e-6)
    np.testing.assert_allclose(W_d, W_c, atol=1e-4)
    np.testing.assert_allclose(lam_d, lam_c, atol=1e-3)


def test_the_dual_solver_reports_infeasible_instances():
    X = np.array([[[1.0, 0.0], [1.0, 0.0]]])
    with pytest.raises(svm.InfeasibleSVM):
        svm.att_svm(X, np.array([[1.0, 0.0]]), [0], norm=3, solver="dual")
    problem, alpha = _problem()
    with pytest.raises(ValueError, match="solver"):
        svm.att_svm(problem, alpha, norm=1, solver="dual")


def test_the_dual_solver_never_returns_a_short_margin():
    """For large p the dual is nearly non-smooth (q near 1): a solution is accurate, or SolverError is raised."""
    problems, alpha = _problem(10, n=6, T=8, d=10, batch=3)
    try:
        W = svm.att_svm(problems, alpha, norm=7.5, solver="dual")
    except svm.SolverError as error:
        assert "clarabel" in str(error)
    else:
        for b in range(3):
            assert (svm.constraint_matrix(problems[b], alpha[b]) @ W[b].reshape(-1)).min() >= 1 - 1e-12


@pytest.mark.parametrize("p,solver,name", [(1.0000001, "dual", "l1.0000001"), (1.0, None, "l1"),
                                           (2.5, "dual", "l2.5"), (INF, "highs", "linf"), (3, None, "l3")])
def test_messages_name_p_faithfully(p, solver, name):
    """p = 1.0000001 used to be printed with :g, naming the "l1 Att-SVM" (a different, linear program)."""
    X = np.array([[[1.0, 0.0], [1.0, 0.0]]])  # equal tokens: infeasible for every p
    with pytest.raises(svm.InfeasibleSVM, match=rf"^the {re.escape(name)} Att-SVM is infeasible:"):
        svm.att_svm(X, np.array([[1.0, 0.0]]), [0], norm=p, solver=solver)
