"""The spectral-norm Att-SVM: the W of smallest largest singular value that separates the selected tokens,

    W_alpha^spec = argmin ||W||_2 = sigma_max(W)  s.t.  (x_{i,alpha_i} - x_it)^T W z_i >= 1  for all i, t != alpha_i,

the candidate limit direction of spectral descent and Muon (orthogonalized-gradient steps) on W, the question of
one of the book's open problems. The constraints are those of ``att_svm`` (rows of ``constraint_matrix``); the
objective is a semidefinite-representable convex function, solved by Clarabel (or SCS) through cvxpy. The
problem is feasible exactly when the Frobenius Att-SVM is (``feasible``); its minimizer need not be unique.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from .._checks import finite_result
from ..data import Problem
from ._attention import (CLARABEL_MAX_ITER, CLARABEL_TOL, MAX_NORM, SCS_MAX_ITERS, SCS_TOL, SolverError, _accepted,
                         _arrays, _least_distance, _option, _pairs, _raise_infeasible, _rows, _solved, _unit_scale)
from ._inputs import _unpack
from ._nuclear_svm import _unscale

__all__ = ["spectral_att_svm", "SPECTRAL_SOLVERS"]

SPECTRAL_SOLVERS = ("clarabel", "scs")  # the first is the default


def _solver(solver: str, k: int, d: int):
    """A function that solves min sigma_max(W) s.t. A vec(W) >= 1 (vec row-major) for one matrix A (k, d^2):
    the solution w (d^2,). A new cvxpy problem per call of ``spectral_att_svm`` (no state kept between calls)."""
    import cvxpy as cp  # here: importing cvxpy takes a second that only this solver needs

    A = cp.Parameter((k, d * d))
    W = cp.Variable((d, d))
    problem = cp.Problem(cp.Minimize(cp.sigma_max(W)), [A @ cp.vec(W, order="C") >= 1])
    if solver == "clarabel":
        tol = CLARABEL_TOL["nuc"]  # an SDP, like the nuclear-norm Att-SVM
        settings = {"solver": cp.CLARABEL, "max_iter": CLARABEL_MAX_ITER, "tol_gap_abs": tol, "tol_gap_rel": tol,
                    "tol_feas": tol}
    else:
        settings = {"solver": cp.SCS, "eps_abs": SCS_TOL, "eps_rel": SCS_TOL, "max_iters": SCS_MAX_ITERS}
    other = next(name for name in SPECTRAL_SOLVERS if name != solver)

    def solve(matrix: np.ndarray) -> np.ndarray:
        A.value = matrix
        advice = f"; try solver={other!r}"
        if not _solved(problem, settings, solver, "spectral Att-SVM", {}, advice):  # feasibility was checked first
            raise SolverError(f"{solver} found the spectral Att-SVM infeasible{advice}")
        w = W.value.reshape(-1)
        return w / _accepted((matrix @ w).min(), f"{solver} returned a spectral Att-SVM solution",
                             f"; try solver={other!r}")
    return solve


def spectral_att_svm(X: ArrayLike | Problem, Z: ArrayLike | None = None, alpha: ArrayLike | None = None, *,
                     solver: str = "clarabel") -> np.ndarray:
    r"""The spectral-norm Att-SVM: :math:`\arg\min \sigma_{\max}(W)` with every margin :math:`(x_{i\alpha_i} -
    x_{it})^\top W z_i \ge 1`.

    Every returned W satisfies all margins :math:`\ge 1` exactly (a solution short by round-off is scaled up). The
    minimal value is unique, the minimizer need not be: compare values of :math:`\sigma_{\max}`, or margins, rather
    than matrices. Call it as ``spectral_att_svm(X, Z, alpha)`` or ``spectral_att_svm(problem, alpha)`` with an
    ``attnsvm.data.Problem``.

    Parameters
    ----------
    X : ArrayLike or Problem
        The tokens (..., n, T, d), :math:`T \ge 2`, or a problem.
    Z : ArrayLike or None, default=None
        The queries (..., n, d); with a problem, alpha.
    alpha : ArrayLike or None, default=None
        The selected token of each sequence, shape (..., n).
    solver : {'clarabel', 'scs'}, default='clarabel'
        The solver, through cvxpy.

    Returns
    -------
    ndarray
        W, shape (..., d, d).

    Raises
    ------
    InfeasibleSVM
        Where no W separates the selected tokens (exactly where ``feasible`` is False).
    SolverError
        If a solution falls short of a margin by more than round-off.
    ValueError
        If T < 2, the shapes do not fit, or the solver is not supported.

    Examples
    --------
    >>> import numpy as np
    >>> from attnsvm import data, svm, theory
    >>> problem = data.random_problem(n=2, T=3, d=3, seed=0)
    >>> alpha = theory.optimal_tokens(problem)
    >>> W = svm.spectral_att_svm(problem, alpha)
    >>> W.shape, bool((svm.constraint_matrix(problem, alpha) @ W.reshape(-1) >= 1).all())
    ((3, 3), True)
    >>> W_fro = svm.att_svm(problem, alpha)  # feasible too: its spectral norm is at least as large
    >>> bool(np.linalg.norm(W, 2) <= np.linalg.norm(W_fro, 2) + 1e-7)
    True
    """
    X, Z, alpha = _unpack("spectral_att_svm", X, Z, alpha, field="Z", middle_name="Z", last_name="alpha")
    solver = _option(solver, "solver", SPECTRAL_SOLVERS)
    Xs, Zs, alphas, batch = _arrays(X, Z, alpha)
    _, n, T, d = Xs.shape
    solve = _solver(solver, n * (T - 1), d)
    solutions, exponents = [], []
    for Xb, Zb, ab in zip(Xs, Zs, alphas):
        (Xb, Zb), e = _unit_scale(Xb, Zb)  # exact rescaling of data of extreme scale
        A = _rows(*_pairs(Xb, Zb, ab))
        solutions.append(None if _least_distance(A) is None else A)  # feasibility as for every Att-SVM
        exponents.append(e)
    _raise_infeasible(
        solutions, batch, "spectral Att-SVM",
        f"no W separates the selected tokens alpha of X from the others with margin 1 for the queries Z (or only "
        f"one with norm > {MAX_NORM:g}); select other tokens or increase d")
    what = "the spectral Att-SVM solution for these X, Z"
    Ws = [_unscale(solve(A).reshape(d, d), e, what) for A, e in zip(solutions, exponents)]
    return finite_result(np.array(Ws).reshape(batch + (d, d)), what, "rescale X or Z")
