"""Gradient descent on W compiled with Numba: the whole run of a block of problems in one call, on the CPU.

At the book's sizes (a few sequences of a few tokens in R^10) a step of the batched torch loop of `train.gd` is some
fifty tiny tensor operations, and their overhead, not the arithmetic, sets its time. This loop computes the same
step, the exact gradient of `gradients` factor for factor (the pairwise form, the log-space scale, the top-token
sum), several times faster. It runs up to BLOCK problems side by side, one problem per lane: every array ends in the
lane axis, so each operation is the same on all lanes and compiles to vector instructions, and the exponentials and
logarithms (some seventy per step and problem) go to glibc's vector math library, libmvec, four entries a call (of
four lanes, or for one problem alone of four sequences; entry by entry where libmvec is not there). Each lane's
arithmetic is its own: a problem's run does not depend on the batch it is in. One problem alone runs in the same
loop compiled for one lane (`_run_one`: no loop over lanes is left, so no loop overhead), to the same digits; a
batch costs about as much per step for four problems as for sixteen (the loops' overhead), then grows in proportion;
a batch of more than BLOCK problems runs in blocks side by side on threads (`_each_block`, ``setup()``'s
``loop_threads``). It keeps the products W z_i, not W: the gradient sum_i a_i z_i^T moves W in the span of the
queries, so a step updates W z_i in n^2 d operations (n d^2 for W itself), and W is formed only at the recorded
steps. It covers the W parameterization with a linear or ReLU head and any loss of `model.LOSSES` (`_kq_loop` runs
(K, Q) on its gradient and step, `_mirror` mirror and sign descent on its gradient); `train.gd` uses it on the CPU
where it applies and the torch loop everywhere else. The two agree to round-off step by step (tests/lib); over
thousands of steps a run can amplify round-off, as it would a change of BLAS.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import llvmlite.binding
import numba
import numpy as np
import torch
from llvmlite import ir
from numpy.typing import ArrayLike
from numba.core import cgutils, codegen, config

from .. import heads
from .._checks import boolean, budget, nonnegative_float, positive_float
from .._session import _threads_for_loops
from ..data import Problem
from ..linear import SCHEDULES
from ._gradients import GRADIENTS
from ._initial import PARAMS
from ..model import (_TRAINING, LOSSES, MAX_RECORDS, MAX_STEPS, _checked_head, _checked_problem, _finite,
                    _memory_budget, _option, _token_values, _weights)

__all__ = ["gd", "why_not_compiled", "LANES", "BLOCK", "LOSS_CODES", "HEADS", "LIBMVEC"]

# No fast-math flags: with reassociation or contraction (FMA) the compiler rounds a lane's sums as the code around
# them allows, so one problem compiled alone (`_run_one`) and the same problem in a vector lane would part in the
# last digit. Without them every lane computes the same IEEE operations in the same order, whatever the batch.
_FAST: set = set()
_TINY = 1e-290  # where e^{second} is below this, ratios are taken as e^{logit - second}, not as quotients
LANES = 4  # float64 lanes of an AVX2 vector: a block holds a multiple of this many problems
BLOCK = 64  # problems run side by side: a block's arrays stay in the L2 cache
LOSS_CODES = {name: code for code, name in enumerate(LOSSES)}  # logistic, exponential, linear
HEADS = (type(None), heads.Linear, heads.ReLU)


def why_not_compiled(param: str, head: heads.Head | None, gradient: str, device: torch.device | str) -> str | None:
    """Why ``train.gd`` does not run a training in its compiled CPU loop, or None if it does.

    Parameters
    ----------
    param : {'W', 'KQ'}
        Which parameters.
    head : Head or None
        None or a head of ``attnsvm.heads``.
    gradient : {'exact', 'autograd'}
        The gradient.
    device : str
        Where the problem is (a torch.device or its name).

    Returns
    -------
    str or None
        None, or the reason (a sentence).

    Raises
    ------
    ValueError
        If param or gradient is not one of its options.
    TypeError
        If head is not None or a head of ``attnsvm.heads``.

    Examples
    --------
    >>> from attnsvm import train
    >>> train.why_not_compiled("W", None, "exact", "cpu") is None
    True
    >>> train.why_not_compiled("KQ", None, "autograd", "cpu")
    'it computes the exact gradient only (gradient="exact"; rule="official" defaults to autograd)'
    """
    _option(param, "param", PARAMS)  # it runs both
    gradient, head = _option(gradient, "gradient", GRADIENTS), _checked_head(head)
    try:
        device = torch.device(device)
    except (TypeError, RuntimeError) as err:
        raise TypeError(f"device must be a torch.device or a device name such as 'cpu', got {device!r}") from err
    if device.type != "cpu":
        return f"it runs on the CPU only (the problem is on {device})"
    if gradient != "exact":
        return 'it computes the exact gradient only (gradient="exact"; rule="official" defaults to autograd)'
    if not isinstance(head, HEADS):
        return f"it has no {type(head).__name__} head (linear and ReLU heads only)"
    return None


def _load_libmvec() -> bool:
    """Whether glibc's vector math library is loaded for the compiled loop: it must be installed (it is, with
    glibc on x86-64), and Numba must compile for AVX2, the ABI of its 4-lane routines."""
    features = config.CPU_FEATURES if config.CPU_FEATURES is not None else codegen.get_host_cpu_features()
    if "+avx2" not in features.split(","):
        return False
    try:
        llvmlite.binding.load_library_permanently("libmvec.so.1")
    except RuntimeError:
        return False
    return True


LIBMVEC = _load_libmvec()


def _in_place(name: str, scalar):
    """A compiled f(a, index, size=the row's length) that replaces each of the `size` entries from the start of the
    row a[index] on (the leading indices of a C-contiguous float64 array; a size past the row's length runs on
    through the rows after it) by its `name`: libmvec's routine, LANES
    entries a call (the last ones padded to a vector), where it is loaded, else `scalar` entry by entry (both
    within two ulps of numpy's, tests/lib). An entry's value does not depend on the entries beside it. The row
    is addressed, not sliced: in these loops a view costs more than a row's arithmetic."""
    @numba.extending.intrinsic
    def apply(typingctx, a, index, size):
        if not (isinstance(a, numba.types.Array) and a.layout == "C" and a.dtype == numba.float64
                and isinstance(index, numba.types.BaseTuple) and len(index) == a.ndim - 1
                and isinstance(size, numba.types.Integer)):
            return None

        def lower(context, builder, signature, args):
            array = context.make_array(a)(context, builder, args[0])
            intp = context.get_value_type(numba.intp)
            leading = [context.cast(builder, value, kind, numba.intp)
                       for value, kind in zip(cgutils.unpack_tuple(builder, args[1]), index)]
            first = cgutils.get_item_pointer(context, builder, a, array, leading + [ir.Constant(intp, 0)])
            size = context.cast(builder, args[2], signature.args[2], numba.intp)
            if LIBMVEC:
                vector = ir.VectorType(ir.DoubleType(), LANES)
                routine = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vector, [vector]),
                                                         f"_ZGVdN{LANES}v_{name}")
                whole = builder.mul(builder.sdiv(size, ir.Constant(intp, LANES)), ir.Constant(intp, LANES))
                with cgutils.for_range_slice(builder, ir.Constant(intp, 0), whole, ir.Constant(intp, LANES)) as (b, _):
                    pointer = builder.bitcast(builder.gep(first, [b]), vector.as_pointer())
                    builder.store(builder.call(routine, [builder.load(pointer, align=8)]), pointer, align=8)
                _vector_tail(builder, routine, first, whole, builder.sub(size, whole), vector, intp)
            else:
                routine = context.get_function(scalar, numba.core.typing.signature(numba.float64, numba.float64))
                with cgutils.for_range(builder, size) as loop:
                    pointer = builder.gep(first, [loop.index])
                    builder.store(routine(builder, [builder.load(pointer)]), pointer)
            return context.get_dummy_value()
        return numba.types.none(a, index, size), lower

    @numba.njit(error_model="numpy", inline="always")
    def row(a, index, size=-1):
        apply(a, index, a.shape[-1] if size < 0 else size)
    return row


def _vector_tail(builder, routine, first, start, count, vector, intp) -> None:
    """The `count` (< LANES) entries from first[start] through `routine`, in one vector (the first repeated)."""
    lane = [ir.Constant(ir.IntType(32), j) for j in range(LANES)]
    with builder.if_then(builder.icmp_signed(">", count, ir.Constant(intp, 0)), likely=False):
        packed = ir.Constant(vector, ir.Undefined)
        for j in range(LANES):  # the lanes past `count` repeat the first entry
            inside = builder.icmp_signed(">", count, ir.Constant(intp, j))
            at = builder.select(inside, builder.add(start, ir.Constant(intp, j)), start)
            packed = builder.insert_element(packed, builder.load(builder.gep(first, [at])), lane[j])
        result = builder.call(routine, [packed])
        for j in range(LANES - 1):
            with builder.if_then(builder.icmp_signed(">", count, ir.Constant(intp, j))):
                pointer = builder.gep(first, [builder.add(start, ir.Constant(intp, j))])
                builder.store(builder.extract_element(result, lane[j]), pointer)


_exp, _log, _log1p = _in_place("exp", math.exp), _in_place("log", math.log), _in_place("log1p", math.log1p)
# Rows of the buffer `lanes` (see GRADIENT_ROWS).
TOP, TOTAL, SECOND, E_SECOND, SCALE, U_TOP, TOP_SUM = range(7)
GRADIENT_ROWS = 7  # the rows of the buffer `lanes` of `_gradient`: n L entries each (sequence i, lane b at i L + b),
# of which a step uses the first L (one per lane)
NORM, FACTOR = TOTAL, SECOND  # in the step


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _logits(i, X, WZ, g, L):
    """g[i, t] = x_it . W z_i on every lane, from WZ[i] = W z_i."""
    T, d = X.shape[1], X.shape[2]
    for t in range(T):
        for b in range(L):
            g[i, t, b] = 0.0
        for p in range(d):
            for b in range(L):
                g[i, t, b] += X[i, t, p, b] * WZ[i, p, b]


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _softmax(g, s, lanes, L):
    """From the logits g (n, T, L) of every sequence i on every lane b: the softmax s; at entry i L + b of the rows
    of `lanes`, the top token (its first largest logit), the largest logit off it once shifted to 0 at the top
    token (SECOND) and its exponential, the sum of the exponentials (TOTAL); in g the ratios s_t / e^{second}, 0
    at the top token. Each exponential and logarithm runs over every sequence at once (a call of libmvec per four
    entries, not per sequence: one problem alone has one lane)."""
    n, T = g.shape[:2]
    for i in range(n):
        for b in range(L):  # SECOND: the largest logit, first
            lanes[TOP, i * L + b], lanes[SECOND, i * L + b], lanes[TOTAL, i * L + b] = 0.0, -np.inf, 0.0
        for t in range(T):
            for b in range(L):
                j = i * L + b
                lanes[TOP, j] = t if g[i, t, b] > lanes[SECOND, j] else lanes[TOP, j]
                lanes[SECOND, j] = max(lanes[SECOND, j], g[i, t, b])
        for t in range(T):
            for b in range(L):
                g[i, t, b] -= lanes[SECOND, i * L + b]
                s[i, t, b] = g[i, t, b]
    _exp(s, (0, 0), n * T * L)  # every row of s
    for i in range(n):
        for t in range(T):
            for b in range(L):
                lanes[TOTAL, i * L + b] += s[i, t, b]
        for b in range(L):
            lanes[SECOND, i * L + b] = -np.inf
        for t in range(T):
            for b in range(L):
                j = i * L + b
                lanes[SECOND, j] = lanes[SECOND, j] if t == lanes[TOP, j] else max(lanes[SECOND, j], g[i, t, b])
    tiny = False
    for j in range(n * L):
        lanes[E_SECOND, j] = lanes[SECOND, j]
    _exp(lanes, (E_SECOND,), n * L)
    for j in range(n * L):
        tiny |= lanes[E_SECOND, j] < _TINY
        lanes[SCALE, j] = 1.0 / lanes[E_SECOND, j]
    if tiny:  # some ratio needs e^{g - second}: there a quotient by e^{second} would lose digits
        for i in range(n):
            for t in range(T):
                for b in range(L):  # e^0 at the top token: libmvec takes a slow path for e^{-inf}
                    j = i * L + b
                    g[i, t, b] = 0.0 if t == lanes[TOP, j] else g[i, t, b] - lanes[SECOND, j]
        _exp(g, (0, 0), n * T * L)
    for i in range(n):
        for t in range(T):
            for b in range(L):  # both sides computed, then chosen: a load under a condition does not vectorize
                j = i * L + b
                quotient = s[i, t, b] * lanes[SCALE, j]
                exact = lanes[E_SECOND, j] >= _TINY
                g[i, t, b] = 0.0 if t == lanes[TOP, j] else (quotient if exact else g[i, t, b])
    for j in range(n * L):
        lanes[SCALE, j] = 1.0 / lanes[TOTAL, j]
    for i in range(n):
        for t in range(T):
            for b in range(L):
                s[i, t, b] *= lanes[SCALE, i * L + b]


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _head(i, s, U, XV, u, outputs, hidden, L):
    """The head's output f_i on every lane into outputs[i] and, in u[i], the token values: U[i] for the linear
    head; for the ReLU head (XV[i, t] = x_it^T V) u_t = x_it^T V slope, the slope of the ReLU at
    a^T V = sum_t s_t XV[i, t]."""
    T, k = XV.shape[1], XV.shape[2]
    for b in range(L):
        outputs[i, b] = 0.0
    if not k:
        for t in range(T):
            for b in range(L):
                u[i, t, b] = U[i, t, b]
                outputs[i, b] += s[i, t, b] * u[i, t, b]
        return
    for c in range(k):
        for b in range(L):
            hidden[c, b] = 0.0
        for t in range(T):
            for b in range(L):
                hidden[c, b] += s[i, t, b] * XV[i, t, c, b]
        for b in range(L):
            outputs[i, b] += max(hidden[c, b], 0.0)
            hidden[c, b] = 1.0 if hidden[c, b] > 0 else 0.0
    for t in range(T):
        for b in range(L):
            u[i, t, b] = 0.0
        for c in range(k):
            for b in range(L):
                u[i, t, b] += hidden[c, b] * XV[i, t, c, b]


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _log_slopes(loss, Y, outputs, weights, L):
    """weights[i] = log(-l'(Y_i f_i)) for every sequence on every lane, for the loss with code `loss` (as
    `model.LOSSES`)."""
    n = Y.shape[0]
    for i in range(n):
        for b in range(L):
            margin = Y[i, b] * outputs[i, b]
            weights[i, b] = -abs(margin) if loss == 0 else (-margin if loss == 1 else 0.0)
    if loss == 0:  # -log(1 + e^x) = -max(x, 0) - log(1 + e^{-|x|})
        _exp(weights, (0,), n * L)
        _log1p(weights, (0,), n * L)
        for i in range(n):
            for b in range(L):
                weights[i, b] = -max(Y[i, b] * outputs[i, b], 0.0) - weights[i, b]


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _sequences(X, Y, U, XV, WZ, loss, s, g, outputs, weights, u, hidden, lanes, L):
    """Every sequence i on every lane, as `gradients.logit_gradient`: the softmax s[i], the logit gradient g[i] of
    order one, the output f_i into outputs[i] and the log weight log|dL/df_i| + L_i (without the 1/n) into
    weights[i]; u (n, T, L) holds the token values and `lanes` (rows of n L entries) the sequences' scalars."""
    n, T = X.shape[:2]
    for i in range(n):
        _logits(i, X, WZ, g, L)
    _softmax(g, s, lanes, L)
    for i in range(n):
        _head(i, s, U, XV, u, outputs, hidden, L)
        for b in range(L):
            lanes[U_TOP, i * L + b], lanes[TOP_SUM, i * L + b] = 0.0, 0.0
        for t in range(T):
            for b in range(L):
                j = i * L + b
                lanes[U_TOP, j] = u[i, t, b] if t == lanes[TOP, j] else lanes[U_TOP, j]
        for t in range(T):
            for b in range(L):
                j = i * L + b
                lanes[TOP_SUM, j] += g[i, t, b] * (lanes[U_TOP, j] - u[i, t, b])
    _log(lanes, (TOTAL,), n * L)
    for j in range(n * L):
        lanes[SECOND, j] -= lanes[TOTAL, j]  # L_i = second - log(total)
        lanes[E_SECOND, j] = lanes[SECOND, j]
    _exp(lanes, (E_SECOND,), n * L)
    for i in range(n):
        for t in range(T):
            for b in range(L):
                j = i * L + b
                at_top = s[i, t, b] * lanes[TOP_SUM, j]
                off_top = g[i, t, b] * (u[i, t, b] - lanes[U_TOP, j] + lanes[E_SECOND, j] * lanes[TOP_SUM, j])
                g[i, t, b] = at_top if t == lanes[TOP, j] else off_top
    _log_slopes(loss, Y, outputs, weights, L)
    for i in range(n):
        for b in range(L):
            weights[i, b] += lanes[SECOND, i * L + b]


# `_gradient` (once a step) and the loops' `_body` (once a run) are called, not inlined: Numba inlines a function by
# deep-copying its IR with its whole variable scope for each of its blocks, a compile time quadratic in its size
# (inlined, the loops of W (both heads), mirror descent and (K, Q) took 219 s to compile cold, one after the other;
# called, 76 s). The calls cost a few percent of a step at most (one problem alone, the best of 27 runs, side by
# side: W 2.56 -> 2.67 us per step, mirror descent 4.60 -> 4.72, (K, Q) 5.64 -> 5.48). A call with the literal L = 1
# (`_run_one`) compiles its own specialization, for one lane. The small functions stay inlined.
@numba.njit(cache=True, fastmath=_FAST, error_model="numpy")
def _gradient(X, Y, U, XV, WZ, loss, s, g, outputs, weights, A, log_scale, u, hidden, lanes, L):
    """dL/dW = e^{log scale} sum_i A[i] z_i^T on every lane (as `gradients.weight_gradient`; A of order one):
    fills A and log_scale."""
    n, T, d = X.shape[:3]
    _sequences(X, Y, U, XV, WZ, loss, s, g, outputs, weights, u, hidden, lanes, L)
    _relative_weights(Y, g, weights, log_scale, L)
    for i in range(n):
        for p in range(d):
            for b in range(L):
                A[i, p, b] = 0.0
        for t in range(T):
            for p in range(d):
                for b in range(L):
                    A[i, p, b] += g[i, t, b] * X[i, t, p, b]


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _relative_weights(Y, g, weights, log_scale, L):
    """From the log weights w_i of `_sequences` on every lane: log_scale = max_i w_i - log n, and the logit
    gradients g[i] times -Y_i e^{w_i - max_j w_j} (order one: dL/dg_it = e^{log scale} g[i, t])."""
    n, T = g.shape[:2]
    for b in range(L):
        log_scale[b] = -np.inf
    for i in range(n):
        for b in range(L):
            log_scale[b] = max(log_scale[b], weights[i, b])
    for i in range(n):
        for b in range(L):
            weights[i, b] -= log_scale[b]
    _exp(weights, (0,), n * L)
    for i in range(n):
        for t in range(T):
            for b in range(L):
                g[i, t, b] *= -Y[i, b] * weights[i, b]
    log_n = math.log(n)
    for b in range(L):
        log_scale[b] -= log_n


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _step(WZ, B, A, R, gram, log_scale, lr, normalized, eps, lanes, L):
    """The step W -= factor G for G = sum_i A[i] z_i^T, as `train.gd` takes it (normalized as `train._unit`),
    made on WZ[i] = W z_i, through R[i] = G z_i = sum_j A[j] (z_j . z_i), and on B, where W = W0 - sum_i B[i] z_i^T;
    ||G||_F^2 = sum_i A[i] . R[i]. A lane whose G is 0 (up to round-off, if normalized) does not move."""
    n, d = A.shape[:2]
    _gram_products(gram, A, R, L)
    _scaled_products(A, R, lanes, L)
    _factor(lanes, log_scale, lr, normalized, eps, L)
    for i in range(n):
        for p in range(d):
            for b in range(L):
                WZ[i, p, b] -= lanes[FACTOR, b] * R[i, p, b]
                B[i, p, b] += lanes[FACTOR, b] * A[i, p, b]


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _gram_products(gram, A, R, L):
    """R[i] = sum_j gram[i, j] A[j] on every lane (A, R (n, d, L)): R[i] = G z_i for G = sum_j A[j] z_j^T and the
    Gram matrix gram[i, j] = z_i . z_j."""
    n, d = A.shape[:2]
    for i in range(n):
        for p in range(d):
            for b in range(L):
                R[i, p, b] = 0.0
        for j in range(n):
            for p in range(d):
                for b in range(L):
                    R[i, p, b] += gram[i, j, b] * A[j, p, b]


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _largest_entries(G, lanes, row, L):
    """lanes[row] = the largest |entry| of G (..., L), C-contiguous, on every lane (0 where G = 0). A maximum is
    exact, so any loop that takes it gives the same bits."""
    flat = G.reshape(-1, G.shape[-1])
    for b in range(L):
        lanes[row, b] = 0.0
    for a in range(flat.shape[0]):
        for b in range(L):
            lanes[row, b] = max(lanes[row, b], abs(flat[a, b]))


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _scaled_unit(G, lanes, scale, norm, L):
    """On every lane, G (..., L), C-contiguous, divided in place by lanes[scale], its largest |entry| (1 where G =
    0), and lanes[norm] = the Euclidean norm of the result: the steps' normalization (`_descent._unit`)."""
    flat = G.reshape(-1, G.shape[-1])
    _largest_entries(G, lanes, scale, L)
    for b in range(L):
        lanes[norm, b] = 0.0
        lanes[scale, b] = lanes[scale, b] if lanes[scale, b] > 0 else 1.0
    for a in range(flat.shape[0]):
        for b in range(L):
            flat[a, b] /= lanes[scale, b]
            lanes[norm, b] += flat[a, b] * flat[a, b]
    for b in range(L):
        lanes[norm, b] = math.sqrt(lanes[norm, b])


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _record_span(r, W0, B, Z, Ws, L):
    """Record r of every lane's W = W0 - sum_i B[i] z_i^T (the loops keep W in that form) into Ws (records, L, d,
    d)."""
    n, d = B.shape[:2]
    for b in range(L):
        for p in range(d):
            for q in range(d):
                Ws[r, b, p, q] = W0[p, q, b]
                for i in range(n):
                    Ws[r, b, p, q] -= B[i, p, b] * Z[i, q, b]


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _scaled_products(G, H, lanes, L):
    """On every lane, lanes[SCALE] = the largest |entry| of G and lanes[NORM] = sum G H / SCALE^2 over the
    entries of G and H (both (rows, columns, L)); 0 where G = 0."""
    rows, columns = G.shape[:2]
    _largest_entries(G, lanes, SCALE, L)
    for b in range(L):
        lanes[NORM, b] = 0.0
    for a in range(rows):
        for c in range(columns):
            for b in range(L):
                unit = 1.0 / lanes[SCALE, b] if lanes[SCALE, b] > 0 else 0.0
                lanes[NORM, b] += (G[a, c, b] * unit) * (H[a, c, b] * unit)


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _factor(lanes, log_scale, lr, normalized, eps, L):
    """lanes[FACTOR] = the factor of the step -factor G that `train.gd` takes for the gradient e^{log scale} G
    (normalized as `train._unit`), on every lane, from a scale lanes[SCALE] > 0 (0 where G = 0: no move) and
    lanes[NORM] = ||G||_F^2 / scale^2."""
    if normalized:
        for b in range(L):
            lanes[NORM, b] = math.sqrt(lanes[NORM, b]) if lanes[NORM, b] > 0 else 0.0
            lanes[FACTOR, b] = lanes[SCALE, b] * lanes[NORM, b] / eps if eps > 0 else 1.0
        if eps > 0:  # paper A's 1 / (||G_true|| + eps) for G_true = e^{log scale} G, in log space
            _log(lanes, (FACTOR,), L)
            for b in range(L):
                lanes[FACTOR, b] = -(log_scale[b] + lanes[FACTOR, b])
            _exp(lanes, (FACTOR,), L)
        for b in range(L):
            length = lanes[SCALE, b] * lanes[NORM, b]
            factor = lr / length / (1.0 + lanes[FACTOR, b]) if eps > 0 else lr / length
            lanes[FACTOR, b] = factor if lanes[NORM, b] > 0 else 0.0
    else:
        for b in range(L):
            lanes[FACTOR, b] = log_scale[b]
        _exp(lanes, (FACTOR,), L)
        for b in range(L):
            lanes[FACTOR, b] = lr * lanes[FACTOR, b] if lanes[SCALE, b] > 0 else 0.0


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _row_products(left, right, out, L):
    """out[i, j] = left[i] . right[j] on every lane (out = left right^T)."""
    for i in range(left.shape[0]):
        for j in range(right.shape[0]):
            for b in range(L):
                out[i, j, b] = 0.0
            for q in range(left.shape[1]):
                for b in range(L):
                    out[i, j, b] += left[i, q, b] * right[j, q, b]


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _products(left, right, out, L):
    """out[i] = left[i] right on every lane: out[i, j] = sum_c left[i, c] right[c, j]."""
    for i in range(left.shape[0]):
        for j in range(right.shape[1]):
            for b in range(L):
                out[i, j, b] = 0.0
            for c in range(left.shape[1]):
                for b in range(L):
                    out[i, j, b] += left[i, c, b] * right[c, j, b]


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _outer_sums(left, right, out, L):
    """out = sum_i left[i] right[i]^T on every lane: out[a, j] = sum_i left[i, a] right[i, j]."""
    for a in range(left.shape[1]):
        for j in range(right.shape[1]):
            for b in range(L):
                out[a, j, b] = 0.0
    for i in range(left.shape[0]):
        for a in range(left.shape[1]):
            for j in range(right.shape[1]):
                for b in range(L):
                    out[a, j, b] += left[i, a, b] * right[i, j, b]


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _record_outputs(r, loss, Y, outputs, s, probs, risks, L):
    """Record r of every lane's attention s into probs (records, L, n, T) and, from the outputs, of its loss
    (the loss with code `loss`) into risks (records, L)."""
    n, T = s.shape[:2]
    for b in range(L):
        risk = 0.0
        for i in range(n):
            margin = Y[i, b] * outputs[i, b]
            risk += (max(-margin, 0.0) + math.log1p(math.exp(-abs(margin))) if loss == 0 else
                     (math.exp(-margin) if loss == 1 else -margin))
            for t in range(T):
                probs[r, b, i, t] = s[i, t, b]
        risks[r, b] = risk / n


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy")
def _body(X, Y, Z, U, XV, W0, loss, lr, normalized, eps, sqrt_schedule, record, Ws, probs, risks, L):
    """Every lane's run to step record[-1] (step k at lr / sqrt(k + 1) where `sqrt_schedule`), lanes last (X
    (n, T, d, L), Z (n, d, L), W0 (d, d, L), ...); the iterates at the steps `record` go to Ws (records, L, d, d),
    probs (records, L, n, T) and risks (records, L)."""
    n, T, d = X.shape[:3]
    WZ, A, B, R = np.empty((n, d, L)), np.empty((n, d, L)), np.zeros((n, d, L)), np.empty((n, d, L))
    gram, s, g = np.empty((n, n, L)), np.empty((n, T, L)), np.empty((n, T, L))
    outputs, weights, u, hidden = np.empty((n, L)), np.empty((n, L)), np.empty((n, T, L)), np.empty((XV.shape[2], L))
    log_scale, lanes = np.empty(L), np.empty((GRADIENT_ROWS, n * L))
    _row_products(Z, Z, gram, L)
    _row_products(Z, W0, WZ, L)
    r = 0
    for k in range(record[-1] + 1):
        _gradient(X, Y, U, XV, WZ, loss, s, g, outputs, weights, A, log_scale, u, hidden, lanes, L)
        if k == record[r]:
            _record_outputs(r, loss, Y, outputs, s, probs, risks, L)
            _record_span(r, W0, B, Z, Ws, L)
            r += 1
            if r == len(record):
                break
        rate = lr / math.sqrt(k + 1.0) if sqrt_schedule else lr
        _step(WZ, B, A, R, gram, log_scale, rate, normalized, eps, lanes, L)


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", nogil=True)
def _run(X, Y, Z, U, XV, W0, loss, lr, normalized, eps, sqrt_schedule, record, Ws, probs, risks):
    """`_body` on every lane of X (n, T, d, L)."""
    _body(X, Y, Z, U, XV, W0, loss, lr, normalized, eps, sqrt_schedule, record, Ws, probs, risks, X.shape[3])


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", nogil=True)
def _run_one(X, Y, Z, U, XV, W0, loss, lr, normalized, eps, sqrt_schedule, record, Ws, probs, risks):
    """`_body` on one problem (X (n, T, d, 1)), compiled for one lane: no loop over lanes is left."""
    _body(X, Y, Z, U, XV, W0, loss, lr, normalized, eps, sqrt_schedule, record, Ws, probs, risks, 1)


def gd(problem: Problem, W0: ArrayLike, head: heads.Head | None, *, loss: str, lr: float, normalized: bool,
       eps: float, record: ArrayLike, schedule: str = "constant") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(W, probs, risk) recorded at the increasing steps ``record`` (the last is the last step), each
    (records, *batch, ...), of gradient descent on W from W0 ((d, d) or one per problem) as ``train.gd`` takes it
    (``head``: None, or a linear or ReLU head; ``loss``, ``lr``, ``normalized``, ``eps``, ``schedule``: as
    ``train.gd``'s).
    ``train.gd`` calls it wherever it applies; it is here for those who want the loop alone.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import data
    >>> from attnsvm.train import _cpu_loop
    >>> problem = data.random_problem(n=2, T=3, d=2, seed=0)
    >>> W0 = torch.zeros(2, 2, dtype=torch.float64)
    >>> W, probs, risk = _cpu_loop.gd(problem, W0, None, loss="logistic", lr=0.5, normalized=True, eps=0.0,
    ...                               record=[0, 10])
    >>> tuple(W.shape), tuple(probs.shape), tuple(risk.shape)
    ((2, 2, 2), (2, 2, 3), (2,))
    """
    problem = _checked_problem(problem, min_T=2, why=_TRAINING, needs_Z=True)
    batch, n, T, d = problem.batch_shape, problem.n, problem.T, problem.d
    W0, head = _weights(problem, W0, "W0"), _checked_head(head, problem)
    if torch.broadcast_shapes(W0.shape[:-2], batch) != batch:
        raise ValueError(f"W0 must have shape ({d}, {d}) or {batch + (d, d)} (one initial W per problem), "
                         f"got {tuple(W0.shape)}")
    unsupported = why_not_compiled("W", head, "exact", problem.X.device)
    if unsupported:
        raise ValueError(f"head={head!r} is not supported: {unsupported}; train it with train.gd(engine='torch')")
    loss, lr, eps = _option(loss, "loss", tuple(LOSSES)), positive_float(lr, "lr"), nonnegative_float(eps, "eps")
    normalized, record = boolean(normalized, "normalized"), _record(record)
    sqrt_schedule = _option(schedule, "schedule", SCHEDULES) == "sqrt"
    _memory_budget(len(record) * (np.prod(batch, dtype=float) + LANES) * (d * d + n * T + 1), "record")
    result = _gd(problem, W0, head, loss, lr, normalized, eps, record, sqrt_schedule)
    for values, what in zip(result, ("W", "the attention", "the loss")):
        _finite(values, f"{what} in gradient descent", f"lr={lr!r} takes steps too large for this problem (or its "
                f"tokens, {'the head or ' if head is not None else ''}W0 are too large)", "lower lr")
    return result


def _lanes(batch: tuple, one_lane: bool = False) -> tuple[int, int, partial]:
    """The number of problems in ``batch``, that number rounded up to a whole number of vectors (``padded``; 1 for
    one problem where ``one_lane``: the caller has a loop compiled for one lane), and `_lanes_last` for them: the
    layout of the compiled loops' arrays."""
    size = int(np.prod(batch))
    padded = 1 if one_lane and size == 1 else -(-size // LANES) * LANES  # the last problem repeated
    return size, padded, partial(_lanes_last, batch=batch, size=size, padded=padded)


def _lanes_last(tensor: torch.Tensor, shape: tuple, *, batch: tuple, size: int, padded: int) -> np.ndarray:
    """``tensor`` broadcast to batch + shape, as an array with the problems (``size`` of them) last, the last problem
    repeated up to ``padded`` problems (a whole number of vectors)."""
    flat = torch.broadcast_to(tensor.detach(), batch + shape).reshape((size,) + shape).numpy()
    return np.moveaxis(np.concatenate([flat, flat[-1:].repeat(padded - size, 0)]), 0, -1)


def _gd(problem: Problem, W0: torch.Tensor, head, loss: str, lr: float, normalized: bool, eps: float,
        record, sqrt_schedule: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """`gd` without checks (for `train.gd`, which checked its arguments and checks the result)."""
    d = problem.d
    return _in_blocks(_run, problem, head, (W0,), (LOSS_CODES[loss], float(lr), normalized, float(eps),
                                                  sqrt_schedule, np.asarray(record, dtype=np.int64)),
                      len(record), ((d, d), (problem.n, problem.T), ()), run_one=_run_one)


def _in_blocks(run, problem: Problem, head, starts: tuple, options: tuple, records: int, shapes: tuple,
               run_one=None) -> tuple[torch.Tensor, ...]:
    """The records of a compiled loop `run` (`_run`'s arguments: the problem's X, Y, Z, the head's U, XV, the
    ``starts``, ``options``, then the arrays it records into, one per shape of ``shapes``), called on blocks of up
    to BLOCK problems (`_each_block`), lanes last (`run_one`, the loop compiled for one lane, where there is one
    problem);
    each record as a tensor (records, *batch, *shape)."""
    batch, n, T, d = problem.batch_shape, problem.n, problem.T, problem.d
    size, padded, lanes_last = _lanes(batch, one_lane=run_one is not None)
    run = run_one if padded == 1 else run
    X, Y, Z = lanes_last(problem.X, (n, T, d)), lanes_last(problem.Y, (n,)), lanes_last(problem.Z, (n, d))
    if isinstance(head, heads.ReLU):
        V = lanes_last(head.V, head.V.shape[-2:])
        U, XV = np.zeros((n, T, padded)), np.einsum("ntpb,pcb->ntcb", X, V)
    else:
        u = _token_values(problem, problem.v if head is None else head.v)
        U, XV = lanes_last(u, (n, T)), np.zeros((n, T, 0, padded))
    inputs = (X, Y, Z, U, XV) + tuple(lanes_last(start, start.shape[-2:]) for start in starts)
    outputs = [np.empty((records, padded) + shape) for shape in shapes]

    def run_block(block: slice) -> None:
        recorded = [np.empty(a[:, block].shape) for a in outputs]
        run(*(np.ascontiguousarray(a[..., block]) for a in inputs), *options, *recorded)
        for a, values in zip(outputs, recorded):
            a[:, block] = values
    _each_block(run_block, padded)
    return tuple(torch.from_numpy(a[:, :size]).reshape((records,) + batch + a.shape[2:]) for a in outputs)


def _blocks(padded: int) -> list[slice]:
    """The lanes 0, ..., padded - 1 cut into blocks of at most BLOCK problems, each a whole number of vectors (but
    the last): as few as can be, but an even number where there is more than one, their sizes within a vector of
    each other, so that two threads share them evenly. The blocks depend on ``padded`` alone, never on the
    threads: a loop that stops a block early (at a failure, or once all its lanes diverged) does the same on
    any number of threads."""
    if padded == 0:
        return []
    count = -(-padded // BLOCK)
    count += count % 2 if count > 1 else 0
    vectors = -(-padded // LANES)
    ends = np.minimum(LANES * np.cumsum([vectors // count + (k < vectors % count) for k in range(count)]), padded)
    return [slice(int(start), int(end)) for start, end in zip(np.concatenate([[0], ends[:-1]]), ends)]


def _each_block(run_block, padded: int) -> list:
    """[run_block(block) for each of `_blocks`], in order, the blocks side by side on ``setup()``'s
    ``loop_threads`` threads (at most one per block; the compiled loops release the GIL). A lane's arithmetic is
    its own and the blocks do not depend on the threads, so a run is the same on any number of threads."""
    threads, blocks = _threads_for_loops(), _blocks(padded)
    if threads == 1 or len(blocks) < 2:
        return [run_block(block) for block in blocks]
    with ThreadPoolExecutor(min(threads, len(blocks))) as pool:  # a pool per call: safe in a forked child
        return list(pool.map(run_block, blocks))


def _record(record) -> np.ndarray:
    """`record` checked to hold increasing step numbers in [0, MAX_STEPS], as an int64 array."""
    if torch.is_tensor(record):
        if record.device.type != "cpu":
            raise ValueError(f"record is on the device {record.device.type!r}: pass a list of step numbers")
        record = record.detach()
    try:
        steps = np.asarray(record)
    except (TypeError, ValueError) as err:
        raise TypeError(f"record must be a list of step numbers, got {type(record).__name__}") from err
    if steps.dtype.kind not in "iu" or steps.ndim != 1:
        raise TypeError(f"record must be a 1-D list of integer step numbers, got dtype {steps.dtype} and shape "
                        f"{steps.shape}")
    budget(steps.size, "record", MAX_RECORDS, "recorded iterates")
    if steps.size == 0 or steps[0] < 0 or np.any(np.diff(steps) <= 0):
        raise ValueError(f"record must hold the steps to record, increasing (sorted, without repeats) from >= 0, "
                         f"got {record!r}")
    budget(steps[-1], "record", MAX_STEPS, "gradient steps")
    return steps.astype(np.int64)
