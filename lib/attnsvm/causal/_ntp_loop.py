"""Gradient descent on the next-token loss (`ntp_gd`) compiled with Numba: the whole run in one call, on the CPU.

At the book's sizes (six sequences of four tokens in R^8) a step of `ntp_gd`'s torch loop is a few dozen tiny
tensor operations, and their overhead, not the arithmetic, sets its time. This loop takes the same steps, from the same
exact gradient, many times faster. It follows `train._cpu_loop`: up to BLOCK problems of one shape side by side,
one problem per lane, every array ending in the lane axis, so that each operation is the same on all lanes and
compiles to vector instructions, and the exponentials and logarithms go to glibc's vector math library (libmvec)
four lanes a call. Each lane's arithmetic is its own: a problem's run does not depend on the batch it is in.

The gradient is `_next_token._gradient`'s, in log space, term by term. For sequence i with logits g_it and the
log-sum-exps a_i over its label's positions, o_i over the others (-inf where there are none) and
l_i = logsumexp(a_i, o_i) = max + log1p(e^{-|a_i - o_i|}) over all, dL/dg_it = sign e^{h_it} / n with
h_it = g_it + (o_i - l_i) - a_i on a label position (sign -1) and g_it - l_i elsewhere (sign +1); each set's
log-sum-exp is taken from its own largest logit, and the terms e^{h_it - top} are taken from the largest h of
all, so no term underflows before it is negligible next to the largest. The direction G = sum e^{h - top} sign
x_it z_i^T is formed in full (d^2 entries, not through the Gram matrix of the queries: where its terms cancel,
the norm of G keeps the round-off of G's entries, not of their squares). A normalized step is -lr G / ||G||_F
with G scaled by its largest entry first, as `train._descent._unit` takes it; a plain one -lr e^{top - log n} G.
A lane whose gradient is 0 (every position of every sequence its label's) does not move.

Exponents are floored at -1000 before e^x is taken: e^{-1000} is exactly 0 in float64, as e^{-inf} is, and the
floor keeps -inf (and the NaN of -inf - (-inf), where every term of a lane is 0) out of the exponentials.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import torch

from ..train._cpu_loop import (_FAST, _each_block, _exp, _lanes, _log, _log1p, _outer_sums, _row_products,
                               _scaled_unit)
from ..train._cpu_loop import _logits as _row_logits

__all__ = ["gd"]

_FLOOR = -1000.0  # e^x is 0 in float64 below this
# Rows of the per-lane buffer `lanes` (L entries each).
M_LABEL, M_OTHER, S_LABEL, S_OTHER, GAP, SHIFT, TOP, SCALE, NORM, FACTOR, CHECK = range(11)


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _logits(X, WZ, g, lanes):
    """g[i, t] = x_it . W z_i on every lane, from WZ[i] = W z_i; lanes[CHECK] is NaN on a lane where one is not
    finite (inf * 0), else 0."""
    n, T, d, L = X.shape
    for b in range(L):
        lanes[CHECK, b] = 0.0
    for i in range(n):
        _row_logits(i, X, WZ, g, L)
        for t in range(T):
            for b in range(L):
                lanes[CHECK, b] += g[i, t, b] * 0.0


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _sequence(i, LABEL, g, h, e, every, label, lanes):
    """Sequence i on every lane: its log-sum-exps over all positions (every[i]) and over the label's (label[i]),
    and h[i, t] = log |dL/dg_it| + log n (see the module's docstring); e[i] is scratch."""
    T, L = g.shape[1], g.shape[2]
    for b in range(L):
        lanes[M_LABEL, b], lanes[M_OTHER, b], lanes[S_LABEL, b], lanes[S_OTHER, b] = -np.inf, -np.inf, 0.0, 0.0
    for t in range(T):
        for b in range(L):
            on = LABEL[i, t, b] > 0.5
            lanes[M_LABEL, b] = max(lanes[M_LABEL, b], g[i, t, b]) if on else lanes[M_LABEL, b]
            lanes[M_OTHER, b] = lanes[M_OTHER, b] if on else max(lanes[M_OTHER, b], g[i, t, b])
    for t in range(T):
        for b in range(L):
            e[i, t, b] = g[i, t, b] - (lanes[M_LABEL, b] if LABEL[i, t, b] > 0.5 else lanes[M_OTHER, b])
        _exp(e, (i, t))
        for b in range(L):
            on = LABEL[i, t, b] > 0.5
            lanes[S_LABEL, b] += e[i, t, b] if on else 0.0
            lanes[S_OTHER, b] += 0.0 if on else e[i, t, b]
    for b in range(L):  # no other position: log 1, and o = -inf from its largest logit
        lanes[S_OTHER, b] = lanes[S_OTHER, b] if lanes[S_OTHER, b] > 0 else 1.0
    _log(lanes, (S_LABEL,))
    _log(lanes, (S_OTHER,))
    for b in range(L):
        label[i, b] = lanes[M_LABEL, b] + lanes[S_LABEL, b]
        lanes[S_OTHER, b] += lanes[M_OTHER, b]  # o_i
        lanes[GAP, b] = -min(abs(label[i, b] - lanes[S_OTHER, b]), -_FLOOR)
    _exp(lanes, (GAP,))
    _log1p(lanes, (GAP,))
    for b in range(L):
        every[i, b] = max(label[i, b], lanes[S_OTHER, b]) + lanes[GAP, b]
        lanes[SHIFT, b] = (lanes[S_OTHER, b] - every[i, b]) - label[i, b]
    for t in range(T):
        for b in range(L):
            h[i, t, b] = g[i, t, b] + lanes[SHIFT, b] if LABEL[i, t, b] > 0.5 else g[i, t, b] - every[i, b]


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _direction(X, Z, LABEL, h, e, A, G, lanes):
    """G = sum_it sign e^{h_it - top} x_it z_i^T on every lane, through A[i] = sum_t sign e^{h_it - top} x_it;
    lanes[TOP] = top, the largest h (-inf where every h is: there G = 0)."""
    n, T, d, L = X.shape
    for b in range(L):
        lanes[TOP, b] = -np.inf
    for i in range(n):
        for t in range(T):
            for b in range(L):
                lanes[TOP, b] = max(lanes[TOP, b], h[i, t, b])
    for b in range(L):
        lanes[SHIFT, b] = lanes[TOP, b] if lanes[TOP, b] > -np.inf else 0.0
    for i in range(n):
        for p in range(d):
            for b in range(L):
                A[i, p, b] = 0.0
        for t in range(T):
            for b in range(L):
                e[i, t, b] = max(h[i, t, b] - lanes[SHIFT, b], _FLOOR)
            _exp(e, (i, t))
            for b in range(L):
                e[i, t, b] = -e[i, t, b] if LABEL[i, t, b] > 0.5 else e[i, t, b]
            for p in range(d):
                for b in range(L):
                    A[i, p, b] += e[i, t, b] * X[i, t, p, b]
    _outer_sums(A, Z, G, L)


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _step(W, G, n, lr, normalized, lanes):
    """W -= lr G / ||G||_F (normalized: G scaled by its largest entry first, no move where G = 0) or
    W -= lr e^{top - log n} G (plain) on every lane."""
    d, L = W.shape[1], W.shape[2]
    if normalized:
        _scaled_unit(G, lanes, SCALE, NORM, L)
        for b in range(L):
            lanes[FACTOR, b] = lr / lanes[NORM, b] if lanes[NORM, b] > 0 else 0.0
    else:
        log_n = math.log(n)
        for b in range(L):
            lanes[FACTOR, b] = max(lanes[TOP, b] - log_n, _FLOOR)
        _exp(lanes, (FACTOR,))
        for b in range(L):
            lanes[FACTOR, b] *= lr
    for p in range(d):
        for q in range(d):
            for b in range(L):
                W[p, q, b] -= lanes[FACTOR, b] * G[p, q, b]


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _record(r, W, g, every, label, s, Ws, probs, losses):
    """Record r of the first Ws.shape[1] lanes (the others repeat a problem): W into Ws (records, lanes, d, d),
    the attention e^{g - every} into probs (records, lanes, n, T), the loss mean_i (every_i - label_i) into
    losses (records, lanes); s is scratch."""
    n, T, L = g.shape
    d = W.shape[0]
    for i in range(n):
        for t in range(T):
            for b in range(L):
                s[i, t, b] = g[i, t, b] - every[i, b]
            _exp(s, (i, t))
    for b in range(Ws.shape[1]):
        risk = 0.0
        for i in range(n):
            risk += every[i, b] - label[i, b]
            for t in range(T):
                probs[r, b, i, t] = s[i, t, b]
        losses[r, b] = risk / n
        for p in range(d):
            for q in range(d):
                Ws[r, b, p, q] = W[p, q, b]


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", nogil=True)
def _run(X, Z, LABEL, W0, lr, normalized, record, Ws, probs, losses, diverged):
    """Every lane's run to step record[-1], lanes last (X (n, T, d, L), Z (n, d, L), LABEL (n, T, L): 1 on the
    label's positions, W0 (d, d, L)); the iterates at the steps `record` of the first lanes (as many as Ws has:
    the others repeat a problem to fill a vector) go to Ws (records, lanes, d, d), probs (records, lanes, n, T)
    and losses (records, lanes). diverged[b] is the first step at which a logit of lane b is not finite, -1 if
    none; the run stops when every lane has diverged."""
    n, T, d, L = X.shape
    W, WZ, G, A = W0.copy(), np.empty((n, d, L)), np.empty((d, d, L)), np.empty((n, d, L))
    g, h, e, s = np.empty((n, T, L)), np.empty((n, T, L)), np.empty((n, T, L)), np.empty((n, T, L))
    every, label, lanes = np.empty((n, L)), np.empty((n, L)), np.empty((11, L))
    for b in range(L):
        diverged[b] = -1
    _row_products(Z, W, WZ, L)  # WZ[i] = W z_i
    r = 0
    for k in range(record[-1] + 1):
        _logits(X, WZ, g, lanes)
        alive = 0
        for b in range(L):
            if diverged[b] < 0 and lanes[CHECK, b] != 0.0:
                diverged[b] = k
            alive += diverged[b] < 0
        if alive == 0:
            return
        for i in range(n):
            _sequence(i, LABEL, g, h, e, every, label, lanes)
        if k == record[r]:
            _record(r, W, g, every, label, s, Ws, probs, losses)
            r += 1
            if r == len(record):
                return
        _direction(X, Z, LABEL, h, e, A, G, lanes)
        _step(W, G, n, lr, normalized, lanes)
        _row_products(Z, W, WZ, L)  # WZ[i] = W z_i


def gd(problems: list, W0: torch.Tensor, lr: float, normalized: bool,
       record) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, np.ndarray]:
    """(W, probs, loss, diverged): the iterates (records, B, d, d), attention (records, B, n, T) and loss
    (records, B) at the increasing steps ``record`` (the last is the last step) of gradient descent on
    ``causal.ntp_loss`` for B checked ``NTPProblem`` of one shape (n, T, d) from W0 (B, d, d), as
    ``causal.ntp_gd`` takes it; diverged (B,): the first step at which a problem's logits are not finite (its
    records from there on are not), -1 where none. No argument is checked: ``causal.ntp_gd`` checks them."""
    size, padded, lanes_last = _lanes((len(problems),))
    n, T, d = problems[0].n, problems[0].T, problems[0].d
    stacked = (torch.stack([p.X for p in problems]), torch.stack([p.queries for p in problems]),
               torch.stack([(p.ids == p.labels[:, None]).double() for p in problems]), W0.detach().double())
    X, Z, LABEL, W0 = (lanes_last(a, a.shape[1:]) for a in stacked)
    record = np.asarray(record, dtype=np.int64)
    outputs = [np.zeros((len(record), size) + shape) for shape in ((d, d), (n, T), ())]
    diverged = np.empty(padded, dtype=np.int64)

    def run_block(block: slice) -> None:
        recorded = [np.zeros(a[:, block].shape) for a in outputs]  # the block's problems, not its repeats
        _run(*(np.ascontiguousarray(a[..., block]) for a in (X, Z, LABEL, W0)), float(lr), bool(normalized),
             record, *recorded, diverged[block])
        for a, values in zip(outputs, recorded):
            a[:, block] = values
    _each_block(run_block, padded)
    return (*(torch.from_numpy(a) for a in outputs), diverged[:size])
