"""The entrywise lp Att-SVM: the W of least lp norm (entrywise, p >= 1 or infinity) that separates the selected
tokens with margin 1,

    W_alpha^p = argmin ||vec(W)||_p  s.t.  <(x_{i,alpha_i} - x_it) z_i^T, W> >= 1  for all i and t != alpha_i,

the implicit bias of mirror descent with potential ||W||_p^p (``attnsvm.train.mirror_descent``). p = 2 is the
Frobenius Att-SVM; p = 1 and p = infinity are linear programs.

Solvers: Clarabel through cvxpy for every p ("clarabel": a linear program for p = 1 and infinity, a quadratic
program for p = 2, an exact power-cone program otherwise, not cvxpy's rational approximation of p); for
p = 1 and infinity also HiGHS through scipy ("highs", the faster path: no modelling layer), and for
1 < p < infinity L-BFGS-B on the smooth dual problem ("dual", the faster path there). Reached through
``svm.att_svm(..., norm=p)``, with the same acceptance rule as the other solvers (every margin >= 1 exactly after
scaling up a solution short by round-off; a shortfall beyond MARGIN_TOL raises SolverError) and the same
infeasibility report (InfeasibleSVM naming the infeasible batch instances).
"""

from __future__ import annotations

import math

import numpy as np

from .._checks import finite_result

__all__ = ["entrywise_svm", "exponent", "is_exponent", "SOLVERS", "CLARABEL_TOL", "HIGHS_TOL"]

SOLVERS = ("clarabel", "highs", "dual")  # the first is the default; "highs" for p = 1 and infinity (linear
# programs), "dual" (L-BFGS-B on the smooth dual) for 1 < p < infinity
CLARABEL_TOL = 1e-9  # Clarabel's gap and feasibility tolerances for every p
HIGHS_TOL = 1e-10  # HiGHS's primal and dual feasibility tolerances


def is_exponent(norm) -> bool:
    """Whether ``norm`` is meant as an exponent p (a real number, not a bool), not a named norm."""
    return (isinstance(norm, (int, float, np.integer, np.floating))
            and not isinstance(norm, (bool, np.bool_)))


def exponent(norm) -> float:
    """``norm`` as an exponent p in [1, inf], else a ValueError naming ``norm``."""
    p = float(norm)
    if math.isnan(p) or p < 1:
        raise ValueError(f"norm={norm!r} is not supported: an entrywise norm needs an exponent p >= 1 (or "
                         f"float('inf')); the named norms are 'fro' and 'nuc'")
    return p


def _label(p: float) -> str:
    """p as written in messages: the short form ("1", "2.5", "inf") where it is exact, else the full repr (so
    p = 1.0000001 is not named as p = 1)."""
    short = f"{p:g}"
    return short if float(short) == p else repr(p)


def _cvx_solver(p: float, k: int, d: int, options: dict):
    """solve(A) -> (w, multipliers) or None (infeasible, or ||w|| > MAX_NORM) for constraint matrices (k, d^2), by
    Clarabel through cvxpy; one cvxpy problem per call of att_svm (no state carried between calls)."""
    import cvxpy as cp

    from ._attention import CLARABEL_MAX_ITER, MAX_NORM, _solved

    A = cp.Parameter((k, d * d))
    w = cp.Variable(d * d)
    margin = A @ w >= 1
    if p == 1:
        objective = cp.norm1(w)
    elif math.isinf(p):
        objective = cp.norm_inf(w)
    elif p == 2:  # the Frobenius QP (accurate to its tolerance, as "fro"); its multipliers are rescaled below
        objective = 0.5 * cp.sum_squares(w)
    else:
        objective = cp.pnorm(w, p, approx=False)  # the exact power cone, for any real p
    problem = cp.Problem(cp.Minimize(objective), [margin])
    settings = {"solver": cp.CLARABEL, "warm_start": False, "max_iter": CLARABEL_MAX_ITER,
                "tol_gap_abs": CLARABEL_TOL, "tol_gap_rel": CLARABEL_TOL, "tol_feas": CLARABEL_TOL, **options}

    def solve(matrix: np.ndarray):
        A.value = matrix
        if not _solved(problem, settings, "clarabel", f"l{_label(p)} Att-SVM", options):
            return None
        if np.linalg.norm(w.value) > MAX_NORM:
            return None
        duals = np.maximum(margin.dual_value, 0.0)  # p = 2: w = A^T duals, and w / ||w|| is the subgradient
        return np.array(w.value), duals / np.linalg.norm(w.value) if p == 2 else duals
    return solve


def _highs_solver(p: float, k: int, d: int, options: dict):
    """solve(A) -> (w, multipliers) or None for p = 1 or infinity, by HiGHS (scipy.optimize.linprog) on the
    linear program in (w, u): p = 1: min sum(u), -u <= w <= u; p = inf: min u, -u <= w_j <= u; and A w >= 1."""
    from scipy.optimize import linprog

    from ._attention import MAX_NORM, SolverError

    m = d * d
    eye = np.eye(m)
    if p == 1:  # variables (w, u), u (m,)
        cost = np.concatenate([np.zeros(m), np.ones(m)])
        bounds_rows = np.block([[eye, -eye], [-eye, -eye]])
    else:  # variables (w, u), u scalar
        cost = np.concatenate([np.zeros(m), [1.0]])
        bounds_rows = np.block([[eye, -np.ones((m, 1))], [-eye, -np.ones((m, 1))]])
    width = len(cost)
    settings = {"primal_feasibility_tolerance": HIGHS_TOL, "dual_feasibility_tolerance": HIGHS_TOL, **options}

    def solve(matrix: np.ndarray):
        rows = np.vstack([np.hstack([-matrix, np.zeros((k, width - m))]), bounds_rows])
        upper = np.concatenate([-np.ones(k), np.zeros(len(bounds_rows))])
        try:
            result = linprog(cost, A_ub=rows, b_ub=upper, bounds=[(None, None)] * width, method="highs",
                             options=settings)
        except (TypeError, ValueError) as err:
            if not options:
                raise
            kind = TypeError if isinstance(err, TypeError) else ValueError
            raise kind(f"options {options!r} were refused by highs: {err}") from err
        if result.status == 2:  # infeasible
            return None
        if result.status != 0:
            raise SolverError(f"highs stopped with status {result.status} ({result.message}) on the l{_label(p)} "
                              f"Att-SVM; try solver='clarabel'")
        w = result.x[:m]
        if np.linalg.norm(w) > MAX_NORM:
            return None
        return w, np.maximum(-result.ineqlin.marginals[:k], 0.0)
    return solve


def _dual_solver(p: float, k: int, d: int, options: dict):
    """solve(A) -> (w, multipliers) or None for 1 < p < infinity, by L-BFGS-B on the dual: maximize
    1^T lambda - ||A^T lambda||_q^q / q over lambda >= 0 (q = p / (p - 1)), then w = sign(y) |y|^(q-1) with
    y = A^T lambda (the minimizer of ||w||_p^p / p over A w >= 1). Feasibility is decided first by the Frobenius
    solver's NNLS (the feasible set does not depend on p). Several times faster than Clarabel's power cone and as
    accurate in the objective for moderate p (tested for p <= 3); for large p the dual is nearly non-smooth
    (q near 1), and a solution whose margins fall short beyond MARGIN_TOL raises SolverError (the acceptance
    rule): use Clarabel there."""
    from scipy.optimize import minimize

    from ._attention import MAX_NORM, _least_distance

    q = p / (p - 1.0)
    settings = {"maxiter": 20000, "maxcor": 50, "ftol": 1e-16, "gtol": 1e-13, **options}

    def solve(matrix: np.ndarray):
        if _least_distance(matrix) is None:
            return None

        def negative_dual(lam):
            y = matrix.T @ lam
            magnitude = np.abs(y)
            w = np.sign(y) * magnitude ** (q - 1.0)
            return (magnitude**q).sum() / q - lam.sum(), matrix @ w - 1.0
        try:
            result = minimize(negative_dual, np.full(k, 1.0 / k), jac=True, method="L-BFGS-B",
                              bounds=[(0.0, None)] * k, options=settings)
        except (TypeError, ValueError) as err:
            if not options:
                raise
            kind = TypeError if isinstance(err, TypeError) else ValueError
            raise kind(f"options {options!r} were refused by L-BFGS-B: {err}") from err
        y = matrix.T @ result.x
        w = np.sign(y) * np.abs(y) ** (q - 1.0)
        size = np.linalg.norm(w, p)
        if not np.isfinite(size) or np.linalg.norm(w) > MAX_NORM:
            return None
        return w, result.x / size ** (p - 1.0)  # multipliers of the norm (not of its p-th power / p)
    return solve


def entrywise_svm(X, Z, alpha, norm, *, solver: str | None, return_multipliers: bool, options: dict | None):
    """``svm.att_svm(X, Z, alpha, norm=p)`` for an exponent p (validated here; X, Z, alpha as unpacked by
    att_svm): the entrywise lp Att-SVM of every instance of the batch, (..., d, d), and with
    ``return_multipliers`` the multipliers (..., n, T), 0 at alpha, for which A^T lambda is a subgradient of
    ||.||_p at W."""
    from .._checks import boolean
    from ._attention import (_accepted, _arrays, _option, _raise_infeasible, _scatter,
                             _solver_options, _unit_scale, _unscale, constraint_matrix)

    p = exponent(norm)
    linear = p == 1 or math.isinf(p)
    allowed = SOLVERS[:2] if linear else SOLVERS[::2]
    solver = "clarabel" if solver is None else _option(solver, "solver", allowed)
    return_multipliers = boolean(return_multipliers, "return_multipliers")
    settings = _solver_options(options, solver)
    Xs, Zs, alphas, batch = _arrays(X, Z, alpha)
    _, n, T, d = Xs.shape
    scaled = [_unit_scale(Xb, Zb) for Xb, Zb in zip(Xs, Zs)]
    make = {"clarabel": _cvx_solver, "highs": _highs_solver, "dual": _dual_solver}[solver]
    solve = make(p, n * (T - 1), d, settings)
    solutions = []
    for ((Xb, Zb), _), ab in zip(scaled, alphas):
        A = constraint_matrix(Xb, Zb, ab)  # by its public name, which tools/faults.py replaces
        solution = solve(A)
        solutions.append(None if solution is None else (*solution, (A @ solution[0]).min()))
    _raise_infeasible(
        solutions, batch, f"the l{_label(p)} Att-SVM",
        f"no W separates the selected tokens alpha of X from the others with margin 1 for the queries Z (or only "
        f"one of huge norm). Increase d, or select other tokens (e.g. theory.optimal_tokens).")
    Ws, lams = [], []
    what = f"the l{_label(p)} Att-SVM solution for these X, Z"
    other = ("highs" if linear else "dual") if solver == "clarabel" else "clarabel"
    advice = f"; try solver={other!r}"
    for (w, lam, smallest), (_, e), a in zip(solutions, scaled, alphas):
        w = w / _accepted(smallest, f"{solver} returned an l{_label(p)} Att-SVM solution", advice,
                          strict=options is None)
        Ws.append(_unscale(w.reshape(d, d), e, what))
        if return_multipliers:  # a subgradient of a norm is scale-free: lambda scales as W
            lams.append(_scatter(_unscale(lam, e, "the multipliers for X, Z"), a, T))
    W = finite_result(np.array(Ws).reshape(batch + (d, d)), what, "rescale X or Z")
    if not return_multipliers:
        return W
    return W, np.array(lams).reshape(batch + (n, T))
