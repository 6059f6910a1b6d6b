"""Gradient descent on W compiled with Numba: each problem's whole run in one call, on the CPU.

At the book's sizes (a few sequences of a few tokens in R^10) a step of the batched torch loop of `train.gd` is
some fifty tiny tensor operations, and their overhead, not the arithmetic, sets its time. This loop computes the
same step, the exact gradient of `gradients` factor for factor (the pairwise form, the log-space scale, the
top-token sum), in a few small buffers it reuses, several times faster. It keeps the products W z_i, not W:
the gradient sum_i a_i z_i^T moves W in the span of the queries, so a step updates W z_i in n^2 d operations
(n d^2 for W itself), and W is formed only at the recorded steps. It covers the W
parameterization with a linear or ReLU head and any loss of `model.LOSSES`; `train.gd` uses it on the CPU
where it applies and the torch loop everywhere else. The two agree to round-off step by step (tests/lib);
over thousands of steps a run can amplify round-off, as it would a change of BLAS.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import torch

from . import heads
from .data import Problem
from .model import LOSSES, queries, token_values

# Reassociation lets sums of products vectorize; no assumption about infinities (the masked logits are -inf).
_FAST = {"reassoc", "contract", "nsz", "arcp"}
_TINY = 1e-290  # below this, e^x is taken in log space: a quotient of subnormals would lose digits
_UNDERFLOW = -746.0  # e^x rounds to 0 below about -745.13; libm's exp takes a slow path down there
LOSS_CODES = {name: code for code, name in enumerate(LOSSES)}  # logistic, exponential, linear
HEADS = (type(None), heads.Linear, heads.ReLU)


def supports(param: str, head, gradient: str, device: torch.device) -> str | None:
    """None if the compiled loop runs this training, else why it does not."""
    if device.type != "cpu":
        return f"it runs on the CPU only (the problem is on {device})"
    if param != "W":
        return 'it trains W only (param="W")'
    if gradient != "exact":
        return 'it computes the exact gradient only (gradient="exact")'
    if not isinstance(head, HEADS):
        return f"it has no {type(head).__name__} head (linear and ReLU heads only)"
    return None


@numba.njit(cache=True, fastmath=_FAST, inline="always")
def _exp(x):
    """e^x, skipping libm where it is 0 (the result is the same; the time is not)."""
    return 0.0 if x < _UNDERFLOW else math.exp(x)


@numba.njit(cache=True, fastmath=_FAST, inline="always")
def _log1pexp(x):
    """log(1 + e^x) without overflow."""
    return max(x, 0.0) + math.log1p(_exp(-abs(x)))


@numba.njit(cache=True, fastmath=_FAST, inline="always")
def _log_slope(loss, x):
    """log(-l'(x)) for the loss with code `loss` (as `model.LOSSES`)."""
    if loss == 0:
        return -_log1pexp(x)
    return -x if loss == 1 else 0.0


@numba.njit(cache=True, fastmath=_FAST, inline="always")
def _loss_value(loss, x):
    """l(x) for the loss with code `loss`."""
    if loss == 0:
        return _log1pexp(-x)
    return math.exp(-x) if loss == 1 else -x


@numba.njit(cache=True, fastmath=_FAST, inline="always")
def _sequence(i, X, Y, U, XV, WZ, loss, s, h, hidden, u):
    """Sequence i's softmax s[i], output f and logit gradient h[i] (its weight apart), as
    `gradients.logit_gradient`, from WZ[i] = W z_i: returns (f, log weight = log|dL/df_i| + L_i without the 1/n).
    Arrays are indexed, never sliced: in this loop a slice costs more than a sequence's arithmetic."""
    T, d, k = X.shape[1], X.shape[2], XV.shape[-1]
    top, largest = 0, -np.inf
    for t in range(T):
        acc = 0.0
        for p in range(d):
            acc += X[i, t, p] * WZ[i, p]
        h[i, t] = acc
        if acc > largest:
            top, largest = t, acc
    total, second, e_second = 0.0, -np.inf, 0.0  # second: the largest logit off the top token, shifted
    for t in range(T):
        h[i, t] -= largest
        s[i, t] = 1.0 if t == top else _exp(h[i, t])
        if t != top and h[i, t] > second:
            second, e_second = h[i, t], s[i, t]
        total += s[i, t]
    for t in range(T):  # h becomes the ratio s_it / e^{L_i} = e^{shifted - second}
        if t == top:
            h[i, t] = 0.0
        elif s[i, t] > _TINY and e_second > _TINY:
            h[i, t] = s[i, t] / e_second
        else:
            h[i, t] = _exp(h[i, t] - second)
        s[i, t] /= total
    f = 0.0
    if k:  # ReLU head: XV = x_t^T V, so hidden = a^T V = sum_t s_t XV_t and u_t = x_t^T slope
        for c in range(k):
            hidden[c] = 0.0
        for t in range(T):
            for c in range(k):
                hidden[c] += s[i, t] * XV[i, t, c]
        for c in range(k):
            f += max(hidden[c], 0.0)
            hidden[c] = 1.0 if hidden[c] > 0 else 0.0  # the ReLU's slope
        for t in range(T):
            acc = 0.0
            for c in range(k):
                acc += hidden[c] * XV[i, t, c]
            u[t] = acc
    else:
        for t in range(T):
            u[t] = U[i, t]
            f += s[i, t] * u[t]
    top_sum = 0.0
    for t in range(T):
        top_sum += h[i, t] * (u[top] - u[t])
    log_second = second - math.log(total)
    e_log_second = e_second / total if e_second > _TINY else _exp(log_second)
    for t in range(T):
        if t == top:
            h[i, t] = s[i, t] * top_sum
        else:
            h[i, t] *= u[t] - u[top] + e_log_second * top_sum
    return f, _log_slope(loss, Y[i] * f) + log_second


@numba.njit(cache=True, fastmath=_FAST, inline="always")
def _gradient(X, Y, U, XV, WZ, loss, s, outputs, A, h, hidden, u, weights):
    """dL/dW = e^{log scale} sum_i A[i] z_i^T (as `gradients.weight_gradient`; A of order one): fills A, returns
    the log scale."""
    n, T, d = X.shape
    for i in range(n):
        outputs[i], weights[i] = _sequence(i, X, Y, U, XV, WZ, loss, s, h, hidden, u)
    log_n = math.log(n)
    log_scale = np.max(weights) - log_n
    for i in range(n):
        c = -Y[i] * _exp(weights[i] - log_n - log_scale)
        for p in range(d):
            A[i, p] = 0.0
        for t in range(T):
            coefficient = c * h[i, t]
            for p in range(d):
                A[i, p] += coefficient * X[i, t, p]
    return log_scale


@numba.njit(cache=True, fastmath=_FAST, inline="always")
def _step(WZ, B, A, R, gram, log_scale, lr, normalized, eps):
    """The step W -= factor G for G = sum_i A[i] z_i^T, as `train.gd` takes it (normalized as `train._unit`),
    made on WZ[i] = W z_i, through R[i] = G z_i = sum_j A[j] (z_j . z_i), and on B, where W = W0 - sum_i B[i] z_i^T;
    ||G||_F^2 = sum_i A[i] . R[i]."""
    n, d = A.shape
    scale = 0.0
    for i in range(n):
        for p in range(d):
            scale = max(scale, abs(A[i, p]))
    if scale == 0.0:
        return
    norm = 0.0
    for i in range(n):
        for p in range(d):
            acc = 0.0
            for j in range(n):
                acc += gram[i, j] * A[j, p]
            R[i, p] = acc
            norm += (A[i, p] / scale) * (acc / scale)
    if normalized:
        if norm <= 0.0:  # G = 0 up to round-off
            return
        norm = math.sqrt(norm)
        factor = lr / (scale * norm)
        if eps > 0:
            factor /= 1.0 + math.exp(-(log_scale + math.log(scale * norm / eps)))
    else:
        factor = lr * math.exp(log_scale)
    for i in range(n):
        for p in range(d):
            WZ[i, p] -= factor * R[i, p]
            B[i, p] += factor * A[i, p]


@numba.njit(cache=True, fastmath=_FAST, inline="always")
def _row_products(left, right, out):
    """out[i, j] = left[i] . right[j] (out = left right^T)."""
    for i in range(left.shape[0]):
        for j in range(right.shape[0]):
            acc = 0.0
            for q in range(left.shape[1]):
                acc += left[i, q] * right[j, q]
            out[i, j] = acc


@numba.njit(cache=True, fastmath=_FAST)
def _run(X, Y, Z, U, XV, W0, loss, lr, normalized, eps, record, Ws, probs, risks):
    """Every problem's run to step record[-1]; the iterates at the steps `record` go to Ws, probs and risks."""
    batch, n, T, d = X.shape
    WZ, A, B, R, gram = np.empty((n, d)), np.empty((n, d)), np.empty((n, d)), np.empty((n, d)), np.empty((n, n))
    s, h, outputs, hidden, u, weights = np.empty((n, T)), np.empty((n, T)), np.empty(n), np.empty(XV.shape[-1]), \
        np.empty(T), np.empty(n)
    for b in range(batch):
        Xb, Yb, Zb, Ub, XVb, W0b = X[b], Y[b], Z[b], U[b], XV[b], W0[b]
        _row_products(Zb, Zb, gram)
        _row_products(Zb, W0b, WZ)
        B[:, :] = 0.0
        r = 0
        for k in range(record[-1] + 1):
            log_scale = _gradient(Xb, Yb, Ub, XVb, WZ, loss, s, outputs, A, h, hidden, u, weights)
            if k == record[r]:
                Ws[r, b], probs[r, b] = W0b, s
                for i in range(n):
                    for p in range(d):
                        for q in range(d):
                            Ws[r, b, p, q] -= B[i, p] * Zb[i, q]
                risk = 0.0
                for i in range(n):
                    risk += _loss_value(loss, Yb[i] * outputs[i])
                risks[r, b] = risk / n
                r += 1
            if r == len(record):
                break
            _step(WZ, B, A, R, gram, log_scale, lr, normalized, eps)


def gd(problem: Problem, W0: torch.Tensor, head, *, loss: str, lr: float, normalized: bool, eps: float,
       record: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(W, probs, risk) recorded at the increasing steps `record` (the last is the last step), each
    (records, *batch, ...); arguments checked by `train.gd`."""
    batch, n, T, d = problem.batch_shape, problem.n, problem.T, problem.d
    flat = (int(np.prod(batch)),)

    def array(tensor, shape):
        return np.ascontiguousarray(torch.broadcast_to(tensor, batch + shape).reshape(flat + shape).numpy())
    X, Y, Z = array(problem.X, (n, T, d)), array(problem.Y, (n,)), array(queries(problem), (n, d))
    if isinstance(head, heads.ReLU):
        V = array(head.V, head.V.shape[-2:])
        U, XV = np.zeros(flat + (n, T)), X @ V[:, None]
    else:
        U, XV = array(token_values(problem, None if head is None else head.v), (n, T)), np.zeros(flat + (n, T, 0))
    records = len(record)
    Ws, probs, risks = np.empty((records,) + flat + (d, d)), np.empty((records,) + flat + (n, T)), np.empty((records,) + flat)
    _run(X, Y, Z, U, XV, array(W0, (d, d)), LOSS_CODES[loss], float(lr), normalized, float(eps),
         np.asarray(record, dtype=np.int64), Ws, probs, risks)
    return tuple(torch.from_numpy(a).reshape((records,) + batch + a.shape[2:]) for a in (Ws, probs, risks))
