"""attnsvm: attention as max-margin token selection.

Modules: `linear` (the prelude's linear classifiers: hard-margin SVM, gradient descent on separable data),
`data` (problem instances), `model` (the attention model and losses), `heads` (linear, ReLU and lambda
heads), `theory` (token scores, optimal and locally-optimal tokens, margins, support tokens, correlation,
convergence classes), `svm` (the Att-SVM solvers), `train` (gradient descent, its gradients and
initializations, the regularization path), `causal` (every token a query: causal attention, the synthetic
language, the causal and soft-margin Att-SVMs), `tensor` (paper C's tensor-trick view and Lipschitz bounds),
`experiments` (paper A's ReLU-head and rank experiments). `book` holds the book's figure style, explorers and
exercise self-checks; it loads on first use and needs the `book` extra. Call `setup()` once at the top of a
chapter.

Import attnsvm before numpy, torch and numba: `codepaths` then pins their CPU code paths, so that the printed
numbers are the same on any x86-64 machine with AVX2.
"""

from . import codepaths  # noqa: I001 (first: it sets the code paths before numpy and torch load)
from importlib import import_module as _import_module
from importlib.metadata import version as _version

from . import causal, data, experiments, heads, linear, model, svm, tensor, theory, train
from ._session import environment, setup
from .svm import InfeasibleSVM, SolverError

__version__ = _version("attnsvm")
__all__ = ["book", "causal", "codepaths", "data", "experiments", "heads", "linear", "model", "svm", "tensor", "theory",
           "train", "setup", "environment", "InfeasibleSVM", "SolverError", "__version__"]


def __getattr__(name: str):
    # The book's helpers load on first use, so that the science imports without matplotlib and IPython.
    if name == "book":
        return _import_module(".book", __name__)
    raise AttributeError(f"module 'attnsvm' has no attribute {name!r}")
