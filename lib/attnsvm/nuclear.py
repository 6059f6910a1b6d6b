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
advance together in one tensor program. General-purpose conic solvers (Clarabel, SCS) treat the same SDP
without this structure and take 10-100 times longer.
"""

from __future__ import annotations

import torch

GAP_TOL = 1e-9  # stop when the relative duality gap and the relative residuals are all below this
STALLED_TOL = 1e-8  # accept a problem whose iteration stalled (round-off) with errors below this
MAX_ITER = 100
STEP_FRACTION = 0.98  # of the distance to the boundary of the cones


def _sym(N: torch.Tensor) -> torch.Tensor:
    return (N + N.transpose(-2, -1)) / 2


class _Constraints:
    """The operator A(S)_k = <A_k, S>, its adjoint, and the Schur complement, for D (B, r1, K), Zq (B, r2, K)."""

    def __init__(self, D: torch.Tensor, Zq: torch.Tensor):
        self.D, self.Zq, self.r1 = D, Zq, D.shape[-2]

    def apply(self, S: torch.Tensor) -> torch.Tensor:
        """A(S)_k = p_k^T S q_k = delta_k^T S12 z_k, for symmetric S: (B, K)."""
        return torch.einsum("brk,brs,bsk->bk", self.D, S[:, : self.r1, self.r1:], self.Zq)

    def adjoint(self, y: torch.Tensor) -> torch.Tensor:
        """sum_k y_k A_k = [[0, G / 2], [G^T / 2, 0]] with G = sum_k y_k delta_k z_k^T: (B, r, r)."""
        G = torch.einsum("brk,bk,bsk->brs", self.D, y, self.Zq) / 2
        top = torch.cat([torch.zeros_like(G[..., :1].expand(-1, -1, self.r1)), G], -1)
        bottom = torch.cat([G.transpose(-2, -1), torch.zeros_like(G[:, :1].expand(-1, G.shape[-1], -1))], -1)
        return torch.cat([top, bottom], -2)

    def schur(self, S: torch.Tensor, Zinv: torch.Tensor) -> torch.Tensor:
        """M_kl = tr(A_k S A_l Z^-1) = (1/4) [(D'S12 Z)^T o (D'Zi12 Z) + (Z'S22 Z) o (D'Zi11 D)
        + (D'S11 D) o (Z'Zi22 Z) + (D'S12 Z) o (D'Zi12 Z)^T] (' transposes, o is the Hadamard product)."""
        r1, D, Zq = self.r1, self.D, self.Zq
        Dt, Zt = D.transpose(-2, -1), Zq.transpose(-2, -1)
        cross_S, cross_Z = Dt @ S[:, :r1, r1:] @ Zq, Dt @ Zinv[:, :r1, r1:] @ Zq
        return (cross_S.transpose(-2, -1) * cross_Z + cross_S * cross_Z.transpose(-2, -1)
                + (Zt @ S[:, r1:, r1:] @ Zq) * (Dt @ Zinv[:, :r1, :r1] @ D)
                + (Dt @ S[:, :r1, :r1] @ D) * (Zt @ Zinv[:, r1:, r1:] @ Zq)) / 4


def _max_step(L: torch.Tensor, dS: torch.Tensor) -> torch.Tensor:
    """Largest a in (0, 1] with L L^T + a dS PSD (scaled by STEP_FRACTION), per batch element."""
    Linv_dS = torch.linalg.solve_triangular(L, dS, upper=False)
    inner = torch.linalg.solve_triangular(L, Linv_dS.transpose(-2, -1), upper=False)
    worst = torch.linalg.eigvalsh(_sym(inner))[..., 0]  # most negative eigenvalue of L^-1 dS L^-T
    return torch.where(worst < 0, torch.clamp(-STEP_FRACTION / worst, max=1.0), torch.ones_like(worst))


def _max_step_lp(v: torch.Tensor, dv: torch.Tensor) -> torch.Tensor:
    ratios = torch.where(dv < 0, -v / dv, torch.full_like(v, float("inf")))
    return torch.clamp(STEP_FRACTION * ratios.min(-1).values, max=1.0)


def _cholesky_with_jitter(M: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
    """Cholesky factor of the Schur complement; where round-off made it indefinite (nearly infeasible
    problems, late iterations), add the smallest of 1e-13, 1e-11, ... times its mean diagonal that works."""
    L, info = torch.linalg.cholesky_ex(M)
    size = torch.diagonal(M, dim1=-2, dim2=-1).mean(-1)[:, None, None] * torch.eye(M.shape[-1], dtype=M.dtype,
                                                                                   device=M.device)
    for jitter in (1e-13, 1e-11, 1e-9, 1e-7):
        failed = (info > 0) & active
        if not failed.any():
            return L
        L_retry, info_retry = torch.linalg.cholesky_ex(M + jitter * size)
        L = torch.where(failed[:, None, None], L_retry, L)
        info = torch.where(failed, info_retry, info)
    raise FloatingPointError("the interior-point Schur complement lost positive definiteness")


def _basis(vectors: torch.Tensor) -> torch.Tensor:
    """Orthonormal bases (B, d, r) of the spans of the rows of `vectors` (B, K, d), r = the largest rank."""
    U, sigma, _ = torch.linalg.svd(vectors.transpose(-2, -1), full_matrices=False)
    rank = int((sigma > 1e-10 * sigma[..., :1]).sum(-1).max())
    return U[..., :rank]


def solve(deltas: torch.Tensor, queries: torch.Tensor):
    """Nuclear-norm Att-SVMs for a batch: deltas, queries (B, K, d) -> (W (B, d, d), y (B, K), converged (B,)).

    The problems must be feasible (check with the Frobenius solver first). `converged` is False where the
    tolerance was not reached: within the iteration limit, or before round-off stalled the iteration (this
    happens on nearly infeasible problems, whose solutions have huge norms).
    """
    B, K, d = deltas.shape
    # Solve for unit-size data: with c = max ||delta_k|| max ||z_k||, W = W' / c and y = y' / c. Then every
    # ||delta_k z_k^T||_op <= 1, so ||W'||_* >= 1 and the tolerances below are relative.
    c = (deltas.norm(dim=-1).amax(-1) * queries.norm(dim=-1).amax(-1))[:, None]
    deltas = deltas / deltas.norm(dim=-1).amax(-1)[:, None, None]
    queries = queries / queries.norm(dim=-1).amax(-1)[:, None, None]
    U, V = _basis(deltas), _basis(queries)
    A = _Constraints(U.transpose(-2, -1) @ deltas.transpose(-2, -1), V.transpose(-2, -1) @ queries.transpose(-2, -1))
    r1, r = U.shape[-1], U.shape[-1] + V.shape[-1]
    eye = torch.eye(r, dtype=deltas.dtype, device=deltas.device).expand(B, r, r)
    C, b = eye / 2, torch.ones(B, K, dtype=deltas.dtype, device=deltas.device)
    S, Z, w, y = eye.clone(), eye.clone(), b.clone(), b.clone()
    converged = torch.zeros(B, dtype=torch.bool, device=deltas.device)
    stalled = torch.zeros_like(converged)
    for _ in range(MAX_ITER):
        Rp = b - A.apply(S) + w  # primal residual of A(S) - w = b
        Rd = C - A.adjoint(y) - Z  # dual residual
        primal, dual = (C * S).sum((-2, -1)), y.sum(-1)
        gap = (S * Z).sum((-2, -1)) + (w * y).sum(-1)
        mu = gap / (r + K)
        error = torch.stack([gap / (1 + primal.abs() + dual.abs()), Rp.norm(dim=-1) / (1 + S.norm(dim=(-2, -1))),
                             Rd.norm(dim=(-2, -1)) / (1 + C.norm(dim=(-2, -1)))]).amax(0)
        converged = converged | (error < GAP_TOL)
        LZ, info_Z = torch.linalg.cholesky_ex(Z)
        LS, info_S = torch.linalg.cholesky_ex(S)
        stalled = stalled | ((info_Z > 0) | (info_S > 0)) & ~converged  # round-off reached the cone boundary
        active = ~(converged | stalled)  # the others keep their iterate
        if not active.any():
            break
        Si = torch.where(active[:, None, None], S, eye)  # iterates of the active problems, identity elsewhere
        Zi = torch.where(active[:, None, None], Z, eye)
        LZ = torch.where(active[:, None, None], LZ, eye)
        LS = torch.where(active[:, None, None], LS, eye)
        Zinv = torch.cholesky_inverse(LZ)
        LM = _cholesky_with_jitter(A.schur(Si, Zinv) + torch.diag_embed(w / y), active)

        def direction(sigma_mu, second_S, second_w):
            """Newton direction for S Z = sigma mu I - second_S and w y = sigma mu - second_w."""
            G = (sigma_mu[:, None, None] * eye - Si @ Zi - second_S) @ Zinv  # dS = G - S dZ Z^-1
            lp = (sigma_mu[:, None] - w * y - second_w) / y  # dw = lp - (w / y) dy
            rhs = Rp - A.apply(_sym(G - Si @ Rd @ Zinv)) + lp
            dy = torch.cholesky_solve(rhs[..., None], LM)[..., 0]
            dZ = Rd - A.adjoint(dy)
            return _sym(G - Si @ dZ @ Zinv), lp - w / y * dy, dy, dZ

        def steps(dS, dw, dy, dZ):
            a_p = torch.minimum(_max_step(LS, dS), _max_step_lp(w, dw))
            a_d = torch.minimum(_max_step(LZ, dZ), _max_step_lp(y, dy))
            return torch.where(active, a_p, 0.0), torch.where(active, a_d, 0.0)

        dS, dw, dy, dZ = direction(torch.zeros_like(mu), 0.0, 0.0)  # predictor (affine scaling)
        a_p, a_d = steps(dS, dw, dy, dZ)
        gap_aff = (((Si + a_p[:, None, None] * dS) * (Zi + a_d[:, None, None] * dZ)).sum((-2, -1))
                   + ((w + a_p[:, None] * dw) * (y + a_d[:, None] * dy)).sum(-1))
        sigma = (gap_aff / gap).clamp(0, 1) ** 3
        dS, dw, dy, dZ = direction(sigma * mu, dS @ dZ, dw * dy)  # Mehrotra corrector
        a_p, a_d = steps(dS, dw, dy, dZ)
        S, w = S + a_p[:, None, None] * dS, w + a_p[:, None] * dw
        y, Z = y + a_d[:, None] * dy, Z + a_d[:, None, None] * dZ
    converged = converged | (stalled & (error < STALLED_TOL))  # round-off stopped it just short of GAP_TOL
    return U @ S[:, :r1, r1:] @ V.transpose(-2, -1) / c[..., None], y / c, converged
