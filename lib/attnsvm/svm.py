"""The attention SVM (Att-SVM): the minimum-norm W that separates the selected tokens with margin 1.

    W_alpha^mm = argmin ||W||  s.t.  (x_{i,alpha_i} - x_it)^T W z_i >= 1  for all i and t != alpha_i,

with the Frobenius norm (the implicit bias of GD on W) or the nuclear norm (that of the (K, Q)
parameterization). Each constraint is linear in W: <(x_{i,alpha_i} - x_it) z_i^T, W> >= 1, a row
kron(x_{i,alpha_i} - x_it, z_i) of a constraint matrix A acting on vec(W) (row-major).

Solvers, always named: the Frobenius problem is a least-distance program, solved exactly by
non-negative least squares ("nnls", Lawson and Hanson 1974, chapter 23, with the active set polished
to machine precision) or by the interior-point solver Clarabel through cvxpy ("clarabel"); the
nuclear-norm problem is a semidefinite program, solved by this library's interior-point method
("ipm", see `nuclear`), or by Clarabel ("clarabel") or SCS ("scs") through cvxpy.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.optimize import nnls

import torch

from . import nuclear
from .checks import as_index, as_tensor, choice, require_shape

SOLVERS = {"fro": ("nnls", "clarabel"), "nuc": ("ipm", "clarabel", "scs")}  # the first is the default
MAX_NORM = 1e6  # a feasible Att-SVM with a larger solution is reported as (numerically) infeasible
MARGIN_TOL = 1e-6  # relative slack allowed on a returned solution's margins


class InfeasibleSVM(ValueError):
    """No W separates the selected tokens with a positive margin (or only one of norm > MAX_NORM)."""

    def __init__(self, message: str, instances=()):
        super().__init__(message)
        self.instances = tuple(instances)


class SolverError(RuntimeError):
    """The convex solver did not reach an accurate optimum."""


def _arrays(X, Z, alpha):
    """Validate (X, Z, alpha) and return numpy arrays flattened over the batch, plus the batch shape."""
    X = as_tensor(X, "X").cpu().numpy()
    if X.ndim < 3:
        raise ValueError(f"X must have shape (..., n, T, d) (n sequences of T tokens in R^d), got {X.shape}")
    *batch, n, T, d = X.shape
    if T < 2:
        raise ValueError(f"X must hold T >= 2 tokens per sequence (there is nothing to separate), got T={T}")
    Z = as_tensor(Z, "Z")
    require_shape(Z, "Z", tuple(batch) + (n, d), "one query token per sequence")
    alpha = as_index(alpha, "alpha", tuple(batch) + (n,), T)
    return X.reshape(-1, n, T, d), Z.cpu().numpy().reshape(-1, n, d), alpha.reshape(-1, n), tuple(batch)


def _pairs(X: np.ndarray, Z: np.ndarray, alpha: np.ndarray):
    """(x_{i,alpha_i} - x_it, z_i) for all i and t != alpha_i, ordered by (i, t): two (n(T-1), d) arrays."""
    n, T, d = X.shape
    rows = np.arange(n)
    keep = np.ones((n, T), dtype=bool)
    keep[rows, alpha] = False
    return (X[rows, alpha][:, None, :] - X)[keep], np.repeat(Z, T - 1, axis=0)


def constraint_matrix(X: np.ndarray, Z: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Rows kron(x_{i,alpha_i} - x_it, z_i) for all i and t != alpha_i, ordered by (i, t): shape (n(T-1), d^2)."""
    deltas, queries = _pairs(X, Z, alpha)
    return np.einsum("kd,ke->kde", deltas, queries).reshape(len(deltas), -1)


def _scatter(values: np.ndarray, alpha: np.ndarray, T: int) -> np.ndarray:
    """Place per-constraint values (ordered as constraint_matrix rows) into an (n, T) array, 0 at alpha."""
    n = alpha.shape[0]
    out = np.zeros((n, T))
    keep = np.ones((n, T), dtype=bool)
    keep[np.arange(n), alpha] = False
    out[keep] = values
    return out


def _least_distance(A: np.ndarray, h: np.ndarray | None = None):
    """min ||w|| s.t. A w >= h (default h = 1) by NNLS; returns (w, multipliers) or None when infeasible.

    Lawson-Hanson: with E = [A^T; h^T] and f = e_last, solve min_{u >= 0} ||E u - f||, r = E u - f.
    Then ||r||^2 = -r_last, w = -r[:-1] / r_last = A^T u / (1 - h^T u) and lambda = u / (1 - h^T u) are the
    KKT multipliers (w = A^T lambda). ||w||^2 = 1 / ||r||^2 - 1, so a tiny residual means no feasible w.
    """
    k, p = A.shape
    h = np.ones(k) if h is None else h
    E = np.vstack([A.T, h[None, :]])
    f = np.zeros(p + 1)
    f[-1] = 1.0
    u, _ = nnls(E, f, maxiter=50 * (k + p + 1))
    rho = 1.0 - h @ u
    if rho <= 1.0 / (1.0 + MAX_NORM**2):
        return None
    lam, w = _polish(A, h, u / rho)
    margins = A @ w
    smallest = (margins[h > 0] / h[h > 0]).min(initial=1.0)  # below 1 by round-off ~1e-11 ||w|| when nearly
    return (w / smallest, lam / smallest) if smallest < 1 else (w, lam)  # infeasible: scale up


def _polish(A: np.ndarray, h: np.ndarray, lam: np.ndarray):
    """Re-solve the KKT system on the active set (margins exactly h on the support) to machine precision."""
    support = lam > 1e-12 * max(lam.max(), 1.0)
    if support.any():
        A_s = A[support]
        lam_s, *_ = np.linalg.lstsq(A_s @ A_s.T, h[support], rcond=None)
        polished = np.zeros_like(lam)
        polished[support] = lam_s
        w = A.T @ polished
        if lam_s.min() >= 0 and (A @ w - h).min() >= -1e-12:
            return polished, w
    return lam, A.T @ lam


@lru_cache(maxsize=64)
def _cvx_problem(norm: str, k: int, d: int, solver: str):
    """A cvxpy Att-SVM with the constraint matrix as a parameter: compiled once per (norm, size, solver)."""
    import cvxpy as cp  # here, not at the top: importing it takes a second that only the cvxpy solvers need
    A = cp.Parameter((k, d * d))
    W = cp.Variable((d, d))
    margin = A @ cp.vec(W, order="C") >= 1
    objective = 0.5 * cp.sum_squares(W) if norm == "fro" else cp.normNuc(W)
    return cp.Problem(cp.Minimize(objective), [margin]), A, W, margin


def _solve_cvx(A: np.ndarray, d: int, norm: str, solver: str, options: dict | None = None):
    """Solve with cvxpy; returns (w, multipliers) or None when the solver certifies infeasibility.

    options override the solver settings (by default tight tolerances, but Clarabel's own 1e-8 for the SDP,
    where tighter ones fail).
    """
    import cvxpy as cp

    problem, A_param, W, margin = _cvx_problem(norm, A.shape[0], d, solver)
    A_param.value = A
    if solver == "clarabel":
        settings = dict(tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10) if norm == "fro" else {}
        problem.solve(solver=cp.CLARABEL, **{"max_iter": 500, **settings, **(options or {})})
    else:
        problem.solve(solver=cp.SCS, **{"eps_abs": 1e-9, "eps_rel": 1e-9, "max_iters": 100_000, **(options or {})})
    if problem.status in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE):
        return None
    if problem.status != cp.OPTIMAL:
        raise SolverError(f"{solver} stopped with status {problem.status!r} on the {norm} Att-SVM; "
                          f"try solver={_alternative(norm, solver)!r}")
    w = W.value.reshape(-1)
    if np.linalg.norm(w) > MAX_NORM:
        return None
    return w, np.maximum(margin.dual_value, 0.0)


def _alternative(norm: str, solver: str) -> str:
    return next(other for other in SOLVERS[norm] if other != solver)


def _solve_ipm(instances, d: int):
    """Batched nuclear-norm solutions [(w, multipliers) or None if infeasible] by `nuclear.solve`."""
    pairs = [_pairs(*instance) for instance in instances]
    feasible = [_least_distance(np.einsum("kd,ke->kde", *pair).reshape(len(pair[0]), -1)) is not None
                for pair in pairs]
    solutions = [None] * len(pairs)
    chosen = [b for b, ok in enumerate(feasible) if ok]
    if chosen:
        W, y, converged = nuclear.solve(*(np.stack([pairs[b][j] for b in chosen]) for j in (0, 1)))
        for b, W_b, y_b, done in zip(chosen, W, y, converged):
            A = np.einsum("kd,ke->kde", *pairs[b]).reshape(len(pairs[b][0]), -1)
            # the rare problem the IPM cannot finish (nearly infeasible, ||W|| huge) goes to Clarabel
            solutions[b] = (W_b.reshape(-1), np.maximum(y_b, 0.0)) if done else _solve_cvx(A, d, "nuc", "clarabel")
    return solutions


def att_svm(X, Z, alpha, norm: str = "fro", *, solver: str | None = None, return_multipliers: bool = False,
            options: dict | None = None):
    """The Att-SVM solution W_alpha^mm, a numpy array of shape (..., d, d).

    X (..., n, T, d) tokens, Z (..., n, d) queries, alpha (..., n) the selected token of each sequence.
    norm: "fro" (Frobenius; GD on W) or "nuc" (nuclear; the (K, Q) parameterization, rank unconstrained).
    solver: see `SOLVERS`; default "nnls" for "fro" and "ipm" (the library's interior-point method) for "nuc".
    return_multipliers: also return the KKT multipliers lambda (..., n, T) (0 at alpha), for which
    A^T lambda is W ("fro") or a subgradient of the nuclear norm at W ("nuc").
    options: settings passed to a cvxpy solver ("clarabel", "scs"), e.g. SCS's default accuracy
    {"eps_abs": 1e-4, "eps_rel": 1e-4} to see what a loose solver returns.
    Every returned W satisfies all margins >= 1 exactly: a solution short by round-off (less than MARGIN_TOL,
    or anything with `options`) is scaled up; a larger shortfall raises SolverError.
    Raises InfeasibleSVM (its `.instances` lists the infeasible batch indices) when no W exists.
    """
    if options is not None and solver in (None, "nnls", "ipm"):
        raise ValueError("options apply to the cvxpy solvers only: pass solver='clarabel' or 'scs' with them")
    choice(norm, "norm", tuple(SOLVERS))
    solver = SOLVERS[norm][0] if solver is None else choice(solver, "solver", SOLVERS[norm])
    Xs, Zs, alphas, batch = _arrays(X, Z, alpha)
    _, n, T, d = Xs.shape
    instances = list(zip(Xs, Zs, alphas))
    if solver == "ipm":
        solutions = _solve_ipm(instances, d)
    elif solver == "nnls":
        solutions = [_least_distance(constraint_matrix(*instance)) for instance in instances]
    else:
        solutions = [_solve_cvx(constraint_matrix(*instance), d, norm, solver, options) for instance in instances]
    infeasible = [b for b, solution in enumerate(solutions) if solution is None]
    if infeasible:
        where = f" for batch instances {infeasible}" if batch else ""
        raise InfeasibleSVM(
            f"Att-SVM is infeasible{where}: no W separates the selected tokens alpha from the others with margin 1 "
            f"(or only one with norm > {MAX_NORM:g}). Increase d (generic data is feasible for every alpha when "
            f"d >= max(T-1, n) = {max(T - 1, n)}), or select other tokens (e.g. theory.optimal_tokens).",
            infeasible)
    for b, (instance, (w, lam)) in enumerate(zip(instances, solutions)):
        smallest = (constraint_matrix(*instance) @ w).min()
        if smallest < 1 - MARGIN_TOL and options is None:
            raise SolverError(f"{solver} returned a {norm} Att-SVM solution with margin {smallest:.3g} < 1; "
                              f"try solver={_alternative(norm, solver)!r}")
        if smallest < 1:  # round-off (or a loose solver): scale up to satisfy every margin exactly
            solutions[b] = (w / smallest, lam)
    W = np.stack([w.reshape(d, d) for w, _ in solutions]).reshape(batch + (d, d))
    if not return_multipliers:
        return W
    lams = [_scatter(lam, a, T) for (_, lam), a in zip(solutions, alphas)]
    return W, np.stack(lams).reshape(batch + (n, T))


def feasible(X, Z, alpha) -> np.ndarray:
    """Whether the Att-SVM for (X, Z, alpha) has a solution (the same for both norms): bool array of batch shape."""
    Xs, Zs, alphas, batch = _arrays(X, Z, alpha)
    flags = [_least_distance(constraint_matrix(*instance)) is not None for instance in zip(Xs, Zs, alphas)]
    return np.array(flags, dtype=bool).reshape(batch)


def prompt_svm(X, key, alpha, *, relaxed=None) -> np.ndarray:
    """Paper B's SVM for the query p: min ||p|| s.t. (k_{i,alpha_i} - k_it)^T p >= 1 for all i, t != alpha_i,
    with keys k_it = key^T x_it. X (..., n, T, d), key (d, d), alpha (..., n); returns p (..., d).

    relaxed: optional boolean (..., n): those sequences only need margin >= 0 (the relaxed p-SVM of joint
    training, where the sequences that are not support vectors of the head's SVM are relaxed).
    """
    Xs, _, alphas, batch = _arrays(X, np.zeros(np.shape(X)[:-2] + np.shape(X)[-1:]), alpha)
    _, n, T, d = Xs.shape
    key = as_tensor(key, "key").cpu().numpy()
    require_shape(torch.as_tensor(key), "key", (d, d), "the fixed key-query matrix")
    if relaxed is None:
        relaxed = np.zeros((len(Xs), n), bool)
    else:
        relaxed = np.asarray(relaxed, bool)
        if relaxed.shape != batch + (n,):
            raise ValueError(f"relaxed must have shape {batch + (n,)} (one flag per sequence), got {relaxed.shape}")
        relaxed = relaxed.reshape(len(Xs), n)
    solutions = []
    for b, (Xb, ab) in enumerate(zip(Xs, alphas)):
        deltas, _ = _pairs(Xb @ key, np.zeros((n, d)), ab)
        h = np.repeat(np.where(relaxed[b], 0.0, 1.0), T - 1)
        solution = _least_distance(deltas, h)
        if solution is None:
            raise InfeasibleSVM(f"the p-SVM is infeasible for batch instance {b}: no query separates the selected "
                                f"keys; select other tokens", [b])
        solutions.append(solution[0])
    return np.stack(solutions).reshape(batch + (d,))



@dataclass(frozen=True)
class GeneralSVM:
    """Paper A's general SVM equivalence for attention that mixes the tokens O_i (nonlinear heads).

    W_fin: the minimum-norm W with (x_it - x_itau)^T W z_i = log(s_it / s_itau) for t, tau in O_i (the finite
    part: it sets the softmax composition inside O_i). W_mm: the minimum-norm W with margin >= 1 from every
    t in O_i to every tau outside O_i and equal logits inside O_i (the directional part: it masks the rest).
    """

    relevant: np.ndarray  # (n, T) bool: O_i
    W_fin: np.ndarray  # (d, d)
    W_mm: np.ndarray  # (d, d)

    def combined(self, W_gd) -> np.ndarray:
        """W_SVMeq = W_fin + C W_mm with C = argmin_C ||W_fin + C W_mm - W_gd||_F."""
        C = np.sum((np.asarray(W_gd) - self.W_fin) * self.W_mm) / np.sum(self.W_mm**2)
        return self.W_fin + C * self.W_mm


def general_svm(X, Z, probs, *, threshold: float = 1e-3) -> GeneralSVM:
    """The general SVM of one problem, X (n, T, d), Z (n, d), from attention probabilities `probs` (n, T) (e.g.
    the final softmax of gradient descent): O_i = {t : s_it >= threshold} (paper A's code uses 1e-3).

    Raises InfeasibleSVM if the directional part has no solution (or no token is masked anywhere).
    """
    X, Z = as_tensor(X, "X").cpu().numpy(), as_tensor(Z, "Z").cpu().numpy()
    probs = as_tensor(probs, "probs").cpu().numpy()
    if X.ndim != 3 or Z.shape != (X.shape[0], X.shape[2]) or probs.shape != X.shape[:2]:
        raise ValueError(f"general_svm takes one problem: X (n, T, d), Z (n, d), probs (n, T); got {X.shape}, "
                         f"{Z.shape}, {probs.shape}")
    n, T, d = X.shape
    relevant = probs >= threshold
    equal, logratio, apart = [], [], []
    for i in range(n):
        inside, outside = np.flatnonzero(relevant[i]), np.flatnonzero(~relevant[i])
        first = inside[0]
        for t in inside[1:]:  # equalities against the first relevant token span all pairs in O_i
            equal.append(np.outer(X[i, t] - X[i, first], Z[i]).ravel())
            logratio.append(np.log(probs[i, t] / probs[i, first]))
        apart += [np.outer(X[i, t] - X[i, tau], Z[i]).ravel() for t in inside for tau in outside]
    if not apart:
        raise InfeasibleSVM("no token is masked (every s_it >= threshold): the directional part is undefined; "
                            "train longer or lower `threshold`")
    E = np.array(equal).reshape(-1, d * d)
    w_fin = np.linalg.lstsq(E, np.array(logratio), rcond=None)[0] if len(E) else np.zeros(d * d)
    # Equality constraints E w = 0: solve in the null space of E, where ||w|| is unchanged.
    null = np.eye(d * d) - (np.linalg.pinv(E) @ E if len(E) else 0.0)
    solution = _least_distance(np.array(apart) @ null)
    if solution is None:
        raise InfeasibleSVM("the directional part of the general SVM is infeasible: no W separates the relevant "
                            "tokens from the masked ones with equal logits inside O_i")
    return GeneralSVM(relevant, w_fin.reshape(d, d), (null @ solution[0]).reshape(d, d))


def head_svm(X, Y, alpha) -> tuple[np.ndarray, np.ndarray]:
    """The hard-margin SVM of the head on the selected tokens: v_mm = argmin ||v|| s.t. Y_i v^T x_{i,alpha_i} >= 1.

    One problem: X (n, T, d), Y (n,), alpha (n,). Returns (v_mm (d,), support (n,) bool: the sequences on the
    margin, the support vectors). In paper B's joint training, the p-SVM relaxes the other sequences.
    """
    X, Y = as_tensor(X, "X").cpu().numpy(), as_tensor(Y, "Y").cpu().numpy()
    if X.ndim != 3 or Y.shape != X.shape[:1]:
        raise ValueError(f"head_svm takes one problem: X (n, T, d) and Y (n,), got {X.shape} and {Y.shape}")
    alpha = as_index(alpha, "alpha", Y.shape, X.shape[1])
    rows = Y[:, None] * X[np.arange(len(Y)), alpha]
    solution = _least_distance(rows)
    if solution is None:
        raise InfeasibleSVM("the selected tokens are not linearly separable by their labels: no head v exists")
    v, _ = solution
    return v, np.abs(rows @ v - 1) <= 1e-9
