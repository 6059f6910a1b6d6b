"""`setup()`: one call at the top of every chapter fixes precision, threads, seeds and plot style."""

from __future__ import annotations

import platform
import random
from importlib.metadata import version

import numpy as np
import torch

from . import plots
from .checks import positive_int

PACKAGES = ("attnsvm", "torch", "cvxpy", "numpy", "scipy", "matplotlib")


def setup(seed: int = 0, threads: int = 1, *, quiet: bool = False) -> None:
    """float64 by default, `threads` torch threads, every global seed set to `seed`, the book's plot style.

    One thread is the fastest for the book's small batched problems (thread start-up dominates).
    Prints the versions it runs with, so that a printed result can be traced to its environment.
    """
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(positive_int(threads, "threads"))
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    plots.use_style()
    if not quiet:
        versions = " | ".join(f"{name} {version(name)}" for name in PACKAGES)
        print(f"{versions} | Python {platform.python_version()} | seed {seed}")
