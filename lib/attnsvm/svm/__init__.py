"""The attention SVMs: Att-SVM with the Frobenius or nuclear norm (its interior-point method is compiled,
`_nuclear_svm`), the prompt, general (soft-selection) and head SVMs, and the errors they raise."""

from ._attention import (MAX_NORM, MEMORY, SCALES, SOLVERS, GeneralSVM, InfeasibleSVM, SolverError, att_svm,
                         constraint_matrix, feasible, general_svm, head_svm, prompt_svm)
from ._nuclear_svm import MARGIN_TOL

__all__ = ["GeneralSVM", "InfeasibleSVM", "SolverError", "att_svm", "constraint_matrix", "feasible", "general_svm",
           "head_svm", "prompt_svm", "SOLVERS", "MAX_NORM", "SCALES", "MEMORY", "MARGIN_TOL"]
