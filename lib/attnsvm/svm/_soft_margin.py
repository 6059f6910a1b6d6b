"""Hard- and soft-margin SVMs of any system of linear margin constraints, solved in the space of their Gram matrix.

The constraints are rows a_c (a matrix A, w in R^p) or, for the attention SVMs, Kronecker rows
a_c = kron(delta_c, z_c) given by the pairs (delta_c, z_c): the constraint <delta_c z_c^T, W> >= 1 on a matrix W.
The hard-margin SVM is

    min ||w||  s.t.  a_c^T w >= 1 for every c,

and the soft-margin SVM adds slacks xi >= 0, a_c^T w >= 1 - xi_g(c), and C sum_g xi_g to the objective, with the
objective (1/2)||w||^2 + C sum xi ("squared", the textbook form) or ||w|| + C sum xi ("norm", paper C's form). A
slack belongs to one constraint (groups=None) or is shared by a group of constraints (paper C's per-token slack).

Every solver works with the Gram matrix G = A A^T, for Kronecker rows (D D^T) * (Z Z^T), or a factor B (B B^T = G,
the rows themselves where they have at most m entries): the rows of B have the same inner products as the rows a_c,
so every SVM of B has the same multipliers lam and norms, and w = A^T lam is rebuilt from the multipliers. So the
cost does not grow with p (d^2 for an attention SVM). The hard margin is the least-distance program of `_attention`
(NNLS), accepted by the SVMs' one rule (`_attention._accepted`) and checked against its dual to GAP_TOL["hard"]; the
exact-penalty threshold is a linear program (HiGHS). The soft margins start from Clarabel's interior-point solution;
the KKT system on its active set is then solved ("norm": with C' = C ||w|| from a quadratic equation) and refined in
long double, and every answer w is certified by its own multipliers lam (in the dual set: lam >= 0, at most C summed
over a group, exactly): the "squared" objective P, its slacks read off the margins of w, is 1-strongly convex in w,
so ||w - w*|| <= sqrt(2 (P(w) - D(lam))), D(lam) = sum lam - ||A^T lam||^2 / 2; w is certified where this bound, the
gap computed without cancellation and with its round-off (`_squared_gap`), is at most W_TOL = 1e-5 times ||w|| (w =
0: at most sqrt(32 eps C groups), as float64 group sums of lam miss C by about eps C). W_TOL: a float64 w has
margins off by about eps ||a_c|| ||w||, each costing its multiplier (up to C) in P - D, so the bound is about sqrt(2
eps C sum ||a_c|| ||w||) even for w* rounded; 1e-5 certifies all but 1 of the tests' 160 sweep cases (C up to 1e5;
refused: shared slacks at C = 8.3e4), while 1e-6 refused 29 of them. "norm": w != 0 solves paper C's form at C iff
it solves the "squared" one at C' = C ||w|| with multipliers ||w|| lam, so w is certified as that (within W_TOL
||w|| of the "squared" solution at C', which is the "norm" solution at a penalty within a relative W_TOL of C) and
also by the "norm" dual bound sum lam / max(1, ||A^T lam||), its gap at most GAP_TOL["soft"] = 1e-9 times P plus
round-off; w = 0 by the latter alone. An answer not certified gives way to the next candidate (Clarabel's own, at
its best scale); SolverError, saying what failed, where none is (measured on next-token language problems: from
C ~ 2e4 for both objectives, every case at C >= 1e6; and the sweep's case above). The "norm" certificate is of a
penalty within a relative W_TOL of C: within about 1e-9 of the W = 0 threshold either side may be returned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import clarabel
import numpy as np
import torch
from numpy.typing import ArrayLike
from scipy import sparse
from scipy.linalg import lstsq
from scipy.optimize import linprog

from .._checks import MAX_BYTES, as_tensor, boolean, budget, finite_result, number, option
from ._attention import (CLARABEL_MAX_ITER, CLARABEL_TOL, GAP_TOL, POLISH_TOL, SCALES, W_TOL, InfeasibleSVM,
                         SolverError, _accepted, _least_distance)

__all__ = ["penalty_threshold", "soft_margin_svm", "OBJECTIVES", "SOLVER_FLOATS"]

OBJECTIVES = ("squared", "norm")  # (1/2)||w||^2 + C sum xi (default), or paper C's ||w|| + C sum xi
# peak memory of each solver, in dense floats per m^2 for m constraints (measured: NNLS, Clarabel, HiGHS)
SOLVER_FLOATS = {"hard": 6, "squared": 12, "norm": 28, "token": 24, "threshold": 30}


@dataclass(frozen=True)
class _Rows:
    """Constraint rows kron(delta_c, z_c), c < m: deltas (m, d), queries (m, e); a matrix A is (A, ones (m, 1))."""

    deltas: np.ndarray
    queries: np.ndarray

    def __len__(self) -> int:
        return len(self.deltas)

    def gram(self) -> np.ndarray:
        """G = A A^T for the rows A_c = kron(delta_c, z_c): (D D^T) * (Z Z^T)."""
        return (self.deltas @ self.deltas.T) * (self.queries @ self.queries.T)

    def combine(self, lam: np.ndarray) -> np.ndarray:
        """A^T lam as a (d, e) matrix: sum_c lam_c delta_c z_c^T."""
        return (self.deltas * lam[:, None]).T @ self.queries

    def margins(self, W: np.ndarray) -> np.ndarray:
        """delta_c^T W z_c for every c."""
        return np.einsum("cd,de,ce->c", self.deltas, W, self.queries)


def _factor(G: np.ndarray) -> np.ndarray:
    """B with B B^T = G (G symmetric positive semidefinite): the constraint rows in an m-dimensional space
    with the same inner products, so every SVM of the rows has the same multipliers and norms."""
    eigenvalues, vectors = np.linalg.eigh(G)
    return vectors * np.sqrt(np.clip(eigenvalues, 0.0, None))


# ------------------------------------------------------------------ arguments

def _checked_rows(rows) -> tuple[_Rows, bool]:
    """`rows` as a _Rows, and whether it came as a matrix A (w a vector) rather than Kronecker pairs (W a matrix)."""
    pair = isinstance(rows, (tuple, list)) and len(rows) == 2 and all(np.ndim(part) == 2 for part in rows)
    parts = [as_tensor(part, f"rows[{k}]").detach().numpy() for k, part in enumerate(rows)] if pair else \
        [as_tensor(rows, "rows").detach().numpy()]
    if not pair and parts[0].ndim != 2:
        raise ValueError(f"rows must be a constraint matrix A (m, p), one row a_c per constraint a_c^T w >= 1, or a "
                         f"pair (deltas (m, d), queries (m, e)) of Kronecker rows, got shape {parts[0].shape}")
    if pair and parts[0].shape[0] != parts[1].shape[0]:
        raise ValueError(f"rows must pair one delta_c with one z_c per constraint: rows[0] has {parts[0].shape[0]} "
                         f"rows, rows[1] has {parts[1].shape[0]}")
    if 0 in parts[0].shape[1:] + parts[-1].shape[1:]:
        raise ValueError(f"rows must have at least one column (w in R^p, p >= 1), got shapes "
                         f"{[part.shape for part in parts]}")
    deltas, queries = parts if pair else (parts[0], np.ones((len(parts[0]), 1)))
    return _Rows(deltas, queries), not pair


def _checked_groups(groups, m: int) -> np.ndarray:
    """`groups` (m,) as the compact slack index 0, 1, ... of each constraint (same group, same index)."""
    if torch.is_tensor(groups) and groups.device.type != "cpu":
        raise ValueError(f"groups is on the device {groups.device.type!r}: attnsvm computes on the CPU, pass "
                         f"groups.cpu()")
    array = groups.detach().numpy() if torch.is_tensor(groups) else np.asarray(groups)
    if array.dtype.kind not in "iu":
        raise TypeError(f"groups must hold integer group labels (one per constraint), got dtype {array.dtype}")
    if array.shape != (m,):
        raise ValueError(f"groups must have shape ({m},) (one slack group per constraint), got {array.shape}")
    return np.unique(array, return_inverse=True)[1].reshape(-1)


def _memory(m: int, solver: str) -> None:
    budget(SOLVER_FLOATS[solver] * 8.0 * m * m, f"rows ({m} constraints)", MAX_BYTES,
           f"bytes for the dense constraint system (about {SOLVER_FLOATS[solver]} m^2 floats for m constraints)")


# ------------------------------------------------------------------ the solvers

def _hard(rows: _Rows):
    """(W, multipliers) of the hard-margin SVM, or None when infeasible (NNLS on the factor B)."""
    solution = _least_distance(_factor(rows.gram()))
    if solution is None:
        return None
    lam = solution[1]
    W = rows.combine(lam)
    divisor = _accepted(rows.margins(W).min(), "the hard-margin SVM solution")
    return W / divisor, lam / divisor


def _clarabel(P, q, A, b, cones):
    """Clarabel's solution of min (1/2) x^T P x + q^T x s.t. b - A x in the cones, to the library's tolerances (a
    start for the polish, which does not need them met), or None where it is not finite."""
    settings = clarabel.DefaultSettings()
    settings.verbose = False
    settings.tol_gap_abs = settings.tol_gap_rel = settings.tol_feas = CLARABEL_TOL["fro"]
    settings.max_iter = CLARABEL_MAX_ITER
    solution = clarabel.DefaultSolver(P, q, A, b, cones, settings).solve()
    finite = all(np.isfinite(np.asarray(part)).all() for part in (solution.x, solution.z, solution.s))
    return solution if finite else None


def _group_sums(values: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """The sum of values over each slack group."""
    return np.bincount(groups, values, minlength=int(groups.max()) + 1)


def _dual_feasible(lam: np.ndarray, groups: np.ndarray, C: float) -> np.ndarray:
    """lam moved into the dual set: lam >= 0, and a group whose sum exceeds C scaled down to C; where the exact sum
    (math.fsum) still exceeds C by round-off, its largest lam is lowered by the excess and one ulp more."""
    lam = np.maximum(lam, 0.0)
    sums = _group_sums(lam, groups)
    lam = np.minimum(lam * np.where(sums > C, C / np.where(sums > C, sums, 1.0), 1.0)[groups], C)
    for g in np.flatnonzero(_group_sums(lam, groups) > C * (1 - 1e-12)):
        members = np.flatnonzero(groups == g)
        excess = math.fsum(np.r_[lam[members], -C])
        if excess > 0:
            top = members[np.argmax(lam[members])]
            lam[top] = max(np.nextafter(lam[top] - excess, 0.0), 0.0)
    return lam


def _interior(rows: _Rows, G: np.ndarray, groups: np.ndarray, C: float, objective: str):
    """Clarabel's approximate solution of the soft-margin SVM in a factor space, or None: with B B^T = G, min
    (1/2)||y||^2 or s + C sum_g xi_g s.t. B y + xi_g(c) >= 1, xi >= 0 (and ||y|| <= s for "norm"). B is the rows
    themselves where they have at most m entries (y = vec W), else the eigenvectors of G scaled by the roots of its
    eigenvalues above round-off (W = A^T B Lambda^-1 y). Returns (W, lam, surplus, xi): its primal W, the multipliers
    lam of the margins, surplus = B y + xi_g(c) - 1 and xi. For "squared" with m >= 500 and B of more than m / 6
    columns its dual in lam is faster (up to 10 times at m = 1000), and W = A^T lam."""
    (m, d), e = rows.deltas.shape, rows.queries.shape[1]
    if d * e <= m:
        B = np.einsum("cd,ce->cde", rows.deltas, rows.queries).reshape(m, d * e)
    else:
        B = _factor(G)
        energy = (B ** 2).sum(0)  # the eigenvalues of G
        B = B[:, energy > m * np.finfo(float).eps * energy.max()]
    r, g, norm = B.shape[1], int(groups.max()) + 1, int(objective == "norm")
    share = sparse.csc_matrix((np.ones(m), (np.arange(m), groups)), shape=(m, g))
    if not norm and 6 * r > m >= 500:  # the dual: min (1/2) lam^T G lam - 1^T lam, lam >= 0, sum_g lam <= C
        solution = _clarabel(sparse.triu(sparse.csc_matrix(G)).tocsc(), -np.ones(m),
                             sparse.vstack([-sparse.identity(m), share.T]).tocsc(),
                             np.concatenate([np.zeros(m), np.full(g, C)]), [clarabel.NonnegativeConeT(m + g)])
        if solution is None:
            return None
        lam, z = _dual_feasible(np.asarray(solution.x), groups, C), np.asarray(solution.z)
        return rows.combine(lam), lam, z[:m], z[m:]  # the multipliers of lam >= 0: surplus; of the sums: xi
    blocks = [sparse.hstack([-sparse.csc_matrix(B), sparse.csc_matrix((m, norm)), -share]),  # B y + xi >= 1
              sparse.hstack([sparse.csc_matrix((g, r + norm)), -sparse.identity(g)])]  # xi >= 0
    cones = [clarabel.NonnegativeConeT(m + g)]
    if norm:  # (s, y) in the second-order cone: ||y|| <= s
        blocks += [sparse.hstack([sparse.csc_matrix((1, r)), -sparse.identity(1), sparse.csc_matrix((1, g))]),
                   sparse.hstack([-sparse.identity(r), sparse.csc_matrix((r, 1 + g))])]
        cones.append(clarabel.SecondOrderConeT(1 + r))
    quadratic = sparse.block_diag([sparse.identity(r) * (1 - norm), sparse.csc_matrix((norm + g,) * 2)]).tocsc()
    solution = _clarabel(quadratic, np.concatenate([np.zeros(r), np.ones(norm), np.full(g, C)]),
                         sparse.vstack(blocks).tocsc(), np.concatenate([-np.ones(m), np.zeros(g + norm * (1 + r))]),
                         cones)
    if solution is None:
        return None
    x = np.asarray(solution.x)
    W = x[:r].reshape(d, e) if d * e <= m else rows.combine((B / (B ** 2).sum(0)) @ x[:r])
    return W, _dual_feasible(np.asarray(solution.z)[:m], groups, C), np.asarray(solution.s)[:m], x[r + norm:]


def _partition(groups: np.ndarray, C: float, lam: np.ndarray, surplus: np.ndarray, xi: np.ndarray):
    """The active set (support, saturated) of an interior-point solution for the penalty C: multipliers lam,
    margin surpluses margin_c - 1 + xi_g(c) >= 0 and group slacks xi >= 0, complementary up to its tolerance. A
    constraint is in the support (lam > 0, surplus 0) where lam / C exceeds its surplus, a group saturated (xi > 0,
    its lam summing to C) where xi exceeds its unused share 1 - sum lam / C; a saturated group keeps its lowest
    margin in the support."""
    saturated = xi > 1.0 - _group_sums(lam, groups) / C
    lowest = np.full(saturated.size, np.inf)
    np.minimum.at(lowest, groups, surplus)
    return (lam / C > surplus) | saturated[groups] & (surplus == lowest[groups]), saturated


def _kkt_solve(G: np.ndarray, groups: np.ndarray, support: np.ndarray, saturated: np.ndarray, margins: np.ndarray,
               sums: np.ndarray, near: np.ndarray | None = None):
    """The KKT equations of the "squared" form on an active set, G_SS lam_S + xi_g(c) = margins_c on the support and
    sum_{c in g} lam_c = sums_g on the saturated groups (lam = 0 off the support, xi = 0 on the other groups), for
    right-hand sides margins (m, q) and sums (groups, q). A saturated group with one constraint in the support fixes
    its lam to sums_g and its xi by its equation; the rest is a rank-revealing least-squares solve (dependent rows,
    copies of a constraint), the solution nearest to near (m + groups, q; default 0). Returns x = (lam, xi)
    (m + groups, q) and the residual of the margin equations (m, q; 0 where they have a solution)."""
    m, q = len(G), margins.shape[1]
    count = _group_sums(support.astype(float), groups)
    sole = np.flatnonzero(support & (saturated & (count == 1))[groups])
    s, k = np.flatnonzero(support & ~(saturated & (count == 1))[groups]), np.flatnonzero(saturated & (count > 1))
    E = (groups[s][:, None] == k[None, :]).astype(float)
    K = np.block([[G[np.ix_(s, s)], E], [E.T, np.zeros((len(k), len(k)))]])
    x = np.zeros((m + saturated.size, q))
    x[sole] = sums[groups[sole]]
    rhs = np.concatenate([margins[s] - G[np.ix_(s, sole)] @ x[sole], sums[k]])
    z = np.zeros_like(rhs) if near is None else np.concatenate([near[s], near[m + k]])
    if len(z):
        z = z + lstsq(K, rhs - K @ z, cond=np.finfo(float).eps * len(z), lapack_driver="gelsy")[0]
    x[s], x[m + k] = z[:len(s)], z[len(s):]
    x[m + groups[sole]] = margins[sole] - G[sole] @ x[:m]
    residual = np.zeros((m, q))
    residual[s] = (rhs - K @ z)[:len(s)]
    return x, residual


def _affine(G: np.ndarray, groups: np.ndarray, x: np.ndarray, C: float, support: np.ndarray,
            saturated: np.ndarray):
    """The "squared" form's KKT system on the active set (`_kkt_solve`) for every penalty C' at once: (p, r) with
    x(C') = p + C' r = (lam, xi), margins 1 - xi_g on the support and sums C' on the saturated groups, x(C) the
    solution nearest to x."""
    m, g = len(G), saturated.size
    margins, sums = np.stack([np.ones(m), np.zeros(m)], axis=1), np.stack([np.full(g, C), np.ones(g)], axis=1)
    here, r = _kkt_solve(G, groups, support, saturated, margins, sums, np.stack([x, np.zeros_like(x)], 1))[0].T
    return here - C * r, r


def _moved(G: np.ndarray, groups: np.ndarray, C: float, x: np.ndarray, support: np.ndarray,
           saturated: np.ndarray):
    """The active set after moving what breaks the KKT conditions of x = (lam, xi) for C (margins to POLISH_TOL
    relative, multipliers to POLISH_TOL C): out of the support where lam < 0 or the margin is above its target
    1 - xi_g, into it where the margin is below; a group released where xi < 0, saturated where its lam sum above
    C or a margin of its support below 1. None where nothing breaks them: x solves the "squared" form for C."""
    m = len(G)
    lam, xi = x[:m], x[m:]
    margin = G @ lam
    tol = POLISH_TOL * max(1.0, np.abs(margin).max())
    off = margin - (1.0 - xi[groups])
    drop, add = support & ((lam < -POLISH_TOL * C) | (off > tol)), ~support & (off < -tol)
    release = saturated & (xi < -tol)
    fill = ~saturated & ((_group_sums(lam, groups) > (1 + POLISH_TOL) * C)
                         | (_group_sums((support & (off < -tol)).astype(float), groups) > 0))
    if not (drop.any() or add.any() or release.any() or fill.any()):
        return None
    return support & ~drop | add, saturated & ~release | fill


def _descended(G: np.ndarray, groups: np.ndarray, C: float, lam: np.ndarray, support: np.ndarray,
               saturated: np.ndarray):
    """The primal active-set method for the "squared" form's dual at C, min (1/2) lam^T G lam - 1^T lam s.t.
    lam >= 0 and sum_{c in g} lam_c <= C, from the feasible point nearest lam on the working set (lam = 0 off the
    support, the sum C on the saturated groups). Each step solves the KKT system on the working set and moves
    toward its solution until a constraint blocks (it joins the working set); at the solution the constraint whose
    multiplier is most negative leaves (margins to POLISH_TOL relative). Where dependent rows leave the system
    without a solution, its least-squares residual (projected to keep the saturated sums) is a direction along
    which the objective falls linearly until a constraint blocks. One change per step, so it cannot cycle between
    block moves as `_settled` can. (x, support, saturated, p, r) as `_settled`, or None after 10 (m + groups)
    steps."""
    m = len(G)
    lam = _dual_feasible(np.where(support, lam, 0.0), groups, C)
    sums = _group_sums(lam, groups)
    saturated = saturated & (sums > 0)
    lam = lam * np.where(saturated, C / np.where(saturated, sums, 1.0), 1.0)[groups]
    for _ in range(10 * (m + saturated.size)):
        solution, residual = _kkt_solve(G, groups, support, saturated, np.ones((m, 1)),
                                        np.full((saturated.size, 1), C))
        target, direction = solution[:m, 0], residual[:, 0]
        direction -= np.where(support & saturated[groups], (_group_sums(direction, groups) / np.maximum(
            _group_sums(support.astype(float), groups), 1.0))[groups], 0.0)
        if np.linalg.norm(direction) > POLISH_TOL * np.sqrt(support.sum()):
            full = np.inf  # no solution: move along the residual
        else:
            direction, full = target - lam, 1.0
        falling, rising = direction < 0, _group_sums(direction, groups) > 0
        limits = np.r_[np.where(support & falling, lam / np.where(falling, -direction, 1.0), np.inf),
                       np.where(~saturated & rising, (C - _group_sums(lam, groups))
                                / np.where(rising, _group_sums(direction, groups), 1.0), np.inf), full]
        block = int(np.argmin(limits))
        if limits[block] == np.inf:
            return None
        lam = np.maximum(lam + max(limits[block], 0.0) * direction, 0.0)
        if block < m:
            support[block], lam[block] = False, 0.0
        elif block < m + saturated.size:
            saturated[block - m] = True
        else:  # at the solution on the working set: its multipliers
            xi = solution[m:, 0] * saturated
            margin = G @ lam
            slack = np.r_[np.where(support, np.inf, margin - 1 + xi[groups]), np.where(saturated, xi, np.inf)]
            worst = int(np.argmin(slack))
            if slack[worst] >= -POLISH_TOL * max(1.0, np.abs(margin).max()):
                p, r = _affine(G, groups, np.r_[lam, xi], C, support, saturated)
                return p + C * r, support, saturated, p, r
            if worst < m:
                support[worst] = True
            else:
                saturated[worst - m] = False
    return None


def _settled(G: np.ndarray, groups: np.ndarray, C: float, x: np.ndarray, support: np.ndarray,
             saturated: np.ndarray):
    """The "squared" form's exact solution for C by an active-set iteration from x = (lam, xi) on the active set
    (support, saturated): what breaks the KKT conditions moves (`_moved`), at most 50 times and never back to an
    active set already tried; where that fails, the primal active-set method (`_descended`) from the same start.
    (x, support, saturated, p, r) with x = p + C r (`_affine`), or None."""
    m, seen, start = len(G), set(), (x[:len(G)].copy(), support.copy(), saturated.copy())
    for _ in range(50):
        saturated = saturated & (_group_sums(support.astype(float), groups) > 0)
        if (support.tobytes(), saturated.tobytes()) in seen:
            break
        seen.add((support.tobytes(), saturated.tobytes()))
        p, r = _affine(G, groups, x, C, support, saturated)
        x = p + C * r
        moved = _moved(G, groups, C, x, support, saturated)
        if moved is None:
            return x, support, saturated, p, r
        support, saturated = moved
        x[:m] = _dual_feasible(x[:m], groups, C)
    return _descended(G, groups, C, *start)


def _polished(G: np.ndarray, groups: np.ndarray, start, C: float, penalties=None):
    """(lam, C') solving the "squared" form's KKT conditions exactly, from an interior-point solution
    start = (lam, surplus, xi) for the penalty C (`_partition`), for C' = C (penalties None) or for a penalty C' in
    penalties(p, r) (the candidates on an active set where x = (lam, xi) = p + C' r). The exact solution for C
    comes first (`_settled`); on its active set the first candidate C' whose x meets the KKT conditions is the
    answer, else the exact solution for the first candidate is next, at most 20 times. None where this fails."""
    m = len(G)
    support, saturated = _partition(groups, C, *start)
    x, tried = np.r_[start[0], np.zeros(saturated.size)], {C}
    for _ in range(20):
        settled = _settled(G, groups, C, x, support, saturated)
        if settled is None:
            return None
        x, support, saturated, p, r = settled
        if penalties is None:
            return x[:m], C
        candidates = [Cp for Cp in penalties(p[:m], r[:m]) if Cp > 0]
        for Cp in candidates:
            if _moved(G, groups, Cp, p + Cp * r, support, saturated) is None:
                return (p + Cp * r)[:m], Cp
        if not candidates or candidates[0] in tried:
            return None
        C = candidates[0]
        tried.add(C)
        x = p + C * r
        x[:m] = _dual_feasible(x[:m], groups, C)
    return None


def _refined(rows: _Rows, G: np.ndarray, groups: np.ndarray, C: float, lam: np.ndarray):
    """(W, lam) of the "squared" form at C from its exact multipliers lam, by two steps of iterative refinement:
    W = A^T lam in float64 cancels terms as large as C ||a_c|| (margins off by about eps C sum_c ||a_c||, and each
    margin off 1 costs its multiplier in the duality gap), so the KKT equations on the active set of lam (support
    lam > 0, groups summing to C) are solved again for the residuals of the margins, computed in long double, and of
    the group sums (math.fsum), and W moves by A^T of the small correction (the margins' right-hand sides less the
    current slacks, so that the whole correction is small and the solve meets the sums to round-off)."""
    W, support = rows.combine(lam), lam > 0
    sums = _group_sums(lam, groups)
    saturated = sums >= C * (1 - 1e-9)
    ld = np.longdouble
    for _ in range(2):
        margins = np.einsum("cd,de,ce->c", rows.deltas.astype(ld), W.astype(ld), rows.queries.astype(ld))
        xi = np.zeros(saturated.size, ld)  # the slacks on the support, so that the correction is small
        np.maximum.at(xi, groups[support], 1 - margins[support])
        xi = np.where(saturated, xi, 0)
        unused = np.array([math.fsum(np.r_[lam[groups == g], -C]) if full else 0.0
                           for g, full in enumerate(saturated)])
        x = _kkt_solve(G, groups, support, saturated, (1 - margins - xi[groups]).astype(float)[:, None],
                       -unused[:, None])[0]
        W, lam = W + rows.combine(x[:len(G), 0]), lam + x[:len(G), 0]
    return W, lam


def _candidates(rows: _Rows, C: float, objective: str, groups: np.ndarray):
    """The soft-margin solutions (W, lam) worth certifying, best first: the exact solution on the active set of
    Clarabel's (`_interior`, `_polished`); Clarabel's own primal W with its multipliers lam; and W = A^T lam."""
    G = rows.gram()
    start = _interior(rows, G, groups, C, objective)
    if start is None:
        return
    W_interior, lam, surplus, xi = start
    if objective == "squared":
        polished = _polished(G, groups, (lam, surplus, xi), C)
    else:  # paper C's form for C is the "squared" one for C' = C ||W||, with multipliers lam C' / C
        norm = np.linalg.norm(W_interior)

        def penalties(p, r):  # C' = C N for the positive roots N of N^2 = ||A^T p + C N A^T r||^2
            p, r = rows.combine(p), rows.combine(r)
            coefficients = np.array([1.0 - C * C * (r * r).sum(), -2.0 * C * (p * r).sum(), -(p * p).sum()])
            roots = np.roots(coefficients) if np.isfinite(coefficients).all() else np.zeros(0)
            return C * np.sort(roots[np.isreal(roots)].real)[::-1]

        polished = _polished(G, groups, (norm * lam, surplus, xi), C * norm, penalties)
    if polished is not None:
        lam_squared, C_squared = polished
        W, lam_squared = _refined(rows, G, groups, C_squared, _dual_feasible(lam_squared, groups, C_squared))
        yield W, _dual_feasible(lam_squared * (C / C_squared), groups, C)
    yield W_interior, lam
    yield rows.combine(lam), lam


def _best_scale(rows: _Rows, W: np.ndarray, C: float, objective: str, groups: np.ndarray) -> np.ndarray:
    """t W for the t >= 0 that minimizes the objective along W, (1/2) t^2 ||W||^2 or t ||W||, + C sum_g
    max(0, 1 - t nu_g) with nu_g the smallest margin of group g. It is convex and smooth between the breakpoints
    t = 1 / nu_g, so its minimum is where its slope, t ||W||^2 or ||W||, minus C times the sum of nu_g over the
    groups with t nu_g < 1, turns >= 0 (a margin short of 1 by round-off costs C times the shortfall; t > 1 by as
    much removes it)."""
    norm = np.linalg.norm(W)
    if norm == 0:
        return W
    nu = np.full(int(groups.max()) + 1, np.inf)
    np.minimum.at(nu, groups, rows.margins(W))
    breaks = np.sort(1.0 / nu[nu > 0])
    pulls = C * (nu.sum() - np.concatenate([[0.0], np.cumsum(1.0 / breaks)]))  # C sum nu_g on each piece
    ends = np.concatenate([[0.0], breaks, [np.inf]])
    for k, pull in enumerate(pulls):
        t = pull / norm ** 2 if objective == "squared" else ends[k] if pull <= norm else np.inf
        if t <= ends[k + 1]:
            return max(t, ends[k]) * W
    return W


def _objective(rows: _Rows, W: np.ndarray, C: float, objective: str, groups: np.ndarray) -> float:
    """The soft-margin objective of W, its slacks read off its margins: (1/2)||W||^2 or ||W||, + C sum_g xi_g."""
    xi = np.zeros(int(groups.max()) + 1)
    np.maximum.at(xi, groups, np.maximum(0.0, 1.0 - rows.margins(W)))
    norm = np.linalg.norm(W)
    return (0.5 * norm ** 2 if objective == "squared" else norm) + C * xi.sum()


def _in_dual_set(lam: np.ndarray, groups: np.ndarray, C: float) -> bool:
    """lam >= 0 and the exact sum (math.fsum) of lam over each group at most C."""
    if not (lam >= 0).all() or lam.max(initial=0.0) > C:
        return False
    near = np.flatnonzero(_group_sums(lam, groups) > C * (1 - 1e-12))
    return all(math.fsum(np.r_[lam[groups == g], -C]) <= 0 for g in near)


def _squared_gap(rows: _Rows, W: np.ndarray, lam: np.ndarray, C: float, groups: np.ndarray,
                 scale: float = 1.0) -> float:
    """An upper bound, round-off included, on P(W) - D(s lam) for the "squared" form at the penalty s C (s = scale;
    lam in the dual set for C). For every W and lam, P(W) - D(lam) = sum_c lam_c surplus_c + sum_g xi_g (C - sum_g
    lam) + (1/2)||W - A^T lam||^2 (margins mu = A W, slacks xi_g = max(0, 1 - min_g mu), surpluses mu_c - 1 +
    xi_g(c)): a sum of terms >= 0 without the cancellation of P - D, each P ~ C sum xi. Computed in long double;
    each margin's error bound e_c = 2 (p + 2) eps_ld |delta_c|^T |W| |z_c| (p entries of W) enters where it can
    raise a term: the surplus bound max(0, mu_c + e_c - 1, mu_c + e_c - min_{k != c in g} (mu_k - e_k)), the slack
    bound max(0, 1 - min_g (mu - e)); ||W - s A^T lam|| gets 2 (m + 2) eps_ld s sum_c lam_c ||a_c||, the group sums
    their own error, and the total a relative 8 (m + groups + p) eps_ld."""
    ld, eps = np.longdouble, float(np.finfo(np.longdouble).eps)
    deltas, queries, W_ld = rows.deltas.astype(ld), rows.queries.astype(ld), W.astype(ld)
    lam_ld, m, g, p = lam.astype(ld), len(lam), int(groups.max()) + 1, W.size
    mu = np.einsum("cd,de,ce->c", deltas, W_ld, queries)
    error = 2 * (p + 2) * eps * np.einsum("cd,de,ce->c", abs(deltas), abs(W_ld), abs(queries)) \
        + 4 * eps * (1 + abs(mu))
    low, order = mu - error, np.lexsort((mu - error, groups))  # each group's lowest margin first
    first = np.r_[True, groups[order][1:] != groups[order][:-1]]
    lowest, second = np.full(g, np.inf, ld), np.full(g, np.inf, ld)
    lowest[groups[order[first]]] = low[order[first]]
    later = np.flatnonzero(first) + 1
    later = later[~np.r_[first, True][later]]  # each group's second lowest, where it has one
    second[groups[order[later]]] = low[order[later]]
    others = np.where(low == lowest[groups], second[groups], lowest[groups])  # min over the group without c
    surplus = np.maximum(0, np.maximum(mu + error - 1, mu + error - others))
    xi = np.maximum(0, 1 - lowest)
    sums = np.zeros(g, ld)
    np.add.at(sums, groups, lam_ld)
    counts = np.bincount(groups, minlength=g)
    unused = np.maximum(0, C - sums) + 2 * (counts + 1) * eps * (C + sums)
    size = np.linalg.norm(deltas, axis=1) * np.linalg.norm(queries, axis=1)
    residual = np.sqrt(((W_ld - scale * ((deltas * lam_ld[:, None]).T @ queries)) ** 2).sum()) \
        + 2 * (m + 2) * eps * scale * (size @ lam_ld)
    gap = scale * (lam_ld @ surplus + xi @ unused) + residual ** 2 / 2
    return float(gap * (1 + 8 * (m + g + p) * eps))


def _norm_gap(rows: _Rows, W: np.ndarray, lam: np.ndarray, C: float, groups: np.ndarray) -> tuple[float, float]:
    """(P(W) - D(lam), allowed) of paper C's form: D = sum lam / max(1, ||A^T lam||) (lam / max(1, ||A^T lam||) is
    in the dual set of ||w|| + C sum xi), allowed GAP_TOL["soft"] P plus 16 eps times the terms whose rounding it
    sums: the margins in the slacks, C ||W|| sum_c ||a_c||, and A^T lam in D, D sum_c lam_c ||a_c||."""
    size = np.linalg.norm(rows.deltas, axis=1) * np.linalg.norm(rows.queries, axis=1)  # ||a_c||
    primal = _objective(rows, W, C, "norm", groups)
    dual = lam.sum() / max(1.0, np.linalg.norm(rows.combine(lam)))
    rounding = 16 * np.finfo(float).eps * (C * np.linalg.norm(W) * size.sum() + dual * (size @ lam))
    return primal - dual, GAP_TOL["soft"] * primal + rounding


def _spread(rows: _Rows, lam: np.ndarray) -> float:
    """sum_c lam_c ||a_c||: the size of the terms of A^T lam; a candidate W within 1e3 eps of it is W* = 0 rounded
    (where they cancel), and W = 0 is tried too."""
    return float(lam @ (np.linalg.norm(rows.deltas, axis=1) * np.linalg.norm(rows.queries, axis=1)))


def _certificate(rows: _Rows, W: np.ndarray, lam: np.ndarray, C: float, objective: str, groups: np.ndarray):
    """(ratio, what): W is certified where ratio <= 1; what says which test it failed. lam must be in the dual set.
    "squared": P is 1-strongly convex in W (the slacks at their optimum for W), so ||W - W*||_F <= sqrt(2 (P(W) -
    D(lam))); certified where that bound (`_squared_gap`) is at most W_TOL ||W||_F (W = 0: sqrt(32 eps C groups),
    float64 group sums of lam missing C by about eps C each). "norm", W != 0: its KKT
    conditions are those of the "squared" form at C' = C ||W||_F with multipliers ||W||_F lam, so W must pass the
    same test at C' (within W_TOL ||W|| of the "squared" solution at C', which is the "norm" solution at
    C ||W|| / ||W*||, within a relative W_TOL of C), and also the "norm" dual bound (`_norm_gap`); W = 0 the latter
    alone."""
    if not _in_dual_set(lam, groups, C):
        return np.inf, "its multipliers lam leave the dual set (lam >= 0, summing to at most C over each group)"
    norm = np.linalg.norm(W)
    if objective == "norm":
        gap, allowed = _norm_gap(rows, W, lam, C, groups)
        if not gap <= allowed or norm == 0:
            return gap / allowed, f'the "norm" duality gap {gap:.3g} against the {allowed:.3g} allowed ' \
                f'(GAP_TOL["soft"] relative, plus round-off)'
    scale = norm if objective == "norm" else 1.0
    bound = np.sqrt(2 * _squared_gap(rows, W, lam, C, groups, scale))
    where = f' of the "squared" form at C\' = C ||W|| = {C * norm:.3g}' if objective == "norm" else ""
    limit, name = (W_TOL * norm, "W_TOL ||W||_F") if norm > 0 else \
        (np.sqrt(32 * np.finfo(float).eps * C * (groups.max() + 1)), "sqrt(32 eps C groups)")
    ratio = bound / limit if limit > 0 else 0.0 if bound == 0 else np.inf
    return ratio, f"the bound sqrt(2 (P - D)) = {bound:.3g} on ||W - W*||_F{where} (round-off included) " \
        f"against {name} = {limit:.3g}"


def _soft(rows: _Rows, C: float, objective: str, groups: np.ndarray | None):
    """The first soft-margin solution (W, lam) of `_candidates` that `_certificate` certifies, W or W at its best
    scale (`_best_scale`), the one of lower objective where both are; SolverError, saying what failed nearest to
    certified, where none is."""
    groups = np.arange(len(rows)) if groups is None else groups
    nearest = None
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow (C near the float64 limit) is not certified
        for W, lam in _candidates(rows, C, objective, groups):
            if not (np.isfinite(W).all() and np.isfinite(lam).all()):
                continue
            certified = []
            zero = [0 * W] if 0 < np.linalg.norm(W) <= 1e3 * np.finfo(float).eps * _spread(rows, lam) else []
            for V in [W, _best_scale(rows, W, C, objective, groups)] + zero:
                ratio, what = _certificate(rows, V, lam, C, objective, groups)
                if ratio <= 1:
                    certified.append((_objective(rows, V, C, objective, groups), len(certified), V))
                elif nearest is None or ratio < nearest[0]:
                    nearest = (ratio, what)
            if certified:
                return min(certified)[2], lam
    size = float(np.max(np.linalg.norm(rows.deltas, axis=1) * np.linalg.norm(rows.queries, axis=1)))
    scaled = 2.0 ** SCALES[0] <= size <= 2.0 ** SCALES[1]
    advice = "" if scaled else f"; the rows have norms up to {size:.3g}, far from 1, which inflates round-off (to " \
        f"rescale them: the SVM of rows c a_c at C is that of the rows a_c at c^2 C, \"norm\": c C, divided by c)"
    workaround = ("a smaller C (the certificate's floor, about sqrt(2 eps C sum_c ||a_c|| ||W||), comes from the "
                  "float64 margins and grows with C)")
    reached = "Clarabel returned no finite solution to start from" if nearest is None else f"nearest, {nearest[1]}"
    raise SolverError(f"the soft-margin SVM with C={C:g} reached no certified solution: {reached}{advice}; try "
                      f"{workaround}")


def _check_hard(rows: _Rows, W: np.ndarray, lam: np.ndarray) -> None:
    """Raise SolverError unless the hard-margin solution (W, lam) is optimal to GAP_TOL["hard"]: the relative gap
    between the primal objective of W and the dual objective of lam."""
    if not (np.isfinite(W).all() and np.isfinite(lam).all()):
        raise SolverError("the SVM solver returned a non-finite solution: the rows are badly scaled, rescale them "
                          "to entries near 1")
    primal, dual = 0.5 * (W ** 2).sum(), lam.sum() - 0.5 * (rows.combine(lam) ** 2).sum()
    gap = abs(primal - dual) / max(abs(primal), 1e-300)
    if not gap <= GAP_TOL["hard"]:
        scale = float(np.abs(rows.deltas).max() * np.abs(rows.queries).max())
        raise SolverError(f"the hard-margin SVM solution is not optimal to tolerance (relative duality gap "
                          f"{gap:.2g} > {GAP_TOL['hard']:g}): the rows are badly scaled (products of entries up to "
                          f"{scale:.3g}); rescale them to entries near 1")


def _solve(rows: _Rows, C, objective: str, groups):
    """(W, lam) of the SVM of checked arguments, certified by its dual; InfeasibleSVM for a hard margin that does
    not exist."""
    if len(rows) == 0:
        return np.zeros((rows.deltas.shape[1], rows.queries.shape[1])), np.zeros(0)
    if C is not None:
        return _soft(rows, C, objective, groups)
    solution = _hard(rows)
    if solution is None:
        raise InfeasibleSVM(f"the hard-margin SVM is infeasible: no w satisfies all {len(rows)} constraints "
                            f"a_c^T w >= 1 of rows (or only one with ||w|| > MAX_NORM, as for rows of tiny "
                            f"entries: rescale them to entries near 1); pass C for a soft margin", [0])
    _check_hard(rows, *solution)
    return solution


def _prepared(rows, groups, solver: str):
    """The checked ``rows`` (a _Rows, and whether they came as a matrix A) and ``groups`` (compact labels, or None),
    refused before any work where the `solver`'s dense system would exceed MAX_BYTES or the Gram matrix overflows."""
    checked, matrix = _checked_rows(rows)
    groups = None if groups is None else _checked_groups(groups, len(checked))
    _memory(len(checked), solver)
    with np.errstate(over="ignore", invalid="ignore"):  # an overflow is reported here
        finite_result(checked.gram(), "the Gram matrix of the rows", "the rows are too large (rescale them)")
    return checked, matrix, groups


def _threshold(rows: _Rows, W: np.ndarray, lam: np.ndarray, groups: np.ndarray) -> float:
    """`penalty_threshold` from the hard-margin solution (W, lam) of checked rows."""
    m = len(rows)
    if m == 0:
        return 0.0
    G = rows.gram()
    values, vectors = np.linalg.eigh(G)
    keep = values > 1e-10 * max(values.max(), 1e-300)
    B = vectors[:, keep] * np.sqrt(values[keep])  # independent coordinates of the rows A_c
    margin = rows.margins(W)
    bounds = [(0.0, None if abs(margin[c] - 1) <= 1e-7 * max(1.0, margin[c]) else 0.0) for c in range(m)] \
        + [(None, None)]
    g = int(groups.max()) + 1
    upper = np.hstack([np.zeros((g, m)), -np.ones((g, 1))])
    upper[groups, np.arange(m)] = 1.0  # sum of lam over a slack's constraints - t <= 0
    result = linprog(np.r_[np.zeros(m), 1.0], A_ub=upper, b_ub=np.zeros(g),
                     A_eq=np.hstack([B.T, np.zeros((B.shape[1], 1))]), b_eq=B.T @ lam, bounds=bounds, method="highs")
    if result.status != 0:
        raise SolverError(f"HiGHS stopped on the exact-penalty threshold: {result.message} (if the rows are far "
                          f"from size 1, rescale them)")
    return float(finite_result(result.x[-1] / np.linalg.norm(W), "the exact-penalty threshold",
                               "the rows are badly scaled (rescale them to entries near 1)"))


# ------------------------------------------------------------------ public

def soft_margin_svm(rows: ArrayLike | tuple[ArrayLike, ArrayLike], C: float | None = None, *,
                    objective: str = "squared", groups: ArrayLike | None = None,
                    return_multipliers: bool = False) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    r"""The hard- or soft-margin SVM of m linear margin constraints, in numpy.

    C=None gives the hard-margin SVM, :math:`\min \|w\|` s.t. every margin :math:`\ge 1`. C > 0 gives the
    soft-margin SVM with slacks :math:`\xi \ge 0` on the margins, :math:`\mathrm{margin}_c \ge 1 - \xi`, with the
    objective :math:`\frac{1}{2}\|w\|^2 + C\sum\xi` (objective="squared") or paper C's :math:`\|w\| + C\sum\xi`
    ("norm"); the "norm" solution for C is the "squared" one for :math:`C\|w\|`. Both are solved on the active set
    of Clarabel's interior-point solution and certified to the bound in the notes. The cost grows with m, not
    with p: every solver works with the Gram matrix of the rows.

    Parameters
    ----------
    rows : ArrayLike or tuple
        A constraint matrix A (m, p), one row :math:`a_c` per constraint :math:`a_c^\top w \ge 1`, or a pair
        (deltas (m, d), queries (m, e)) of an attention SVM's Kronecker rows :math:`\delta_c \otimes z_c`, the
        constraints :math:`\delta_c^\top W z_c \ge 1`; the causal Att-SVM (``causal.att_svm``) passes its rows
        this way.
    C : float or None, default=None
        None (hard margin) or the penalty C > 0.
    objective : {'squared', 'norm'}, default='squared'
        The soft-margin objective.
    groups : ArrayLike or None, default=None
        None (one slack per constraint) or one integer label per constraint, the constraints of a label sharing
        one slack (paper C's per-token slack).
    return_multipliers : bool, default=False
        Also return :math:`\lambda` (m,) with :math:`w = A^\top\lambda` ("squared" and hard) or
        :math:`w = \|w\| A^\top\lambda` ("norm") to the bound in the notes, :math:`0 \le \lambda \le C`, or with the
        exact sum of :math:`\lambda` over a group at most C.

    Returns
    -------
    ndarray or tuple of ndarray
        w (p,) for a matrix, W (d, e) for a pair, and with ``return_multipliers`` :math:`\lambda` (m,).

    Raises
    ------
    InfeasibleSVM
        If C is None and no w exists (or only one of norm above ``MAX_NORM``).
    SolverError
        If no candidate is certified (see the notes).
    ValueError
        If an argument is invalid (the message names it), e.g. C :math:`\le 0` or groups not one label per
        constraint.

    Notes
    -----
    A hard-margin solution short of a margin by round-off is scaled up (the rule of ``att_svm``) and checked against
    its dual to ``GAP_TOL["hard"]``. A soft-margin one is certified by its multipliers: :math:`\|w - w^*\| \le
    \sqrt{2(P - D)} \le` ``W_TOL`` :math:`\|w\| = 10^{-5}\|w\|` for the "squared" form (P - D: its duality gap,
    round-off included), for "norm" the same bound for the "squared" form at :math:`C\|w\|` and its own duality gap
    within ``GAP_TOL["soft"]`` = 1e-9 relative; :math:`w = A^\top\lambda` or :math:`\|w\| A^\top\lambda` holds to
    the same bound. SolverError where no candidate is certified: measured, from C ~ 2e4 for both objectives on
    next-token language problems (all at C >= 1e6), and in a sweep of 360 problems (Gaussian, low-rank,
    near-copy, tied and language rows, C log-uniform in [1e-6, 1e8]) 57 times: 50 at C >= 2e4, and 7 below, all
    for rows within 1e-6 of copies of one another (or of their negatives).

    Examples
    --------
    >>> import numpy as np
    >>> from attnsvm import svm
    >>> A = np.array([[1.0, 0.0], [0.0, 2.0]])  # w_1 >= 1 and 2 w_2 >= 1
    >>> svm.soft_margin_svm(A).round(4).tolist()
    [1.0, 0.5]
    >>> w, lam = svm.soft_margin_svm(A, C=0.5, return_multipliers=True)  # the first margin pays a slack
    >>> w.round(4).tolist(), lam.round(4).tolist()
    ([0.5, 0.5], [0.5, 0.25])
    """
    objective = option(objective, "objective", OBJECTIVES)
    return_multipliers = boolean(return_multipliers, "return_multipliers")
    if C is not None:
        C = number(C, "C")
    elif objective != "squared":
        raise ValueError('objective="norm" is paper C\'s soft-margin form: pass C with it')
    elif groups is not None:
        raise ValueError("groups (shared slacks) is a soft-margin option: pass C with it")
    solver = "hard" if C is None else "token" if groups is not None else objective
    checked, matrix, groups = _prepared(rows, groups, solver)
    W, lam = _solve(checked, C, objective, groups)
    W = W[:, 0] if matrix else W
    return (W, lam) if return_multipliers else W


def penalty_threshold(rows: ArrayLike | tuple[ArrayLike, ArrayLike], *, groups: ArrayLike | None = None) -> float:
    r"""The exact-penalty threshold :math:`C^*` of paper C's soft-margin form (objective="norm") for these rows.

    With :math:`\lambda` the multipliers of the hard-margin SVM (:math:`w^{mm} = A^\top\lambda`,
    :math:`\lambda \ge 0`, :math:`\lambda_c = 0` off the margin), :math:`C^*` is the minimum over all such
    :math:`\lambda` of :math:`\max_c \lambda_c/\|w^{mm}\|` (groups=None), or of the largest sum of :math:`\lambda`
    over a group, divided by :math:`\|w^{mm}\|` (shared slacks). The soft-margin solution is :math:`w^{mm}` for
    every :math:`C > C^*`, :math:`w^{mm}` is one solution at :math:`C = C^*`, and it is none for
    :math:`C < C^*`. The minimum over :math:`\lambda` matters only when the constraints on the margin are linearly
    dependent (otherwise :math:`\lambda` is unique); it is a linear program (HiGHS).

    Parameters
    ----------
    rows : ArrayLike or tuple
        As in ``soft_margin_svm``.
    groups : ArrayLike or None, default=None
        As in ``soft_margin_svm``.

    Returns
    -------
    float
        :math:`C^*`.

    Raises
    ------
    InfeasibleSVM
        If the hard-margin SVM does not exist.
    ValueError
        If rows or groups are invalid.

    Examples
    --------
    >>> import numpy as np
    >>> from attnsvm import svm
    >>> A = np.array([[1.0, 0.0], [0.0, 2.0]])  # w^mm = (1, 0.5), lam = (1, 0.25)
    >>> round(svm.penalty_threshold(A), 4)  # max lam / ||w^mm||
    0.8944
    """
    checked, _, groups = _prepared(rows, groups, "threshold")
    groups = np.arange(len(checked)) if groups is None else groups
    return _threshold(checked, *_solve(checked, None, "squared", None), groups)
