"""attnsvm: attention as max-margin token selection.

Modules: `data` (problem instances), `model` (the attention model and losses), `theory` (token scores, optimal
and locally-optimal tokens, margins, support tokens, correlation, convergence classes), `svm` (Att-SVM solvers;
`nuclear` is its compiled interior-point method), `train` (gradient descent, the regularization path, paper B's
prompt model; the gradients themselves are in `gradients`, the compiled loop for W on the CPU in `compiled`),
`heads` (linear, ReLU and lambda heads), `multitoken` (paper A's ReLU-head experiment and its run filter),
`ranks` (paper A's rank experiment), `causal` (every token a query: causal and seq2seq attention, the synthetic
language, the causal and soft-margin Att-SVMs), `tensor` (paper C's tensor-trick view and Lipschitz bounds),
`plots` (the book's figure style and tables), `widgets` (explorers), `exercises` (self-checks). Call `setup()`
once at the top of a chapter.

Import attnsvm before numpy, torch and numba: `codepaths` then pins their CPU code paths, so that the printed
numbers are the same on any x86-64 machine with AVX2.
"""

from . import codepaths  # noqa: I001 (first: it sets the code paths before numpy and torch load)
from importlib import import_module as _import_module
from importlib.metadata import version as _version

from . import causal, data, heads, model, multitoken, nuclear, ranks, svm, tensor, theory, train
from .session import environment, setup, worker_pool
from .svm import InfeasibleSVM, SolverError

# The book's own modules (figures, explorers, exercise self-checks) load on first use, so that the science
# imports without matplotlib and IPython (`pip install attnsvm[book]` adds them).
_BOOK_MODULES = ("exercises", "plots", "widgets")
__version__ = _version("attnsvm")
__all__ = ["codepaths", "causal", "data", "exercises", "heads", "model", "multitoken", "nuclear", "plots", "ranks",
           "svm", "tensor", "theory", "train", "widgets", "setup", "environment", "worker_pool", "InfeasibleSVM", "SolverError",
           "__version__"]


def __getattr__(name: str):
    if name in _BOOK_MODULES:
        return _import_module(f".{name}", __name__)
    raise AttributeError(f"module 'attnsvm' has no attribute {name!r}")
