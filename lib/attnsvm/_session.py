"""``setup()``: one call at the top of every chapter fixes precision, threads, seeds and plot style;
``environment()`` prints the versions a result was computed with."""

from __future__ import annotations

import os
import platform
import random
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from . import codepaths, _checks
from ._checks import positive_int

__all__ = ["environment", "setup", "PACKAGES"]

PACKAGES = ("attnsvm", "torch", "cvxpy", "numpy", "scipy", "matplotlib")
_loop_threads: int | None = None  # setup(loop_threads=...); None: every core the process may run on


def setup(seed: int = 0, threads: int = 1, loop_threads: int | None = None) -> None:
    """Set the book's numerics: float64 by default, ``threads`` threads for torch and for numpy's and scipy's BLAS,
    ``loop_threads`` for the training loops' blocks, every global seed set to ``seed``, and the book's plot style
    (when matplotlib is installed).

    One thread by default: on 2 cores, 500 batched GD steps took 0.31 s with 1 thread and 0.20 s with 2 on an idle
    machine, but 0.51 s with 2 as soon as another process used a core (and 15 times longer under heavier load), and
    a batch of NNLS solves went from 1.3 s to 6.6 s with two BLAS threads under load; one thread is never far from
    the best. The compiled loops (``train.gd`` and the other trainers on the CPU) are another matter: they cut a
    batch of more than 64 problems into blocks and run the blocks side by side, one thread each, and since each
    problem's arithmetic is its own and the blocks do not depend on the threads, a run is the same bit for bit on
    any number of threads (tests/lib); by default they use every core the process may run on. The torch loops of
    ``train.gd`` without a head (``engine="torch"``, paper A's ``rule="official"``) and of mirror and sign descent
    run a one-dimensional CPU batch of 256 problems or more in blocks the same way, each block one tensor program,
    on up to ``loop_threads`` threads (torch's kernels release the GIL). Warns when a library does not run the
    pinned CPU code path (``codepaths.report()``), since the printed numbers may then differ from the book's in
    their last digits; ``environment()`` prints the versions a result was computed with. The experiments' parallel
    tasks set the same numerics themselves (``attnsvm.experiments``), in whatever process runs them.

    Parameters
    ----------
    seed : int, default=0
        The global seed.
    threads : int, default=1
        Threads for torch and the BLAS.
    loop_threads : int or None, default=None
        Threads for the training loops' blocks; None: every core the process may run on.

    Raises
    ------
    ValueError
        If threads or loop_threads is not a positive integer.

    Examples
    --------
    >>> import attnsvm, torch
    >>> attnsvm.setup(seed=0)
    >>> torch.get_default_dtype(), torch.get_num_threads()
    (torch.float64, 1)
    """
    global _loop_threads
    loops = None if loop_threads is None else positive_int(loop_threads, "loop_threads")
    _numerics(seed, threads)
    _loop_threads = loops
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
    """The part of ``setup()`` that results depend on (precision, threads, seeds)."""
    threads = positive_int(threads, "threads")
    seed = _checks.seed(seed)
    torch.set_default_dtype(torch.float64)
    torch.set_num_threads(threads)
    threadpool_limits(threads)  # the BLAS of numpy and scipy (the NNLS and least-squares solves)
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def _threads_for_loops() -> int:
    """The threads the compiled loops run a batch's blocks on: ``setup()``'s ``loop_threads``, else every core the
    process may run on."""
    if _loop_threads is not None:
        return _loop_threads
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this platform (macOS)
        return os.cpu_count() or 1


@contextmanager
def _task_numerics(seed: int = 0) -> Iterator[None]:
    """Run a block under ``setup()``'s numerics (float64, one thread for torch, the BLAS and the compiled loops,
    every global seed ``seed``), then give the process back its own (dtype, threads, random states).

    Each task of a parallel experiment runs in this block, so that it computes the same numbers in whatever
    process a joblib backend gives it: the caller's (one worker), a loky worker, a Dask worker. torch's settings
    belong to the process, so a backend that runs two tasks as threads of one process would share them: use
    one thread per worker process (Dask: ``threads_per_worker=1``)."""
    global _loop_threads
    dtype, threads, loops = torch.get_default_dtype(), torch.get_num_threads(), _loop_threads
    states = torch.random.get_rng_state(), np.random.get_state(), random.getstate()
    try:
        _loop_threads = 1  # the tasks themselves run side by side
        with threadpool_limits(1):  # numpy's and scipy's BLAS, restored on leaving
            torch.set_default_dtype(torch.float64)
            torch.set_num_threads(1)
            torch.manual_seed(seed)
            np.random.seed(seed)
            random.seed(seed)
            yield
    finally:
        torch.set_default_dtype(dtype)
        torch.set_num_threads(threads)
        _loop_threads = loops
        torch.random.set_rng_state(states[0])
        np.random.set_state(states[1])
        random.setstate(states[2])


def environment() -> None:
    """Print the versions of the packages (``PACKAGES``, those installed) and of Python that results are computed
    with.

    Examples
    --------
    >>> import attnsvm
    >>> attnsvm.environment()
    attnsvm ... | torch ... | cvxpy ... | numpy ...
    scipy ... | Python ...
    """
    items = []
    for name in PACKAGES:
        try:
            items.append(f"{name} {version(name)}")
        except PackageNotFoundError:  # matplotlib is the `book` extra's
            pass
    items.append(f"Python {platform.python_version()}")
    print("\n".join(" | ".join(items[k:k + 4]) for k in range(0, len(items), 4)))
