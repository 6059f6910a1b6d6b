"""Hard- and soft-margin SVMs of any system of linear margin constraints, solved in the space of their Gram matrix.

The constraints are rows a_c (a matrix A, w in R^p) or, for the attention SVMs, Kronecker rows
a_c = kron(delta_c, z_c) given by the pairs (delta_c, z_c): the constraint <delta_c z_c^T, W> >= 1 on a matrix W.
The hard-margin SVM is

    min ||w||  s.t.  a_c^T w >= 1 for every c,

and the soft-margin SVM adds slacks xi >= 0, a_c^T w >= 1 - xi_g(c), and C sum_g xi_g to the objective, with the
objective (1/2)||w||^2 + C sum xi ("squared", the textbook form) or ||w|| + C sum xi ("norm", paper C's form). A
slack belongs to one constraint (groups=None) or is shared by a group of constraints (paper C's per-token slack).

Every solver works with the Gram matrix G = A A^T, for Kronecker rows (D D^T) * (Z Z^T), and its factor B
(B B^T = G): the rows of B have the same inner products as the rows a_c, so every SVM of B has the same
multipliers lam and norms, and w = A^T lam is rebuilt from the multipliers. So the cost does not grow with p
(d^2 for an attention SVM). The hard margin is the least-distance program of `_attention` (NNLS), accepted by the
SVMs' one rule (`_attention._accepted`); the soft margins are Clarabel's quadratic and cone programs, polished on
their active set, and the exact-penalty threshold is a linear program (HiGHS). Every solution is checked against
its dual: a relative duality gap above GAP_TOL raises SolverError. The tolerances are those of `_attention`.
"""

from __future__ import annotations

from dataclasses import dataclass

import clarabel
import numpy as np
import torch
from numpy.typing import ArrayLike
from scipy import sparse
from scipy.optimize import linprog

from .._checks import MAX_BYTES, as_tensor, boolean, budget, finite_result, number, option
from ._attention import (CLARABEL_MAX_ITER, CLARABEL_TOL, GAP_TOL, POLISH_TOL, InfeasibleSVM, SolverError,
                         _accepted, _least_distance)

__all__ = ["penalty_threshold", "soft_margin_svm", "OBJECTIVES", "SOLVER_FLOATS"]

OBJECTIVES = ("squared", "norm")  # (1/2)||w||^2 + C sum xi (default), or paper C's ||w|| + C sum xi
# peak memory of each solver, in dense floats per m^2 for m constraints (measured: NNLS, Clarabel, HiGHS)
SOLVER_FLOATS = {"hard": 6, "squared": 10, "norm": 28, "token": 22, "threshold": 30}


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


def _clarabel(P, q, A, b, cones, what: str, C: float):
    """Clarabel's solution of min (1/2) x^T P x + q^T x s.t. b - A x in the cones, to the library's tolerances."""
    settings = clarabel.DefaultSettings()
    settings.verbose = False
    settings.tol_gap_abs = settings.tol_gap_rel = settings.tol_feas = CLARABEL_TOL["fro"]
    settings.max_iter = CLARABEL_MAX_ITER
    solution = clarabel.DefaultSolver(P, q, A, b, cones, settings).solve()
    if str(solution.status) not in ("Solved", "AlmostSolved"):
        raise SolverError(f"Clarabel stopped with status {solution.status} on {what}: with C={C:g} far from 1, or "
                          f"the rows far from size 1, the program is badly scaled (choose C nearer 1 or rescale "
                          f"the rows)")
    return solution


def _box_start(G: np.ndarray, C: float) -> np.ndarray:
    """Clarabel's approximate argmin_lam (1/2) lam^T G lam - 1^T lam s.t. 0 <= lam <= C (the soft-margin dual)."""
    m = len(G)
    box = sparse.vstack([-sparse.identity(m), sparse.identity(m)]).tocsc()
    solution = _clarabel(sparse.triu(sparse.csc_matrix(G)).tocsc(), -np.ones(m), box,
                         np.concatenate([np.zeros(m), np.full(m, C)]), [clarabel.NonnegativeConeT(2 * m)],
                         "the soft-margin dual", C)
    return np.clip(np.asarray(solution.x), 0.0, C)


def _box_qp(G: np.ndarray, C: float) -> np.ndarray:
    """The soft-margin dual's exact solution: `_box_start`, then polished on its active set (`_polished`)."""
    return _polished(G, _box_start(G, C), C, lambda p, r: [C])[0]


def _partition(G: np.ndarray, C: float, lam: np.ndarray):
    """The active set (low, high) of approximate multipliers lam for the penalty C, by the margins G lam: low
    (lam = 0) where the margin exceeds 1 + 1e-6, high (lam = C) where it is below 1 - 1e-6, and within 1e-6 of one
    by the multipliers (low at lam <= 1e-7 C, high at lam >= (1 - 1e-7) C, free otherwise)."""
    margin = G @ lam
    tie = np.abs(margin - 1) <= 1e-6 * max(1.0, np.abs(margin).max())
    return (margin > 1) & ~tie | tie & (lam <= 1e-7 * C), (margin < 1) & ~tie | tie & (lam >= (1 - 1e-7) * C)


def _affine(G: np.ndarray, lam: np.ndarray, low: np.ndarray, high: np.ndarray):
    """The soft-margin KKT system on the active set (low, high), for every penalty at once: (p, r) with
    lam(C') = p + C' r, lam_high = C', lam_low = 0, and the free multipliers solving G_FF lam_F = 1 - C' G_FH 1
    (margin exactly one). Where G_FF is singular (copies of a constraint) these solutions are an affine set and
    lam_F is its point nearest to lam_F (a least-squares step); `_polished` moves any that leave the box."""
    free = ~(low | high)
    p, r = np.zeros(len(G)), high.astype(float)
    if free.any():
        G_FF = G[np.ix_(free, free)]
        rhs = np.stack([1.0 - G_FF @ lam[free], -G[np.ix_(free, high)].sum(1)], axis=1)
        step, r[free] = np.linalg.lstsq(G_FF, rhs, rcond=None)[0].T
        p[free] = lam[free] + step
    return p, r


def _violations(G: np.ndarray, C: float, lam: np.ndarray, low: np.ndarray, high: np.ndarray):
    """The constraints that break the soft-margin KKT conditions for C on this active set (margins to POLISH_TOL):
    (free below 0, free above C, low with margin < 1, high with margin > 1), all empty at a solution."""
    free = ~(low | high)
    margin = G @ lam
    tol = POLISH_TOL * max(1.0, np.abs(margin).max())
    return free & (lam < 0), free & (lam > C), low & (margin < 1 - tol), high & (margin > 1 + tol)


def _polished(G: np.ndarray, lam: np.ndarray, C: float, penalties):
    """(lam, C') solving the soft-margin KKT conditions exactly for a penalty C' in penalties(p, r) (the
    candidates on each active set lam = p + C' r), by an active-set iteration from the approximate multipliers lam
    for C: the constraints that break the conditions move between the sets (free ones out of the box to their
    bound, bound ones on the wrong side of the margin to the free set), at most 50 times and never back to an
    active set already tried. Raises SolverError where it does not converge."""
    low, high = _partition(G, C, lam)
    seen = set()
    for _ in range(50):
        seen.add((low.tobytes(), high.tobytes()))
        p, r = _affine(G, lam, low, high)
        candidates = [Cp for Cp in penalties(p, r) if Cp > 0]
        for Cp in candidates:
            lam = p + Cp * r
            below, above, under, over = _violations(G, Cp, lam, low, high)
            if not (below.any() or above.any() or under.any() or over.any()):
                return np.clip(lam, 0.0, Cp), Cp
        if not candidates:
            break
        lam, C = p + candidates[0] * r, candidates[0]
        below, above, under, over = _violations(G, C, lam, low, high)
        low, high = (low | below) & ~under, (high | above) & ~over
        lam = np.clip(lam, 0.0, C)
        if (low.tobytes(), high.tobytes()) in seen:
            break
    raise SolverError("the soft-margin SVM's active-set iteration did not reach a solution that meets its KKT "
                      "conditions: the rows are badly scaled or nearly dependent; rescale them to entries near 1 or "
                      "choose C nearer 1")


def _norm_objective(rows: _Rows, C: float):
    """Paper C's form min ||W||_F + C sum xi. Returns (W, lam) with W = ||W||_F A^T lam and 0 <= lam <= C.

    W = 0 exactly when C ||A^T 1|| <= 1 (then lam = C: every margin is 0). Otherwise N = ||W|| > 0 and the KKT
    conditions, W / N = A^T lam with 0 <= lam <= C, are those of the "squared" form for C' = C N, with multipliers
    N lam. A second-order cone program in the factor space B (B B^T = G, so ||W||_F = ||y||; variables (y, s, xi),
    min s + C 1^T xi s.t. B y + xi >= 1, xi >= 0, ||y|| <= s) gives N to about 1e-5 relative, and the box QP of the
    squared form for C N an active set. On an active set the squared form's multipliers are affine in C'
    (p + C' r, `_affine`), so N = ||A^T (p + C N r)|| is a quadratic equation in N, solved exactly; a root whose
    multipliers pass the KKT test for C N is the solution, and otherwise the violating constraints move between
    the sets (`_polished`). SolverError where that iteration fails: never an unverified answer.
    """
    G = rows.gram()
    ones = np.ones(len(G))
    if C * np.sqrt(max(ones @ G @ ones, 0.0)) <= 1:
        return np.zeros((rows.deltas.shape[1], rows.queries.shape[1])), np.full(len(G), C)
    B = _factor(G)
    m = len(B)
    eye, zero_m, zero_1 = sparse.identity(m, format="csc"), sparse.csc_matrix((m, m)), sparse.csc_matrix((m, 1))
    # Clarabel's form: A x + slack = b with the slack in the cones; x = (y, s, xi)
    A = sparse.vstack([
        sparse.hstack([-sparse.csc_matrix(B), zero_1, -eye]),  # slack = B y + xi - 1 >= 0
        sparse.hstack([zero_m, zero_1, -eye]),  # slack = xi >= 0
        sparse.hstack([sparse.csc_matrix((1, m)), -sparse.identity(1), sparse.csc_matrix((1, m))]),  # (s, y) in
        sparse.hstack([-eye, zero_1, zero_m]),  # the second-order cone: ||y|| <= s
    ]).tocsc()
    b = np.concatenate([-np.ones(m), np.zeros(m), np.zeros(1 + m)])
    q = np.concatenate([np.zeros(m), [1.0], np.full(m, C)])
    solution = _clarabel(sparse.csc_matrix((2 * m + 1, 2 * m + 1)), q, A, b,
                         [clarabel.NonnegativeConeT(2 * m), clarabel.SecondOrderConeT(1 + m)],
                         "paper C's soft-margin SVM", C)
    norm = max(np.linalg.norm(np.asarray(solution.x)[:m]), 1e-300)

    def penalties(p, r):  # C' = C N for the positive roots N of N^2 = ||A^T (p + C N r)||^2, largest first
        Gp, Gr = G @ p, G @ r
        roots = np.roots([1.0 - C * C * (r @ Gr), -2.0 * C * (p @ Gr), -(p @ Gp)])
        return C * np.sort(roots[np.isreal(roots)].real)[::-1]

    lam_sq, C_sq = _polished(G, _box_start(G, C * norm), C * norm, penalties)
    return rows.combine(lam_sq), np.clip(lam_sq * (C / C_sq), 0.0, C)


def _grouped_slack(rows: _Rows, groups: np.ndarray, C: float, objective: str):
    """One slack xi_g per group g of constraints (paper C's Definition 4.1 as printed: per (sequence i, token t)),
    min (1/2)||W||_F^2 or ||W||_F + C sum_g xi_g s.t. margin_c >= 1 - xi_g(c), xi >= 0. Returns (W, lam) with
    W = A^T lam ("squared") or W = ||W||_F A^T lam ("norm"), lam >= 0 and sum_{c in g} lam_c <= C.

    Solved by Clarabel in the factor space B (B B^T = G): variables (y, s, xi) with margins B y (s and the
    second-order cone ||y|| <= s only for "norm"); W is rebuilt from the multipliers of the margin constraints.
    """
    B = _factor(rows.gram())
    m = len(B)
    g = int(groups.max()) + 1
    P = sparse.csc_matrix((np.ones(m), (np.arange(m), groups)), shape=(m, g))
    norm = objective == "norm"
    s_col = [sparse.csc_matrix((m, 1))] if norm else []
    blocks = [sparse.hstack([-sparse.csc_matrix(B)] + s_col + [-P]),  # slack = B y + P xi - 1 >= 0
              sparse.hstack([sparse.csc_matrix((g, m + norm)), -sparse.identity(g)])]  # slack = xi >= 0
    b = [-np.ones(m), np.zeros(g)]
    cones = [clarabel.NonnegativeConeT(m + g)]
    if norm:
        blocks += [sparse.hstack([sparse.csc_matrix((1, m)), -sparse.identity(1), sparse.csc_matrix((1, g))]),
                   sparse.hstack([-sparse.identity(m), sparse.csc_matrix((m, 1 + g))])]  # (s, y) in the cone
        b.append(np.zeros(1 + m))
        cones.append(clarabel.SecondOrderConeT(1 + m))
        quadratic = sparse.csc_matrix((m + 1 + g,) * 2)
        q = np.concatenate([np.zeros(m), [1.0], np.full(g, C)])
    else:
        quadratic = sparse.block_diag([sparse.identity(m), sparse.csc_matrix((g, g))]).tocsc()
        q = np.concatenate([np.zeros(m), np.full(g, C)])
    solution = _clarabel(quadratic, q, sparse.vstack(blocks).tocsc(), np.concatenate(b), cones,
                         "the soft-margin SVM with shared slacks", C)
    lam = np.clip(np.asarray(solution.z)[:m], 0.0, C)
    W = rows.combine(lam)
    if norm:
        W = np.linalg.norm(np.asarray(solution.x)[:m]) * W
    return W, lam


def _check_solution(rows: _Rows, W: np.ndarray, lam: np.ndarray, C, objective: str, groups) -> None:
    """Raise SolverError unless (W, lam) is optimal to GAP_TOL: the relative gap between the primal objective of W
    and the dual objective of lam (weak duality makes it >= 0; it is 0 exactly at the optimum). Paper C's form
    (objective="norm") is only checked here to beat W = 0: with one slack per constraint `_norm_objective` has
    verified its KKT conditions; with shared slacks its cone program's multipliers certify W only loosely."""
    if not (np.isfinite(W).all() and np.isfinite(lam).all()):
        raise SolverError("the SVM solver returned a non-finite solution: the rows are badly scaled, rescale them "
                          "to entries near 1")
    if len(rows) == 0:
        return
    mu, combined = rows.margins(W), rows.combine(lam)
    if C is None:
        kind, primal, dual = "hard", 0.5 * (W ** 2).sum(), lam.sum() - 0.5 * (combined ** 2).sum()
    else:
        groups = np.arange(len(rows)) if groups is None else groups
        xi = np.zeros(int(groups.max()) + 1)
        np.maximum.at(xi, groups, np.maximum(0.0, 1.0 - mu))
        if objective == "norm":
            if not np.linalg.norm(W) + C * xi.sum() <= C * len(xi) * (1 + 1e-9):
                raise SolverError(f"the soft-margin SVM solution is worse than W = 0: the rows are badly scaled; "
                                  f"rescale them to entries near 1 or choose C={C:g} nearer 1")
            return
        kind, primal, dual = "soft", 0.5 * (W ** 2).sum() + C * xi.sum(), lam.sum() - 0.5 * (combined ** 2).sum()
    gap = abs(primal - dual) / max(abs(primal), 1e-300)
    if not gap <= GAP_TOL[kind]:
        scale = float(np.abs(rows.deltas).max() * np.abs(rows.queries).max())
        hint = "" if C is None else f" or choose C={C:g} nearer 1"
        raise SolverError(f"the {kind}-margin SVM solution is not optimal to tolerance (relative duality gap "
                          f"{gap:.2g} > {GAP_TOL[kind]:g}): the rows are badly scaled (products of entries up to "
                          f"{scale:.3g}); rescale them to entries near 1{hint}")


def _solve(rows: _Rows, C, objective: str, groups):
    """(W, lam) of the SVM of checked arguments, checked against its dual; InfeasibleSVM for a hard margin that
    does not exist."""
    if len(rows) == 0:
        return np.zeros((rows.deltas.shape[1], rows.queries.shape[1])), np.zeros(0)
    if C is None:
        solution = _hard(rows)
        if solution is None:
            raise InfeasibleSVM(f"the hard-margin SVM is infeasible: no w satisfies all {len(rows)} constraints "
                                f"a_c^T w >= 1 of rows (or only one with ||w|| > MAX_NORM, as for rows of tiny "
                                f"entries: rescale them to entries near 1); pass C for a soft margin", [0])
    elif groups is not None:
        solution = _grouped_slack(rows, groups, C, objective)
    elif objective == "squared":
        lam = _box_qp(rows.gram(), C)
        solution = rows.combine(lam), lam
    else:
        solution = _norm_objective(rows, C)
    _check_solution(rows, *solution, C, objective, groups)
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
    """The hard- or soft-margin SVM of m linear margin constraints, numpy.

    ``rows``: a constraint matrix A (m, p), one row a_c per constraint a_c^T w >= 1 (returns w (p,)), or a pair
    (deltas (m, d), queries (m, e)) of an attention SVM's Kronecker rows kron(delta_c, z_c), the constraints
    delta_c^T W z_c >= 1 (returns W (d, e)); the causal Att-SVM (``causal.att_svm``) passes its rows this way.

    ``C=None``: the hard-margin SVM, min ||w|| s.t. every margin >= 1; raises InfeasibleSVM when no w exists
    (or only one of norm above ``MAX_NORM``). ``C > 0``: the soft-margin SVM with slacks xi >= 0 on the margins,
    margin_c >= 1 - xi, with the objective (1/2)||w||^2 + C sum xi (``objective="squared"``, solved exactly
    through its dual, a box-constrained QP) or paper C's ||w|| + C sum xi (``"norm"``, a second-order cone
    program, then solved exactly on its active set); the "norm" solution for C is the "squared" one for C ||w||.
    ``groups``: None (one slack per constraint) or one integer label per constraint, the constraints of a label
    sharing one slack (paper C's per-token slack; a cone program, accurate to about 1e-8).
    ``return_multipliers``: also return lam (m,) with w = A^T lam ("squared" and hard) or w = ||w|| A^T lam
    ("norm"), 0 <= lam <= C, or with the sum of lam over
    a group at most C.

    The cost grows with m, not with p: every solver works with the Gram matrix of the rows. A solution short of a
    margin by round-off is scaled up (the rule of ``att_svm``); one whose relative duality gap exceeds ``GAP_TOL``
    raises SolverError (badly scaled rows or C).

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
    """The exact-penalty threshold C* of paper C's soft-margin form (``objective="norm"``) for these ``rows``.

    With lam the multipliers of the hard-margin SVM (w^mm = A^T lam, lam >= 0, lam_c = 0 off the margin),
    C* = min over all such lam of max_c lam_c / ||w^mm|| (``groups=None``), or of the largest sum of lam over a
    group, divided by ||w^mm|| (shared slacks). The soft-margin solution is w^mm for every C > C*, w^mm is one
    solution at C = C*, and it is none for C < C*. The minimum over lam matters only when the constraints on the
    margin are linearly dependent (otherwise lam is unique); it is a linear program (HiGHS). ``rows`` and
    ``groups`` as in ``soft_margin_svm``; raises InfeasibleSVM where the hard-margin SVM does not exist.

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
