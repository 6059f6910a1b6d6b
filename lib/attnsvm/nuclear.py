"""A batched primal-dual interior-point method for the nuclear-norm Att-SVM.

    min ||W||_*  s.t.  <delta_k z_k^T, W> >= 1  (k = 1..K; delta_k = x_{i,alpha_i} - x_it, z_k = z_i)

is the semidefinite program (with S = [[P, W], [W^T, Q]] of size r = 2d)

    primal:  min <C, S>  s.t.  <A_k, S> - w_k = 1,  S >= 0 (PSD),  w >= 0,       C = I / 2,
    dual:    max sum_k y_k  s.t.  Z = C - sum_k y_k A_k >= 0 (PSD),  y >= 0,

where A_k = (p_k q_k^T + q_k p_k^T) / 2 with p_k = [delta_k; 0], q_k = [0; z_k], so that <A_k, S> = <delta_k z_k^T, W>.
The dual multipliers y are those of the Att-SVM: sum_k y_k delta_k z_k^T is a subgradient of ||.||_* at W.

Every A_k has rank two, so the Schur complement M_kl = tr(A_k S A_l Z^-1) (the HKM direction) is a sum of four
Hadamard products of K x K matrices and costs O(K^2 r) instead of O(K^2 r^2). Mehrotra predictor-corrector
steps, infeasible start; all problems of a batch advance together in one tensor program. General-purpose
conic solvers (Clarabel, SCS) treat the same SDP without this structure and take 50-1000 times longer.
"""

from __future__ import annotations

import torch

GAP_TOL = 1e-9  # stop when the relative duality gap and the relative residuals are all below this
MAX_ITER = 100
STEP_FRACTION = 0.98  # of the distance to the boundary of the cones


def _sym(N: torch.Tensor) -> torch.Tensor:
    return (N + N.transpose(-2, -1)) / 2


def _apply(P: torch.Tensor, Q: torch.Tensor, S: torch.Tensor) -> torch.Tensor:
    """A(S)_k = <A_k, S> = p_k^T S q_k for symmetric S: shape (B, K)."""
    return torch.einsum("brk,brs,bsk->bk", P, S, Q)


def _adjoint(P: torch.Tensor, Q: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """A^T(y) = sum_k y_k A_k: shape (B, r, r)."""
    return _sym(torch.einsum("brk,bk,bsk->brs", P, y, Q))


def _schur(P, Q, S, Zinv):
    """M_kl = tr(A_k S A_l Z^-1), using A_k = (p q^T + q p^T) / 2."""
    def quad(L, R, N):
        return L.transpose(-2, -1) @ N @ R
    return (quad(Q, P, S) * quad(P, Q, Zinv) + quad(Q, Q, S) * quad(P, P, Zinv)
            + quad(P, P, S) * quad(Q, Q, Zinv) + quad(P, Q, S) * quad(Q, P, Zinv)) / 4


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


def solve(deltas: torch.Tensor, queries: torch.Tensor):
    """Nuclear-norm Att-SVMs for a batch: deltas, queries (B, K, d) -> (W (B, d, d), y (B, K), converged (B,)).

    The problems must be feasible (check with the Frobenius solver first). `converged` is False where the
    tolerance was not reached: within the iteration limit, or before round-off stalled the iteration (this
    happens on nearly infeasible problems, whose solutions have huge norms).
    """
    B, K, d = deltas.shape
    r = 2 * d
    # Solve for unit-size data: with c = max ||delta_k|| max ||z_k||, W = W' / c and y = y' / c. Then every
    # ||delta_k z_k^T||_op <= 1, so ||W'||_* >= 1 and the tolerances below are relative.
    c = (deltas.norm(dim=-1).amax(-1) * queries.norm(dim=-1).amax(-1))[:, None]
    deltas = deltas / deltas.norm(dim=-1).amax(-1)[:, None, None]
    queries = queries / queries.norm(dim=-1).amax(-1)[:, None, None]
    zeros = torch.zeros_like(deltas)
    P = torch.cat([deltas, zeros], -1).transpose(-2, -1)  # (B, r, K): columns p_k
    Q = torch.cat([zeros, queries], -1).transpose(-2, -1)
    eye = torch.eye(r, dtype=deltas.dtype, device=deltas.device).expand(B, r, r)
    C, b = eye / 2, torch.ones(B, K, dtype=deltas.dtype, device=deltas.device)
    S, Z, w, y = eye.clone(), eye.clone(), b.clone(), b.clone()
    converged = torch.zeros(B, dtype=torch.bool, device=deltas.device)
    stalled = torch.zeros_like(converged)
    for _ in range(MAX_ITER):
        Rp = b - _apply(P, Q, S) + w  # primal residual of A(S) - w = b
        Rd = C - _adjoint(P, Q, y) - Z  # dual residual
        primal, dual = (C * S).sum((-2, -1)), y.sum(-1)
        gap = (S * Z).sum((-2, -1)) + (w * y).sum(-1)
        mu = gap / (r + K)
        converged = converged | ((gap / (1 + primal.abs() + dual.abs()) < GAP_TOL)
                                 & (Rp.norm(dim=-1) / (1 + S.norm(dim=(-2, -1))) < GAP_TOL)
                                 & (Rd.norm(dim=(-2, -1)) / (1 + C.norm(dim=(-2, -1))) < GAP_TOL))
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
        LM = _cholesky_with_jitter(_schur(P, Q, Si, Zinv) + torch.diag_embed(w / y), active)

        def direction(sigma_mu, second_S, second_w):
            """Newton direction for S Z = sigma mu I - second_S and w y = sigma mu - second_w."""
            G = (sigma_mu[:, None, None] * eye - Si @ Zi - second_S) @ Zinv  # dS = G - S dZ Z^-1
            lp = (sigma_mu[:, None] - w * y - second_w) / y  # dw = lp - (w / y) dy
            rhs = Rp - _apply(P, Q, _sym(G - Si @ Rd @ Zinv)) + lp
            dy = torch.cholesky_solve(rhs[..., None], LM)[..., 0]
            dZ = Rd - _adjoint(P, Q, dy)
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
    return S[:, :d, d:] / c[..., None], y / c, converged
