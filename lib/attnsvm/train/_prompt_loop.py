"""Gradient descent on the query p of paper B's prompt model compiled with Numba: `train.gd_prompt` on the CPU.

The model is f(X) = <X v, softmax(X key p)>: the logits of sequence i are g_it = k_it . p with the keys
k_it = key^T x_it, and the gradient is dL/dp = sum_i sum_t dL/dg_it k_it. At the book's sizes (one to three
sequences of two to seven tokens in R^3, up to a few thousand starting points) a step of the batched torch loop
is some forty tiny tensor operations whose overhead sets its time; this loop takes the same step in the design of
`_cpu_loop` (read its docstring): every array ends in the lane axis, one problem per lane, BLOCK problems a call,
float64, the exponentials and logarithms through libmvec (`_exp`, `_log`, `_log1p`), and each lane's arithmetic
its own, so a problem's run does not depend on the batch it is in. The gradient is `gradients.logit_gradient`'s,
factor for factor: the pairwise form, the ratios s_it / e^{L_i} (taken as e^{g_it - second} where e^{second}
underflows), the top token's sum, the log-space scale e^{log scale} over the sequences. So it stays exact however
far softmax saturates, as the torch loop's does. The step is the torch loop's (`train._descend` with
`train._unit`): -lr g / ||g|| with g scaled by its largest entry first, or the plain -lr e^{log scale} g. The two
loops sum in other orders and agree to round-off step by step (tests/lib/test_prompt_compiled.py). Numba's cache
keys on this file only: after an edit of `_cpu_loop`, clear this module's files in ``__pycache__``.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import torch

from ..data import Problem
from ._cpu_loop import _FAST, BLOCK, LOSS_CODES, _exp, _lanes, _log, _log1p

__all__: list[str] = []  # `train.gd_prompt` runs it

_TINY = 1e-290  # as `_cpu_loop`'s: where e^{second} is below this, ratios are e^{g - second}, not quotients
# Rows of the per-lane buffer `lanes` (L entries each).
TOP, TOTAL, SECOND, E_SECOND, SCALE, U_TOP, TOP_SUM, NORM = range(8)


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _softmax(i, keys, p, s, g, lanes):
    """The logits g[i, t] = k_it . p of sequence i on every lane, then: the softmax s[i]; in `lanes` the top
    token (its first largest logit), the largest logit off it once shifted to 0 at the top token (SECOND) and
    the sum of the exponentials (TOTAL); in g[i] the ratios s_t / e^{second}, 0 at the top token."""
    T, d, L = keys.shape[1], keys.shape[2], keys.shape[3]
    for t in range(T):
        for b in range(L):
            g[i, t, b] = 0.0
        for q in range(d):
            for b in range(L):
                g[i, t, b] += keys[i, t, q, b] * p[q, b]
    for b in range(L):
        lanes[TOP, b], lanes[SECOND, b], lanes[TOTAL, b] = 0.0, -np.inf, 0.0  # SECOND: the largest logit, first
    for t in range(T):
        for b in range(L):
            lanes[TOP, b] = t if g[i, t, b] > lanes[SECOND, b] else lanes[TOP, b]
            lanes[SECOND, b] = max(lanes[SECOND, b], g[i, t, b])
    for t in range(T):
        for b in range(L):
            g[i, t, b] -= lanes[SECOND, b]
            s[i, t, b] = g[i, t, b]
        _exp(s, (i, t))
        for b in range(L):
            lanes[TOTAL, b] += s[i, t, b]
    for b in range(L):
        lanes[SECOND, b] = -np.inf
    for t in range(T):
        for b in range(L):
            lanes[SECOND, b] = lanes[SECOND, b] if t == lanes[TOP, b] else max(lanes[SECOND, b], g[i, t, b])
    tiny = False
    for b in range(L):
        lanes[E_SECOND, b] = lanes[SECOND, b]
    _exp(lanes, (E_SECOND,))
    for b in range(L):
        tiny |= lanes[E_SECOND, b] < _TINY
        lanes[SCALE, b] = 1.0 / lanes[E_SECOND, b]
    for t in range(T):
        if tiny:  # some lane's ratio needs e^{g - second}: there a quotient by e^{second} would lose digits
            for b in range(L):  # e^0 at the top token: libmvec takes a slow path for e^{-inf}
                g[i, t, b] = 0.0 if t == lanes[TOP, b] else g[i, t, b] - lanes[SECOND, b]
            _exp(g, (i, t))
        for b in range(L):  # both sides computed, then chosen: a load under a condition does not vectorize
            quotient = s[i, t, b] * lanes[SCALE, b]
            exact = lanes[E_SECOND, b] >= _TINY
            g[i, t, b] = 0.0 if t == lanes[TOP, b] else (quotient if exact else g[i, t, b])
    for b in range(L):
        lanes[SCALE, b] = 1.0 / lanes[TOTAL, b]
    for t in range(T):
        for b in range(L):
            s[i, t, b] *= lanes[SCALE, b]


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _sequence(i, keys, Y, U, p, loss, s, g, outputs, weights, lanes):
    """Sequence i on every lane, as `gradients.logit_gradient` with the linear head (token values U[i]): the
    softmax s[i], the logit gradient g[i] of order one (h_it), the output f_i into outputs[i] and the log weight
    log|dL/df_i| + L_i (without the 1/n) into weights[i]."""
    T, L = keys.shape[1], keys.shape[3]
    _softmax(i, keys, p, s, g, lanes)
    for b in range(L):
        outputs[i, b], lanes[U_TOP, b], lanes[TOP_SUM, b] = 0.0, 0.0, 0.0
    for t in range(T):
        for b in range(L):
            outputs[i, b] += s[i, t, b] * U[i, t, b]
            lanes[U_TOP, b] = U[i, t, b] if t == lanes[TOP, b] else lanes[U_TOP, b]
    for t in range(T):
        for b in range(L):
            lanes[TOP_SUM, b] += g[i, t, b] * (lanes[U_TOP, b] - U[i, t, b])
    _log(lanes, (TOTAL,))
    for b in range(L):
        lanes[SECOND, b] -= lanes[TOTAL, b]  # L_i = second - log(total)
        lanes[E_SECOND, b] = lanes[SECOND, b]
    _exp(lanes, (E_SECOND,))
    for t in range(T):  # off the top token u_t - u_top + e^{L_i} top_sum, never u_t - f_i (equal scores)
        for b in range(L):
            at_top = s[i, t, b] * lanes[TOP_SUM, b]
            off_top = g[i, t, b] * (U[i, t, b] - lanes[U_TOP, b] + lanes[E_SECOND, b] * lanes[TOP_SUM, b])
            g[i, t, b] = at_top if t == lanes[TOP, b] else off_top
    for b in range(L):  # log(-l'(Y_i f_i)) for the loss with code `loss` (as `model.LOSSES`)
        margin = Y[i, b] * outputs[i, b]
        weights[i, b] = -abs(margin) if loss == 0 else (-margin if loss == 1 else 0.0)
    if loss == 0:  # -log(1 + e^x) = -max(x, 0) - log(1 + e^{-|x|})
        _exp(weights, (i,))
        _log1p(weights, (i,))
        for b in range(L):
            weights[i, b] = -max(Y[i, b] * outputs[i, b], 0.0) - weights[i, b]
    for b in range(L):
        weights[i, b] += lanes[SECOND, b]


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _gradient(keys, Y, U, p, loss, s, g, outputs, weights, G, log_scale, lanes):
    """dL/dp = e^{log scale} G on every lane, G = sum_i sum_t -Y_i e^{w_i - log scale} h_it k_it of order one
    (w_i = log|dL/df_i| + L_i, as `gradients.logit_gradient`): fills G (d, L) and log_scale."""
    n, T, d, L = keys.shape
    for i in range(n):
        _sequence(i, keys, Y, U, p, loss, s, g, outputs, weights, lanes)
    log_n = math.log(n)
    for b in range(L):
        log_scale[b] = -np.inf
    for i in range(n):
        for b in range(L):
            log_scale[b] = max(log_scale[b], weights[i, b])
    for q in range(d):
        for b in range(L):
            G[q, b] = 0.0
    for i in range(n):
        for b in range(L):
            weights[i, b] -= log_scale[b]
        _exp(weights, (i,))
        for t in range(T):
            for b in range(L):
                g[i, t, b] *= -Y[i, b] * weights[i, b]
            for q in range(d):
                for b in range(L):
                    G[q, b] += g[i, t, b] * keys[i, t, q, b]
    for b in range(L):
        log_scale[b] -= log_n


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _step(p, G, log_scale, lr, normalized, lanes):
    """p -= lr g / ||g|| (normalized, as `train._unit`: g scaled by its largest |entry| first, no move where g
    is 0) or p -= lr e^{log scale} g, on every lane."""
    d, L = G.shape
    if normalized:
        for b in range(L):
            lanes[SCALE, b], lanes[NORM, b] = 0.0, 0.0
        for q in range(d):
            for b in range(L):
                lanes[SCALE, b] = max(lanes[SCALE, b], abs(G[q, b]))
        for b in range(L):
            lanes[SCALE, b] = lanes[SCALE, b] if lanes[SCALE, b] > 0 else 1.0
        for q in range(d):
            for b in range(L):
                unit = G[q, b] / lanes[SCALE, b]
                lanes[NORM, b] += unit * unit
        for b in range(L):
            lanes[NORM, b] = math.sqrt(lanes[NORM, b]) if lanes[NORM, b] > 0 else 1.0
        for q in range(d):
            for b in range(L):
                p[q, b] -= lr * (G[q, b] / lanes[SCALE, b] / lanes[NORM, b])
    else:
        for b in range(L):
            lanes[SCALE, b] = log_scale[b]
        _exp(lanes, (SCALE,))
        for q in range(d):
            for b in range(L):
                p[q, b] -= lr * (lanes[SCALE, b] * G[q, b])


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy")
def _run(keys, Y, U, P0, loss, lr, normalized, record, Ps, probs, risks):
    """Every lane's run to step record[-1], lanes last (keys (n, T, d, L), Y (n, L), U (n, T, L), P0 (d, L)); the
    iterates at the steps `record` go to Ps (records, L, d), probs (records, L, n, T) and risks (records, L)."""
    n, T, d, L = keys.shape
    p, G = P0.copy(), np.empty((d, L))
    s, g, outputs, weights = np.empty((n, T, L)), np.empty((n, T, L)), np.empty((n, L)), np.empty((n, L))
    log_scale, lanes = np.empty(L), np.empty((8, L))
    r = 0
    for k in range(record[-1] + 1):
        _gradient(keys, Y, U, p, loss, s, g, outputs, weights, G, log_scale, lanes)
        if k == record[r]:
            for b in range(L):
                risk = 0.0
                for i in range(n):
                    margin = Y[i, b] * outputs[i, b]
                    risk += (max(-margin, 0.0) + math.log1p(math.exp(-abs(margin))) if loss == 0 else
                             (math.exp(-margin) if loss == 1 else -margin))
                    for t in range(T):
                        probs[r, b, i, t] = s[i, t, b]
                risks[r, b] = risk / n
                for q in range(d):
                    Ps[r, b, q] = p[q, b]
            r += 1
            if r == len(record):
                break
        _step(p, G, log_scale, lr, normalized, lanes)


def _gd(problem: Problem, keys: torch.Tensor, values: torch.Tensor, p0: torch.Tensor, loss: str, lr: float,
        normalized: bool, record) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(p, probs, risk) recorded at the increasing steps ``record`` (the last is the last step), each
    (records, *batch, ...), of `train.gd_prompt` from p0 (*batch, d) with the keys key^T x_it (*batch, n, T, d)
    and the token values X v (*batch, n, T), unchecked (`train.gd_prompt` checks its arguments and the result)."""
    batch, n, T, d = problem.batch_shape, problem.n, problem.T, problem.d
    size, padded, lanes_last = _lanes(batch)
    inputs = (lanes_last(keys, (n, T, d)), lanes_last(problem.Y, (n,)), lanes_last(values, (n, T)),
              lanes_last(p0, (d,)))
    record = np.asarray(record, dtype=np.int64)
    outputs = [np.empty((len(record), padded) + shape) for shape in ((d,), (n, T), ())]
    for start in range(0, padded, BLOCK):
        block = slice(start, start + BLOCK)
        recorded = [np.empty(a[:, block].shape) for a in outputs]
        _run(*(np.ascontiguousarray(a[..., block]) for a in inputs), LOSS_CODES[loss], float(lr), bool(normalized),
             record, *recorded)
        for a, values_ in zip(outputs, recorded):
            a[:, block] = values_
    return tuple(torch.from_numpy(a[:, :size]).reshape((len(record),) + batch + a.shape[2:]) for a in outputs)
