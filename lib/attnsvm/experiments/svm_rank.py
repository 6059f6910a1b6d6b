"""Paper A's rank experiment (E2.2): the singular values of both Att-SVM solutions on random feasible problems.

Each grid point (n, T, d) draws random problems in chunks of ``chunk`` (``theory.sample_feasible``; chunk j has
seed 1000 n + 100 T + d + 10**6 j, so chunk 0 is the batch that earlier versions drew alone), keeps the first
``count`` whose Att-SVM is feasible for the optimal tokens, and stops after ``max_draws`` draws if it has not found
them. It solves the Frobenius and the nuclear-norm Att-SVM of each. The points do not depend on each other, so
``grid`` hands them to joblib as separate tasks (worker processes, or a Dask cluster under
``joblib.parallel_config``); the answer does not depend on where they run.

Where feasible problems are rare (Chapter 2's grid draws 116 161 problems at n = 15, T = 5, d = 2 to find 100),
the time goes into deciding feasibility, one NNLS each (``svm.feasible``, scipy's). ``feasible_problems`` draws the
same problems as ``theory.sample_feasible`` and keeps the same ones, but first screens each with a compiled NNLS
whose answer is checked by a certificate: a W of margins >= 1 (verified in floating point with a bound on its
round-off) of norm at most MAX_NORM / 100 proves the problem feasible, and multipliers lambda >= 0 whose sum
exceeds 100 MAX_NORM ||A^T lambda|| (with the same care) prove that every feasible W has a norm above 100 MAX_NORM,
where ``svm.feasible`` reports the problem infeasible (``svm.MAX_NORM``). A problem neither proves is decided by
``svm.feasible`` itself. So the flags are ``svm.feasible``'s, problem for problem (tests/lib/test_ranks.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

import math

import numba
import numpy as np
import torch
from joblib import Parallel, delayed

from .. import data, svm, theory
from .._checks import budget, finite_result, positive_int
from .._session import _task_numerics
from ..data import _memory, _sizes, _workers
from ..svm._attention import MAX_NORM, SCALES

__all__ = ["Spectra", "feasible_problems", "grid", "spectra", "CHUNK_SEED_STRIDE"]

CHUNK_SEED_STRIDE = 10**6  # chunk j of a point has seed base + j * CHUNK_SEED_STRIDE (bases are below 10**6)
SCREEN_MAX_D = 5  # the compiled screen runs where d <= this (beyond, few problems are drawn and scipy is as fast)
_EPS = float(np.finfo(np.float64).eps)


@numba.njit(cache=True, error_model="numpy")
def _nnls(E, f, u, passive, residual, gradient, z, M, rhs, order):
    """Lawson and Hanson's NNLS, min ||E u - f|| over u >= 0, on the normal equations of the passive set: u (k,)
    (k = E.shape[1]). Only a screen: its answer is checked by the certificates of `_screen`, not trusted."""
    m, k = E.shape
    for j in range(k):
        u[j], passive[j] = 0.0, False
    for _ in range(3 * k + 30):
        for a in range(m):
            residual[a] = f[a]
            for j in range(k):
                residual[a] -= E[a, j] * u[j]
        best, largest = -1, 1e-13
        for j in range(k):
            gradient[j] = 0.0
            for a in range(m):
                gradient[j] += E[a, j] * residual[a]
            if not passive[j] and gradient[j] > largest:
                best, largest = j, gradient[j]
        if best < 0:
            return
        passive[best] = True
        for _ in range(k + 1):
            size = 0
            for j in range(k):
                if passive[j]:
                    order[size] = j
                    size += 1
            if size == 0:
                break
            for x in range(size):  # M = E_P^T E_P, rhs = E_P^T f, solved by Cholesky
                rhs[x] = 0.0
                for a in range(m):
                    rhs[x] += E[a, order[x]] * f[a]
                for y in range(x + 1):
                    total = 0.0
                    for a in range(m):
                        total += E[a, order[x]] * E[a, order[y]]
                    M[x, y] = total
            for x in range(size):
                for y in range(x + 1):
                    total = M[x, y]
                    for c in range(y):
                        total -= M[x, c] * M[y, c]
                    if x == y:
                        if not total > 0:
                            return  # singular: the screen gives up on this problem (the certificates decide)
                        M[x, x] = math.sqrt(total)
                    else:
                        M[x, y] = total / M[y, y]
            for x in range(size):
                total = rhs[x]
                for c in range(x):
                    total -= M[x, c] * z[c]
                z[x] = total / M[x, x]
            for x in range(size - 1, -1, -1):
                total = z[x]
                for c in range(x + 1, size):
                    total -= M[c, x] * z[c]
                z[x] = total / M[x, x]
            step = 1.0
            for x in range(size):
                j = order[x]
                if z[x] <= 0:
                    step = min(step, u[j] / (u[j] - z[x]))
            for x in range(size):
                j = order[x]
                u[j] += step * (z[x] - u[j])
                if step < 1.0 and u[j] <= 1e-300:
                    u[j], passive[j] = 0.0, False
            if step == 1.0:
                break


@numba.njit(cache=True, error_model="numpy")
def _screen(X, Z, alpha, limit, codes):
    """codes[b] = 1 where a certificate proves that the Att-SVM of problem b (X (N, n, T, d), Z (N, n, d), alpha
    (N, n)) has a solution of norm at most `limit` / 100, 0 where one proves that every feasible W has a norm above
    100 `limit`, -1 where neither is proved. Its constraint rows a_j are ``svm``'s, (x_{i alpha_i} - x_it) kron z_i
    for t != alpha_i, entry for entry; the certificates come from the NNLS of ``svm``'s least-distance form
    (min ||E u - e_last|| over u >= 0, E = [A^T; 1^T]) and are verified in floating point with bounds on its
    round-off."""
    N, n, T, d = X.shape
    k, p = n * (T - 1), d * d
    E, f = np.empty((p + 1, k)), np.zeros(p + 1)
    f[p] = 1.0
    u, passive, residual, gradient = np.empty(k), np.empty(k, dtype=np.bool_), np.empty(p + 1), np.empty(k)
    z, M, rhs, order = np.empty(k), np.empty((k, k)), np.empty(k), np.empty(k, dtype=np.int64)
    w, size_w = np.empty(p), np.empty(p)
    for b in range(N):
        j = 0
        for i in range(n):
            for t in range(T):
                if t != alpha[b, i]:
                    for x in range(d):
                        delta = X[b, i, alpha[b, i], x] - X[b, i, t, x]
                        for y in range(d):
                            E[x * d + y, j] = delta * Z[b, i, y]
                    E[p, j] = 1.0
                    j += 1
        _nnls(E, f, u, passive, residual, gradient, z, M, rhs, order)
        codes[b] = -1
        total = 0.0
        for j in range(k):
            total += u[j]
        for a in range(p):  # w = A^T u, and |A|^T u bounds the round-off of its entries
            w[a], size_w[a] = 0.0, 0.0
            for j in range(k):
                w[a] += E[a, j] * u[j]
                size_w[a] += abs(E[a, j]) * u[j]
        if total < 1.0:  # W = A^T u / (1 - sum u), scaled to margins >= 1: feasible with a norm this small
            smallest, norm = np.inf, 0.0
            for a in range(p):
                norm += w[a] * w[a]
            for j in range(k):
                margin, error = 0.0, 0.0
                for a in range(p):
                    margin += E[a, j] * w[a]
                    error += abs(E[a, j] * w[a])
                smallest = min(smallest, margin - 2.0 * (p + 2) * _EPS * error)
            if smallest > 0 and math.sqrt(norm) / smallest * (1.0 + 1e-9) <= limit / 100.0:
                codes[b] = 1
                continue
        if total > 0:  # lambda = u: every feasible W has sum_j u_j <= u^T A W <= ||A^T u|| ||W||
            norm, error = 0.0, 0.0
            for a in range(p):
                norm += w[a] * w[a]
                error += size_w[a] * size_w[a]
            bound = math.sqrt(norm) + 2.0 * (k + 2) * _EPS * math.sqrt(error)
            if total * (1.0 - 1e-9) >= 100.0 * limit * bound:
                codes[b] = 0


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
    sample = _sample_feasible if d <= SCREEN_MAX_D else theory.sample_feasible
    while found < count and draws < max_draws:
        size = min(chunk, max_draws - draws)
        problems, alpha, used = sample(n, T, d, count=count - found, max_draws=size, seed=base + CHUNK_SEED_STRIDE * j)
        parts.append((problems, alpha))
        found, draws, j = found + len(alpha), draws + int(used), j + 1
    if len(parts) == 1:
        return (*parts[0], draws)
    problems = type(parts[0][0])(*(torch.cat(fields) for fields in zip(*(
        (p.X, p.Y, p.Z, p.v) for p, _ in parts))))
    return problems, torch.cat([alpha for _, alpha in parts]), draws


def _sample_feasible(n: int, T: int, d: int, *, count: int, max_draws: int,
                     seed: int) -> tuple[data.Problem, torch.Tensor, int]:
    """``theory.sample_feasible(n, T, d, count=count, max_draws=max_draws, seed=seed)``: the same draws, the same
    problems kept, with each problem's feasibility screened first (see the module docstring)."""
    batch = data.random_problem(n, T, d, seed=seed, batch=max_draws)
    alpha = theory.optimal_tokens(batch)
    X, Z, a = batch.X.numpy(), batch.Z.numpy(), alpha.numpy()
    found, start, size = [], 0, count
    while start < max_draws and len(found) < count:  # sample_feasible's chunks, which double in size
        stop = min(start + size, max_draws)
        found += [start + k for k in np.flatnonzero(_feasible(X[start:stop], Z[start:stop], a[start:stop]))]
        start, size = stop, 2 * size
    draws = int(found[count - 1]) + 1 if len(found) >= count else start
    chosen = torch.as_tensor(found[:count], dtype=torch.long)
    return batch[chosen], alpha[chosen], draws


def _feasible(X: np.ndarray, Z: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """``svm.feasible(X, Z, alpha)`` for a batch (N, n, T, d), (N, n, d), (N, n): screened (`_screen`), and decided
    by ``svm.feasible`` where the screen proves nothing or the data are not of unit scale (``svm``'s `_unit_scale`
    would rescale them, and its NNLS would not see these rows)."""
    N = X.shape[0]
    codes = np.empty(N, dtype=np.int64)
    _screen(X, Z, alpha.astype(np.int64), MAX_NORM, codes)
    eX, eZ = (np.frexp(np.abs(a).reshape(N, -1).max(1))[1] for a in (X, Z))  # svm's `_exponent`, per problem
    scaled = (eX + eZ < SCALES[0]) | (eX + eZ > SCALES[1]) | (np.maximum(np.abs(eX), np.abs(eZ)) > 64)
    flags = codes == 1
    for b in np.flatnonzero((codes < 0) | scaled):
        flags[b] = bool(svm.feasible(X[b], Z[b], alpha[b]))
    return flags


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
