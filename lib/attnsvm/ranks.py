"""Paper A's rank experiment (E2.2): the singular values of both Att-SVM solutions on random feasible problems.

Each grid point (n, T, d) draws up to `max_draws` random problems (`theory.sample_feasible`, seed
1000 n + 100 T + d), keeps the first `count` whose Att-SVM is feasible for the optimal tokens, and solves the
Frobenius and the nuclear-norm Att-SVM of each. The points do not depend on each other, so `grid` can spread
them over worker processes; the answer does not depend on how many.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import numpy as np

from . import svm, theory
from .checks import positive_int
from .session import worker_pool


class Spectra(NamedTuple):
    """values: singular values (2, found, d) of W_mm (Frobenius) and W_mm_star (nuclear), largest first;
    draws: how many random problems were drawn to find them."""

    values: np.ndarray
    draws: int


def spectra(n: int, T: int, d: int, *, count: int = 100, max_draws: int = 2000) -> Spectra:
    """The singular values of both Att-SVM solutions on the feasible problems found at (n, T, d)."""
    n, T, d = (positive_int(value, name) for value, name in ((n, "n"), (T, "T"), (d, "d")))
    problems, alpha, draws = theory.sample_feasible(n, T, d, count=count, seed=1000 * n + 100 * T + d,
                                                    max_draws=max_draws)
    if len(alpha) == 0:
        return Spectra(np.zeros((2, 0, d)), draws)
    W = np.stack([svm.att_svm(problems.X, problems.Z, alpha, norm) for norm in ("fro", "nuc")])
    return Spectra(np.linalg.svd(W, compute_uv=False), draws)


def grid(points, *, count: int = 100, max_draws: int = 2000, workers: int = 1) -> dict[tuple, Spectra]:
    """`spectra` at every (n, T, d) of `points`, computed by `workers` processes (one: in this process)."""
    try:
        points = [tuple(point) for point in points]
    except TypeError:
        points = []
    if not points or any(len(point) != 3 for point in points):
        raise ValueError("points must be a non-empty list of (n, T, d) triples, e.g. [(5, 5, 10), (5, 5, 20)]")
    workers = positive_int(workers, "workers")
    point_spectra = partial(spectra, count=count, max_draws=max_draws)
    if workers == 1:
        return {point: point_spectra(*point) for point in points}
    with worker_pool(min(workers, len(points))) as pool:
        return dict(zip(points, pool.map(point_spectra, *zip(*points))))
