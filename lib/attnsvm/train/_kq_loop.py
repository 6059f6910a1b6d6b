"""Gradient descent on (K, Q), W = K Q^T, compiled with Numba: `train.gd(param="KQ")` on the CPU.

The same design as the W loop of `_cpu_loop` (one problem per vector lane, blocks of up to BLOCK problems), and the same
arithmetic wherever the two share it: the exact log-space gradient dL/dW = e^{log scale} sum_i A_i z_i^T of
`_cpu_loop._gradient` and the normalization of `_cpu_loop._factor`. Only the factors differ: the loop keeps K
and Q (d, m) and the products Q^T z_i, forms W z_i = K (Q^T z_i) for the logits and takes

    dL/dK = G Q = sum_i A_i (Q^T z_i)^T,    dL/dQ = G^T K = sum_i z_i (K^T A_i)^T,

each O(n d m) a step, with `_cpu_loop`'s lane-wise products (the compiled mirror descent's too). It takes the
torch loop's step: K and Q each normalized by its own norm (plus ``eps``, in log space), or the plain step, and with
``ridge`` the true gradient plus 2 ridge K (and Q). The two loops sum the products in other orders, so they agree
to round-off per step (tests/lib/test_compiled.py). Normalized (K, Q) runs amplify round-off: in Chapter 4's
experiment W's direction parts by ~1e-3 within a few hundred steps, in either loop from a change of K0 in its
last digit, while the selected tokens and the loss stay the same. Numba's cache keys on this file only: after an
edit of `_cpu_loop`, clear ``__pycache__``.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import torch

from ..data import Problem
from ._cpu_loop import (_FAST, FACTOR, GRADIENT_ROWS, LOSS_CODES, _exp, _factor, _gradient, _in_blocks, _outer_sums,
                        _products, _record_outputs, _row_products, _scaled_products)

__all__: list[str] = []  # `train.gd` runs it (param="KQ")


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _move(P, G, log_scale, lr, normalized, eps, lanes, L):
    """P -= factor G on every lane: the step of `train.gd` on one factor (K or Q) for its gradient
    e^{log scale} G, normalized by its own norm (`_cpu_loop._factor`)."""
    rows, columns = G.shape[:2]
    _scaled_products(G, G, lanes, L)  # ||G||_F^2 = SCALE^2 NORM
    _factor(lanes, log_scale, lr, normalized, eps, L)
    for a in range(rows):
        for c in range(columns):
            for b in range(L):
                P[a, c, b] -= lanes[FACTOR, b] * G[a, c, b]


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy")
def _body(X, Y, Z, U, XV, K0, Q0, loss, lr, normalized, eps, ridge, sqrt_schedule, record, Ks, Qs, probs, risks, L):
    """Every lane's run to step record[-1] from (K0, Q0) (d, m, L), lanes last as `_cpu_loop._body`; the iterates
    at the steps `record` go to Ks and Qs (records, L, d, m), probs and risks."""
    n, T, d = X.shape[:3]
    m = K0.shape[1]
    K, Q, G_K, G_Q = K0.copy(), Q0.copy(), np.empty((d, m, L)), np.empty((d, m, L))
    WZ, A, QZ, KA = np.empty((n, d, L)), np.empty((n, d, L)), np.empty((n, m, L)), np.empty((n, m, L))
    s, g, outputs, weights = np.empty((n, T, L)), np.empty((n, T, L)), np.empty((n, L)), np.empty((n, L))
    u, hidden, log_scale = np.empty((n, T, L)), np.empty((XV.shape[2], L)), np.empty(L)
    lanes = np.empty((GRADIENT_ROWS, n * L))
    r = 0
    for k in range(record[-1] + 1):
        _products(Z, Q, QZ, L)  # QZ[i] = Q^T z_i
        _row_products(QZ, K, WZ, L)  # WZ[i] = K Q^T z_i = W z_i
        _gradient(X, Y, U, XV, WZ, loss, s, g, outputs, weights, A, log_scale, u, hidden, lanes, L)
        if k == record[r]:
            _record_outputs(r, loss, Y, outputs, s, probs, risks, L)
            for b in range(L):
                for a in range(d):
                    for c in range(m):
                        Ks[r, b, a, c], Qs[r, b, a, c] = K[a, c, b], Q[a, c, b]
            r += 1
            if r == len(record):
                break
        _outer_sums(A, QZ, G_K, L)  # dL/dK = G Q, over e^{log scale}
        _products(A, K, KA, L)  # KA[i] = K^T A_i
        _outer_sums(Z, KA, G_Q, L)  # dL/dQ = G^T K, over e^{log scale}
        if ridge > 0:  # the true gradients (log scale 0) plus the ridge's, as the torch loop takes them
            for b in range(L):
                lanes[FACTOR, b] = log_scale[b]
            _exp(lanes, (FACTOR,), L)
            for a in range(d):
                for c in range(m):
                    for b in range(L):
                        G_K[a, c, b] = lanes[FACTOR, b] * G_K[a, c, b] + 2.0 * ridge * K[a, c, b]
                        G_Q[a, c, b] = lanes[FACTOR, b] * G_Q[a, c, b] + 2.0 * ridge * Q[a, c, b]
            for b in range(L):
                log_scale[b] = 0.0
        rate = lr / math.sqrt(k + 1.0) if sqrt_schedule else lr
        _move(K, G_K, log_scale, rate, normalized, eps, lanes, L)
        _move(Q, G_Q, log_scale, rate, normalized, eps, lanes, L)


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", nogil=True)
def _run(X, Y, Z, U, XV, K0, Q0, loss, lr, normalized, eps, ridge, sqrt_schedule, record, Ks, Qs, probs, risks):
    """`_body` on every lane of X (n, T, d, L)."""
    _body(X, Y, Z, U, XV, K0, Q0, loss, lr, normalized, eps, ridge, sqrt_schedule, record, Ks, Qs, probs, risks,
          X.shape[3])


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", nogil=True)
def _run_one(X, Y, Z, U, XV, K0, Q0, loss, lr, normalized, eps, ridge, sqrt_schedule, record, Ks, Qs, probs, risks):
    """`_body` on one problem (X (n, T, d, 1)), compiled for one lane."""
    _body(X, Y, Z, U, XV, K0, Q0, loss, lr, normalized, eps, ridge, sqrt_schedule, record, Ks, Qs, probs, risks, 1)


def _gd(problem: Problem, K0: torch.Tensor, Q0: torch.Tensor, head, loss: str, lr: float, normalized: bool,
        eps: float, ridge: float, record, sqrt_schedule: bool) -> tuple[torch.Tensor, ...]:
    """(W, K, Q, probs, risk) recorded at the increasing steps ``record``, each (records, *batch, ...), of
    `train.gd(param="KQ")` from (K0, Q0) with a linear or ReLU head, unchecked (`train.gd` checks its arguments
    and the result). W = K Q^T is formed here, as the torch loop forms it."""
    d, m = problem.d, K0.shape[-1]
    options = (LOSS_CODES[loss], float(lr), normalized, float(eps), float(ridge), sqrt_schedule,
               np.asarray(record, dtype=np.int64))
    K, Q, probs, risk = _in_blocks(_run, problem, head, (K0, Q0), options, len(record),
                                   ((d, m), (d, m), (problem.n, problem.T), ()), run_one=_run_one)
    return K @ Q.transpose(-2, -1), K, Q, probs, risk
