"""The diagonal Att-SVM: the Att-SVM over diagonal key-query matrices W = diag(w).

For W = diag(w) the logit of token t is x_it^T diag(w) z_i = <phi_it, w> with the features phi_it = x_it * z_i
(entrywise product), so the Att-SVM restricted to diagonal matrices is an SVM on these features,

    w_alpha^p = argmin ||w||_p  s.t.  <phi_{i,alpha_i} - phi_it, w> >= 1  for all i and t != alpha_i,

with ||diag(w)||_F = ||w||_2 (p = 2, the bias of gradient descent on w) and ||diag(w)||_* = ||w||_1 (p = 1, the
bias of the factorization w = k * q). p = 2 is solved by non-negative least squares, p = 1 as the linear program
min sum(w+ + w-) s.t. A (w+ - w-) >= 1, w+, w- >= 0 (w = w+ - w-), by HiGHS. ``nonnegative=True`` adds w >= 0
(the reach of a balanced start k = q): a least-distance program for p = 2, min sum(w) s.t. A w >= 1, w >= 0 for
p = 1.
"""

from __future__ import annotations

import numpy as np
import torch
from numpy.typing import ArrayLike

from .._checks import as_index, boolean
from ..data import Problem
from ..model import _checked_problem
from ._attention import MAX_NORM, SolverError, _accepted, _least_distance, _pairs, _raise_infeasible, _unit_scale
from ._entrywise import HIGHS_TOL
from ._nuclear_svm import _unscale

__all__ = ["diagonal_features", "diagonal_svm", "DIAGONAL_NORMS"]

DIAGONAL_NORMS = (1, 2)  # the exponents p of the diagonal Att-SVM: ||w||_1 = ||diag(w)||_*, ||w||_2 = ||diag(w)||_F


def diagonal_features(problem: Problem) -> torch.Tensor:
    r"""The features :math:`\phi_{it} = x_{it} \odot z_i` of the diagonal model.

    The logit of token t under :math:`W = \mathrm{diag}(w)` is ``phi[..., i, t, :] @ w``.

    Parameters
    ----------
    problem : Problem
        The problems (a batch).

    Returns
    -------
    Tensor
        :math:`\phi`, shape (..., n, T, d).

    Raises
    ------
    ValueError
        If the problem has no queries Z.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import data, model, svm
    >>> problem = data.random_problem(n=2, T=3, d=4, seed=0)
    >>> phi = svm.diagonal_features(problem)
    >>> w = torch.arange(4.0, dtype=torch.float64)
    >>> phi.shape, bool(torch.allclose(phi @ w, model.logits(problem, torch.diag(w))))
    (torch.Size([2, 3, 4]), True)
    """
    problem = _checked_problem(problem, needs_Z=True)
    return problem.X * problem.Z[..., None, :]


def _norm(norm) -> int:
    """`norm` checked to be 1 or 2 (an int or a float equal to one, not a bool)."""
    ok = isinstance(norm, (int, float, np.integer, np.floating)) and not isinstance(norm, (bool, np.bool_))
    if not ok or norm not in DIAGONAL_NORMS:
        raise ValueError(f"norm={norm!r} is not supported: the diagonal Att-SVM takes norm=2 (||w||_2, the "
                         f"Frobenius norm of diag(w)) or norm=1 (||w||_1, its nuclear norm)")
    return int(norm)


def _nonnegative_l1(A: np.ndarray):
    """min sum(w) s.t. A w >= 1, w >= 0 by HiGHS (highspy: no modelling layer, no scipy wrapper, which took most
    of the time of so small a program): w, or None where HiGHS certifies that no such w exists or where its
    Euclidean norm exceeds MAX_NORM (numerically infeasible, the rule of att_svm)."""
    import highspy

    k, d = A.shape
    solver = highspy.Highs()
    for name, value in (("output_flag", False), ("primal_feasibility_tolerance", HIGHS_TOL),
                        ("dual_feasibility_tolerance", HIGHS_TOL)):
        solver.setOptionValue(name, value)
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = d, k
    lp.col_cost_, lp.col_lower_, lp.col_upper_ = np.ones(d), np.zeros(d), np.full(d, highspy.kHighsInf)
    lp.row_lower_, lp.row_upper_ = np.ones(k), np.full(k, highspy.kHighsInf)
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.start_ = np.arange(0, k * d + 1, d, dtype=np.int32)
    lp.a_matrix_.index_ = np.tile(np.arange(d, dtype=np.int32), k)
    lp.a_matrix_.value_ = np.ascontiguousarray(A, dtype=np.float64).ravel()
    solver.passModel(lp)
    solver.run()
    status = solver.getModelStatus()
    if status == highspy.HighsModelStatus.kInfeasible:
        return None
    if status != highspy.HighsModelStatus.kOptimal:
        raise SolverError(f"HiGHS stopped with status {solver.modelStatusToString(status)} on the l1 diagonal "
                          f"Att-SVM")
    w = np.maximum(np.array(solver.getSolution().col_value), 0.0)
    return None if np.linalg.norm(w) > MAX_NORM else w  # numerically infeasible, as att_svm's rule


def diagonal_svm(problem: Problem, alpha: ArrayLike, norm: int = 2, *, nonnegative: bool = False) -> np.ndarray:
    r"""The diagonal Att-SVM :math:`w^p_\alpha`: the w of least norm with margins :math:`\langle \phi_{i\alpha_i} -
    \phi_{it}, w\rangle \ge 1` (``diagonal_features``).

    It is the Att-SVM over :math:`W = \mathrm{diag}(w)` with the Frobenius (2) or nuclear (1) norm. The
    :math:`\ell_1` solution (a linear program) may not be unique, and this is the one HiGHS returns.

    Parameters
    ----------
    problem : Problem
        The problems (a batch).
    alpha : ArrayLike
        The selected token of each sequence, shape (..., n).
    norm : {1, 2}, default=2
        2: :math:`\|w\|_2`; 1: :math:`\|w\|_1`.
    nonnegative : bool, default=False
        Also ask :math:`w \ge 0`.

    Returns
    -------
    ndarray
        w, shape (..., d).

    Raises
    ------
    InfeasibleSVM
        Where no such w exists; its ``.instances`` lists the batch instances.
    ValueError
        If norm is not 1 or 2, or alpha does not fit the problem.

    Examples
    --------
    >>> import numpy as np
    >>> from attnsvm import data, svm, theory
    >>> problem = data.random_problem(n=5, T=2, d=12, seed=1)
    >>> alpha = theory.optimal_tokens(problem)
    >>> w2, w1 = svm.diagonal_svm(problem, alpha), svm.diagonal_svm(problem, alpha, norm=1)
    >>> w2.shape, int((np.abs(w2) > 1e-9).sum()), int((np.abs(w1) > 1e-9).sum())
    ((12,), 12, 5)
    >>> bool(np.abs(w1).sum() <= np.abs(w2).sum())
    True
    """
    problem = _checked_problem(problem, min_T=2, why="with one token there is nothing to separate", needs_Z=True)
    norm, nonnegative = _norm(norm), boolean(nonnegative, "nonnegative")
    batch, n, T, d = problem.batch_shape, problem.n, problem.T, problem.d
    alpha = as_index(alpha, "alpha", batch + (n,), T).reshape(-1, n)
    phi = diagonal_features(problem).detach().cpu().numpy().reshape(-1, n, T, d)
    solutions = []
    for phi_b, alpha_b in zip(phi, alpha):
        (phi_b,), e = _unit_scale(phi_b)
        A = _pairs(phi_b, np.zeros((n, d)), alpha_b)[0]
        if norm == 2:
            rows, h = (np.vstack([A, np.eye(d)]), np.r_[np.ones(len(A)), np.zeros(d)]) if nonnegative else (A, None)
            solution = _least_distance(rows, h)
            w = None if solution is None else (np.maximum(solution[0], 0.0) if nonnegative else solution[0])
        elif nonnegative:
            w = _nonnegative_l1(A)
        else:  # w = w+ - w- with w+, w- >= 0, at an optimum never both positive in one entry
            w = _nonnegative_l1(np.hstack([A, -A]))
            w = None if w is None else w[:d] - w[d:]
        if w is not None:
            w = w / _accepted((A @ w).min(), "the diagonal Att-SVM solution has a margin")
            w = _unscale(w, e, "the diagonal Att-SVM solution for this problem")
        solutions.append(w)
    _raise_infeasible(solutions, batch, "the diagonal Att-SVM" + (" with w >= 0" if nonnegative else ""),
                      "no diagonal W" + (" with non-negative entries" if nonnegative else "") + " separates the "
                      f"selected tokens alpha from the others with margin 1 (or only ones with ||w||_{norm} > {MAX_NORM:g})")
    return np.array(solutions).reshape(batch + (d,))
