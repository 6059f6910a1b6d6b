"""Paper A's rank experiment (E2.2): the singular values of both Att-SVM solutions on random feasible problems.

Each grid point (n, T, d) draws random problems in chunks of `chunk` (`theory.sample_feasible`; chunk j has seed
1000 n + 100 T + d + 10**6 j, so chunk 0 is the batch that earlier versions drew alone), keeps the first `count`
whose Att-SVM is feasible for the optimal tokens, and stops after `max_draws` draws if it has not found them.
It solves the Frobenius and the nuclear-norm Att-SVM of each. The points do not depend on each other, so `grid`
can spread them over worker processes; the answer does not depend on how many.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import numpy as np
import torch

from .. import svm, theory
from .._checks import budget, finite_result, positive_int
from ..data import _memory, _sizes, _workers
from .._session import worker_pool

__all__ = ["Spectra", "feasible_problems", "grid", "spectra", "CHUNK_SEED_STRIDE"]

CHUNK_SEED_STRIDE = 10**6  # chunk j of a point has seed base + j * CHUNK_SEED_STRIDE (bases are below 10**6)


class Spectra(NamedTuple):
    """values: singular values (2, found, d) of W_mm (Frobenius) and W_mm_star (nuclear), largest first;
    draws: how many random problems were drawn to find them."""

    values: np.ndarray
    draws: int


def _arguments(n, T, d, count, max_draws, chunk) -> tuple[int, ...]:
    """The arguments of `feasible_problems`, checked (sizes, budgets), as ints."""
    n, T, d = _sizes(n, T, d)
    count, max_draws, chunk = (positive_int(value, name) for value, name in
                               ((count, "count"), (max_draws, "max_draws"), (chunk, "chunk")))
    budget(max_draws, "max_draws", theory.MAX_DRAWS, "random problems")
    _memory(min(chunk, max_draws) * n * (T + 1) * d, "chunk (or max_draws), n, T and d")
    _memory(min(count, max_draws) * 2 * d * d, "count and d")  # the solutions of the feasible problems
    return n, T, d, count, max_draws, chunk


def feasible_problems(n: int, T: int, d: int, *, count: int = 100, max_draws: int = 2000, chunk: int = 2000):
    """The first `count` problems at (n, T, d) whose Att-SVM is feasible for the optimal tokens, drawn in chunks
    (see the module docstring), and at most `max_draws` draws. Returns (problems, alpha, draws) as
    `theory.sample_feasible` does; fewer than `count` problems when `max_draws` runs out first."""
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
    """The singular values of both Att-SVM solutions on the feasible problems found at (n, T, d)."""
    problems, alpha, draws = feasible_problems(n, T, d, count=count, max_draws=max_draws, chunk=chunk)
    if len(alpha) == 0:
        return Spectra(np.zeros((2, 0, d)), draws)
    W = np.stack([svm.att_svm(problems.X, problems.Z, alpha, norm) for norm in ("fro", "nuc")])
    values = finite_result(np.linalg.svd(W, compute_uv=False), "the singular values", "the Att-SVM solutions "
                                                                                       "overflow float64")
    return Spectra(values, draws)


def grid(points, *, count: int = 100, max_draws: int = 2000, chunk: int = 2000,
         workers: int = 1) -> dict[tuple, Spectra]:
    """`spectra` at every (n, T, d) of `points`, computed by `workers` processes (one: in this process); each
    point is a separate task, so two slow points can run at the same time."""
    try:
        points = [tuple(point) for point in points] if not isinstance(points, (str, bytes)) else []
    except TypeError:
        points = []
    if not points or any(len(point) != 3 for point in points):
        raise ValueError("points must be a non-empty list of (n, T, d) triples, e.g. [(5, 5, 10), (5, 5, 20)]")
    for k, point in enumerate(points):  # here, before any work, so that the error names the argument
        try:
            _sizes(*point)
        except ValueError as err:
            raise ValueError(f"points[{k}]={point}: {err}") from None
        _arguments(*point, count, max_draws, chunk)
    workers = _workers(workers)
    point_spectra = partial(spectra, count=count, max_draws=max_draws, chunk=chunk)
    if workers == 1:
        return {point: point_spectra(*point) for point in points}
    with worker_pool(min(workers, len(points))) as pool:
        return dict(zip(points, pool.map(point_spectra, *zip(*points))))
