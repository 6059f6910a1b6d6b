"""attnsvm.nuclear and the default nuclear-norm Att-SVM solver ("ipm"): optimality (KKT), agreement with Clarabel,
reduction to the spans of the deltas and queries, duplicates, scaling, batching and the Clarabel fallback."""

import numpy as np
import pytest
import torch

import reference as ref

from attnsvm import data, svm, theory
from attnsvm.svm import _nuclear_svm as nuclear


def _check_nuclear_kkt(X, Z, alpha, W, lam, *, op_tol=1e-7, rtol=1e-8):
    """KKT conditions of min ||W||_* s.t. margins >= 1, for one problem, with the multipliers lam (n, T):
    lam >= 0 (0 at alpha); G = sum lam_it delta_it z_i^T is a subgradient of ||.||_* at W (||G||_op <= 1 and
    <G, W> = ||W||_*); margins >= 1; complementary slackness sum lam (margin - 1) = 0; strong duality
    sum lam = ||W||_*."""
    off = ref.off_alpha(alpha, X.shape[-2])
    assert lam.shape == off.shape
    assert (lam >= 0).all() and (lam[~off] == 0).all()
    nuc = np.linalg.norm(W, "nuc")
    G = ref.combination(lam, X, Z, alpha)
    assert np.linalg.norm(G, 2) <= 1 + op_tol
    assert abs((G * W).sum() - nuc) <= rtol * nuc
    margins = ref.margins(X, Z, alpha, W)[off]
    assert margins.min() >= 1 - 1e-13 * max(1.0, nuc)  # att_svm scales W up: >= 1 up to the round-off of margins
    assert (lam[off] * (margins - 1)).sum() <= rtol * nuc
    assert abs(lam.sum() - nuc) <= rtol * nuc
    return nuc


def _instance(shape, seed, which="random"):
    problem = data.random_problem(*shape, seed=seed)
    if which == "opt":
        alpha = theory.optimal_tokens(problem).numpy()
    else:
        alpha = np.random.default_rng(seed).integers(0, shape[1], shape[0])
    return problem.X.numpy(), problem.Z.numpy(), alpha


# (n, T, d): full rank, n < d (the queries span a subspace), n (T - 1) < d (so do the deltas), a single sequence,
# n > d, and a larger one
SHAPES = [(4, 5, 6), (2, 5, 6), (3, 3, 8), (2, 3, 6), (1, 3, 5), (10, 5, 8), (6, 8, 10), (15, 15, 20)]


@pytest.mark.parametrize("which", ["opt", "random"])
@pytest.mark.parametrize("shape", SHAPES)
def test_ipm_kkt_conditions(shape, which):
    X, Z, alpha = _instance(shape, 0, which)
    W, lam = svm.att_svm(X, Z, alpha, norm="nuc", return_multipliers=True)
    assert W.shape == (shape[2],) * 2 and lam.shape == shape[:2]
    _check_nuclear_kkt(X, Z, alpha, W, lam)


@pytest.mark.parametrize("which", ["opt", "random"])
@pytest.mark.parametrize("shape", [(2, 5, 6), (3, 3, 8), (2, 3, 6), (1, 3, 5), (6, 8, 10)])
def test_ipm_agrees_with_clarabel(shape, which):
    X, Z, alpha = _instance(shape, 1, which)
    nuc = np.linalg.norm(svm.att_svm(X, Z, alpha, norm="nuc"), "nuc")
    nuc_clarabel = np.linalg.norm(svm.att_svm(X, Z, alpha, norm="nuc", solver="clarabel"), "nuc")
    assert abs(nuc - nuc_clarabel) <= 1e-7 * nuc


@pytest.mark.parametrize("shape", [(2, 5, 6), (3, 3, 8), (1, 3, 5), (6, 8, 10)])
def test_ipm_solution_lies_in_the_spans_of_deltas_and_queries(shape):
    """W maps span{z_i} into span{delta_it} and vanishes on the orthogonal complement of span{z_i}."""
    X, Z, alpha = _instance(shape, 2)
    W = svm.att_svm(X, Z, alpha, norm="nuc")
    deltas, queries = svm._attention._pairs(X, Z, alpha)

    def projector(rows):
        U, sigma, _ = np.linalg.svd(rows.T, full_matrices=False)
        U = U[:, sigma > 1e-10 * sigma[0]]
        return U @ U.T

    P, R = projector(deltas), projector(queries)
    np.testing.assert_allclose(P @ W @ R, W, rtol=0, atol=1e-12 * np.abs(W).max())
    n, T, d = shape
    singular = np.linalg.svd(W, compute_uv=False)
    assert (singular > 1e-7 * singular[0]).sum() <= min(n, n * (T - 1), d)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_isometric_embedding_of_a_small_problem(seed):
    """Tokens in a 3-D subspace of R^7 and queries in another: the solution is E W F^T, where W solves the 3-D
    problem and E, F are the (7 x 3, orthonormal) embeddings; the nuclear norm is unchanged."""
    problem = data.random_problem(4, 4, 3, seed=seed)
    X, Z = problem.X.numpy(), problem.Z.numpy()
    alpha = np.random.default_rng(seed).integers(0, 4, 4)
    rng = np.random.default_rng(100 + seed)
    E = np.linalg.qr(rng.standard_normal((7, 3)))[0]
    F = np.linalg.qr(rng.standard_normal((7, 3)))[0]
    W_small = svm.att_svm(X, Z, alpha, norm="nuc")
    W_big, lam = svm.att_svm(X @ E.T, Z @ F.T, alpha, norm="nuc", return_multipliers=True)
    nuc = _check_nuclear_kkt(X @ E.T, Z @ F.T, alpha, W_big, lam)
    assert abs(nuc - np.linalg.norm(W_small, "nuc")) <= 1e-8 * nuc
    np.testing.assert_allclose(E.T @ W_big @ F, W_small, rtol=0, atol=1e-5 * np.abs(W_small).max())


def test_duplicate_tokens_and_sequences_give_repeated_constraints():
    """A repeated token (T = 6 with token 5 = token 1) and a repeated sequence repeat constraint rows: the problem,
    hence the nuclear norm, is unchanged, and the multipliers still certify optimality."""
    X, Z, alpha = _instance((4, 5, 6), 3)
    base = np.linalg.norm(svm.att_svm(X, Z, alpha, norm="nuc"), "nuc")
    other = (alpha + 1) % 5  # a non-selected token of each sequence
    X_tok = np.concatenate([X, X[np.arange(4), other][:, None]], axis=1)
    X_seq, Z_seq, alpha_seq = np.concatenate([X, X[:2]]), np.concatenate([Z, Z[:2]]), np.concatenate([alpha, alpha[:2]])
    for Xd, Zd, ad in ((X_tok, Z, alpha), (X_seq, Z_seq, alpha_seq)):
        W, lam = svm.att_svm(Xd, Zd, ad, norm="nuc", return_multipliers=True)
        nuc = _check_nuclear_kkt(Xd, Zd, ad, W, lam)
        assert abs(nuc - base) <= 1e-8 * base
        nuc_clarabel = np.linalg.norm(svm.att_svm(Xd, Zd, ad, norm="nuc", solver="clarabel"), "nuc")
        assert abs(nuc - nuc_clarabel) <= 1e-7 * nuc


@pytest.mark.parametrize("a,b", [(1e-3, 10.0), (7.0, 0.01), (1e3, 1e3), (0.2, 0.2)])
def test_scaling_deltas_and_queries_scales_the_solution_inversely(a, b):
    X, Z, alpha = _instance((4, 5, 6), 4)
    W, lam = svm.att_svm(X, Z, alpha, norm="nuc", return_multipliers=True)
    W_s, lam_s = svm.att_svm(a * X, b * Z, alpha, norm="nuc", return_multipliers=True)
    np.testing.assert_allclose(np.linalg.norm(W_s, "nuc") * a * b, np.linalg.norm(W, "nuc"), rtol=1e-9)
    # the solver works on unit-size data, so the scaled solution and multipliers agree to its accuracy
    np.testing.assert_allclose(W_s * a * b, W, rtol=0, atol=1e-6 * np.abs(W).max())
    np.testing.assert_allclose(lam_s * a * b, lam, rtol=0, atol=1e-6 * lam.max())


def _random_pairs(rng, K, d, rank_deltas, rank_queries):
    deltas = rng.standard_normal((K, rank_deltas)) @ rng.standard_normal((rank_deltas, d))
    queries = rng.standard_normal((K, rank_queries)) @ rng.standard_normal((rank_queries, d))
    return deltas, queries


def test_solve_on_a_batch_of_mixed_ranks_equals_single_solves():
    """nuclear.solve directly, on a batch whose problems span subspaces of different dimensions: each problem is
    reduced to its own spans and solved on its own, so the batch gives exactly the single solves."""
    rng = np.random.default_rng(0)
    parts = [_random_pairs(rng, 6, 5, rd, rq) for rd, rq in ((2, 5), (5, 1), (5, 5), (3, 2))]
    deltas = np.stack([p[0] for p in parts])
    queries = np.stack([p[1] for p in parts])
    W, y, converged = nuclear.solve(deltas, queries)
    assert W.shape == (4, 5, 5) and y.shape == (4, 6) and converged.shape == (4,) and converged.dtype == bool
    assert converged.all()
    for b in range(4):
        D, Q = deltas[b], queries[b]
        W_b, y_b, converged_b = nuclear.solve(deltas[b:b + 1], queries[b:b + 1])
        assert converged_b.all()
        np.testing.assert_array_equal(W_b[0], W[b])
        np.testing.assert_array_equal(y_b[0], y[b])
        nuc = np.linalg.norm(W[b], "nuc")
        G = np.einsum("k,kd,ke->de", y[b], D, Q)
        margins = np.einsum("kd,de,ke->k", D, W[b], Q)
        assert (y[b] >= 0).all()
        assert np.linalg.norm(G, 2) <= 1 + 1e-7
        assert abs((G * W[b]).sum() - nuc) <= 1e-8 * nuc
        assert margins.min() >= 1 - 1e-7  # the raw IPM iterate: feasible to its tolerance (att_svm scales it up)
        assert abs(y[b].sum().item() - nuc) <= 1e-8 * nuc


def test_ipm_batch_of_rank_deficient_problems_equals_single_solves():
    problem = data.random_problem(2, 4, 7, seed=5, batch=5)  # queries span 2 of 7 dimensions, deltas 6
    alpha = data.random_selection(problem, seed=5)
    W, lam = svm.att_svm(problem.X, problem.Z, alpha, norm="nuc", return_multipliers=True)
    for b in range(5):
        X, Z, a = problem.X[b].numpy(), problem.Z[b].numpy(), alpha[b].numpy()
        nuc = _check_nuclear_kkt(X, Z, a, W[b], lam[b])
        single = np.linalg.norm(svm.att_svm(X, Z, a, norm="nuc"), "nuc")
        assert abs(nuc - single) <= 1e-8 * nuc


# ------------------------------------------------------ nearly infeasible problems and the fallback

def _nearly_infeasible():
    """The feasible instances 5, 7, 15, 18 of a d = 2 batch with random selections; instance 7 has ||W||_* ~ 6.6e3."""
    problem = data.random_problem(5, 5, 2, seed=0, batch=20)
    alpha = np.random.default_rng(0).integers(0, 5, (20, 5))
    feasible = svm.feasible(problem.X, problem.Z, alpha)
    chosen = np.flatnonzero(feasible)
    np.testing.assert_array_equal(chosen, [5, 7, 15, 18])
    return problem.X.numpy()[chosen], problem.Z.numpy()[chosen], alpha[chosen]


# Clarabel stops at its default tolerance 1e-8 on this SDP: its multipliers certify optimality to about 1e-7
CLARABEL_KKT = dict(op_tol=1e-6, rtol=1e-6)


def test_nearly_infeasible_instances_are_solved_optimally():
    X, Z, alpha = _nearly_infeasible()
    W, lam = svm.att_svm(X, Z, alpha, norm="nuc", return_multipliers=True)
    norms = [_check_nuclear_kkt(X[b], Z[b], alpha[b], W[b], lam[b], **CLARABEL_KKT) for b in range(4)]
    assert 6e3 < norms[1] < 7e3
    for b in range(4):
        nuc_clarabel = np.linalg.norm(svm.att_svm(X[b], Z[b], alpha[b], norm="nuc", solver="clarabel"), "nuc")
        assert abs(norms[b] - nuc_clarabel) <= 1e-7 * norms[b]


def test_ipm_that_does_not_converge_falls_back_to_clarabel(monkeypatch):
    """Where nuclear.solve reports no convergence (forced here by a 3-iteration limit), att_svm returns Clarabel's
    solution, which is optimal and feasible also on the nearly infeasible instance."""
    X, Z, alpha = _nearly_infeasible()
    reported = []
    solve = nuclear.solve

    def spy(deltas, queries):
        W, y, converged = solve(deltas, queries)
        reported.append(converged.copy())
        return W, y, converged

    monkeypatch.setattr(nuclear, "MAX_ITER", 3)
    monkeypatch.setattr(nuclear, "solve", spy)
    W, lam = svm.att_svm(X, Z, alpha, norm="nuc", return_multipliers=True)
    assert len(reported) == 1 and not reported[0].any()
    for b in range(4):
        nuc = _check_nuclear_kkt(X[b], Z[b], alpha[b], W[b], lam[b], **CLARABEL_KKT)
        W_clarabel = svm.att_svm(X[b], Z[b], alpha[b], norm="nuc", solver="clarabel")
        np.testing.assert_allclose(W[b], W_clarabel, rtol=0, atol=1e-12 * np.abs(W_clarabel).max())
        assert b != 1 or nuc > 6e3


def test_instance_where_the_ipm_stalls_near_the_optimum_is_solved():
    """Instance 179 of this batch is not nearly infeasible (||W||_* ~ 6.07), yet the IPM stagnates at a relative gap
    of about 1.07e-9 (tolerance 1e-9) and reports no convergence: the result must still be optimal."""
    problem = data.random_problem(6, 6, 3, seed=0, batch=200)[179]
    alpha = np.random.default_rng(0).integers(0, 6, (200, 6))[179]
    X, Z = problem.X.numpy(), problem.Z.numpy()
    W, lam = svm.att_svm(X, Z, alpha, norm="nuc", return_multipliers=True)
    nuc = _check_nuclear_kkt(X, Z, alpha, W, lam, **CLARABEL_KKT)
    assert 6.0 < nuc < 6.2
    nuc_clarabel = np.linalg.norm(svm.att_svm(X, Z, alpha, norm="nuc", solver="clarabel"), "nuc")
    assert abs(nuc - nuc_clarabel) <= 1e-7 * nuc


# ------------------------------------------------------------------ solver options

def test_loose_scs_solution_is_scaled_to_feasibility():
    X, Z, alpha = _instance((4, 5, 6), 6)
    W_opt = svm.att_svm(X, Z, alpha, norm="nuc")
    W = svm.att_svm(X, Z, alpha, norm="nuc", solver="scs", options=dict(eps_abs=1e-4, eps_rel=1e-4))
    assert ref.margins(X, Z, alpha, W)[ref.off_alpha(alpha, 5)].min() >= 1 - 1e-12
    nuc, nuc_opt = np.linalg.norm(W, "nuc"), np.linalg.norm(W_opt, "nuc")
    assert nuc_opt * (1 - 1e-9) <= nuc <= nuc_opt * (1 + 1e-2)  # feasible, hence no better than the optimum


def test_clarabel_options_are_passed_through():
    X, Z, alpha = _instance((3, 4, 5), 7)
    W = svm.att_svm(X, Z, alpha, solver="clarabel", options=dict(max_iter=200))
    np.testing.assert_allclose(W, svm.att_svm(X, Z, alpha), rtol=0, atol=1e-7 * np.abs(W).max())
    with pytest.raises(TypeError, match="no_such_setting"):  # an unknown setting reaches Clarabel, which rejects it
        svm.att_svm(X, Z, alpha, norm="nuc", solver="clarabel", options=dict(no_such_setting=1))


@pytest.mark.parametrize("norm,solver", [("fro", None), ("fro", "nnls"), ("nuc", None), ("nuc", "ipm")])
def test_options_with_the_default_solvers_raise(norm, solver):
    X, Z, alpha = _instance((3, 4, 5), 7)
    with pytest.raises(ValueError, match=r"options apply to the cvxpy solvers only"):
        svm.att_svm(X, Z, alpha, norm=norm, solver=solver, options=dict(eps_abs=1e-4))
