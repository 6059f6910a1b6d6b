"""Polyak steps on W compiled with Numba: the whole run of a block of problems in one call, on the CPU.

A step of `train.polyak`'s torch loop is dozens of tiny tensor operations (the exact gradient, the log gap, the
step's length), and their overhead, not the arithmetic, sets its time. This loop takes the same steps in the design of
`_cpu_loop`, whose compiled gradient it calls: up to BLOCK problems side by side, one per lane (every array ends
in the lane axis), the products W z_i kept in place of W. Each step computes, on every lane,

- the exact gradient e^{log scale} G of `_cpu_loop` (G = sum_i A_i z_i^T, of order one);
- log(L - L*) as `train.log_loss_gap`: log delta_i = logsumexp_t(log s_it + log(gamma_i* - gamma_it)), the
  logarithms log(gamma_i* - gamma_it) and log|l'(gamma_i*)| tabled once per run (the scores do not change), then
  the excess of each sequence (first order in delta_i below log delta_i = `first_order`) and their log-mean,
  every sum of exponentials shifted to hold e^0 (terms below e^-700 are taken as e^-700: they cannot change it);
- the step W -= e^{log(L - L*) - log scale - 2 log ||G||_F} G, its factor from these logarithms, so that the
  step stays exact after L - L* and the gradient have underflowed in float64.

It covers the linear head v of the problem and every loss of `model.LOSSES`, with the exact gradient; the two
engines agree to round-off step by step (tests/lib/test_polyak_compiled.py). Each lane's arithmetic is its
own: a problem's run does not depend on the batch it is in. Numba's cache keys on this file only: after an edit
of `_cpu_loop`, clear this module's files in ``__pycache__``.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import torch

from ..data import Problem
from ._cpu_loop import (_FAST, GRADIENT_ROWS, LOSS_CODES, NORM, SCALE, _exp, _gradient, _gram_products, _in_blocks,
                        _log, _record_span, _row_products, _scaled_products)

__all__ = ["polyak"]

# Rows of this loop's per-lane buffer `rows` (L entries each).
TOP, PEAK, TOTAL, SUM, MOVES = 0, 2, 3, 5, 6  # and `_cpu_loop`'s NORM = 1 and SCALE = 4 (`_scaled_products`)
# Exponents are raised to this floor before e^x: a term e^x < e^-700 < 2^-1000 adds nothing to a sum that holds
# a 1 (each sum below holds its largest term, e^0), and libmvec takes a path some ten times slower below -708.
_FLOOR = -700.0


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _exact_gradient(X, Y, U, XV, WZ, loss, s, g, outputs, weights, A, log_scale, u, hidden, lanes):
    """`_cpu_loop._gradient`, called from this one place (its signature belongs to `_cpu_loop`)."""
    _gradient(X, Y, U, XV, WZ, loss, s, g, outputs, weights, A, log_scale, u, hidden, lanes, X.shape[3])


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _gap_tables(Y, U, loss, log_gaps, best_slope, factor):
    """On every lane, from the scores gamma_it = Y_i U_it and their largest gamma_i*: log_gaps[i, t] =
    log(gamma_i* - gamma_it) (-inf at the best tokens), best_slope[i] = log|l'(gamma_i*)| and factor[i], the
    factor of expm1(delta) in l(gamma_i* - delta) - l(gamma_i*): sigmoid(-gamma_i*) (logistic), e^{-gamma_i*}
    (exponential), 1 (linear)."""
    n, T, L = U.shape
    for i in range(n):
        for b in range(L):
            best = -np.inf
            for t in range(T):
                best = max(best, Y[i, b] * U[i, t, b])
            for t in range(T):
                log_gaps[i, t, b] = math.log(best - Y[i, b] * U[i, t, b])
            if loss == 0:
                best_slope[i, b] = -(max(best, 0.0) + math.log1p(math.exp(-abs(best))))
                factor[i, b] = 1.0 / (1.0 + math.exp(best))
            elif loss == 1:
                best_slope[i, b], factor[i, b] = -best, math.exp(-best)
            else:
                best_slope[i, b], factor[i, b] = 0.0, 1.0


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _log_gap(X, WZ, log_gaps, best_slope, factor, loss, first_order, a, c, excess, terms, rows, log_gap):
    """log_gap = log(L - L*) on every lane (as `train.log_loss_gap`), from WZ[i] = W z_i and `_gap_tables`;
    a, c (T, L), excess and terms (n, L) are scratch."""
    n, T, d, L = X.shape
    for i in range(n):
        for t in range(T):
            for b in range(L):
                a[t, b] = 0.0
            for p in range(d):
                for b in range(L):
                    a[t, b] += X[i, t, p, b] * WZ[i, p, b]
        for b in range(L):
            rows[TOP, b], rows[PEAK, b] = -np.inf, -np.inf
        for t in range(T):
            for b in range(L):
                rows[TOP, b] = max(rows[TOP, b], a[t, b])
        for t in range(T):  # a: the logits shifted to 0 at the top; c: log s_t + log(gamma* - gamma_t) + log total
            for b in range(L):
                a[t, b] -= rows[TOP, b]
                c[t, b] = a[t, b] + log_gaps[i, t, b]
                rows[PEAK, b] = max(rows[PEAK, b], c[t, b])
        for t in range(T):
            for b in range(L):  # 0 in place of -inf (a best token): its term is dropped below
                c[t, b] = max(c[t, b] - rows[PEAK, b], _FLOOR) if log_gaps[i, t, b] > -np.inf else 0.0
                a[t, b] = max(a[t, b], _FLOOR)
            _exp(a, (t,))
            _exp(c, (t,))
        for b in range(L):
            rows[TOTAL, b], rows[SUM, b] = 0.0, 0.0
        for t in range(T):
            for b in range(L):
                rows[TOTAL, b] += a[t, b]
                rows[SUM, b] += c[t, b] if log_gaps[i, t, b] > -np.inf else 0.0
        _log(rows, (TOTAL,))
        _log(rows, (SUM,))  # log 0 = -inf where every score of the sequence is the best: delta_i = 0
        for b in range(L):
            log_delta = rows[PEAK, b] + rows[SUM, b] - rows[TOTAL, b]
            if log_delta < first_order:  # l(x - delta) - l(x) = |l'(x)| delta to float64 accuracy
                excess[i, b] = best_slope[i, b] + log_delta
                continue
            delta = math.exp(log_delta)
            if loss == 0:
                excess[i, b] = math.log(math.log1p(factor[i, b] * math.expm1(delta)))
            elif loss == 1:
                excess[i, b] = math.log(factor[i, b] * math.expm1(delta))
            else:
                excess[i, b] = math.log(delta)
    for b in range(L):  # log_gap: the log of the mean of e^{excess_i}
        rows[PEAK, b], rows[SUM, b] = -np.inf, 0.0
    for i in range(n):
        for b in range(L):
            rows[PEAK, b] = max(rows[PEAK, b], excess[i, b])
    for i in range(n):
        for b in range(L):  # 0 in place of -inf (a sequence whose scores are all equal): its term is dropped
            terms[i, b] = max(excess[i, b] - rows[PEAK, b], _FLOOR) if excess[i, b] > -np.inf else 0.0
        _exp(terms, (i,))
    for i in range(n):
        for b in range(L):
            rows[SUM, b] += terms[i, b] if excess[i, b] > -np.inf else 0.0
    _log(rows, (SUM,))
    for b in range(L):
        log_gap[b] = rows[PEAK, b] + rows[SUM, b] - math.log(n)


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _step(WZ, B, A, R, gram, log_scale, log_gap, rows):
    """The Polyak step W -= (L - L*) / ||grad||_F^2 grad for grad = e^{log scale} G, G = sum_i A[i] z_i^T, made on
    WZ[i] = W z_i through R[i] = G z_i = sum_j A[j] (z_j . z_i), and on B, where W = W0 - sum_i B[i] z_i^T;
    ||G||_F^2 = sum_i A[i] . R[i]. A lane whose G is 0 does not move."""
    n, d, L = A.shape
    _gram_products(gram, A, R, L)
    _scaled_products(A, R, rows, L)  # rows[SCALE] = the largest |entry| of G, rows[NORM] = ||G||_F^2 / SCALE^2
    for b in range(L):  # the factor e^{log(L - L*) - log scale - 2 log ||G||_F} into rows[NORM] (0: no move)
        rows[MOVES, b] = rows[NORM, b]
        rows[SCALE, b] = rows[SCALE, b] if rows[MOVES, b] > 0 else 1.0
        rows[NORM, b] = rows[NORM, b] if rows[MOVES, b] > 0 else 1.0
    _log(rows, (SCALE,))
    _log(rows, (NORM,))
    for b in range(L):
        rows[NORM, b] = log_gap[b] - log_scale[b] - 2.0 * rows[SCALE, b] - rows[NORM, b]
    _exp(rows, (NORM,))
    for b in range(L):
        rows[NORM, b] = rows[NORM, b] if rows[MOVES, b] > 0 else 0.0
    for i in range(n):
        for p in range(d):
            for b in range(L):
                WZ[i, p, b] -= rows[NORM, b] * R[i, p, b]
                B[i, p, b] += rows[NORM, b] * A[i, p, b]


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", nogil=True)
def _run(X, Y, Z, U, XV, W0, loss, first_order, record, Ws, probs, recorded_outputs):
    """Every lane's Polyak run to step record[-1], lanes last (X (n, T, d, L), Z (n, d, L), W0 (d, d, L), ...,
    as `_cpu_loop._run`); the iterates at the steps `record` go to Ws (records, L, d, d), probs (records, L, n, T)
    and recorded_outputs (records, L, n), the head's outputs f_i."""
    n, T, d, L = X.shape
    WZ, A, B, R = np.empty((n, d, L)), np.empty((n, d, L)), np.zeros((n, d, L)), np.empty((n, d, L))
    gram, s, g = np.empty((n, n, L)), np.empty((n, T, L)), np.empty((n, T, L))
    outputs, weights, u, hidden = np.empty((n, L)), np.empty((n, L)), np.empty((n, T, L)), np.empty((XV.shape[2], L))
    log_scale, lanes = np.empty(L), np.empty((GRADIENT_ROWS, n * L))
    log_gaps, best_slope, factor = np.empty((n, T, L)), np.empty((n, L)), np.empty((n, L))
    a, c, excess, terms = np.empty((T, L)), np.empty((T, L)), np.empty((n, L)), np.empty((n, L))
    log_gap, rows = np.empty(L), np.empty((7, L))
    _row_products(Z, Z, gram, L)
    _row_products(Z, W0, WZ, L)
    _gap_tables(Y, U, loss, log_gaps, best_slope, factor)
    r = 0
    for k in range(record[-1] + 1):
        _exact_gradient(X, Y, U, XV, WZ, loss, s, g, outputs, weights, A, log_scale, u, hidden, lanes)
        if k == record[r]:
            for b in range(L):
                for i in range(n):
                    recorded_outputs[r, b, i] = outputs[i, b]
                    for t in range(T):
                        probs[r, b, i, t] = s[i, t, b]
            _record_span(r, W0, B, Z, Ws, L)
            r += 1
            if r == len(record):
                break
        _log_gap(X, WZ, log_gaps, best_slope, factor, loss, first_order, a, c, excess, terms, rows, log_gap)
        _step(WZ, B, A, R, gram, log_scale, log_gap, rows)


def polyak(problem: Problem, W0: torch.Tensor, loss: str, record, first_order: float
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(W, probs, outputs) recorded at the increasing steps ``record`` (the last is the last step), each (records,
    *batch, ...), of `train.polyak`'s exact rule from W0 ((d, d) or one per problem), for checked arguments
    (`train.polyak` checks them and the result); ``first_order`` as `_step_sizes._FIRST_ORDER`."""
    n, T, d = problem.n, problem.T, problem.d
    options = (LOSS_CODES[loss], float(first_order), np.asarray(record, dtype=np.int64))
    return _in_blocks(_run, problem, None, (W0,), options, len(record), ((d, d), (n, T), (n,)))
