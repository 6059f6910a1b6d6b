"""Gradient descent on W compiled with Numba: each problem's whole run in one call, on the CPU.

At the book's sizes (a few sequences of a few tokens in R^10) a step of the batched torch loop of `train.gd` is
some fifty tiny tensor operations, and their overhead, not the arithmetic, sets its time. This loop computes the
same step, the exact gradient of `gradients` factor for factor (the pairwise form, the log-space scale, the
top-token sum), several times faster. It runs a block of problems side by side, one problem per lane: every
array ends in the lane axis, so each operation is the same on all lanes and compiles to vector instructions,
and the exponentials and logarithms (some seventy per step and problem) go to glibc's vector math library,
libmvec, four lanes a call (computed lane by lane where libmvec is not there). It keeps the products W z_i, not
W: the gradient sum_i a_i z_i^T moves W in the span of the queries, so a step updates W z_i in n^2 d operations
(n d^2 for W itself), and W is formed only at the recorded steps. It covers the W parameterization with a
linear or ReLU head and any loss of `model.LOSSES`; `train.gd` uses it on the CPU where it applies and the torch
loop everywhere else. The two agree to round-off step by step (tests/lib); over thousands of steps a run can
amplify round-off, as it would a change of BLAS.
"""

from __future__ import annotations

import ctypes.util
import math

import llvmlite.binding
import numba
import numpy as np
import torch
from llvmlite import ir
from numba.core import cgutils, codegen, config

from . import heads
from .data import Problem
from .model import LOSSES, queries, token_values

# Reassociation lets sums of products vectorize; no assumption about infinities (the masked logits are -inf).
_FAST = {"reassoc", "contract", "nsz", "arcp"}
_TINY = 1e-290  # where e^{second} is below this, ratios are taken as e^{h - second}, not as quotients
LANES = 4  # float64 lanes of an AVX2 vector: a block holds a multiple of this many problems
BLOCK = 64  # problems run side by side: a block's arrays stay in the L2 cache
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


def _libmvec() -> str | None:
    """The path of glibc's vector math library, if Numba compiles for AVX2 (the ABI of its 4-lane routines)."""
    features = config.CPU_FEATURES if config.CPU_FEATURES is not None else codegen.get_host_cpu_features()
    path = ctypes.util.find_library("mvec")
    return path if path and "+avx2" in features.split(",") else None


LIBMVEC = _libmvec()
if LIBMVEC:
    llvmlite.binding.load_library_permanently(LIBMVEC)


def _in_place(name: str, scalar):
    """A compiled function that replaces each entry of a 1-D contiguous float64 array, whose length is a
    multiple of LANES, by its `name` (exp, log, log1p): libmvec's AVX2 routine, four lanes a call, where it is
    loaded, else `scalar` entry by entry (results within an ulp of each other)."""
    if not LIBMVEC:
        @numba.njit(cache=True, inline="always")
        def by_entry(a):
            for b in range(a.size):
                a[b] = scalar(a[b])
        return by_entry

    @numba.extending.intrinsic
    def by_vector(typingctx, a):
        if not (isinstance(a, numba.types.Array) and a.ndim == 1 and a.layout == "C" and a.dtype == numba.float64):
            return None

        def lower(context, builder, signature, args):
            array = context.make_array(signature.args[0])(context, builder, args[0])
            vector = ir.VectorType(ir.DoubleType(), LANES)
            routine = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vector, [vector]),
                                                     f"_ZGVdN{LANES}v_{name}")
            intp = context.get_value_type(numba.intp)
            size = builder.extract_value(array.shape, 0)
            with cgutils.for_range_slice(builder, ir.Constant(intp, 0), size, ir.Constant(intp, LANES)) as (b, _):
                pointer = builder.bitcast(builder.gep(array.data, [b]), vector.as_pointer())
                builder.store(builder.call(routine, [builder.load(pointer, align=8)]), pointer, align=8)
            return context.get_dummy_value()
        return numba.types.none(a), lower
    return by_vector


_exp, _log, _log1p = _in_place("exp", math.exp), _in_place("log", math.log), _in_place("log1p", math.log1p)


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _logits(i, X, WZ, h):
    """h[t] = x_it . W z_i on every lane, from WZ[i] = W z_i."""
    T, d, L = X.shape[1], X.shape[2], X.shape[3]
    for t in range(T):
        for b in range(L):
            h[t, b] = 0.0
        for p in range(d):
            for b in range(L):
                h[t, b] += X[i, t, p, b] * WZ[i, p, b]


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _softmax(h, s, top, total, second, e_second, scale):
    """From the logits h on every lane: the softmax s, the top token (its first largest logit), the largest
    logit off it once shifted to 0 at the top token (`second`) and its exponential, and in h the ratios
    s_t / e^{second}, 0 at the top token."""
    T, L = h.shape
    largest = second  # a buffer until `second` is needed
    for b in range(L):
        top[b], largest[b], total[b] = 0.0, -np.inf, 0.0
    for t in range(T):
        for b in range(L):
            top[b] = t if h[t, b] > largest[b] else top[b]
            largest[b] = max(largest[b], h[t, b])
    for t in range(T):
        for b in range(L):
            h[t, b] -= largest[b]
            s[t, b] = h[t, b]
        _exp(s[t])
        for b in range(L):
            total[b] += s[t, b]
    for b in range(L):
        second[b] = -np.inf
    for t in range(T):
        for b in range(L):
            second[b] = second[b] if t == top[b] else max(second[b], h[t, b])
    for b in range(L):
        e_second[b] = second[b]
    _exp(e_second)
    tiny = False
    for b in range(L):
        tiny |= e_second[b] < _TINY
        scale[b] = 1.0 / e_second[b]
    for t in range(T):
        if tiny:  # some lane's ratio needs e^{h - second}: there a quotient by e^{second} would lose digits
            for b in range(L):  # e^0 at the top token: libmvec takes a slow path for e^{-inf}
                h[t, b] = 0.0 if t == top[b] else h[t, b] - second[b]
            _exp(h[t])
        for b in range(L):  # both sides computed, then chosen: a load under a condition does not vectorize
            quotient = s[t, b] * scale[b]
            h[t, b] = 0.0 if t == top[b] else (quotient if e_second[b] >= _TINY else h[t, b])
    for b in range(L):
        scale[b] = 1.0 / total[b]
    for t in range(T):
        for b in range(L):
            s[t, b] *= scale[b]


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _head(i, s, U, XV, u, f, hidden):
    """The head's output f on every lane and, in u, the token values: U[i] for the linear head; for the ReLU
    head (XV[i, t] = x_it^T V) u_t = x_it^T V slope, the slope of the ReLU at a^T V = sum_t s_t XV[i, t]."""
    T, k, L = XV.shape[1], XV.shape[2], XV.shape[3]
    for b in range(L):
        f[b] = 0.0
    if not k:
        for t in range(T):
            for b in range(L):
                u[t, b] = U[i, t, b]
                f[b] += s[t, b] * u[t, b]
        return
    for c in range(k):
        for b in range(L):
            hidden[c, b] = 0.0
        for t in range(T):
            for b in range(L):
                hidden[c, b] += s[t, b] * XV[i, t, c, b]
        for b in range(L):
            f[b] += max(hidden[c, b], 0.0)
            hidden[c, b] = 1.0 if hidden[c, b] > 0 else 0.0
    for t in range(T):
        for b in range(L):
            u[t, b] = 0.0
        for c in range(k):
            for b in range(L):
                u[t, b] += hidden[c, b] * XV[i, t, c, b]


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _log_slope(loss, Y, f, out):
    """out = log(-l'(Y f)) on every lane, for the loss with code `loss` (as `model.LOSSES`)."""
    for b in range(out.size):
        out[b] = -abs(Y[b] * f[b]) if loss == 0 else (-Y[b] * f[b] if loss == 1 else 0.0)
    if loss == 0:  # -log(1 + e^x) = -max(x, 0) - log(1 + e^{-|x|})
        _exp(out)
        _log1p(out)
        for b in range(out.size):
            out[b] = -max(Y[b] * f[b], 0.0) - out[b]


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _sequence(i, X, Y, U, XV, WZ, loss, s, g, outputs, weights, u, hidden, lanes):
    """Sequence i on every lane, as `gradients.logit_gradient`: the softmax s[i], the logit gradient g[i] of
    order one, the output f_i into outputs[i] and the log weight log|dL/df_i| + L_i (without the 1/n) into
    weights[i]."""
    T, L = X.shape[1], X.shape[3]
    h = g[i]
    top, total, second, u_top, top_sum, x, y = lanes[0], lanes[1], lanes[2], lanes[3], lanes[4], lanes[5], lanes[6]
    _logits(i, X, WZ, h)
    _softmax(h, s[i], top, total, second, x, y)
    _head(i, s[i], U, XV, u, outputs[i], hidden)
    for b in range(L):
        u_top[b], top_sum[b] = 0.0, 0.0
    for t in range(T):
        for b in range(L):
            u_top[b] = u[t, b] if t == top[b] else u_top[b]
    for t in range(T):
        for b in range(L):
            top_sum[b] += h[t, b] * (u_top[b] - u[t, b])
    for b in range(L):
        x[b] = total[b]
    _log(x)
    for b in range(L):
        second[b] -= x[b]  # L_i = second - log(total)
        x[b] = second[b]
    _exp(x)
    for t in range(T):
        for b in range(L):
            at_top, off_top = s[i, t, b] * top_sum[b], h[t, b] * (u[t, b] - u_top[b] + x[b] * top_sum[b])
            h[t, b] = at_top if t == top[b] else off_top
    _log_slope(loss, Y[i], outputs[i], weights[i])
    for b in range(L):
        weights[i, b] += second[b]


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _gradient(X, Y, U, XV, WZ, loss, s, g, outputs, weights, A, log_scale, u, hidden, lanes):
    """dL/dW = e^{log scale} sum_i A[i] z_i^T on every lane (as `gradients.weight_gradient`; A of order one):
    fills A and log_scale."""
    n, T, d, L = X.shape
    for i in range(n):
        _sequence(i, X, Y, U, XV, WZ, loss, s, g, outputs, weights, u, hidden, lanes)
    log_n = math.log(n)
    for b in range(L):
        log_scale[b] = -np.inf
    for i in range(n):
        for b in range(L):
            log_scale[b] = max(log_scale[b], weights[i, b])
    for i in range(n):
        for b in range(L):
            weights[i, b] -= log_scale[b]
        _exp(weights[i])
        for p in range(d):
            for b in range(L):
                A[i, p, b] = 0.0
        for t in range(T):
            for b in range(L):
                g[i, t, b] *= -Y[i, b] * weights[i, b]
            for p in range(d):
                for b in range(L):
                    A[i, p, b] += g[i, t, b] * X[i, t, p, b]
    for b in range(L):
        log_scale[b] -= log_n


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _step(WZ, B, A, R, gram, log_scale, lr, normalized, eps, lanes):
    """The step W -= factor G for G = sum_i A[i] z_i^T, as `train.gd` takes it (normalized as `train._unit`),
    made on WZ[i] = W z_i, through R[i] = G z_i = sum_j A[j] (z_j . z_i), and on B, where W = W0 - sum_i B[i] z_i^T;
    ||G||_F^2 = sum_i A[i] . R[i]. A lane whose G is 0 (up to round-off, if normalized) does not move."""
    n, d, L = A.shape
    scale, norm, factor = lanes[0], lanes[1], lanes[2]
    for b in range(L):
        scale[b], norm[b] = 0.0, 0.0
    for i in range(n):
        for p in range(d):
            for b in range(L):
                scale[b] = max(scale[b], abs(A[i, p, b]))
    for i in range(n):
        for p in range(d):
            for b in range(L):
                R[i, p, b] = 0.0
        for j in range(n):
            for p in range(d):
                for b in range(L):
                    R[i, p, b] += gram[i, j, b] * A[j, p, b]
        for p in range(d):
            for b in range(L):
                unit = 1.0 / scale[b] if scale[b] > 0 else 0.0
                norm[b] += (A[i, p, b] * unit) * (R[i, p, b] * unit)
    if normalized:
        for b in range(L):
            norm[b] = math.sqrt(norm[b]) if norm[b] > 0 else 0.0
            factor[b] = scale[b] * norm[b] / eps if eps > 0 else 1.0
        if eps > 0:  # paper A's 1 / (||G_true|| + eps) for G_true = e^{log scale} G, in log space
            _log(factor)
            for b in range(L):
                factor[b] = -(log_scale[b] + factor[b])
            _exp(factor)
        for b in range(L):
            factor[b] = lr / (scale[b] * norm[b]) / (1.0 + factor[b]) if eps > 0 else lr / (scale[b] * norm[b])
            factor[b] = factor[b] if norm[b] > 0 else 0.0
    else:
        for b in range(L):
            factor[b] = log_scale[b]
        _exp(factor)
        for b in range(L):
            factor[b] = lr * factor[b] if scale[b] > 0 else 0.0
    for i in range(n):
        for p in range(d):
            for b in range(L):
                WZ[i, p, b] -= factor[b] * R[i, p, b]
                B[i, p, b] += factor[b] * A[i, p, b]


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy")
def _run(X, Y, Z, U, XV, W0, loss, lr, normalized, eps, record, Ws, probs, risks):
    """Every lane's run to step record[-1], lanes last (X (n, T, d, L), Z (n, d, L), W0 (d, d, L), ...); the
    iterates at the steps `record` go to Ws (records, L, d, d), probs (records, L, n, T) and risks (records, L)."""
    n, T, d, L = X.shape
    WZ, A, B, R = np.zeros((n, d, L)), np.empty((n, d, L)), np.zeros((n, d, L)), np.empty((n, d, L))
    gram, s, g = np.zeros((n, n, L)), np.empty((n, T, L)), np.empty((n, T, L))
    outputs, weights, u, hidden = np.empty((n, L)), np.empty((n, L)), np.empty((T, L)), np.empty((XV.shape[2], L))
    log_scale, lanes = np.empty(L), np.empty((7, L))
    for i in range(n):
        for q in range(d):
            for j in range(n):
                for b in range(L):
                    gram[i, j, b] += Z[i, q, b] * Z[j, q, b]
            for p in range(d):
                for b in range(L):
                    WZ[i, p, b] += W0[p, q, b] * Z[i, q, b]
    r = 0
    for k in range(record[-1] + 1):
        _gradient(X, Y, U, XV, WZ, loss, s, g, outputs, weights, A, log_scale, u, hidden, lanes)
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
                for p in range(d):
                    for q in range(d):
                        Ws[r, b, p, q] = W0[p, q, b]
                        for i in range(n):
                            Ws[r, b, p, q] -= B[i, p, b] * Z[i, q, b]
            r += 1
            if r == len(record):
                break
        _step(WZ, B, A, R, gram, log_scale, lr, normalized, eps, lanes)


def gd(problem: Problem, W0: torch.Tensor, head, *, loss: str, lr: float, normalized: bool, eps: float,
       record: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(W, probs, risk) recorded at the increasing steps `record` (the last is the last step), each
    (records, *batch, ...); arguments checked by `train.gd`."""
    batch, n, T, d = problem.batch_shape, problem.n, problem.T, problem.d
    size = int(np.prod(batch))
    padded = -(-size // LANES) * LANES  # the last problem repeated up to a whole vector

    def lanes_last(tensor, shape):
        flat = torch.broadcast_to(tensor, batch + shape).reshape((size,) + shape).numpy()
        return np.moveaxis(np.concatenate([flat, flat[-1:].repeat(padded - size, 0)]), 0, -1)
    X, Y, Z = lanes_last(problem.X, (n, T, d)), lanes_last(problem.Y, (n,)), lanes_last(queries(problem), (n, d))
    if isinstance(head, heads.ReLU):
        V = lanes_last(head.V, head.V.shape[-2:])
        U, XV = np.zeros((n, T, padded)), np.einsum("ntpb,pcb->ntcb", X, V)
    else:
        U, XV = lanes_last(token_values(problem, None if head is None else head.v), (n, T)), np.zeros((n, T, 0, padded))
    W0 = lanes_last(W0, (d, d))
    records = len(record)
    Ws, probs, risks = np.empty((records, padded, d, d)), np.empty((records, padded, n, T)), np.empty((records, padded))
    for start in range(0, padded, BLOCK):
        block = slice(start, start + BLOCK)
        Ws_b, probs_b, risks_b = Ws[:, block].copy(), probs[:, block].copy(), risks[:, block].copy()
        _run(*(np.ascontiguousarray(a[..., block]) for a in (X, Y, Z, U, XV, W0)), LOSS_CODES[loss], float(lr),
             normalized, float(eps), np.asarray(record, dtype=np.int64), Ws_b, probs_b, risks_b)
        Ws[:, block], probs[:, block], risks[:, block] = Ws_b, probs_b, risks_b
    return tuple(torch.from_numpy(a[:, :size]).reshape((records,) + batch + a.shape[2:]) for a in (Ws, probs, risks))
