"""The attention SVMs: Att-SVM with the Frobenius or nuclear norm (its interior-point method is compiled),
the prompt, general (soft-selection) and head SVMs, the hard- and soft-margin SVMs of any constraint rows (which
the causal Att-SVMs use), and the errors they raise.

The Att-SVM solvers take arrays or an ``attnsvm.data.Problem``: ``att_svm(X, Z, alpha)`` is
``att_svm(problem, alpha)`` for ``problem.X``, ``problem.Z`` (likewise ``feasible``, ``constraint_matrix``,
``general_svm(problem, probs)``, ``head_svm(problem, alpha)`` with ``problem.Y``, and ``prompt_svm(problem, key,
alpha)``).

Examples
--------
>>> from attnsvm import data, svm, theory
>>> problem = data.random_problem(n=2, T=3, d=3, seed=0)
>>> alpha = theory.optimal_tokens(problem)
>>> bool(svm.feasible(problem, alpha)), svm.att_svm(problem, alpha).shape
(True, (3, 3))
"""

from ._diagonal import DIAGONAL_NORMS, diagonal_features, diagonal_svm
from ._attention import (GAP_TOL, MAX_NORM, MEMORY, POLISH_TOL, SCALES, SOLVERS, GeneralSVM, InfeasibleSVM,
                         SolverError, att_svm, constraint_matrix, feasible, general_svm, head_svm, prompt_svm)
from ._nuclear_svm import MARGIN_TOL
from ._soft_margin import OBJECTIVES, SOLVER_FLOATS, penalty_threshold, soft_margin_svm
from ._spectral import SPECTRAL_SOLVERS, spectral_att_svm

__all__ = ["GeneralSVM", "InfeasibleSVM", "SolverError", "att_svm", "constraint_matrix", "feasible", "general_svm",
           "head_svm", "prompt_svm", "SOLVERS", "MAX_NORM", "SCALES", "MEMORY", "MARGIN_TOL",
           "soft_margin_svm", "penalty_threshold", "OBJECTIVES", "SOLVER_FLOATS", "GAP_TOL", "POLISH_TOL",
           "spectral_att_svm", "SPECTRAL_SOLVERS",
           "diagonal_svm", "diagonal_features", "DIAGONAL_NORMS"]
