"""`setup()`: one call at the top of every chapter fixes precision, threads, seeds and plot style."""

from __future__ import annotations

import platform
import random
import warnings
from concurrent.futures import ProcessPoolExecutor
from importlib.metadata import version
from multiprocessing import get_context

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from . import codepaths, _checks
from ._checks import positive_int

__all__ = ["environment", "setup", "worker_pool", "PACKAGES"]

PACKAGES = ("attnsvm", "torch", "cvxpy", "numpy", "scipy", "matplotlib")


def setup(seed: int = 0, threads: int = 1) -> None:
    """float64 by default, `threads` threads for torch and for numpy's and scipy's BLAS, every global seed set
    to `seed`, the book's plot style.

    One thread by default: on 2 cores, 500 batched GD steps took 0.31 s with 1 thread and 0.20 s with 2 on
    an idle machine, but 0.51 s with 2 as soon as another process used a core (and 15 times longer under
    heavier load), and a batch of NNLS solves went from 1.3 s to 6.6 s with two BLAS threads under load; one
    thread is never far from the best. Warns when a library does not run the pinned CPU code path
    (`codepaths.report()`), since the printed numbers may then differ from the book's in their last digits;
    `environment()` prints the versions a result was computed with.
    """
    _numerics(seed, threads)
    try:
        from .book import plots  # the book's figure style, when matplotlib is installed (the `book` extra)
    except ImportError:
        pass
    else:
        plots.use_style()
    unpinned = codepaths.report()
    if unpinned and codepaths.PINNABLE:
        warnings.warn("Not every library runs the book's CPU code path, so a printed number may differ from the "
                      f"book's in its last digits: {unpinned}. Fix: restart the kernel and import attnsvm before "
                      "numpy, torch and numba (the chapters' first import does).", stacklevel=2)


def _numerics(seed: int = 0, threads: int = 1) -> None:
    """The part of `setup()` that results depend on (precision, threads, seeds): what worker processes run."""
    threads = positive_int(threads, "threads")
    seed = _checks.seed(seed)
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(threads)
    threadpool_limits(threads)  # the BLAS of numpy and scipy (the NNLS and least-squares solves)
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def environment() -> None:
    """Print the versions of the packages and of Python that results are computed with."""
    items = [f"{name} {version(name)}" for name in PACKAGES] + [f"Python {platform.python_version()}"]
    print("\n".join(" | ".join(items[k:k + 4]) for k in range(0, len(items), 4)))


def worker_pool(workers: int) -> ProcessPoolExecutor:
    """`workers` new processes, each set up as by `setup()` but without its plot style (float64, one thread, no
    matplotlib), for experiments that spread
    independent parts over cores. Starting one takes seconds (it imports the library): reuse a pool."""
    return ProcessPoolExecutor(positive_int(workers, "workers"), mp_context=get_context("spawn"),
                               initializer=_numerics)
