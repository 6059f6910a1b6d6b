"""A batched primal-dual interior-point method for the nuclear-norm Att-SVM.

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
the blocks of S and Z^-1. Mehrotra predictor-corrector steps, infeasible start; all problems of a batch
advance together (numpy, batched linear algebra: the matrices are small, so numpy's low per-call overhead
matters more than anything torch offers). General-purpose conic solvers (Clarabel, SCS) treat the same SDP
without this structure and take 10-100 times longer.
"""

from __future__ import annotations

import numpy as np

GAP_TOL = 1e-9  # stop when the relative duality gap and the relative residuals are all below this
STALLED_TOL = 3e-9  # accept a problem whose iteration stalled (round-off) with errors below this
MAX_ITER = 100
STEP_FRACTION = 0.98  # of the distance to the boundary of the cones


def _sym(N: np.ndarray) -> np.ndarray:
    return (N + np.swapaxes(N, -2, -1)) / 2


def _t(N: np.ndarray) -> np.ndarray:
    return np.swapaxes(N, -2, -1)


class _Constraints:
    """The operator A(S)_k = <A_k, S>, its adjoint, and the Schur complement, for D (B, r1, K), Zq (B, r2, K)."""

    def __init__(self, D: np.ndarray, Zq: np.ndarray):
        self.D, self.Zq, self.r1 = D, Zq, D.shape[-2]

    def apply(self, S: np.ndarray) -> np.ndarray:
        """A(S)_k = p_k^T S q_k = delta_k^T S12 z_k, for symmetric S: (B, K)."""
        return ((_t(self.D) @ S[:, : self.r1, self.r1:]) * _t(self.Zq)).sum(-1)

    def adjoint(self, y: np.ndarray) -> np.ndarray:
        """sum_k y_k A_k = [[0, G / 2], [G^T / 2, 0]] with G = sum_k y_k delta_k z_k^T: (B, r, r)."""
        G = (self.D * y[:, None, :]) @ _t(self.Zq) / 2
        B, r1, r2 = G.shape
        out = np.zeros((B, r1 + r2, r1 + r2))
        out[:, :r1, r1:], out[:, r1:, :r1] = G, _t(G)
        return out

    def schur(self, S: np.ndarray, Zinv: np.ndarray) -> np.ndarray:
        """M_kl = tr(A_k S A_l Z^-1) = (1/4) [(D'S12 Z)^T o (D'Zi12 Z) + (Z'S22 Z) o (D'Zi11 D)
        + (D'S11 D) o (Z'Zi22 Z) + (D'S12 Z) o (D'Zi12 Z)^T] (' transposes, o is the Hadamard product)."""
        r1, D, Zq = self.r1, self.D, self.Zq
        Dt, Zt = _t(D), _t(Zq)
        cross_S, cross_Z = Dt @ S[:, :r1, r1:] @ Zq, Dt @ Zinv[:, :r1, r1:] @ Zq
        return (_t(cross_S) * cross_Z + cross_S * _t(cross_Z)
                + (Zt @ S[:, r1:, r1:] @ Zq) * (Dt @ Zinv[:, :r1, :r1] @ D)
                + (Dt @ S[:, :r1, :r1] @ D) * (Zt @ Zinv[:, r1:, r1:] @ Zq)) / 4


def _cholesky(M: np.ndarray):
    """(Cholesky factors, ok flags) of a batch; where a matrix is not positive definite: identity, False."""
    try:
        return np.linalg.cholesky(M), np.ones(len(M), dtype=bool)
    except np.linalg.LinAlgError:
        factors, ok = np.empty_like(M), np.ones(len(M), dtype=bool)
        for b, matrix in enumerate(M):
            try:
                factors[b] = np.linalg.cholesky(matrix)
            except np.linalg.LinAlgError:
                factors[b], ok[b] = np.eye(M.shape[-1]), False
        return factors, ok


def _max_step(Linv: np.ndarray, dS: np.ndarray) -> np.ndarray:
    """Largest a in (0, 1] with S + a dS PSD (scaled by STEP_FRACTION), given Linv = L^-1, S = L L^T."""
    worst = np.linalg.eigvalsh(_sym(Linv @ dS @ _t(Linv)))[..., 0]  # most negative eigenvalue
    return np.where(worst < 0, np.minimum(-STEP_FRACTION / np.minimum(worst, -1e-300), 1.0), 1.0)


def _max_step_lp(v: np.ndarray, dv: np.ndarray) -> np.ndarray:
    ratios = np.where(dv < 0, -v / np.where(dv < 0, dv, -1.0), np.inf)
    return np.minimum(STEP_FRACTION * ratios.min(-1), 1.0)


def _factor_schur(M: np.ndarray, active: np.ndarray) -> np.ndarray:
    """The Schur complement, made positive definite where round-off broke it (nearly infeasible problems,
    late iterations) by the smallest of 1e-13, 1e-11, ... times its mean diagonal that works."""
    _, ok = _cholesky(M)
    size = np.trace(M, axis1=-2, axis2=-1)[:, None, None] / M.shape[-1] * np.eye(M.shape[-1])
    for jitter in (1e-13, 1e-11, 1e-9, 1e-7):
        failed = ~ok & active
        if not failed.any():
            return M
        M = np.where(failed[:, None, None], M + jitter * size, M)
        ok = ok | (_cholesky(M)[1] & failed)
    if (~ok & active).any():
        raise FloatingPointError("the interior-point Schur complement lost positive definiteness")
    return M


def _basis(vectors: np.ndarray) -> np.ndarray:
    """Orthonormal bases (B, d, r) of the spans of the rows of `vectors` (B, K, d), r = the largest rank."""
    U, sigma, _ = np.linalg.svd(_t(vectors), full_matrices=False)
    rank = int((sigma > 1e-10 * sigma[..., :1]).sum(-1).max())
    return U[..., :rank]


def solve(deltas, queries):
    """Nuclear-norm Att-SVMs for a batch: deltas, queries (B, K, d) -> (W (B, d, d), y (B, K), converged (B,)),
    numpy arrays.

    The problems must be feasible (check with the Frobenius solver first). `converged` is False where the
    tolerance was not reached: within the iteration limit, or before round-off stalled the iteration (this
    happens on nearly infeasible problems, whose solutions have huge norms).
    """
    deltas, queries = np.asarray(deltas, dtype=float), np.asarray(queries, dtype=float)
    B, K, d = deltas.shape
    # Solve for unit-size data: with c = max ||delta_k|| max ||z_k||, W = W' / c and y = y' / c. Then every
    # ||delta_k z_k^T||_op <= 1, so ||W'||_* >= 1 and the tolerances below are relative.
    size_d = np.linalg.norm(deltas, axis=-1).max(-1)
    size_q = np.linalg.norm(queries, axis=-1).max(-1)
    c = (size_d * size_q)[:, None]
    deltas, queries = deltas / size_d[:, None, None], queries / size_q[:, None, None]
    U, V = _basis(deltas), _basis(queries)
    A = _Constraints(_t(U) @ _t(deltas), _t(V) @ _t(queries))
    r1, r = U.shape[-1], U.shape[-1] + V.shape[-1]
    eye = np.broadcast_to(np.eye(r), (B, r, r))
    C, b = eye / 2, np.ones((B, K))
    S, Z, w, y = eye.copy(), eye.copy(), b.copy(), b.copy()
    converged, stalled = np.zeros(B, dtype=bool), np.zeros(B, dtype=bool)
    for _ in range(MAX_ITER):
        Rp = b - A.apply(S) + w  # primal residual of A(S) - w = b
        Rd = C - A.adjoint(y) - Z  # dual residual
        primal, dual = (C * S).sum((-2, -1)), y.sum(-1)
        gap = (S * Z).sum((-2, -1)) + (w * y).sum(-1)
        mu = gap / (r + K)
        error = np.max([gap / (1 + np.abs(primal) + np.abs(dual)),
                        np.linalg.norm(Rp, axis=-1) / (1 + np.linalg.norm(S, axis=(-2, -1))),
                        np.linalg.norm(Rd, axis=(-2, -1)) / (1 + np.linalg.norm(C, axis=(-2, -1)))], axis=0)
        converged |= error < GAP_TOL
        LZ, ok_Z = _cholesky(Z)
        LS, ok_S = _cholesky(S)
        stalled |= ~(ok_Z & ok_S) & ~converged  # round-off reached the cone boundary
        active = ~(converged | stalled)  # the others keep their iterate
        if not active.any():
            break
        keep = active[:, None, None]
        Si, Zi = np.where(keep, S, eye), np.where(keep, Z, eye)  # identity where the problem is finished
        LZinv, LSinv = np.linalg.inv(np.where(keep, LZ, eye)), np.linalg.inv(np.where(keep, LS, eye))
        Zinv = _t(LZinv) @ LZinv
        M = _factor_schur(A.schur(Si, Zinv) + np.eye(K) * (w / y)[:, None, :], active)

        def direction(sigma_mu, second_S, second_w):
            """Newton direction for S Z = sigma mu I - second_S and w y = sigma mu - second_w."""
            G = (sigma_mu[:, None, None] * eye - Si @ Zi - second_S) @ Zinv  # dS = G - S dZ Z^-1
            lp = (sigma_mu[:, None] - w * y - second_w) / y  # dw = lp - (w / y) dy
            rhs = Rp - A.apply(_sym(G - Si @ Rd @ Zinv)) + lp
            dy = np.linalg.solve(M, rhs[..., None])[..., 0]
            dZ = Rd - A.adjoint(dy)
            return _sym(G - Si @ dZ @ Zinv), lp - w / y * dy, dy, dZ

        def steps(dS, dw, dy, dZ):
            a_p = np.minimum(_max_step(LSinv, dS), _max_step_lp(w, dw))
            a_d = np.minimum(_max_step(LZinv, dZ), _max_step_lp(y, dy))
            return np.where(active, a_p, 0.0), np.where(active, a_d, 0.0)

        dS, dw, dy, dZ = direction(np.zeros_like(mu), 0.0, 0.0)  # predictor (affine scaling)
        a_p, a_d = steps(dS, dw, dy, dZ)
        gap_aff = (((Si + a_p[:, None, None] * dS) * (Zi + a_d[:, None, None] * dZ)).sum((-2, -1))
                   + ((w + a_p[:, None] * dw) * (y + a_d[:, None] * dy)).sum(-1))
        sigma = np.clip(gap_aff / gap, 0, 1) ** 3
        dS, dw, dy, dZ = direction(sigma * mu, dS @ dZ, dw * dy)  # Mehrotra corrector
        a_p, a_d = steps(dS, dw, dy, dZ)
        S, w = S + a_p[:, None, None] * dS, w + a_p[:, None] * dw
        y, Z = y + a_d[:, None] * dy, Z + a_d[:, None, None] * dZ
    converged |= stalled & (error < STALLED_TOL)  # round-off stopped it just short of GAP_TOL
    return U @ S[:, :r1, r1:] @ _t(V) / c[..., None], y / c, converged
