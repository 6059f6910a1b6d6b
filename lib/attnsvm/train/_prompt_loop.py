"""Gradient descent on the query p of paper B's prompt model compiled with Numba: `train.gd_prompt` on the CPU.

The model is f(X) = <X v, softmax(X key p)>: the logits of sequence i are g_it = k_it . p with the keys k_it = key^T
x_it, and the gradient is dL/dp = sum_i sum_t dL/dg_it k_it. At the book's sizes (one to three sequences of two to
seven tokens in R^3, up to a few thousand starting points) a step of the batched torch loop is some forty tiny
tensor operations whose overhead sets its time; this loop takes the same step in the design of `_cpu_loop` (read its
docstring): every array ends in the lane axis, one problem per lane, blocks of up to BLOCK problems, float64, the
exponentials and logarithms through libmvec (`_exp`, `_log`, `_log1p`), and each lane's arithmetic its own, so a
problem's run does not depend on the batch it is in. The gradient is `_cpu_loop`'s sequence by sequence
(`_sequences`, `_relative_weights`, with W z_i replaced by p), so `gradients.logit_gradient`'s factor for factor: the
pairwise form, the ratios s_it / e^{L_i} (taken as e^{g_it - second} where e^{second} underflows), the top token's
sum, the log-space scale e^{log scale} over the sequences. So it stays exact however far softmax saturates, as the
torch loop's does. The step is the torch loop's (`train._descend` with `train._unit`): -lr g / ||g|| with g scaled
by its largest entry first, or the plain -lr e^{log scale} g. The two loops sum in other orders and agree to
round-off step by step (tests/lib/test_prompt_compiled.py). Numba's cache keys on this file only: after an edit of
`_cpu_loop`, clear this module's files in ``__pycache__``.
"""

from __future__ import annotations

import numba
import numpy as np
import torch

from ..data import Problem
from ._cpu_loop import (_FAST, GRADIENT_ROWS, LOSS_CODES, SCALE, _each_block, _exp, _lanes, _record_outputs,
                        _relative_weights, _scaled_unit, _sequences)

__all__: list[str] = []  # `train.gd_prompt` runs it

# The buffer `lanes` holds `_cpu_loop`'s rows (GRADIENT_ROWS), then the step's NORM (of which the step uses the first
# L entries).
NORM = GRADIENT_ROWS


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _gradient(keys, Y, U, XV, WZ, p, loss, s, g, outputs, weights, G, log_scale, u, hidden, lanes):
    """dL/dp = e^{log scale} G on every lane, G = sum_i sum_t -Y_i e^{w_i - log scale} h_it k_it of order one,
    with `_cpu_loop`'s exact sequences (`_sequences` on the logits k_it . p, WZ[i] = p) and weights: fills G (d, L)
    and log_scale. XV has no columns (the linear head)."""
    n, T, d, L = keys.shape
    for i in range(n):
        for q in range(d):
            for b in range(L):
                WZ[i, q, b] = p[q, b]
    _sequences(keys, Y, U, XV, WZ, loss, s, g, outputs, weights, u, hidden, lanes, L)
    _relative_weights(Y, g, weights, log_scale, L)
    for q in range(d):
        for b in range(L):
            G[q, b] = 0.0
    for i in range(n):
        for t in range(T):
            for q in range(d):
                for b in range(L):
                    G[q, b] += g[i, t, b] * keys[i, t, q, b]


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _step(p, G, log_scale, lr, normalized, lanes):
    """p -= lr g / ||g|| (normalized, as `train._unit`: g scaled by its largest |entry| first, no move where g
    is 0) or p -= lr e^{log scale} g, on every lane."""
    d, L = G.shape
    if normalized:
        _scaled_unit(G, lanes, SCALE, NORM, L)  # G / its largest entry, in place
        for b in range(L):
            lanes[NORM, b] = lanes[NORM, b] if lanes[NORM, b] > 0 else 1.0
        for q in range(d):
            for b in range(L):
                p[q, b] -= lr * (G[q, b] / lanes[NORM, b])
    else:
        for b in range(L):
            lanes[SCALE, b] = log_scale[b]
        _exp(lanes, (SCALE,), L)
        for q in range(d):
            for b in range(L):
                p[q, b] -= lr * (lanes[SCALE, b] * G[q, b])


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", nogil=True)
def _run(keys, Y, U, P0, loss, lr, normalized, record, Ps, probs, risks):
    """Every lane's run to step record[-1], lanes last (keys (n, T, d, L), Y (n, L), U (n, T, L), P0 (d, L)); the
    iterates at the steps `record` go to Ps (records, L, d), probs (records, L, n, T) and risks (records, L)."""
    n, T, d, L = keys.shape
    p, G, WZ, XV = P0.copy(), np.empty((d, L)), np.empty((n, d, L)), np.empty((n, T, 0, L))
    s, g, outputs, weights = np.empty((n, T, L)), np.empty((n, T, L)), np.empty((n, L)), np.empty((n, L))
    u, hidden, log_scale = np.empty((n, T, L)), np.empty((0, L)), np.empty(L)
    lanes = np.empty((GRADIENT_ROWS + 1, n * L))
    r = 0
    for k in range(record[-1] + 1):
        _gradient(keys, Y, U, XV, WZ, p, loss, s, g, outputs, weights, G, log_scale, u, hidden, lanes)
        if k == record[r]:
            _record_outputs(r, loss, Y, outputs, s, probs, risks, L)
            for b in range(L):
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

    def run_block(block: slice) -> None:
        recorded = [np.empty(a[:, block].shape) for a in outputs]
        _run(*(np.ascontiguousarray(a[..., block]) for a in inputs), LOSS_CODES[loss], float(lr), bool(normalized),
             record, *recorded)
        for a, values_ in zip(outputs, recorded):
            a[:, block] = values_
    _each_block(run_block, padded)
    return tuple(torch.from_numpy(a[:, :size]).reshape((len(record),) + batch + a.shape[2:]) for a in outputs)
