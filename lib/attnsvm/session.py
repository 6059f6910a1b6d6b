"""`setup()`: one call at the top of every chapter fixes precision, threads, seeds and plot style."""

from __future__ import annotations

import platform
import random
import time
from importlib.metadata import version

import numpy as np
import torch

from . import plots
from .checks import positive_int

PACKAGES = ("attnsvm", "torch", "cvxpy", "numpy", "scipy", "matplotlib")
_started = time.perf_counter()


def setup(seed: int = 0, threads: int | None = None, *, quiet: bool = False) -> None:
    """float64 by default, every global seed set to `seed`, the book's plot style; `threads` torch threads
    (default: torch's own choice, one per core). Prints the versions it runs with, so that a printed
    result can be traced to its environment.
    """
    global _started
    _started = time.perf_counter()
    torch.set_default_dtype(torch.float64)
    if threads is not None:
        torch.set_num_threads(positive_int(threads, "threads"))
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    plots.use_style()
    if not quiet:
        items = [f"{name} {version(name)}" for name in PACKAGES]
        items += [f"Python {platform.python_version()}", f"seed {seed}"]
        print("\n".join(" | ".join(items[k:k + 4]) for k in range(0, len(items), 4)))


def elapsed() -> None:
    """Print the seconds since `setup()`: the chapter's execution time."""
    print(f"This chapter executed in {time.perf_counter() - _started:.1f} s.")
