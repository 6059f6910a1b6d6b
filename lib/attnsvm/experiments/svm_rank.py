"""Paper A's rank experiment (E2.2): the singular values of both Att-SVM solutions on random feasible problems.

Each grid point (n, T, d) draws random problems in chunks of ``chunk`` (``theory.sample_feasible``; chunk j has
seed 1000 n + 100 T + d + 10**6 j, so chunk 0 is the batch that earlier versions drew alone), keeps the first
``count`` whose Att-SVM is feasible for the optimal tokens, and stops after ``max_draws`` draws if it has not found
them. It solves the Frobenius and the nuclear-norm Att-SVM of each. The points do not depend on each other, so
``grid`` hands them to joblib as separate tasks (worker processes, or a Dask cluster under
``joblib.parallel_config``); the answer does not depend on where they run.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import numpy as np
import torch
from joblib import Parallel, delayed

from .. import data, svm, theory
from .._checks import budget, finite_result, positive_int
from .._session import _task_numerics
from ..data import _memory, _sizes, _workers

__all__ = ["Spectra", "feasible_problems", "grid", "spectra", "CHUNK_SEED_STRIDE"]

CHUNK_SEED_STRIDE = 10**6  # chunk j of a point has seed base + j * CHUNK_SEED_STRIDE (bases are below 10**6)


class Spectra(NamedTuple):
    r"""The result at one grid point.

    Parameters
    ----------
    values : ndarray
        The singular values (2, found, d) of :math:`W_{mm}` (Frobenius) and :math:`W^\star_{mm}` (nuclear) of
        each feasible problem found, largest first.
    draws : int
        How many random problems were drawn to find them.

    Examples
    --------
    >>> from attnsvm.experiments import svm_rank
    >>> result = svm_rank.spectra(3, 4, 5, count=2)
    >>> result.values.shape, type(result.draws)
    ((2, 2, 5), <class 'int'>)
    """

    values: np.ndarray
    draws: int


def _counts(count, max_draws, chunk) -> tuple[int, ...]:
    """``count``, ``max_draws`` and ``chunk``, checked, as ints."""
    count, max_draws, chunk = (positive_int(value, name) for value, name in
                               ((count, "count"), (max_draws, "max_draws"), (chunk, "chunk")))
    budget(max_draws, "max_draws", theory.MAX_DRAWS, "random problems")
    return count, max_draws, chunk


def _arguments(n, T, d, count, max_draws, chunk) -> tuple[int, ...]:
    """The arguments of ``feasible_problems``, checked (sizes, budgets), as ints."""
    n, T, d = _sizes(n, T, d)
    count, max_draws, chunk = _counts(count, max_draws, chunk)
    _memory(min(chunk, max_draws) * n * (T + 1) * d, "chunk (or max_draws), n, T and d")
    _memory(min(count, max_draws) * 2 * d * d, "count and d")  # the solutions of the feasible problems
    return n, T, d, count, max_draws, chunk


def feasible_problems(n: int, T: int, d: int, *, count: int = 100, max_draws: int = 2000,
                      chunk: int = 2000) -> tuple[data.Problem, torch.Tensor, int]:
    """The first ``count`` problems at (n, T, d) whose Att-SVM is feasible for the optimal tokens, drawn in chunks (see
    the module docstring), and at most ``max_draws`` draws.

    Parameters
    ----------
    n : int
        The number of sequences.
    T : int
        Tokens per sequence.
    d : int
        The dimension.
    count : int, default=100
        How many problems.
    max_draws : int, default=2000
        The most problems drawn.
    chunk : int, default=2000
        Problems drawn at a time.

    Returns
    -------
    tuple
        (problems, alpha, draws) as ``theory.sample_feasible`` returns them: the batch of feasible problems,
        their optimal tokens (found, n) and the number of problems drawn; fewer than ``count`` problems when
        ``max_draws`` runs out first.

    Raises
    ------
    ValueError
        If a size is out of range.

    Examples
    --------
    >>> from attnsvm.experiments import svm_rank
    >>> problems, alpha, draws = svm_rank.feasible_problems(3, 4, 5, count=2)
    >>> problems.batch_shape, tuple(alpha.shape), draws >= 2
    ((2,), (2, 3), True)
    """
    n, T, d, count, max_draws, chunk = _arguments(n, T, d, count, max_draws, chunk)
    base, parts, found, draws, j = 1000 * n + 100 * T + d, [], 0, 0, 0
    while found < count and draws < max_draws:
        size = min(chunk, max_draws - draws)
        problems, alpha, used = theory.sample_feasible(n, T, d, count=count - found, max_draws=size,
                                                       seed=base + CHUNK_SEED_STRIDE * j)
        parts.append((problems, alpha))
        found, draws, j = found + len(alpha), draws + int(used), j + 1
    if len(parts) == 1:
        return (*parts[0], draws)
    problems = type(parts[0][0])(*(torch.cat(fields) for fields in zip(*(
        (p.X, p.Y, p.Z, p.v) for p, _ in parts))))
    return problems, torch.cat([alpha for _, alpha in parts]), draws


def spectra(n: int, T: int, d: int, *, count: int = 100, max_draws: int = 2000, chunk: int = 2000) -> Spectra:
    """The singular values of both Att-SVM solutions on the feasible problems found at (n, T, d)
    (``feasible_problems``), and the number of problems drawn.

    Parameters
    ----------
    n : int
        The number of sequences.
    T : int
        Tokens per sequence.
    d : int
        The dimension.
    count : int, default=100
        As in ``feasible_problems``.
    max_draws : int, default=2000
        As in ``feasible_problems``.
    chunk : int, default=2000
        As in ``feasible_problems``.

    Returns
    -------
    Spectra
        The singular values and the draws.

    Raises
    ------
    ValueError
        If a size is out of range.

    Examples
    --------
    >>> from attnsvm.experiments import svm_rank
    >>> result = svm_rank.spectra(3, 4, 5, count=2)
    >>> ranks = (result.values > 1e-7).sum(-1)  # the rank of each solution, tolerance 1e-7
    >>> ranks.shape, bool((ranks[0] <= 3).all())  # the Frobenius solution has rank at most min(n, d)
    ((2, 2), True)
    """
    problems, alpha, draws = feasible_problems(n, T, d, count=count, max_draws=max_draws, chunk=chunk)
    if len(alpha) == 0:
        return Spectra(np.zeros((2, 0, d)), draws)
    W = np.stack([svm.att_svm(problems.X, problems.Z, alpha, norm) for norm in ("fro", "nuc")])
    values = finite_result(np.linalg.svd(W, compute_uv=False), "the singular values", "the Att-SVM solutions "
                                                                                       "overflow float64")
    return Spectra(values, draws)


def _point_spectra(point: tuple[int, int, int], count: int, max_draws: int, chunk: int) -> Spectra:
    """One task of ``grid``: ``spectra`` at ``point`` under ``setup()``'s numerics, in whatever process runs it."""
    with _task_numerics():
        return spectra(*point, count=count, max_draws=max_draws, chunk=chunk)


def grid(points: Iterable[tuple[int, int, int]], *, count: int = 100, max_draws: int = 2000, chunk: int = 2000,
         workers: int | None = None) -> dict[tuple[int, int, int], Spectra]:
    """``spectra`` at every (n, T, d) of ``points``, in their order.

    Each point is a separate joblib task (so two slow points can run at the same time; list the slow ones first).
    Each task sets ``setup()``'s numerics itself, so the answer is the same bit for bit wherever the points run.

    Parameters
    ----------
    points : Iterable of tuple
        The (n, T, d) triples.
    count : int, default=100
        As in ``spectra``.
    max_draws : int, default=2000
        As in ``spectra``.
    chunk : int, default=2000
        As in ``spectra``.
    workers : int or None, default=None
        1 computes the points in this process, k > 1 in k worker processes (joblib's default backend, loky, or the
        backend of an enclosing ``joblib.parallel_config``); None leaves the choice to joblib: this process,
        unless the call is inside ``joblib.parallel_config(n_jobs=..., backend=...)``, e.g. ``backend="dask"`` to
        run the points on a Dask cluster.

    Returns
    -------
    dict
        {point: Spectra}.

    Raises
    ------
    ValueError
        If points is empty or a point is invalid.

    Examples
    --------
    >>> from attnsvm.experiments import svm_rank
    >>> results = svm_rank.grid([(3, 4, 5), (3, 4, 6)], count=2)
    >>> [(point, result.values.shape) for point, result in results.items()]
    [((3, 4, 5), (2, 2, 5)), ((3, 4, 6), (2, 2, 6))]
    """
    try:
        points = [tuple(point) for point in points] if not isinstance(points, (str, bytes)) else []
    except TypeError:
        points = []
    if not points or any(len(point) != 3 for point in points):
        raise ValueError("points must be a non-empty list of (n, T, d) triples, e.g. [(5, 5, 10), (5, 5, 20)]")
    _counts(count, max_draws, chunk)
    for k, point in enumerate(points):  # here, before any work, so that the error names the argument
        try:
            _arguments(*point, count, max_draws, chunk)  # the point's sizes and memory
        except ValueError as err:
            raise ValueError(f"points[{k}]={point}: {err}") from None
    n_jobs = None if workers is None else min(_workers(workers), len(points))
    tasks = (delayed(_point_spectra)(point, count, max_draws, chunk) for point in points)
    return dict(zip(points, Parallel(n_jobs=n_jobs, batch_size=1)(tasks)))
