"""A primal-dual interior-point method for the nuclear-norm Att-SVM, compiled with Numba.

    min ||W||_*  s.t.  <delta_k z_k^T, W> >= 1  (k = 1..K; delta_k = x_{i,alpha_i} - x_it, z_k = z_i)

An optimal W maps span{z_k} into span{delta_k} (projecting W onto these subspaces keeps every constraint and
does not increase the nuclear norm), so with orthonormal bases U (d x r1) and V (d x r2) of the two spans it
is W = U M V^T, where M solves the same problem for the reduced vectors U^T delta_k and V^T z_k. That is the
semidefinite program (S = [[S11, M], [M^T, S22]] of size r = r1 + r2)

    primal:  min <C, S>  s.t.  <A_k, S> - w_k = 1,  S >= 0 (PSD),  w >= 0,       C = I / 2,
    dual:    max sum_k y_k  s.t.  Z = C - sum_k y_k A_k >= 0 (PSD),  y >= 0,

where A_k = (p_k q_k^T + q_k p_k^T) / 2 with p_k = [U^T delta_k; 0], q_k = [0; V^T z_k], so that <A_k, S> is the
margin <delta_k z_k^T, W>. The dual multipliers y are those of the Att-SVM: sum_k y_k delta_k z_k^T is a
subgradient of ||.||_* at W.

Every A_k has rank two and p_k, q_k live in complementary blocks, so the Schur complement
M_kl = tr(A_k S A_l Z^-1) (the HKM direction) is a sum of four Hadamard products of K x K matrices built from
the blocks of S and Z^-1. Mehrotra predictor-corrector steps, infeasible start, one problem after another: at
the book's sizes (r <= 40, K a few hundred at most) a step is a few dozen small matrix products, and compiled
code spends its time on them rather than on the interpreter. General-purpose conic solvers (Clarabel, SCS)
treat the same SDP without this structure and take 10-100 times longer.
"""

from __future__ import annotations

import numba
import numpy as np
from numpy.typing import ArrayLike

from .._checks import as_tensor, budget

__all__ = ["solve", "GAP_TOL", "STALLED_TOL", "MAX_ITER", "MARGIN_TOL", "MAX_FLOPS", "STEP_FRACTION", "JITTERS"]

GAP_TOL = 1e-9  # stop when the relative duality gap and the relative residuals are all below this
STALLED_TOL = 3e-9  # accept a problem whose iteration stalled (round-off) with errors below this
MAX_ITER = 100
MARGIN_TOL = 1e-6  # a solution with a margin below 1 - MARGIN_TOL (relative) has not converged (svm uses it too)
MAX_FLOPS = 1e10  # K^3 per iteration (the Schur complement's Cholesky factor): larger problems are refused
STEP_FRACTION = 0.98  # of the distance to the boundary of the cones
JITTERS = (1e-13, 1e-11, 1e-9, 1e-7)  # tried in turn where round-off broke the Schur complement (times its size)


@numba.njit(cache=True)
def _apply(D, Zq, S):
    """A(S)_k = p_k^T S q_k = delta_k^T S12 z_k for symmetric S, with D (r1, K), Zq (r2, K) the reduced vectors."""
    r1, K = D.shape
    out = np.zeros(K)
    for k in range(K):
        for a in range(r1):
            for b in range(Zq.shape[0]):
                out[k] += D[a, k] * S[a, r1 + b] * Zq[b, k]
    return out


@numba.njit(cache=True)
def _adjoint(D, Zq, y):
    """sum_k y_k A_k = [[0, G / 2], [G^T / 2, 0]] with G = sum_k y_k delta_k z_k^T: (r, r)."""
    r1, r2 = D.shape[0], Zq.shape[0]
    out = np.zeros((r1 + r2, r1 + r2))
    for a in range(r1):
        for b in range(r2):
            for k in range(len(y)):
                out[a, r1 + b] += D[a, k] * y[k] * Zq[b, k] / 2
            out[r1 + b, a] = out[a, r1 + b]
    return out


@numba.njit(cache=True)
def _schur(D, Zq, S, Zinv):
    """M_kl = tr(A_k S A_l Z^-1) = (1/4) [(D'S12 Z)^T o (D'Zi12 Z) + (Z'S22 Z) o (D'Zi11 D)
    + (D'S11 D) o (Z'Zi22 Z) + (D'S12 Z) o (D'Zi12 Z)^T] (' transposes, o is the Hadamard product)."""
    r1 = D.shape[0]

    def block(left, N, rows, columns, right):
        return left.T @ np.ascontiguousarray(N[rows, columns]) @ right
    top, bottom = slice(0, r1), slice(r1, S.shape[0])
    cross_S, cross_Z = block(D, S, top, bottom, Zq), block(D, Zinv, top, bottom, Zq)
    return (cross_S.T * cross_Z + cross_S * cross_Z.T
            + block(Zq, S, bottom, bottom, Zq) * block(D, Zinv, top, top, D)
            + block(D, S, top, top, D) * block(Zq, Zinv, bottom, bottom, Zq)) / 4


@numba.njit(cache=True)
def _cholesky(M):
    """(lower Cholesky factor, True), or (M, False) where M is not positive definite."""
    try:
        return np.linalg.cholesky(M), True
    except Exception:  # Numba raises LinAlgError, which nopython code can only catch this way
        return M, False


@numba.njit(cache=True)
def _max_step(Linv, dS):
    """Largest a in (0, 1] with S + a dS PSD (scaled by STEP_FRACTION), given Linv = L^-1, S = L L^T."""
    N = Linv @ dS @ Linv.T
    worst = np.linalg.eigvalsh((N + N.T) / 2)[0]  # most negative eigenvalue
    return min(-STEP_FRACTION / worst, 1.0) if worst < 0 else 1.0


@numba.njit(cache=True)
def _max_step_lp(v, dv):
    """Largest a in (0, 1] with v + a dv >= 0 (scaled by STEP_FRACTION)."""
    step = 1.0
    for k in range(len(v)):
        if dv[k] < 0:
            step = min(step, -STEP_FRACTION * v[k] / dv[k])
    return step


@numba.njit(cache=True)
def _cholesky_solve(L, rhs):
    """x with L L^T x = rhs, for the lower Cholesky factor L."""
    K = len(rhs)
    x = rhs.copy()
    for k in range(K):
        for j in range(k):
            x[k] -= L[k, j] * x[j]
        x[k] /= L[k, k]
    for k in range(K - 1, -1, -1):
        for j in range(k + 1, K):
            x[k] -= L[j, k] * x[j]
        x[k] /= L[k, k]
    return x


@numba.njit(cache=True)
def _factor_schur(M):
    """The Cholesky factor of the Schur complement, made positive definite where round-off broke it (nearly
    infeasible problems, late iterations) by the smallest of JITTERS times its mean diagonal that works."""
    L, ok = _cholesky(M)
    size = np.trace(M) / len(M)
    for jitter in JITTERS:
        if ok:
            return L
        L, ok = _cholesky(M + jitter * size * np.eye(len(M)))
    if not ok:
        raise FloatingPointError("the interior-point Schur complement lost positive definiteness")
    return L


@numba.njit(cache=True)
def _iterate(D, Zq, max_iter):
    """(S12 = M, y, converged) of the reduced SDP for D (r1, K), Zq (r2, K), columns of norm at most one."""
    r1, K = D.shape
    r = r1 + Zq.shape[0]
    eye = np.eye(r)
    C = eye / 2
    S, Z, w, y = eye.copy(), eye.copy(), np.ones(K), np.ones(K)
    error, converged = np.inf, False
    for _ in range(max_iter):
        Rp = 1 - _apply(D, Zq, S) + w  # primal residual of A(S) - w = 1
        Rd = C - _adjoint(D, Zq, y) - Z  # dual residual
        primal, dual = np.trace(S) / 2, np.sum(y)
        gap = np.sum(S * Z) + w @ y
        mu = gap / (r + K)
        error = max(gap / (1 + abs(primal) + abs(dual)), np.linalg.norm(Rp) / (1 + np.linalg.norm(S)),
                    np.linalg.norm(Rd) / (1 + np.linalg.norm(C)))
        if error < GAP_TOL:
            converged = True
            break
        LZ, ok_Z = _cholesky(Z)
        LS, ok_S = _cholesky(S)
        if not (ok_Z and ok_S):  # round-off reached the cone boundary: accept if just short of GAP_TOL
            converged = error < STALLED_TOL
            break
        LZinv, LSinv = np.linalg.inv(LZ), np.linalg.inv(LS)
        Zinv = LZinv.T @ LZinv
        M = _schur(D, Zq, S, Zinv) + np.diag(w / y)
        LM = _factor_schur(M)

        sigma_mu, second_S, second_w = 0.0, np.zeros((r, r)), np.zeros(K)  # the predictor (affine scaling)
        for corrector in (False, True):
            # Newton direction for S Z = sigma mu I - second_S and w y = sigma mu - second_w
            G = (sigma_mu * eye - S @ Z - second_S) @ Zinv  # dS = G - S dZ Z^-1
            lp = (sigma_mu - w * y - second_w) / y  # dw = lp - (w / y) dy
            N = G - S @ Rd @ Zinv
            dy = _cholesky_solve(LM, Rp - _apply(D, Zq, (N + N.T) / 2) + lp)
            dZ = Rd - _adjoint(D, Zq, dy)
            dS = G - S @ dZ @ Zinv
            dS, dw = (dS + dS.T) / 2, lp - w / y * dy
            a_p = min(_max_step(LSinv, dS), _max_step_lp(w, dw))
            a_d = min(_max_step(LZinv, dZ), _max_step_lp(y, dy))
            if not corrector:  # Mehrotra's centering and second-order terms
                gap_aff = np.sum((S + a_p * dS) * (Z + a_d * dZ)) + (w + a_p * dw) @ (y + a_d * dy)
                sigma_mu = min(max(gap_aff / gap, 0.0), 1.0) ** 3 * mu
                second_S, second_w = dS @ dZ, dw * dy
        S, w = S + a_p * dS, w + a_p * dw
        y, Z = y + a_d * dy, Z + a_d * dZ
    return np.ascontiguousarray(S[:r1, r1:]), y, converged


def _basis(vectors: np.ndarray) -> np.ndarray:
    """An orthonormal basis (d, r) of the span of the rows of `vectors` (K, d)."""
    U, sigma, _ = np.linalg.svd(vectors.T, full_matrices=False)
    return U[:, : np.sum(sigma > 1e-10 * sigma[0])]


def _exponent(array: np.ndarray) -> int:
    """The e with the largest |entry| of `array` in [2^(e-1), 2^e) (0 if there is none): multiplying by 2^-e
    rounds nothing and brings the largest entry into [1/2, 1)."""
    return int(np.frexp(np.abs(array).max(initial=0.0))[1])


def _unscale(array: np.ndarray, exponent: int, what: str) -> np.ndarray:
    """2^-exponent `array` (exact), or a FloatingPointError saying `what` float64 cannot hold: an overflow, or a
    largest entry below the normal range (it would lose digits; with a normal largest entry, the entries that turn
    subnormal keep an absolute accuracy of 2^-52 times it, as in float64 arithmetic)."""
    if exponent == 0:
        return array
    with np.errstate(over="ignore", under="ignore"):
        out = np.ldexp(array, -exponent)
    top = np.abs(out).max(initial=0.0)
    if not np.isfinite(top) or (top < np.finfo(float).smallest_normal and np.abs(array).max(initial=0.0) > 0):
        raise FloatingPointError(f"{what} would be about 2^{_exponent(array) - exponent}, outside the range of "
                                 f"float64: rescale the data (the result scales with a power of their scale) and keep "
                                 f"the factor apart")
    return out


def _batch(value, name: str) -> np.ndarray:
    """`value` as a float64 numpy array of shape (B, K, d), validated (finite, CPU, detached from autograd)."""
    array = as_tensor(value, name).detach().numpy()
    if array.ndim != 3:
        raise ValueError(f"{name} must have shape (B, K, d) (B problems of K constraints in R^d), got {array.shape}")
    return array


def solve(deltas: ArrayLike, queries: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Nuclear-norm Att-SVMs for a batch: deltas, queries (B, K, d) -> (W (B, d, d), y (B, K), converged (B,)),
    numpy arrays: min ||W||_* s.t. delta_k^T W z_k >= 1 for every k (``svm.att_svm(..., norm="nuc")`` calls it).

    The problems must be feasible (check with the Frobenius solver first, ``svm.feasible``); a zero delta or query
    (a constraint no W satisfies) raises ValueError. ``converged`` is False where the tolerance was not reached
    (within the iteration limit, or before round-off stalled the iteration: this happens on nearly infeasible
    problems, whose solutions have huge norms) or where a margin falls short of 1 by more than MARGIN_TOL; there
    W and y are the last iterate, not a solution. FloatingPointError where the iteration diverged (an
    infeasible problem) or float64 cannot hold the solution.

    Examples
    --------
    >>> import numpy as np
    >>> from attnsvm.svm import _nuclear_svm
    >>> deltas = np.array([[[1.0, 0.0], [0.0, 1.0]]])  # two constraints: W[0, 0] >= 1 and W[1, 1] >= 1
    >>> queries = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    >>> W, y, converged = _nuclear_svm.solve(deltas, queries)
    >>> W.shape, y.shape, bool(converged[0]), round(float(np.linalg.norm(W[0], "nuc")), 6)
    ((1, 2, 2), (1, 2), True, 2.0)
    """
    deltas, queries = _batch(deltas, "deltas"), _batch(queries, "queries")
    if queries.shape != deltas.shape:
        raise ValueError(f"queries must have the shape of deltas {deltas.shape} (one query per constraint), "
                         f"got {queries.shape}")
    B, K, d = deltas.shape
    if K < 1 or d < 1:
        raise ValueError(f"deltas must hold K >= 1 constraints in R^d with d >= 1, got shape {deltas.shape}")
    for name, array in (("deltas", deltas), ("queries", queries)):
        zero = np.argwhere(~array.any(axis=-1))
        if len(zero):
            raise ValueError(f"{name}[{zero[0][0]}, {zero[0][1]}] is zero: its constraint <delta z^T, W> >= 1 holds "
                             f"for no W (the problem is infeasible); remove that constraint")
    budget(float(K) ** 3, "deltas", MAX_FLOPS, "floating-point operations per interior-point iteration (K^3)")
    W, y, converged = np.empty((B, d, d)), np.empty((B, K)), np.empty(B, dtype=bool)
    for b, (D, Q) in enumerate(zip(deltas, queries)):
        # Scale by powers of two first (exact), so that no norm below overflows or underflows: the solution for
        # D 2^-e1, Q 2^-e2 is 2^(e1 + e2) times that for D, Q (the constraints are bilinear in W's data).
        e1, e2 = _exponent(D), _exponent(Q)
        with np.errstate(under="ignore"):
            D0, Q0 = np.ldexp(D, -e1), np.ldexp(Q, -e2)
        # Solve for unit-size data: with c = max ||delta_k|| max ||z_k||, W = W' / c and y = y' / c. Then every
        # ||delta_k z_k^T||_op <= 1, so ||W'||_* >= 1 and the tolerances are relative.
        size_d, size_q = np.linalg.norm(D0, axis=1).max(), np.linalg.norm(Q0, axis=1).max()
        D, Q = D0 / size_d, Q0 / size_q
        U, V = _basis(D), _basis(Q)
        M, y_b, done = _iterate(np.ascontiguousarray((D @ U).T), np.ascontiguousarray((Q @ V).T), MAX_ITER)
        W_b = U @ M @ V.T / (size_d * size_q)
        y_b = y_b / (size_d * size_q)
        if not (np.isfinite(W_b).all() and np.isfinite(y_b).all()):
            raise FloatingPointError(f"the interior-point method diverged on problem {b} of deltas, queries: the "
                                     f"problem is probably infeasible (check with svm.feasible)")
        converged[b] = done and np.einsum("kd,de,ke->k", D0, W_b, Q0).min() >= 1 - MARGIN_TOL
        what = f"the solution for problem {b} of deltas, queries"
        W[b], y[b] = _unscale(W_b, e1 + e2, what), _unscale(y_b, e1 + e2, what)
    return W, y, converged
