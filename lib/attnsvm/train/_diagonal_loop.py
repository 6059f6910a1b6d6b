"""Gradient descent on diagonal attention (`train.diagonal_gd`) compiled with Numba, and the exact log-space logit
gradient on vector lanes that it and the compiled gradient flow (`_flow`) share.

At Chapter 11's sizes (five sequences of two tokens in R^12, tens of thousands of steps) a step of the batched torch
loop is some forty tiny tensor operations, and their overhead, not the arithmetic, sets its time. This loop takes
the same steps in the design of `_cpu_loop` (read its docstring): every array ends in the lane axis, one problem
per lane, blocks of up to BLOCK problems, float64, the exponentials and logarithms through libmvec (`_exp`, `_log`,
`_log1p`), and each lane's arithmetic its own, so a problem's run does not depend on the batch it is in. For that
these loops compile with fused multiply-adds but without reassociation (LANE_MATH): with it, LLVM summed a lane's
terms in one order in a vector loop's body and in another in its remainder, and a run changed in its last digits
with the number of problems beside it.

The gradient is `gradients.logit_gradient`'s, formula for formula (`_sequence`, `_combine`): the softmax from the
largest logit, the ratios s_it / e^{L_i} taken as e^{g_it - second} (never as quotients, which underflow), the top
token's sum, the loss's log slope, and the log-space weights of the sequences, so it stays exact however far
softmax saturates, as the torch loop's does. Exponents are floored at -1000 before e^x is taken (e^{-1000} is 0 in
float64, as e^{-inf} is; libmvec takes a slow path for -inf). The step is the torch loop's: -lr g / ||g|| with g
scaled by its largest entry first (`_descent._unit`), a zero g giving no step, or the plain -lr e^{log scale} g; on
(k, q) both factors move from the same g at once. The loops sum in other orders and agree to round-off step by step
(tests/lib/test_diagonal_compiled.py). Numba's cache keys on the file that defines a function: after an edit of
this file or of `_cpu_loop`, clear the files of this module and of `_flow` in ``__pycache__``.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import torch

from ..data import Problem
from ._cpu_loop import LOSS_CODES, _each_block, _exp, _lanes, _log, _log1p, _scaled_unit

__all__ = ["gd"]  # `train.diagonal_gd` runs it

_FLOOR = -1000.0  # e^x below this is 0 in float64: the floor keeps -inf out of libmvec's e^x
# Fused multiply-adds, but no reassociation: with it LLVM sums a lane's terms in another order in the remainder of a
# vector loop than in its body, and a problem's run would depend on the batch around it (tests/lib).
LANE_MATH = {"contract"}
# Rows of the per-lane buffer `lanes` (L entries each).
TOP, LARGEST, TOTAL, SECOND, U_TOP, TOP_SUM, LOG_TOTAL, E_SECOND, LOG_SCALE, SCALE, NORM, FACTOR = range(12)
ROWS = 12


@numba.njit(cache=True, fastmath=LANE_MATH, error_model="numpy", inline="always")
def _sequence(j, count, Y, U, loss, log_n, g, s, e, f, weights, lanes):
    """Sequence j on every lane, from its logits g[j, t] for the first `count` tokens (the others are not
    candidates: attention and gradient exactly 0), as `gradients._logit_gradient`: the softmax into s[j], the
    output f[j] = sum_t s_jt U[j, t], in g[j] the finite h_jt (the top token's s sum_tau ratio (u_top - u_tau), the
    others' ratio (u_t - u_top + e^{L_j} top_sum)) and in weights[j] log|l'(Y_j f_j)| - log_n + L_j, with L_j the
    log of the largest probability off the top token. e[j] is scratch."""
    L = g.shape[2]
    for b in range(L):
        lanes[TOP, b], lanes[LARGEST, b], lanes[TOTAL, b], lanes[SECOND, b] = 0.0, -np.inf, 0.0, -np.inf
        lanes[U_TOP, b], lanes[TOP_SUM, b], f[j, b] = 0.0, 0.0, 0.0
    for t in range(count):  # the first largest logit, as torch's argmax
        for b in range(L):
            lanes[TOP, b] = t if g[j, t, b] > lanes[LARGEST, b] else lanes[TOP, b]
            lanes[LARGEST, b] = max(lanes[LARGEST, b], g[j, t, b])
    for t in range(count):
        for b in range(L):
            g[j, t, b] -= lanes[LARGEST, b]  # shifted: 0 at the top token
            e[j, t, b] = max(g[j, t, b], _FLOOR)
        _exp(e, (j, t))
        for b in range(L):
            lanes[TOTAL, b] += e[j, t, b]
    for t in range(count):
        for b in range(L):
            top = t == lanes[TOP, b]
            s[j, t, b] = e[j, t, b] / lanes[TOTAL, b]
            f[j, b] += s[j, t, b] * U[j, t, b]
            lanes[SECOND, b] = lanes[SECOND, b] if top else max(lanes[SECOND, b], g[j, t, b])
            lanes[U_TOP, b] = U[j, t, b] if top else lanes[U_TOP, b]
    for t in range(count):  # the ratios s_t / e^{L_j} = e^{g_t - second}, 0 at the top token
        for b in range(L):
            e[j, t, b] = _FLOOR if t == lanes[TOP, b] else max(g[j, t, b] - lanes[SECOND, b], _FLOOR)
        _exp(e, (j, t))
        for b in range(L):
            lanes[TOP_SUM, b] += e[j, t, b] * (lanes[U_TOP, b] - U[j, t, b])
    for b in range(L):
        lanes[LOG_TOTAL, b] = lanes[TOTAL, b]
    _log(lanes, (LOG_TOTAL,))
    for b in range(L):
        lanes[LOG_TOTAL, b] = lanes[SECOND, b] - lanes[LOG_TOTAL, b]  # L_j
        lanes[E_SECOND, b] = max(lanes[LOG_TOTAL, b], _FLOOR)
    _exp(lanes, (E_SECOND,))
    for t in range(count):
        for b in range(L):
            at_top = s[j, t, b] * lanes[TOP_SUM, b]
            off_top = e[j, t, b] * (U[j, t, b] - lanes[U_TOP, b] + lanes[E_SECOND, b] * lanes[TOP_SUM, b])
            g[j, t, b] = at_top if t == lanes[TOP, b] else off_top
    for b in range(L):  # log(-l'(x)) at the margin x = Y f: logistic -log(1 + e^x), exponential -x, linear 0
        margin = Y[j, b] * f[j, b]
        weights[j, b] = -abs(margin)
    if loss == 0:
        for b in range(L):
            weights[j, b] = max(weights[j, b], _FLOOR)
        _exp(weights, (j,))
        _log1p(weights, (j,))
    for b in range(L):
        margin = Y[j, b] * f[j, b]
        slope = -(max(margin, 0.0) + weights[j, b]) if loss == 0 else (-margin if loss == 1 else 0.0)
        weights[j, b] = (slope - log_n) + lanes[LOG_TOTAL, b]


@numba.njit(cache=True, fastmath=LANE_MATH, error_model="numpy", inline="always")
def _combine(J, counts, Y, g, weights, lanes):
    """After `_sequence` on sequences 0..J-1: lanes[LOG_SCALE] = the largest weight and g[j, t] the direction
    -Y_j e^{weights_j - LOG_SCALE} h_jt, so that dL/dlogits = e^{LOG_SCALE} g (weights is overwritten)."""
    L = g.shape[2]
    for b in range(L):
        lanes[LOG_SCALE, b] = -np.inf
    for j in range(J):
        for b in range(L):
            lanes[LOG_SCALE, b] = max(lanes[LOG_SCALE, b], weights[j, b])
    for j in range(J):
        for b in range(L):
            weights[j, b] = max(weights[j, b] - lanes[LOG_SCALE, b], _FLOOR)
        _exp(weights, (j,))
        for b in range(L):
            weights[j, b] = -Y[j, b] * weights[j, b]
        for t in range(counts[j]):
            for b in range(L):
                g[j, t, b] = weights[j, b] * g[j, t, b]


@numba.njit(cache=True, fastmath=LANE_MATH, error_model="numpy", inline="always")
def _features_gradient(phi, w, Y, U, counts, loss, log_n, g, s, e, f, weights, grad, lanes):
    """The logits g[i, t] = phi_it . w, the gradient of `_combine` and grad[p] = sum_it g_it phi_itp: dL/dw =
    e^{lanes[LOG_SCALE]} grad on every lane (phi (n, T, d, L), w (d, L))."""
    n, T, d, L = phi.shape
    for i in range(n):
        for t in range(T):
            for b in range(L):
                g[i, t, b] = 0.0
            for p in range(d):
                for b in range(L):
                    g[i, t, b] += phi[i, t, p, b] * w[p, b]
        _sequence(i, T, Y, U, loss, log_n, g, s, e, f, weights, lanes)
    _combine(n, counts, Y, g, weights, lanes)
    for p in range(d):
        for b in range(L):
            grad[p, b] = 0.0
    for i in range(n):
        for t in range(T):
            for p in range(d):
                for b in range(L):
                    grad[p, b] += g[i, t, b] * phi[i, t, p, b]


@numba.njit(cache=True, fastmath=LANE_MATH, error_model="numpy", inline="always")
def _moves(grad, lr, normalized, lanes):
    """grad (d, L) replaced by the move of the step w -= move on every lane, as the torch loop takes it:
    lr (grad / scale) / ||grad / scale|| with scale its largest |entry| (`_descent._unit`: 0 where grad = 0), or,
    plain, lr (e^{lanes[LOG_SCALE]} grad)."""
    d, L = grad.shape
    if normalized:
        _scaled_unit(grad, lanes, SCALE, NORM, L)
        for b in range(L):
            lanes[NORM, b] = lanes[NORM, b] if lanes[NORM, b] > 0 else 1.0
        for p in range(d):
            for b in range(L):
                grad[p, b] = lr * (grad[p, b] / lanes[NORM, b])
    else:
        for b in range(L):
            lanes[FACTOR, b] = max(lanes[LOG_SCALE, b], _FLOOR)
        _exp(lanes, (FACTOR,))
        for p in range(d):
            for b in range(L):
                grad[p, b] = lr * (lanes[FACTOR, b] * grad[p, b])


@numba.njit(cache=True, fastmath=LANE_MATH, error_model="numpy", nogil=True)
def _run(phi, Y, U, k0, q0, factorized, loss, lr, normalized, record, ks, qs, probs, risks):
    """Every lane's run to step record[-1] from w = k0 (or (k, q) = (k0, q0) if `factorized`), lanes last (phi
    (n, T, d, L), Y (n, L), U (n, T, L): the token values, k0 and q0 (d, L)); the iterates at the steps `record` go
    to ks (and qs) (records, L, d), the attention to probs (records, L, n, T), the risk to risks (records, L)."""
    n, T, d, L = phi.shape
    k, q, w, grad = k0.copy(), q0.copy(), np.empty((d, L)), np.empty((d, L))
    g, s, e = np.empty((n, T, L)), np.empty((n, T, L)), np.empty((n, T, L))
    f, weights, lanes = np.empty((n, L)), np.empty((n, L)), np.empty((ROWS, L))
    counts = np.full(n, T, dtype=np.int64)
    log_n = math.log(n)
    r = 0
    for step in range(record[-1] + 1):
        for p in range(d):
            for b in range(L):
                w[p, b] = k[p, b] * q[p, b] if factorized else k[p, b]
        _features_gradient(phi, w, Y, U, counts, loss, log_n, g, s, e, f, weights, grad, lanes)
        if step == record[r]:
            for b in range(L):
                for p in range(d):
                    ks[r, b, p], qs[r, b, p] = k[p, b], q[p, b]
                risk = 0.0
                for i in range(n):
                    margin = Y[i, b] * f[i, b]  # the loss of the margin, as `model.LOSSES`
                    risk += (max(-margin, 0.0) + math.log1p(math.exp(-abs(margin))) if loss == 0 else
                             (math.exp(-margin) if loss == 1 else -margin))
                    for t in range(T):
                        probs[r, b, i, t] = s[i, t, b]
                risks[r, b] = risk / n
            r += 1
            if r == len(record):
                return
        _moves(grad, lr, normalized, lanes)
        for p in range(d):
            for b in range(L):
                move = grad[p, b]
                k[p, b], q[p, b] = (k[p, b] - move * q[p, b], q[p, b] - move * k[p, b]) if factorized else \
                    (k[p, b] - move, q[p, b])


def gd(problem: Problem, starts: tuple, factorized: bool, loss: str, lr: float, normalized: bool,
       record) -> tuple[torch.Tensor, ...]:
    """(k, q, probs, risk): the iterates (records, *batch, d) (w in k where not ``factorized``; q then is the start
    q0 = k0, unused), the attention (records, *batch, n, T) and the risk (records, *batch) at the increasing
    steps ``record`` of ``train.diagonal_gd`` from ``starts`` ((w0,) or (k0, q0), each (*batch, d)). No argument is
    checked: ``diagonal_gd`` checks them."""
    batch, n, T, d = problem.batch_shape, problem.n, problem.T, problem.d
    size, padded, lanes_last = _lanes(batch)
    values = torch.einsum("...ntd,...d->...nt", problem.X, problem.v)
    phi = problem.X * problem.Z[..., None, :]
    arrays = (lanes_last(phi, (n, T, d)), lanes_last(problem.Y, (n,)), lanes_last(values, (n, T)),
              lanes_last(starts[0], (d,)), lanes_last(starts[-1], (d,)))
    record = np.asarray(record, dtype=np.int64)
    outputs = [np.empty((len(record), padded) + shape) for shape in ((d,), (d,), (n, T), ())]

    def run_block(block: slice) -> None:
        recorded = [np.empty(a[:, block].shape) for a in outputs]
        _run(*(np.ascontiguousarray(a[..., block]) for a in arrays), bool(factorized), LOSS_CODES[loss], float(lr),
             bool(normalized), record, *recorded)
        for a, values in zip(outputs, recorded):
            a[:, block] = values
    _each_block(run_block, padded)
    return tuple(torch.from_numpy(a[:, :size]).reshape((len(record),) + batch + a.shape[2:]) for a in outputs)
