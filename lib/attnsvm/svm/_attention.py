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

Scale: the solution for the data X / a, Z / b is a b times that for X, Z, and the solvers' absolute thresholds
(MAX_NORM, the active-set polish) are meant for data of moderate scale. Data outside it are solved after an exact
rescaling (see `_unit_scale`); a solution that float64 cannot hold raises FloatingPointError.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import nnls

import torch

from . import _nuclear_svm as nuclear
from .._checks import as_index, as_tensor, boolean, budget, choice, finite_result, positive_float, require_shape
from ..data import Problem
from ._inputs import _unpack
from ._nuclear_svm import MARGIN_TOL, _exponent, _unscale  # MARGIN_TOL: relative slack allowed on a solution's margins

__all__ = ["GeneralSVM", "InfeasibleSVM", "SolverError", "att_svm", "constraint_matrix", "feasible", "general_svm",
           "head_svm", "prompt_svm", "SOLVERS", "MAX_NORM", "SCALES", "MEMORY"]

SOLVERS = {"fro": ("nnls", "clarabel"), "nuc": ("ipm", "clarabel", "scs")}  # the first is the default
MAX_NORM = 1e6  # a feasible Att-SVM with a larger solution is reported as (numerically) infeasible
SCALES = (-6, 6)  # data of scale max|x| max|z| ~ 2^e with e in this range are solved as given (`_unit_scale`)
MEMORY = 2**31  # bytes: a problem whose constraint matrix would need more is refused before any work
# Solver tolerances, one place for every SVM solver of the library (here and `_soft_margin`; the acceptance rule
# `_accepted` uses MARGIN_TOL, and the nuclear IPM keeps its own stopping rule in `_nuclear_svm`):
CLARABEL_TOL = {"fro": 1e-10, "nuc": 1e-9}  # Clarabel's gap and feasibility tolerances: QPs and SOCPs, the SDP
CLARABEL_MAX_ITER = 500
SCS_TOL, SCS_MAX_ITERS = 1e-9, 100_000
GAP_TOL = {"hard": 1e-6, "soft": 1e-9}  # accepted relative duality gap (soft: plus round-off, `_soft_margin`)
POLISH_TOL = 1e-9  # accepted (relative) KKT residual of a polished soft-margin solution
W_TOL = 1e-5  # certified ||W - W*||_F / ||W||_F of a soft margin (`_soft_margin`), see there


class InfeasibleSVM(ValueError):
    """No W separates the selected tokens with a positive margin (or only one of norm > ``MAX_NORM``). A ValueError.

    Parameters
    ----------
    message : str
        What is infeasible.
    instances : Iterable of int
        The infeasible instances of a batch (stored as ``.instances``), by default none.

    Examples
    --------
    >>> import numpy as np
    >>> from attnsvm import svm
    >>> X = np.array([[[1.0, 0.0], [1.0, 0.0]]])  # the two tokens are equal: nothing separates them
    >>> try:
    ...     svm.att_svm(X, np.array([[1.0, 0.0]]), [0])
    ... except svm.InfeasibleSVM as error:
    ...     print(error.instances)
    (0,)
    """

    def __init__(self, message: str, instances: Iterable[int] = ()) -> None:
        super().__init__(message)
        self.instances = tuple(instances)


class SolverError(RuntimeError):
    """The convex solver did not reach an accurate optimum (a RuntimeError).

    Examples
    --------
    >>> from attnsvm import svm
    >>> issubclass(svm.SolverError, RuntimeError)
    True
    """


def _numpy(value, name: str) -> np.ndarray:
    """`value` validated by `checks.as_tensor` (numeric, finite, on the CPU) as a float64 numpy array, detached
    from autograd (a tensor that requires grad is accepted)."""
    return as_tensor(value, name).detach().numpy()


def _option(value, name: str, options: tuple) -> str:
    """`checks.choice` for string options; any other value (an array, a number) is refused by the same message."""
    if not isinstance(value, str):
        raise ValueError(f"{name}={value!r} is not supported: choose one of {', '.join(map(repr, options))}")
    return choice(value, name, options)


def _arrays(X, Z, alpha, *, queries: bool = True):
    """Validate (X, Z, alpha) and return numpy arrays flattened over the batch, plus the batch shape (with
    queries=False, Z is ignored and None is returned for it)."""
    X = _numpy(X, "X")
    if X.ndim < 3:
        raise ValueError(f"X must have shape (..., n, T, d) (n sequences of T tokens in R^d), got {X.shape}")
    *batch, n, T, d = X.shape
    if T < 2:
        raise ValueError(f"X must hold T >= 2 tokens per sequence (there is nothing to separate), got T={T}")
    if n < 1 or d < 1:
        raise ValueError(f"X must hold n >= 1 sequences of tokens in R^d, d >= 1: got n={n}, d={d} (shape {X.shape})")
    budget(8.0 * n * (T - 1) * d**2, "X", MEMORY, "bytes for the constraint matrix of one problem (n (T-1) d^2 "
           "entries)")
    try:
        if queries:
            Z = _numpy(Z, "Z")
            require_shape(Z, "Z", tuple(batch) + (n, d), "one query token per sequence")
        alpha = as_index(alpha, "alpha", tuple(batch) + (n,), T)
    except ValueError as err:  # the expected shapes come from X's: say how X was read
        raise ValueError(f"{err} (X of shape {X.shape} reads as batch {tuple(batch)}, n={n}, T={T}, d={d})") from None
    return X.reshape(-1, n, T, d), Z.reshape(-1, n, d) if queries else None, alpha.reshape(-1, n), tuple(batch)


def _unit_scale(*arrays):
    """(arrays, e): the data of one problem, scaled by powers of two where their scale is extreme, and the exponent
    e such that the solution for the given data is 2^-e times that for the returned ones.

    Exact. Scaling X by 2^-a and Z by 2^-b multiplies every margin (x_alpha - x_t)^T W z by 2^-(a+b): W is feasible
    for the scaled data if and only if 2^-(a+b) W is feasible for the given data, a bijection that multiplies every
    norm by 2^-(a+b), so the minimizer for the given data is 2^-(a+b) times the one for the scaled data (the same
    for the p-SVM and the head's SVM, linear in their data). A product by a power of two rounds nothing.
    Data of scale 2^e (e: the sum of the arrays' exponents, `nuclear._exponent`) with e in SCALES, such as the
    book's tokens of unit norm, are returned as they are (e = 0), so that their results do not change by a bit;
    others are scaled to largest entries in [1/2, 1), the scale for which MAX_NORM and the polish's thresholds
    are set (so that MAX_NORM bounds ||W|| max|x| max|z| there, and tiny data are no longer called infeasible).
    """
    exponents = [_exponent(array) for array in arrays]
    if SCALES[0] <= sum(exponents) <= SCALES[1] and max(map(abs, exponents)) <= 64:
        return arrays, 0
    with np.errstate(under="ignore"):
        return tuple(np.ldexp(array, -e) for array, e in zip(arrays, exponents)), sum(exponents)


def _pairs(X: np.ndarray, Z: np.ndarray, alpha: np.ndarray):
    """(x_{i,alpha_i} - x_it, z_i) for all i and t != alpha_i, ordered by (i, t): two (n(T-1), d) arrays."""
    n, T, d = X.shape
    rows = np.arange(n)
    keep = np.ones((n, T), dtype=bool)
    keep[rows, alpha] = False
    return (X[rows, alpha][:, None, :] - X)[keep], np.repeat(Z, T - 1, axis=0)


def constraint_matrix(X: ArrayLike | Problem, Z: ArrayLike | None = None,
                      alpha: ArrayLike | None = None) -> np.ndarray:
    r"""The Att-SVM's constraint matrix A, with rows :math:`(x_{i\alpha_i} - x_{it}) \otimes z_i` for all i and
    :math:`t \ne \alpha_i`, ordered by (i, t).

    The Att-SVM asks :math:`A\,\mathrm{vec}(W) \ge 1` (vec row-major). Call it as ``constraint_matrix(X, Z, alpha)``
    for one problem, or ``constraint_matrix(problem, alpha)`` with an unbatched ``attnsvm.data.Problem``.

    Parameters
    ----------
    X : ArrayLike or Problem
        The tokens (n, T, d), or a problem.
    Z : ArrayLike or None, default=None
        The queries (n, d); with a problem, alpha.
    alpha : ArrayLike or None, default=None
        The selected token of each sequence, shape (n,).

    Returns
    -------
    ndarray
        A, shape (n(T - 1), :math:`d^2`).

    Raises
    ------
    ValueError
        If X is a batch, T < 2, or the shapes do not fit.

    Examples
    --------
    >>> from attnsvm import data, svm, theory
    >>> problem = data.random_problem(n=2, T=3, d=2, seed=0)
    >>> alpha = theory.optimal_tokens(problem)
    >>> A = svm.constraint_matrix(problem, alpha)
    >>> A.shape
    (4, 4)
    >>> W = svm.att_svm(problem, alpha)
    >>> bool((A @ W.reshape(-1) >= 1 - 1e-12).all())
    True
    """
    X, Z, alpha = _unpack("constraint_matrix", X, Z, alpha, field="Z", middle_name="Z", last_name="alpha")
    Xs, Zs, alphas, batch = _arrays(X, Z, alpha)
    if batch:
        raise ValueError(f"constraint_matrix takes one problem: X of shape (n, T, d), got {batch + Xs.shape[1:]}; "
                         f"pass one problem of the batch, e.g. X[0], Z[0], alpha[0]")
    (X, Z), e = _unit_scale(Xs[0], Zs[0])  # exact, and for data of extreme scale free of overflow
    return _unscale(_rows(*_pairs(X, Z, alphas[0])), -e, "the constraint matrix of these X, Z")


def _rows(deltas: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """The constraint matrix of validated pairs (`_pairs`): rows kron(delta_k, z_k), shape (K, d^2)."""
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
    divisor = _accepted(smallest, "", strict=False)  # infeasible: scale up
    return w / divisor, lam / divisor


def _accepted(smallest: float, what: str, advice: str = "", *, strict: bool = True) -> float:
    """The acceptance rule of every SVM solution, from the smallest of its margins (1 is asked): the divisor that
    scales it to margins >= 1 exactly (1.0 where none is short, dividing by it changes nothing); a shortfall
    beyond MARGIN_TOL is more than round-off and raises SolverError (`what` has margin ... < 1`advice`), unless
    not `strict` (a loose solver's options, or NNLS near infeasibility)."""
    if strict and smallest < 1 - MARGIN_TOL:
        raise SolverError(f"{what} with margin {smallest:.3g} < 1{advice}")
    return smallest if smallest < 1 else 1.0


def _raise_infeasible(solutions: list, batch: tuple, what: str, why: str) -> None:
    """The rule for a batch of solutions (None where infeasible): InfeasibleSVM naming the infeasible instances,
    "`what` is infeasible (for batch instances ...): `why`"."""
    infeasible = [b for b, solution in enumerate(solutions) if solution is None]
    if infeasible:
        where = f" for batch instances {infeasible}" if batch else ""
        raise InfeasibleSVM(f"{what} is infeasible{where}: {why}", infeasible)


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


def _solver_options(options, solver: str) -> dict:
    """Validate the `options` of att_svm: a dict of settings for a cvxpy solver, or None."""
    if options is None:
        return {}
    if solver in ("nnls", "ipm"):
        raise ValueError("options apply to the cvxpy solvers only: pass solver='clarabel' or 'scs' with them")
    if not isinstance(options, dict) or not all(isinstance(key, str) for key in options):
        raise TypeError(f"options must be a dict of solver settings (names to values), got {options!r}")
    if "solver" in options:
        raise ValueError("options must not name the solver: pass solver='clarabel' or 'scs' instead")
    for key in ("warm_start", "verbose"):  # cvxpy's own settings, which take any value
        if key in options:
            boolean(options[key], f"options[{key!r}]")
    return options


def _cvx_solver(norm: str, solver: str, k: int, d: int, options: dict):
    """A function that solves the Att-SVM for one constraint matrix (k, d^2) with cvxpy: (w, multipliers), or
    None where the solver certifies infeasibility.

    Every call builds a new cvxpy problem (compiling it takes milliseconds), and att_svm makes one per call: a
    problem kept between calls would carry their solver state (SCS's warm start, Clarabel's solver and settings),
    so that a result would depend on the calls before it. Within one call of att_svm, SCS starts each instance of
    the batch from the previous instance's solution (cvxpy's warm start; options={"warm_start": False} starts every
    instance afresh); Clarabel always starts afresh (re-using its solver changes the result in the 8th digit).
    Settings: tight tolerances by default (Clarabel: 1e-10 for the Frobenius QP, 1e-9 for the SDP, where its
    default 1e-8 leaves margins short by 1e-7 on nearly infeasible problems); `options` override them.
    """
    import cvxpy as cp  # here, not at the top: importing it takes a second that only the cvxpy solvers need

    A = cp.Parameter((k, d * d))
    W = cp.Variable((d, d))
    margin = A @ cp.vec(W, order="C") >= 1
    objective = 0.5 * cp.sum_squares(W) if norm == "fro" else cp.normNuc(W)
    problem = cp.Problem(cp.Minimize(objective), [margin])
    if solver == "clarabel":
        tol = CLARABEL_TOL[norm]
        settings = {"solver": cp.CLARABEL, "warm_start": False, "max_iter": CLARABEL_MAX_ITER, "tol_gap_abs": tol,
                    "tol_gap_rel": tol, "tol_feas": tol, **options}
    else:
        settings = {"solver": cp.SCS, "warm_start": True, "eps_abs": SCS_TOL, "eps_rel": SCS_TOL,
                    "max_iters": SCS_MAX_ITERS,
                    **options}

    advice = f"try solver={_alternative(norm, solver)!r}" + (f" or other options than {options!r}" if options else "")

    def solve(matrix: np.ndarray):
        A.value = matrix
        if not _solved(problem, settings, solver, f"{norm} Att-SVM", options, f"; {advice}"):
            return None
        w = W.value.reshape(-1)
        if np.linalg.norm(w) > MAX_NORM:
            return None
        return w, np.maximum(margin.dual_value, 0.0)
    return solve


def _solved(problem, settings: dict, solver: str, what: str, options: dict, advice: str = "") -> bool:
    """Solve the cvxpy `problem` with `settings`: True at an optimum, False if it is infeasible, else a
    SolverError on the `what` (with `advice`); a setting the solver refuses is blamed on the caller's `options`."""
    import cvxpy as cp  # already loaded by the caller, which builds `problem`

    try:
        problem.solve(**settings)
    except cp.error.SolverError as err:
        raise SolverError(f"{solver} failed on the {what} ({err}){advice}") from err
    except (TypeError, ValueError, OverflowError) as err:  # a setting the solver does not know, or a value it refuses
        if not options:
            raise
        kind = TypeError if isinstance(err, TypeError) else ValueError
        raise kind(f"options {options!r} were refused by {solver}: {err}") from err
    if problem.status in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE):
        return False
    if problem.status != cp.OPTIMAL:
        raise SolverError(f"{solver} stopped with status {problem.status!r} on the {what}{advice}")
    return True


def _with_margin(solve, A: np.ndarray):
    """solve(A) = (w, multipliers) or None, with the smallest margin of w appended."""
    solution = solve(A)
    return None if solution is None else (*solution, (A @ solution[0]).min())


def _alternative(norm: str, solver: str) -> str:
    return next(other for other in SOLVERS[norm] if other != solver)


def _solve_ipm(instances, d: int):
    """Batched nuclear-norm solutions [(w, multipliers) or None if infeasible] by `nuclear.solve`."""
    pairs = [_pairs(*instance) for instance in instances]
    feasible = [_least_distance(_rows(*pair)) is not None for pair in pairs]
    solutions = [None] * len(pairs)
    chosen = [b for b, ok in enumerate(feasible) if ok]
    if chosen:
        W, y, converged = nuclear.solve(*(np.stack([pairs[b][j] for b in chosen]) for j in (0, 1)))
        for b, W_b, y_b, done in zip(chosen, W, y, converged):
            A = _rows(*pairs[b])
            # the rare problem the IPM cannot finish (nearly infeasible, ||W|| huge) goes to Clarabel
            solutions[b] = ((W_b.reshape(-1), np.maximum(y_b, 0.0)) if done
                            else _cvx_solver("nuc", "clarabel", len(A), d, {})(A))
    return solutions


def att_svm(X: ArrayLike | Problem, Z: ArrayLike | None = None, alpha: ArrayLike | None = None,
            norm: str | float = "fro",
            *, solver: str | None = None, return_multipliers: bool = False,
            options: dict | None = None) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    r"""The Att-SVM solution :math:`W^{mm}_\alpha`: the W of least norm with every margin :math:`(x_{i\alpha_i} -
    x_{it})^\top W z_i \ge 1`.

    Call it as ``att_svm(X, Z, alpha)`` with arrays or ``att_svm(problem, alpha)`` with an ``attnsvm.data.Problem``
    (its X and Z; then pass ``norm`` by keyword). No result depends on earlier calls; within a call, SCS
    warm-starts each instance of a batch from the previous one. Every returned W satisfies all margins
    :math:`\ge 1` exactly: a solution short by round-off (less than ``MARGIN_TOL``, or anything with ``options``)
    is scaled up.

    Parameters
    ----------
    X : ArrayLike or Problem
        The tokens (..., n, T, d), :math:`T \ge 2`, or a problem.
    Z : ArrayLike or None, default=None
        The queries (..., n, d); with a problem, alpha.
    alpha : ArrayLike or None, default=None
        The selected token of each sequence, shape (..., n).
    norm : str or float, default='fro'
        "fro" (Frobenius; GD on W), "nuc" (nuclear; the (K, Q) parameterization, rank unconstrained), or a number
        :math:`p \ge 1` or ``float('inf')``: the entrywise :math:`\ell_p` norm of W (mirror descent with potential
        :math:`\|W\|_p^p`; p = 2 gives the "fro" solution to solver tolerance), solved by Clarabel ("clarabel",
        the default) or, for the linear programs p = 1 and :math:`\infty`, by HiGHS ("highs"), for
        :math:`1 < p < \infty` by L-BFGS-B on the dual ("dual", several times faster); its multipliers make
        :math:`A^\top\lambda` a subgradient of the :math:`\ell_p` norm at W.
    solver : str or None, default=None
        See ``SOLVERS``; None: "nnls" for "fro" and "ipm" (the library's interior-point method) for "nuc".
    return_multipliers : bool, default=False
        Also return the KKT multipliers :math:`\lambda` (..., n, T) (0 at alpha), for which
        :math:`A^\top\lambda` is W ("fro") or a subgradient of the nuclear norm at W ("nuc").
    options : dict or None, default=None
        Settings passed to a cvxpy solver ("clarabel", "scs"), e.g. SCS's default accuracy
        ``{"eps_abs": 1e-4, "eps_rel": 1e-4}`` to see what a loose solver returns.

    Returns
    -------
    ndarray or tuple of ndarray
        W, shape (..., d, d), and with ``return_multipliers`` the multipliers (..., n, T).

    Raises
    ------
    InfeasibleSVM
        (a ValueError) If no W exists; its ``.instances`` lists the infeasible batch indices.
    SolverError
        If a solution falls short of a margin by more than round-off.
    FloatingPointError
        If float64 cannot hold the solution (data of extreme scale).
    ValueError
        If an argument is invalid, e.g. T < 2, an unsupported norm or solver, or options with a solver that is not
        cvxpy's.

    Examples
    --------
    >>> import numpy as np
    >>> from attnsvm import data, svm, theory
    >>> problems = data.random_problem(n=2, T=3, d=3, seed=0, batch=4)
    >>> alpha = theory.optimal_tokens(problems)
    >>> W = svm.att_svm(problems, alpha)
    >>> W.shape, bool(np.array_equal(W, svm.att_svm(problems.X, problems.Z, alpha)))
    ((4, 3, 3), True)
    >>> W_nuc, lam = svm.att_svm(problems, alpha, norm="nuc", return_multipliers=True)
    >>> lam.shape, bool((lam >= 0).all())
    ((4, 2, 3), True)
    >>> W_1 = svm.att_svm(problems, alpha, norm=1)  # the l1 Att-SVM, a linear program
    >>> bool(np.abs(W_1).sum() <= np.abs(W).sum() * (1 + 1e-8))
    True
    """
    X, Z, alpha = _unpack("att_svm", X, Z, alpha, field="Z", middle_name="Z", last_name="alpha")
    from . import _entrywise  # here: it imports this module's helpers
    if _entrywise.is_exponent(norm):  # an entrywise lp norm
        return _entrywise.entrywise_svm(X, Z, alpha, norm, solver=solver, return_multipliers=return_multipliers,
                                        options=options)
    norm = _option(norm, "norm", tuple(SOLVERS))
    solver = SOLVERS[norm][0] if solver is None else _option(solver, "solver", SOLVERS[norm])
    return_multipliers = boolean(return_multipliers, "return_multipliers")
    settings = _solver_options(options, solver)
    Xs, Zs, alphas, batch = _arrays(X, Z, alpha)
    _, n, T, d = Xs.shape
    if norm == "nuc":
        budget(float(n * (T - 1)) ** 3, "X", nuclear.MAX_FLOPS, "floating-point operations per interior-point "
               "iteration ((n (T-1))^3)")
    scaled = [_unit_scale(Xb, Zb) for Xb, Zb in zip(Xs, Zs)]
    instances = [(Xb, Zb, ab) for ((Xb, Zb), _), ab in zip(scaled, alphas)]
    # constraint_matrix by its public name, which tools/faults.py replaces; solutions: (w, multipliers, margin)
    if solver == "ipm":
        solutions = [None if solution is None else (*solution, (constraint_matrix(*instance) @ solution[0]).min())
                     for instance, solution in zip(instances, _solve_ipm(instances, d))]
    else:
        solve = _least_distance if solver == "nnls" else _cvx_solver(norm, solver, n * (T - 1), d, settings)
        solutions = [_with_margin(solve, constraint_matrix(*instance)) for instance in instances]
    _raise_infeasible(
        solutions, batch, "Att-SVM",
        f"no W separates the selected tokens alpha of X from the others with "
        f"margin 1 for the queries Z (or only one with norm > {MAX_NORM:g}). Increase d (generic data is feasible "
        f"for every alpha when d >= max(T-1, n) = {max(T - 1, n)}), or select other tokens (e.g. "
        f"theory.optimal_tokens).")
    Ws, lams = [], []
    what = "the Att-SVM solution for these X, Z"
    for (w, lam, smallest), (_, e), a in zip(solutions, scaled, alphas):
        # round-off (or a loose solver): scale up to satisfy every margin exactly
        w = w / _accepted(smallest, f"{solver} returned a {norm} Att-SVM solution",
                          f"; try solver={_alternative(norm, solver)!r}", strict=options is None)
        Ws.append(_unscale(w.reshape(d, d), e, what))
        if return_multipliers:  # they scale as W for the nuclear norm, as W^2 for the Frobenius norm (W = A^T lam)
            lams.append(_scatter(_unscale(lam, e if norm == "nuc" else 2 * e, "the multipliers for X, Z"), a, T))
    W = finite_result(np.array(Ws).reshape(batch + (d, d)), what, "rescale X or Z")
    if not return_multipliers:
        return W
    return W, np.array(lams).reshape(batch + (n, T))


def feasible(X: ArrayLike | Problem, Z: ArrayLike | None = None, alpha: ArrayLike | None = None) -> np.ndarray:
    """Whether the Att-SVM for (X, Z, alpha) has a solution (the same for both norms).

    Call it as ``feasible(X, Z, alpha)`` with arrays or ``feasible(problem, alpha)`` with an
    ``attnsvm.data.Problem``.

    Parameters
    ----------
    X : ArrayLike or Problem
        The tokens (..., n, T, d), or a problem.
    Z : ArrayLike or None, default=None
        The queries (..., n, d); with a problem, alpha.
    alpha : ArrayLike or None, default=None
        The selected token of each sequence, shape (..., n).

    Returns
    -------
    ndarray
        A boolean array of the batch shape.

    Raises
    ------
    ValueError
        If T < 2 or the shapes do not fit.

    Examples
    --------
    >>> from attnsvm import data, svm, theory
    >>> problems = data.random_problem(n=4, T=3, d=2, seed=0, batch=6)
    >>> flags = svm.feasible(problems, theory.optimal_tokens(problems))
    >>> flags.shape, flags.dtype
    ((6,), dtype('bool'))
    """
    X, Z, alpha = _unpack("feasible", X, Z, alpha, field="Z", middle_name="Z", last_name="alpha")
    Xs, Zs, alphas, batch = _arrays(X, Z, alpha)
    flags = [_least_distance(_rows(*_pairs(*_unit_scale(Xb, Zb)[0], ab))) is not None
             for Xb, Zb, ab in zip(Xs, Zs, alphas)]
    return np.array(flags, dtype=bool).reshape(batch)


def _flags(value, name: str, shape: tuple) -> np.ndarray:
    """`value` as a bool numpy array of the given shape, else a TypeError/ValueError naming it."""
    if torch.is_tensor(value):
        if value.device.type != "cpu":
            raise ValueError(f"{name} is on the device {value.device.type!r}: pass {name}.cpu()")
        value = value.detach().numpy()
    array = np.asarray(value)
    if array.dtype != bool:
        raise TypeError(f"{name} must hold booleans (True or False per sequence), got dtype {array.dtype}")
    if array.shape != shape:
        raise ValueError(f"{name} must have shape {shape} (one flag per sequence), got {array.shape}")
    return array


def prompt_svm(X: ArrayLike | Problem, key: ArrayLike | None = None, alpha: ArrayLike | None = None, *,
               relaxed: ArrayLike | None = None) -> np.ndarray:
    r"""Paper B's SVM for the query p: :math:`\min \|p\|` s.t. :math:`(k_{i\alpha_i} - k_{it})^\top p \ge 1` for all i,
    :math:`t \ne \alpha_i`, with keys :math:`k_{it} = \mathrm{key}^\top x_{it}`.

    Parameters
    ----------
    X : ArrayLike or Problem
        The tokens (..., n, T, d), or a problem (whose X is used).
    key : ArrayLike or None, default=None
        The key-query matrix (d, d); with a problem, alpha.
    alpha : ArrayLike or None, default=None
        The selected token of each sequence, shape (..., n).
    relaxed : ArrayLike or None, default=None
        Boolean (..., n): those sequences only need margin :math:`\ge 0` (the relaxed p-SVM of joint training,
        where the sequences that are not support vectors of the head's SVM are relaxed).

    Returns
    -------
    ndarray
        p, shape (..., d).

    Raises
    ------
    InfeasibleSVM
        If no query separates the selected tokens.
    ValueError
        If the shapes do not fit (e.g. ``relaxed`` not one flag per sequence).

    Examples
    --------
    >>> import numpy as np
    >>> from attnsvm import data, svm
    >>> problem = data.random_problem(n=2, T=3, d=4, seed=0)
    >>> key = np.eye(4)
    >>> p = svm.prompt_svm(problem, key, [0, 1])
    >>> keys = problem.X.numpy() @ key
    >>> margins = [(keys[i, a] - keys[i, t]) @ p for i, a in enumerate([0, 1]) for t in range(3) if t != a]
    >>> p.shape, bool(min(margins) >= 1 - 1e-12)
    ((4,), True)
    """
    X, key, alpha = _unpack("prompt_svm", X, key, alpha, field=None, middle_name="key", last_name="alpha")
    Xs, _, alphas, batch = _arrays(X, None, alpha, queries=False)
    _, n, T, d = Xs.shape
    key = _numpy(key, "key")
    require_shape(key, "key", (d, d), f"the fixed key-query matrix for the tokens of X in R^{d}")
    relaxed = (np.zeros(batch + (n,), bool) if relaxed is None else _flags(relaxed, "relaxed", batch + (n,)))
    solutions = []
    for b, (Xb, ab, relaxed_b) in enumerate(zip(Xs, alphas, relaxed.reshape(len(Xs), n))):
        (Xb, key_b), e = _unit_scale(Xb, key)
        deltas, _ = _pairs(Xb @ key_b, np.zeros((n, d)), ab)
        solution = _least_distance(deltas, np.repeat(np.where(relaxed_b, 0.0, 1.0), T - 1))
        if solution is None:
            raise InfeasibleSVM(f"the p-SVM is infeasible for batch instance {b}: no query separates the selected "
                                f"keys (key^T x for the tokens alpha of X) from the others; select other tokens", [b])
        solutions.append(finite_result(_unscale(solution[0], e, "the p-SVM solution for X, key"),
                                       "the p-SVM solution for X, key", "rescale X or key"))
    return np.array(solutions).reshape(batch + (d,))


@dataclass(frozen=True)
class GeneralSVM:
    r"""Paper A's general SVM equivalence for attention that mixes the tokens :math:`O_i` (nonlinear heads).

    What ``general_svm`` returns.

    Parameters
    ----------
    relevant : ndarray
        The masks of the sets :math:`O_i`, shape (n, T).
    W_fin : ndarray
        The finite part: the minimum-norm W with :math:`(x_{it} - x_{i\tau})^\top W z_i = \log(s_{it}/s_{i\tau})`
        for :math:`t, \tau \in O_i` (it sets the softmax composition inside :math:`O_i`), shape (d, d).
    W_mm : ndarray
        The directional part: the minimum-norm W with margin :math:`\ge 1` from every t in :math:`O_i` to every
        :math:`\tau` outside :math:`O_i` and equal logits inside :math:`O_i` (it masks the rest), shape (d, d).

    Examples
    --------
    >>> from attnsvm import svm
    >>> [field.name for field in svm.GeneralSVM.__dataclass_fields__.values()]
    ['relevant', 'W_fin', 'W_mm']
    """

    relevant: np.ndarray  # (n, T) bool: O_i
    W_fin: np.ndarray  # (d, d)
    W_mm: np.ndarray  # (d, d)

    def combined(self, W_gd: ArrayLike) -> np.ndarray:
        r""":math:`W_{SVMeq} = W_{fin} + C\, W_{mm}` with :math:`C = \arg\min_C \|W_{fin} + C\, W_{mm} - W_{gd}\|_F`.

        Parameters
        ----------
        W_gd : ArrayLike
            A matrix (d, d), e.g. the last iterate of gradient descent.

        Returns
        -------
        ndarray
            :math:`W_{SVMeq}`, shape (d, d).

        Raises
        ------
        ValueError
            If W_gd does not have shape (d, d) or is not finite.

        Examples
        --------
        >>> import numpy as np
        >>> import torch
        >>> from attnsvm import data, model, svm
        >>> problem = data.random_problem(n=3, T=4, d=4, seed=1)
        >>> W_gd = 10 * torch.randn(4, 4, dtype=torch.float64)
        >>> general = svm.general_svm(problem, model.attention(problem, W_gd))
        >>> W_eq = general.combined(W_gd)
        >>> W_eq.shape, bool(np.linalg.norm(W_eq - W_gd.numpy()) <= np.linalg.norm(general.W_fin - W_gd.numpy()))
        ((4, 4), True)
        """
        W_gd = _numpy(W_gd, "W_gd")
        require_shape(W_gd, "W_gd", self.W_fin.shape, "a d x d matrix, e.g. the last iterate of gradient descent")
        # W_mm scaled by a power of two (exact): its squares cannot overflow, and C W_mm is unchanged to the bit
        unit = np.ldexp(self.W_mm, -_exponent(self.W_mm))
        with np.errstate(over="ignore", invalid="ignore"):  # an overflow is reported below
            C = np.sum((W_gd - self.W_fin) * unit) / np.sum(unit**2)
            W = self.W_fin + C * unit
        return finite_result(W, "W_fin + C W_mm for this W_gd", "pass a W_gd of smaller norm")


def general_svm(X: ArrayLike | Problem, Z: ArrayLike | None = None, probs: ArrayLike | None = None, *,
                threshold: float = 1e-3) -> GeneralSVM:
    r"""The general SVM of one problem, from attention probabilities: :math:`O_i = \{t : s_{it} \ge
    \mathrm{threshold}\}`.

    Call it as ``general_svm(X, Z, probs)`` or ``general_svm(problem, probs)`` with an unbatched
    ``attnsvm.data.Problem``.

    Parameters
    ----------
    X : ArrayLike or Problem
        The tokens (n, T, d), or a problem.
    Z : ArrayLike or None, default=None
        The queries (n, d); with a problem, probs.
    probs : ArrayLike or None, default=None
        Attention probabilities (n, T), each row summing to 1 (e.g. the final softmax of gradient descent).
    threshold : float, default=0.001
        In (0, 1] (paper A's code uses 1e-3).

    Returns
    -------
    GeneralSVM
        The sets :math:`O_i` and the finite and directional parts.

    Raises
    ------
    InfeasibleSVM
        If the finite part has no solution (the log-ratios of probs inside :math:`O_i` are those of no W) or the
        directional part has none (or no token is masked anywhere).
    ValueError
        If X is a batch, T < 2, probs are not probabilities, or threshold is not in (0, 1].

    Examples
    --------
    >>> import torch
    >>> from attnsvm import data, model, svm
    >>> problem = data.random_problem(n=3, T=4, d=4, seed=1)
    >>> probs = model.attention(problem, 10 * torch.randn(4, 4, dtype=torch.float64))
    >>> general = svm.general_svm(problem, probs)
    >>> general.relevant.shape, general.W_fin.shape, general.W_mm.shape
    ((3, 4), (4, 4), (4, 4))
    """
    X, Z, probs = _unpack("general_svm", X, Z, probs, field="Z", middle_name="Z", last_name="probs")
    X, Z, probs = _numpy(X, "X"), _numpy(Z, "Z"), _numpy(probs, "probs")
    if X.ndim != 3 or Z.shape != (X.shape[0], X.shape[2]) or probs.shape != X.shape[:2]:
        raise ValueError(f"general_svm takes one problem: X (n, T, d), Z (n, d), probs (n, T); got {X.shape}, "
                         f"{Z.shape}, {probs.shape}")
    n, T, d = X.shape
    if n < 1 or T < 2 or d < 1:
        raise ValueError(f"X must hold n >= 1 sequences of T >= 2 tokens (masking needs another token) in R^d, "
                         f"d >= 1: got shape {X.shape}")
    if isinstance(threshold, (str, bytes, bool, np.bool_)):
        raise TypeError(f"threshold must be a number in (0, 1], got {threshold!r}")
    threshold = positive_float(threshold, "threshold")
    if threshold > 1:
        raise ValueError(f"threshold must be a probability in (0, 1], got {threshold!r}")
    if probs.min() < 0 or probs.max() > 1 or np.abs(probs.sum(-1) - 1).max() > 1e-5:
        raise ValueError("probs must hold attention probabilities: entries in [0, 1], each row summing to 1 (a "
                         "softmax over the T tokens of a sequence)")
    relevant = probs >= threshold
    if not relevant.any(-1).all():
        raise ValueError(f"probs[{np.flatnonzero(~relevant.any(-1))[0]}] has no entry >= threshold={threshold:g}: "
                         f"every sequence keeps at least one token; lower threshold")
    budget(8.0 * d**4, "X", MEMORY, "bytes for the projection onto the null space of the finite part (d^4 entries)")
    budget(8.0 * d**2 * (relevant.sum(-1) * (~relevant).sum(-1)).sum(), "X", MEMORY,
           "bytes for the directional constraints (kept x masked tokens, d^2 entries each)")
    (X, Z), e = _unit_scale(X, Z)
    equal, logratio, apart = [], [], []
    for i in range(n):
        inside, outside = np.flatnonzero(relevant[i]), np.flatnonzero(~relevant[i])
        first = inside[0]
        for t in inside[1:]:  # equalities against the first relevant token span all pairs in O_i
            equal.append(np.outer(X[i, t] - X[i, first], Z[i]).ravel())
            logratio.append(np.log(probs[i, t] / probs[i, first]))
        apart += [np.outer(X[i, t] - X[i, tau], Z[i]).ravel() for t in inside for tau in outside]
    apart = np.array(apart).reshape(-1, d * d)
    if not len(apart):
        raise InfeasibleSVM("no token is masked (every entry of probs >= threshold): the directional part is "
                            "undefined; train longer or raise threshold")
    E, logratio = np.array(equal).reshape(-1, d * d), np.array(logratio)
    w_fin = np.linalg.lstsq(E, logratio, rcond=None)[0] if len(E) else np.zeros(d * d)
    residual = np.abs(E @ w_fin - logratio).max(initial=0.0)
    if residual > 1e-6 * max(1.0, np.abs(logratio).max(initial=0.0)):
        raise InfeasibleSVM(f"the finite part of the general SVM has no solution: no W gives the log-ratios "
                            f"log(s_it / s_itau) of probs inside O_i (least-squares residual {residual:.3g}); pass "
                            f"probs that are a softmax of x_it^T W z_i for these X, Z")
    # Equality constraints E w = 0: solve in the null space of E, where ||w|| is unchanged.
    null = np.eye(d * d) - (np.linalg.pinv(E) @ E if len(E) else 0.0)
    solution = _least_distance(apart @ null)
    if solution is None:
        raise InfeasibleSVM("the directional part of the general SVM is infeasible: no W separates the relevant "
                            "tokens of X (probs >= threshold) from the masked ones with equal logits inside O_i, "
                            "for the queries Z")
    w_mm = null @ solution[0]
    if (apart @ w_mm).min() < 1 - MARGIN_TOL:
        raise SolverError(f"the directional part of the general SVM has margin {(apart @ w_mm).min():.3g} < 1 "
                          f"after the projection onto the null space of the finite part")
    what = "the general SVM for these X, Z"
    return GeneralSVM(relevant, *(finite_result(_unscale(w.reshape(d, d), e, what), what, "rescale X or Z")
                                  for w in (w_fin, w_mm)))


def head_svm(X: ArrayLike | Problem, Y: ArrayLike | None = None,
             alpha: ArrayLike | None = None) -> tuple[np.ndarray, np.ndarray]:
    r"""The hard-margin SVM of the head on the selected tokens: :math:`v_{mm} = \arg\min \|v\|` s.t.
    :math:`Y_i v^\top x_{i\alpha_i} \ge 1`.

    In paper B's joint training, the p-SVM relaxes the other sequences. Call it as ``head_svm(X, Y, alpha)`` for
    one problem or ``head_svm(problem, alpha)`` with an unbatched ``attnsvm.data.Problem`` (its X and Y).

    Parameters
    ----------
    X : ArrayLike or Problem
        The tokens (n, T, d), or a problem.
    Y : ArrayLike or None, default=None
        The labels :math:`\pm 1` (n,); with a problem, alpha.
    alpha : ArrayLike or None, default=None
        The selected token of each sequence, shape (n,).

    Returns
    -------
    tuple of ndarray
        :math:`v_{mm}` (d,) and ``support`` (n,) bool: the sequences on the margin, the support vectors.

    Raises
    ------
    InfeasibleSVM
        If the selected tokens are not linearly separable by their labels.
    ValueError
        If X is a batch, a label is not :math:`\pm 1`, or the shapes do not fit.

    Examples
    --------
    >>> from attnsvm import data, svm
    >>> problem = data.random_problem(n=3, T=2, d=4, seed=0)
    >>> v, support = svm.head_svm(problem, [0, 1, 0])
    >>> v.shape, support.dtype, bool(support.any())
    ((4,), dtype('bool'), True)
    """
    X, Y, alpha = _unpack("head_svm", X, Y, alpha, field="Y", middle_name="Y", last_name="alpha", min_T=1)
    X, Y = _numpy(X, "X"), _numpy(Y, "Y")
    if X.ndim != 3 or Y.shape != X.shape[:1]:
        raise ValueError(f"head_svm takes one problem: X (n, T, d) and Y (n,), got {X.shape} and {Y.shape}")
    if X.size == 0:
        raise ValueError(f"X must hold n >= 1 sequences of T >= 1 tokens in R^d, d >= 1: got shape {X.shape}")
    if not np.isin(Y, (-1.0, 1.0)).all():
        raise ValueError(f"Y must hold labels +1 or -1, got {np.unique(Y)[:5]}")
    try:
        alpha = as_index(alpha, "alpha", Y.shape, X.shape[1])
    except ValueError as err:  # the range comes from X's shape: say so
        raise ValueError(f"{err} (X of shape {X.shape} holds T={X.shape[1]} tokens per sequence)") from None
    (rows,), e = _unit_scale(Y[:, None] * X[np.arange(len(Y)), alpha])
    solution = _least_distance(rows)
    if solution is None:
        raise InfeasibleSVM("the selected tokens X[i, alpha_i] are not linearly separable by their labels Y: no "
                            "head v exists")
    v = solution[0]
    what = "the head SVM for this X"
    return finite_result(_unscale(v, e, what), what, "rescale X"), np.abs(rows @ v - 1) <= 1e-9
