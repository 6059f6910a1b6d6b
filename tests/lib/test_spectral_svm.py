"""The spectral-norm Att-SVM (svm.spectral_att_svm) against a direct cvxpy formulation on small cases: the
semidefinite program min t s.t. [[t I, W], [W^T, t I]] >= 0 with each margin written token by token."""

import cvxpy as cp
import numpy as np
import pytest

from attnsvm import data, svm, theory


def _direct(X, Z, alpha):
    """min sigma_max(W) s.t. (x_{i,alpha_i} - x_it)^T W z_i >= 1, as an SDP in (W, t), constraints one by one."""
    n, T, d = X.shape
    W, t = cp.Variable((d, d)), cp.Variable()
    S = cp.Variable((2 * d, 2 * d), symmetric=True)
    constraints = [S == cp.bmat([[t * np.eye(d), W], [W.T, t * np.eye(d)]]), S >> 0]
    constraints += [(X[i, alpha[i]] - X[i, s]) @ W @ Z[i] >= 1 for i in range(n) for s in range(T) if s != alpha[i]]
    cp.Problem(cp.Minimize(t), constraints).solve(solver=cp.CLARABEL)
    return W.value, t.value


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("n,T,d", [(2, 3, 3), (4, 3, 4), (3, 4, 5)])
def test_the_value_matches_the_direct_sdp(seed, n, T, d):
    problem = data.random_problem(n, T, d, seed=seed)
    alpha = theory.optimal_tokens(problem).numpy()
    X, Z = problem.X.numpy(), problem.Z.numpy()
    W = svm.spectral_att_svm(X, Z, alpha)
    _, value = _direct(X, Z, alpha)
    assert np.linalg.norm(W, 2) == pytest.approx(value, rel=1e-6)
    assert (svm.constraint_matrix(X, Z, alpha) @ W.reshape(-1)).min() >= 1  # margins >= 1 exactly


def test_the_spectral_value_is_below_every_other_feasible_w():
    """sigma_max of the solution is at most that of the Frobenius, nuclear and l-infinity Att-SVMs (all feasible),
    and at least 1 / (the largest margin any W of spectral norm 1 reaches), bounded by rows' nuclear norms."""
    problems = data.random_problem(4, 3, 4, seed=7, batch=5)
    alpha = theory.optimal_tokens(problems)
    W = svm.spectral_att_svm(problems, alpha)
    spec = np.linalg.norm(W, 2, axis=(-2, -1))
    for norm in ("fro", "nuc", float("inf")):
        other = svm.att_svm(problems, alpha, norm=norm)
        assert (spec <= np.linalg.norm(other, 2, axis=(-2, -1)) * (1 + 1e-7)).all()
    for b in range(5):  # each margin <x_a - x_t, W z> <= sigma_max(W) ||x_a - x_t|| ||z||
        A = svm.constraint_matrix(problems[b], alpha[b])
        assert spec[b] >= 1 / np.linalg.norm(A, axis=1).min() - 1e-12


def test_scs_agrees_with_clarabel_and_batches_agree_with_single_problems():
    problems = data.random_problem(3, 3, 3, seed=2, batch=3)
    alpha = theory.optimal_tokens(problems)
    W = svm.spectral_att_svm(problems, alpha)
    W_scs = svm.spectral_att_svm(problems, alpha, solver="scs")
    np.testing.assert_allclose(np.linalg.norm(W_scs, 2, axis=(-2, -1)), np.linalg.norm(W, 2, axis=(-2, -1)),
                               rtol=1e-5)
    for b in range(3):
        single = svm.spectral_att_svm(problems.X[b], problems.Z[b], alpha[b])
        assert np.linalg.norm(single, 2) == pytest.approx(np.linalg.norm(W[b], 2), rel=1e-9)


def test_a_one_dimensional_case_by_hand():
    """d = 1: W is a number w, the margins are (x_a - x_t) w z; the smallest |w| is 1 / min (x_a - x_t) z."""
    X = np.array([[[2.0], [0.5]], [[1.0], [-1.0]]])
    Z = np.array([[1.0], [0.5]])
    W = svm.spectral_att_svm(X, Z, [0, 0])
    assert W.shape == (1, 1) and W[0, 0] == pytest.approx(1 / min(1.5 * 1.0, 2.0 * 0.5), rel=1e-7)


def test_scaled_data_give_the_scaled_solution_value():
    problem = data.random_problem(2, 3, 3, seed=0)
    alpha = theory.optimal_tokens(problem).numpy()
    X, Z = problem.X.numpy(), problem.Z.numpy()
    value = np.linalg.norm(svm.spectral_att_svm(X, Z, alpha), 2)
    scaled = np.linalg.norm(svm.spectral_att_svm(X * 1e100, Z * 1e100, alpha), 2)
    assert scaled * 1e200 == pytest.approx(value, rel=1e-6)


def test_infeasible_and_empty_input():
    X = np.array([[[1.0, 0.0], [1.0, 0.0]]])  # equal tokens: nothing separates them
    with pytest.raises(svm.InfeasibleSVM, match="spectral Att-SVM is infeasible"):
        svm.spectral_att_svm(X, np.array([[1.0, 0.0]]), [0])
    problems = data.random_problem(2, 3, 3, seed=0, batch=2)
    alpha = theory.optimal_tokens(problems)
    assert svm.spectral_att_svm(problems.X[:0], problems.Z[:0], alpha[:0]).shape == (0, 3, 3)
    with pytest.raises(ValueError, match="solver"):
        svm.spectral_att_svm(problems, alpha, solver="ipm")
