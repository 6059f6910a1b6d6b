"""attnsvm: attention as max-margin token selection.

Modules: `data` (problem instances), `model` (the attention model and losses), `theory` (token scores,
optimal tokens, margins, support tokens, correlation), `svm` (Att-SVM solvers), `train` (gradient
descent), `plots` (the book's figure style). Call `setup()` once at the top of a chapter.
"""

from importlib.metadata import version as _version

from . import data, exercises, model, plots, svm, theory, train
from .session import elapsed, setup
from .svm import InfeasibleSVM

__version__ = _version("attnsvm")
__all__ = ["data", "exercises", "model", "plots", "svm", "theory", "train", "setup", "elapsed", "InfeasibleSVM", "__version__"]
