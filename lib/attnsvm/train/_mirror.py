"""Mirror descent with the potential ||.||_p^p / p (entrywise) on W or on (K, Q), and sign descent.

Each parameter w keeps its dual variable theta = sign(w) |w|^(p-1) (the gradient of the potential); a step moves
the dual variable, theta <- theta - lr G / ||G||_q with q = p / (p - 1) the dual exponent, and maps back,
w = sign(theta) |theta|^(1/(p-1)). p = 2 is normalized gradient descent. The gradient G comes from
``weight_gradient`` as exp(log_scale) * direction, so G / ||G||_q is the direction divided by its own q-norm:
exact however far softmax saturates (the true G may underflow to 0; its direction does not).

``rule="official"`` runs instead the update of the authors' code for mirror descent on attention (their
``full_train``): the gradient by autograd through softmax, divided by ||G||_q + eps with eps = 2.2e-16, and for
(K, Q) the ridge eps (||K||^2 + ||Q||^2) in the loss. Once ||G||_q falls below eps its steps shrink with it, and
once softmax saturates autograd's gradient is round-off: that run freezes where the exact one goes on.

Sign descent, w <- w - lr sign(G), is the steepest descent for the l-infinity norm (the limit p -> infinity of
normalized steepest descent in the lp norm, not of the mirror steps above); sign(G) = sign(direction) is exact
as well.

On the CPU both run, except under rule="official", in a loop compiled with Numba (``engine="auto"``) that takes
the exact gradient from the compiled loop of ``train.gd`` (`_cpu_loop`) and the same steps as the torch loop,
to round-off per step, several times faster. Over many steps deep in saturation with p < 2 and eps = 0 the runs
amplify round-off (in either engine, a change of W0 in its last digit grows), so there the two engines' whole
trajectories agree only as two such perturbed runs do. The compiled loop's powers without a sqrt form (p = 1.75:
7/3 and 4/3) are libmvec's vector pow, within an ulp of libm's. Under rule="official" the torch loop takes the
gradient, the outputs and the attention from one forward pass (`_descent._autograd_gradient`), and runs a batch of
`_descent.SIDE_BY_SIDE` problems or more in blocks side by side (`_descent._side_by_side`). Numba's cache keys
on this file only: after an edit of `_cpu_loop`, clear ``__pycache__`` (the tests that compare the two engines
would fail on a stale loop).
"""

from __future__ import annotations

import math

import numba
import numpy as np
import torch
from llvmlite import ir
from numba.core import cgutils
from numpy.typing import ArrayLike

from .._checks import as_tensor, positive_float, positive_int
from ..data import Problem
from ..model import _TRAINING, LOSSES, _checked_problem, _option, _overflow, _risk, _token_values
from . import _gradients as gradients
from ._cpu_loop import (_FAST, GRADIENT_ROWS, LANES, LIBMVEC, LOSS_CODES, _each_block, _gradient, _lanes,
                        _largest_entries, _outer_sums, _products, _row_products)
from ._descent import (ENGINES, OFFICIAL_EPS, RULES, Trajectory, _autograd_gradient, _blame, _finite_trajectory,
                       _part, _recorder, _side_by_side)
from ._initial import PARAMS, initial_parameters

__all__ = ["mirror_descent", "sign_descent", "dual_norm"]


def _exponent(p) -> float:
    """``p`` as a finite exponent > 1, else a ValueError naming ``p``."""
    if isinstance(p, (str, bytes, bool, np.bool_)) or p is None:
        raise ValueError(f"p must be a number > 1 (the potential ||W||_p^p), got {p!r}")
    value = positive_float(p, "p")
    if value <= 1:
        raise ValueError(f"p must be a number > 1 (the potential ||W||_p^p; for the l-infinity geometry use "
                         f"sign_descent), got {p!r}")
    return value


def dual_norm(G: ArrayLike, q: float, dims: tuple = (-2, -1)) -> torch.Tensor:
    r"""The entrywise q-norm of G over ``dims``.

    It is computed after dividing by the largest entry, so that neither tiny nor huge entries underflow or
    overflow in the powers :math:`|g|^q`.

    Parameters
    ----------
    G : ArrayLike
        The array.
    q : float
        :math:`q \ge 1`, or ``math.inf``.
    dims : tuple of int
        The dimensions to reduce, by default (-2, -1).

    Returns
    -------
    Tensor
        The norms, with ``dims`` kept (size 1).

    Raises
    ------
    ValueError
        If q < 1 or G is not finite.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import train
    >>> G = torch.tensor([[3e-200, -4e-200]], dtype=torch.float64)
    >>> float(train.dual_norm(G, 2.0)[0, 0] / 1e-200)
    5.0
    >>> float(torch.linalg.vector_norm(G, 2.0))  # the naive norm underflows
    0.0
    """
    G = as_tensor(G, "G")
    if isinstance(q, (str, bytes, bool, np.bool_)) or q is None:
        raise ValueError(f"q must be a number >= 1 or math.inf, got {q!r}")
    q = float(q)
    if not q >= 1:
        raise ValueError(f"q must be a number >= 1 or math.inf, got {q!r}")
    if not (isinstance(dims, tuple) and dims
            and all(isinstance(k, (int, np.integer)) and not isinstance(k, bool) for k in dims)):
        raise TypeError(f"dims must be a non-empty tuple of dimension indices, e.g. (-2, -1), got {dims!r}")
    if G.dim() < len(dims):
        raise ValueError(f"G must have at least {len(dims)} dimensions (the norm is taken over dims={dims}), got "
                         f"shape {tuple(G.shape)}")
    if any(not -G.dim() <= k < G.dim() for k in dims) or len({k % G.dim() for k in dims}) != len(dims):
        raise ValueError(f"dims must name distinct dimensions of G (shape {tuple(G.shape)}), got {dims}")
    if any(G.shape[k] == 0 for k in dims):
        raise ValueError(f"G has no entries along dims={dims} (shape {tuple(G.shape)}): its norm is undefined")
    return _dual_norm(G, q, dims)


def _dual_norm(G: torch.Tensor, q: float, dims: tuple = (-2, -1)) -> torch.Tensor:
    """`dual_norm` without checks."""
    scale = G.abs().amax(dims, keepdim=True)
    safe = torch.where(scale > 0, scale, 1.0)
    if math.isinf(q):
        return scale
    return safe * _power((G / safe).abs(), q).sum(dims, keepdim=True) ** (1.0 / q)


def _power(x: torch.Tensor, a: float) -> torch.Tensor:
    """x ** a for x >= 0; for a = 1.5 or 2.5 as x^(a - 1/2) sqrt(x), within an ulp and four times faster than
    pow (torch's pow is fast for a = 1/2, 2 and 3 only)."""
    if a in (1.5, 2.5):
        return x ** (a - 0.5) * x.sqrt()
    return x ** a


def _mirror_step(p: float, q: float, eps):
    """The step of normalized mirror descent: (theta, g, log_scale) -> theta - lr-free move, i.e. the move
    g / ||g||_q for the true gradient exp(log_scale) g (with eps, a tensor of the batch shape, divided by
    ||G_true||_q + eps instead; eps None: no eps anywhere)."""
    log_eps = None if eps is None else torch.log(eps)[..., None, None]

    def move(g: torch.Tensor, log_scale: torch.Tensor) -> torch.Tensor:
        norm = _dual_norm(g, q)
        unit = g / torch.where(norm > 0, norm, 1.0)
        if log_eps is None:
            return unit
        log_norm = log_scale[..., None, None] + torch.log(norm)  # log ||G_true||_q
        factor = torch.sigmoid(log_norm - log_eps)  # eps = 0 (log -inf) leaves the unit step
        return unit * torch.where(norm > 0, factor, 0.0)  # a zero gradient (0 * nan) gives no step
    return move


def _primal(theta: torch.Tensor, p: float) -> torch.Tensor:
    """w = sign(theta) |theta|^(1/(p-1)), the inverse of the mirror map theta = sign(w) |w|^(p-1)."""
    power = 1.0 / (p - 1.0)
    if power == 1.0:
        return theta
    return torch.sign(theta) * _power(theta.abs(), power)


def _dual(w: torch.Tensor, p: float) -> torch.Tensor:
    return torch.sign(w) * _power(w.abs(), p - 1.0)


def _train(problem: Problem, param: str, steps: int, lr: float, init, m, seed: int, record_every: int, loss: str,
           rule, update, name: str, engine: str) -> Trajectory:
    """The shared loop of mirror and sign descent: update(params, grads, log_scale) -> new params; in the
    compiled loop where ``engine`` and the run allow it."""
    problem = _checked_problem(problem, min_T=2, why=_TRAINING, needs_Z=True)
    param, loss = _option(param, "param", PARAMS), _option(loss, "loss", tuple(LOSSES))
    official = _option(rule, "rule", RULES) == "official"
    engine = _option(engine, "engine", ENGINES)
    unsupported = ('rule="official" takes autograd\'s gradient, which it does not compute' if official else
                   None if problem.X.device.type == "cpu" else f"it runs on the CPU only (the problem is on "
                                                                f"{problem.X.device})")
    if engine == "compiled" and unsupported:
        raise ValueError(f'engine="compiled" cannot run this training: {unsupported}; use engine="auto" or "torch"')
    steps, lr = positive_int(steps, "steps", minimum=0), positive_float(lr, "lr")
    record_every = positive_int(record_every, "record_every")
    m = problem.d if m is None else positive_int(m, "m")
    params = initial_parameters(problem, param, init, m, seed)
    d, width = problem.d, 0 if param == "W" else params[0].shape[-1]
    entries = np.prod(problem.batch_shape, dtype=float) * (d * d + 2 * d * width + problem.n * problem.T + 1)
    recorder = _recorder(steps, record_every, entries)
    blame = _blame(f"lr={lr!r}", "init")
    if engine != "torch" and not unsupported:
        return _finite_trajectory(_compiled(problem, params, recorder.steps, lr, loss, update), blame)
    with _overflow(f"{name}'s iterates", blame, "lower lr"):
        _side_by_side(lambda block, recorder: _torch_loop(
            _part(problem, block), _part(params, block), recorder, steps, lr, loss, official, update.part(block)),
            problem, recorder)
    return _finite_trajectory(recorder.trajectory(), blame)


def _torch_loop(problem: Problem, params: tuple, recorder, steps: int, lr: float, loss: str, official: bool,
                update) -> None:
    """`_train`'s torch loop, from `params` (W,) or (K, Q), recording into `recorder`."""
    param, values = "W" if len(params) == 1 else "KQ", _token_values(problem, problem.v)
    ridge = OFFICIAL_EPS if official and param == "KQ" else 0.0
    state = update.start(params)
    for k in range(steps + 1):
        params = update.params(state)
        W = params[0] if param == "W" else params[0] @ params[1].transpose(-2, -1)
        if official:
            grads, f, probs = _autograd_gradient(problem, params, loss, None, ridge, values)
            log_scale = torch.zeros(problem.batch_shape, dtype=torch.float64)
        else:
            G, log_scale, grad = gradients._weight_gradient(problem, W, loss, None, values)
            probs, f = grad.probs, grad.outputs
            grads = (G,) if param == "W" else (G @ params[1], G.transpose(-2, -1) @ params[0])
        if recorder.wants(k):
            factors = {} if param == "W" else {"K": params[0], "Q": params[1]}
            recorder.add(W=W, probs=probs, loss=_risk(LOSSES[loss], problem, f), **factors)
        if k == steps:
            return
        state = update.step(state, grads, log_scale, lr)


def _compiled(problem: Problem, params: tuple, record: list, lr: float, loss: str, update) -> Trajectory:
    """`_train`'s run in the compiled loop `_run`: lanes last, blocks of up to BLOCK problems (as `_cpu_loop.gd`)."""
    batch, n, T, d, m = problem.batch_shape, problem.n, problem.T, problem.d, params[0].shape[-1]
    size, padded, lanes_last = _lanes(batch, one_lane=True)
    X, Y, Z = lanes_last(problem.X, (n, T, d)), lanes_last(problem.Y, (n,)), lanes_last(problem.Z, (n, d))
    U, XV = lanes_last(_token_values(problem, problem.v), (n, T)), np.zeros((n, T, 0, padded))
    K0 = lanes_last(params[0], (d, m))
    Q0 = lanes_last(params[1], (d, m)) if len(params) == 2 else np.zeros_like(K0)
    p, eps = (update.p, update.eps) if isinstance(update, _Mirror) else (0.0, None)
    log_eps = lanes_last(torch.log(torch.zeros(batch, dtype=torch.float64) if eps is None else eps), ())
    R = len(record)
    Ws, probs, f = np.empty((R, padded, d, d)), np.empty((R, padded, n, T)), np.empty((R, padded, n))
    Ks, Qs = np.empty((R, padded, d, m)), np.empty((R, padded, d, m))
    run = _run_one if padded == 1 else _run

    def run_block(block: slice) -> None:
        recorded = [np.empty(a[:, block].shape) for a in (Ws, Ks, Qs, probs, f)]
        run(*(np.ascontiguousarray(a[..., block]) for a in (X, Y, Z, U, XV, K0, Q0, log_eps)), len(params) == 2,
            LOSS_CODES[loss], float(lr), float(p), np.asarray(record, dtype=np.int64), *recorded)
        for a, values in zip((Ws, Ks, Qs, probs, f), recorded):
            a[:, block] = values
    _each_block(run_block, padded)
    Ws, Ks, Qs, probs, f = (torch.from_numpy(a[:, :size]).reshape((R,) + batch + a.shape[2:])
                            for a in (Ws, Ks, Qs, probs, f))
    factors = {} if len(params) == 1 else {"K": Ks, "Q": Qs}
    return Trajectory(steps=np.array(record), probs=probs, loss=_risk(LOSSES[loss], problem, f), W=Ws, **factors)


@numba.extending.intrinsic
def _vector_powers(typingctx, x, a):
    """x = x ** a in place (a C-contiguous float64 array x, a float): libmvec's 4-lane pow (`_ZGVdN4vv_pow`, within
    an ulp or two of libm's, tests/lib), LANES entries a call, the last ones padded to a vector with the first of
    them; an entry's value does not depend on the entries beside it. Only where LIBMVEC is loaded."""
    if not (isinstance(x, numba.types.Array) and x.layout == "C" and x.dtype == numba.float64
            and isinstance(a, numba.types.Float)):
        return None

    def lower(context, builder, signature, args):
        array = context.make_array(x)(context, builder, args[0])
        intp, vector = context.get_value_type(numba.intp), ir.VectorType(ir.DoubleType(), LANES)
        routine = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vector, [vector, vector]),
                                                 f"_ZGVdN{LANES}vv_pow")
        exponent = context.cast(builder, args[1], signature.args[1], numba.float64)
        lane = [ir.Constant(ir.IntType(32), j) for j in range(LANES)]
        exponents = ir.Constant(vector, ir.Undefined)
        for j in range(LANES):
            exponents = builder.insert_element(exponents, exponent, lane[j])
        first, size = array.data, array.nitems
        whole = builder.mul(builder.sdiv(size, ir.Constant(intp, LANES)), ir.Constant(intp, LANES))
        with cgutils.for_range_slice(builder, ir.Constant(intp, 0), whole, ir.Constant(intp, LANES)) as (b, _):
            pointer = builder.bitcast(builder.gep(first, [b]), vector.as_pointer())
            builder.store(builder.call(routine, [builder.load(pointer, align=8), exponents]), pointer, align=8)
        count = builder.sub(size, whole)
        with builder.if_then(builder.icmp_signed(">", count, ir.Constant(intp, 0)), likely=False):
            packed = ir.Constant(vector, ir.Undefined)
            for j in range(LANES):  # the lanes past `count` repeat the first entry of the tail
                inside = builder.icmp_signed(">", count, ir.Constant(intp, j))
                at = builder.select(inside, builder.add(whole, ir.Constant(intp, j)), whole)
                packed = builder.insert_element(packed, builder.load(builder.gep(first, [at])), lane[j])
            result = builder.call(routine, [packed, exponents])
            for j in range(LANES):
                with builder.if_then(builder.icmp_signed(">", count, ir.Constant(intp, j))):
                    builder.store(builder.extract_element(result, lane[j]),
                                  builder.gep(first, [builder.add(whole, ir.Constant(intp, j))]))
        return context.get_dummy_value()
    return numba.types.none(x, a), lower


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy")
def _powers(x, a):
    """x = x ** a in place (x >= 0, C-contiguous): sqrt and products where 2a is 1, 2, 3, 4 or 5 (as `_power`),
    else libmvec's 4-lane pow where it is loaded (an ulp from libm's pow on some entries), else libm's pow."""
    flat = x.reshape(-1)
    if a == 1.0:
        return
    if a == 0.5:
        for j in range(flat.size):
            flat[j] = math.sqrt(flat[j])
    elif a == 1.5:
        for j in range(flat.size):
            flat[j] = flat[j] * math.sqrt(flat[j])
    elif a == 2.0:
        for j in range(flat.size):
            flat[j] = flat[j] * flat[j]
    elif a == 2.5:
        for j in range(flat.size):
            flat[j] = flat[j] * flat[j] * math.sqrt(flat[j])
    elif LIBMVEC:
        _vector_powers(x, a)
    else:
        for j in range(flat.size):
            flat[j] = flat[j] ** a


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy")
def _signed_powers(source, target, a):
    """target = sign(source) |source|^a entry by entry (arrays of one shape, C-contiguous)."""
    x, y = source.reshape(-1), target.reshape(-1)
    for j in range(x.size):
        y[j] = abs(x[j])
    _powers(target, a)
    for j in range(x.size):
        y[j] = math.copysign(y[j], x[j])


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", inline="always")
def _update(theta, w, G, p, lr, log_scale, log_eps, buffer, scratch, L):
    """One step of one parameter w on every lane, for the gradient e^{log_scale} G: the mirror step of `_Mirror`
    on its dual variable theta (then w = its primal), or for p = 0 sign descent (theta is w)."""
    rows, columns = G.shape[:2]
    if p == 0.0:
        for a in range(rows):
            for c in range(columns):
                for b in range(L):
                    theta[a, c, b] -= lr * (1.0 if G[a, c, b] > 0 else (-1.0 if G[a, c, b] < 0 else 0.0))
                    w[a, c, b] = theta[a, c, b]
        return
    q = p / (p - 1.0)
    SCALE, INVERSE, SUM = 0, 1, 2  # rows of buffer; SUM then holds the step's factor
    _largest_entries(G, buffer, SCALE, L)
    for b in range(L):
        buffer[SUM, b] = 0.0
    for b in range(L):
        buffer[INVERSE, b] = 1.0 / buffer[SCALE, b] if buffer[SCALE, b] > 0 else 1.0
    for a in range(rows):
        for c in range(columns):
            for b in range(L):
                scratch[a, c, b] = abs(G[a, c, b]) * buffer[INVERSE, b]
    _powers(scratch, q)
    for a in range(rows):
        for c in range(columns):
            for b in range(L):
                buffer[SUM, b] += scratch[a, c, b]
    for b in range(L):
        norm = buffer[SCALE, b] * buffer[SUM, b] ** (1.0 / q)  # ||G||_q
        # lr / ||G||_q times ||G_true||_q / (||G_true||_q + eps), in log space (eps = 0: log_eps = -inf gives 1)
        ratio = math.exp(log_eps[b] - log_scale[b] - math.log(norm)) if norm > 0 else 0.0  # eps / ||G_true||_q
        buffer[SUM, b] = lr / norm / (1.0 + ratio) if norm > 0 else 0.0
    for a in range(rows):
        for c in range(columns):
            for b in range(L):
                theta[a, c, b] -= buffer[SUM, b] * G[a, c, b]
    _signed_powers(theta, w, 1.0 / (p - 1.0))


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy")
def _body(X, Y, Z, U, XV, K0, Q0, log_eps, kq, loss, lr, p, record, Ws, Ks, Qs, probs, f, L):
    """Every lane's run (lanes last: X (n, T, d, L), K0 (d, m, L), ...) of mirror descent with exponent p, or of
    sign descent for p = 0, on W = K0 or, where kq, on (K, Q) from (K0, Q0), with the gradient of
    `_cpu_loop._gradient`; records W, K, Q, the attention and the outputs f at the steps `record` (lanes first)."""
    n, T, d = X.shape[:3]
    m = K0.shape[1]
    K, Q, theta_K, theta_Q = K0.copy(), Q0.copy(), np.empty((d, m, L)), np.empty((d, m, L))
    if p == 0.0:
        theta_K, theta_Q = K0.copy(), Q0.copy()
    else:
        _signed_powers(K0, theta_K, p - 1.0)
        _signed_powers(Q0, theta_Q, p - 1.0)
    WZ, A, QZ, KA = np.empty((n, d, L)), np.empty((n, d, L)), np.empty((n, m, L)), np.empty((n, m, L))
    s, g, outputs, weights = np.empty((n, T, L)), np.empty((n, T, L)), np.empty((n, L)), np.empty((n, L))
    u, hidden, log_scale = np.empty((n, T, L)), np.empty((XV.shape[2], L)), np.empty(L)
    lanes = np.empty((GRADIENT_ROWS, n * L))
    G_K, G_Q, W, scratch, buffer = np.empty((d, m, L)), np.empty((d, m, L)), np.empty((d, d, L)), \
        np.empty((d, m, L)), np.empty((3, L))
    r = 0
    for k in range(record[-1] + 1):
        if kq:
            _products(Z, Q, QZ, L)  # QZ[i] = Q^T z_i
            _row_products(QZ, K, WZ, L)  # WZ[i] = K Q^T z_i
        else:
            _row_products(Z, K, WZ, L)  # WZ[i] = W z_i
        _gradient(X, Y, U, XV, WZ, loss, s, g, outputs, weights, A, log_scale, u, hidden, lanes, L)
        if k == record[r]:
            if kq:
                _row_products(K, Q, W, L)
            for b in range(L):
                for a in range(d):
                    for c in range(d):
                        Ws[r, b, a, c] = W[a, c, b] if kq else K[a, c, b]
                    for c in range(m):
                        Ks[r, b, a, c], Qs[r, b, a, c] = K[a, c, b], Q[a, c, b]
                for i in range(n):
                    f[r, b, i] = outputs[i, b]
                    for t in range(T):
                        probs[r, b, i, t] = s[i, t, b]
            r += 1
            if r == len(record):
                break
        if kq:  # dL/dK = G Q = sum_i A_i (Q^T z_i)^T, dL/dQ = G^T K = sum_i z_i (K^T A_i)^T
            _outer_sums(A, QZ, G_K, L)
            _products(A, K, KA, L)
            _outer_sums(Z, KA, G_Q, L)
            _update(theta_K, K, G_K, p, lr, log_scale, log_eps, buffer, scratch, L)
            _update(theta_Q, Q, G_Q, p, lr, log_scale, log_eps, buffer, scratch, L)
        else:  # dL/dW = G = sum_i A_i z_i^T
            _outer_sums(A, Z, G_K, L)
            _update(theta_K, K, G_K, p, lr, log_scale, log_eps, buffer, scratch, L)


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", nogil=True)
def _run(X, Y, Z, U, XV, K0, Q0, log_eps, kq, loss, lr, p, record, Ws, Ks, Qs, probs, f):
    """`_body` on every lane of X (n, T, d, L)."""
    _body(X, Y, Z, U, XV, K0, Q0, log_eps, kq, loss, lr, p, record, Ws, Ks, Qs, probs, f, X.shape[3])


@numba.njit(cache=True, fastmath=_FAST, error_model="numpy", nogil=True)
def _run_one(X, Y, Z, U, XV, K0, Q0, log_eps, kq, loss, lr, p, record, Ws, Ks, Qs, probs, f):
    """`_body` on one problem (X (n, T, d, 1)), compiled for one lane."""
    _body(X, Y, Z, U, XV, K0, Q0, log_eps, kq, loss, lr, p, record, Ws, Ks, Qs, probs, f, 1)


class _Mirror:
    """State: the dual variables theta of the parameters."""

    def __init__(self, p: float, eps):
        self.p, self.eps, self.move = p, eps, _mirror_step(p, p / (p - 1.0), eps)

    def part(self, block: slice | None) -> "_Mirror":
        """The update of the problems ``block`` of the batch (None: all)."""
        return self if block is None or self.eps is None else _Mirror(self.p, self.eps[block])

    def start(self, params):
        return tuple(_dual(w, self.p) for w in params)

    def params(self, state):
        return tuple(_primal(theta, self.p) for theta in state)

    def step(self, state, grads, log_scale, lr):
        return tuple(theta - lr * self.move(g, log_scale) for theta, g in zip(state, grads))


class _Sign:
    """State: the parameters themselves."""

    def part(self, block: slice | None) -> "_Sign":
        return self

    def start(self, params):
        return params

    def params(self, state):
        return state

    def step(self, state, grads, log_scale, lr):
        return tuple(w - lr * torch.sign(g) for w, g in zip(state, grads))


@torch.no_grad()  # a run records data, not a graph
def mirror_descent(problem: Problem, *, p: float, steps: int, lr: float, param: str = "W",
                   init: str | np.ndarray | torch.Tensor | tuple | None = None, m: int | None = None, seed: int = 0,
                   record_every: int = 1, loss: str = "logistic", rule: str | None = None,
                   eps: float | ArrayLike | None = None, engine: str = "auto") -> Trajectory:
    r"""Normalized mirror descent with the potential :math:`\|\cdot\|_p^p` (entrywise, p > 1) on W, or on each of K and
    Q with :math:`W = KQ^\top`, for every problem in the batch.

    The dual variable :math:`\mathrm{sign}(w)|w|^{p-1}` moves by :math:`-\eta\, G/\|G\|_q`
    (:math:`q = p/(p-1)`), with the gradient's direction exact under saturation (see the module). p = 2 is
    normalized gradient descent (``gd``'s steps). Records W, the softmax probabilities and the loss at steps 0,
    ``record_every``, ..., ``steps``.

    Parameters
    ----------
    problem : Problem
        The problems (a batch).
    p : float
        The exponent of the potential, p > 1.
    steps : int
        The number of steps.
    lr : float
        The step size :math:`\eta`.
    param : {'W', 'KQ'}, default='W'
        Train W, or the factors (K, Q).
    init : str, ArrayLike, tuple or None, default=None
        As in ``gd`` (None: zeros for W, "uniform" for (K, Q); an initial W or a pair (K0, Q0), refused where
        K0 = Q0 = 0, a saddle point, as init="zeros" is for (K, Q)).
    m : int or None, default=None
        The width of K and Q (None: d).
    seed : int, default=0
        The seed of "uniform".
    record_every : int, default=1
        Record every this many steps.
    loss : str, default='logistic'
        A name of ``model.LOSSES``.
    rule : {'official'} or None, default=None
        None (exact) or "official" (the authors' update: autograd's gradient divided by
        :math:`\|G\|_q + 2.2\times 10^{-16}`, and the ridge :math:`2.2\times 10^{-16}(\|K\|^2 + \|Q\|^2)` for
        (K, Q); it freezes once the gradient underflows; do not pass ``eps`` with it).
    eps : float, ArrayLike or None, default=None
        None (the exact step) or the ridge of the authors' normalization :math:`G/(\|G\|_q + \varepsilon)`, a
        number :math:`\ge 0` or one per problem (batch shape; 0 gives the exact step): with the exact gradient, it
        isolates that normalization's freeze.
    engine : {'auto', 'compiled', 'torch'}, default='auto'
        "compiled" (the compiled CPU loop, see the module), "torch" (the batched torch loop, for every option) or
        "auto" (compiled wherever it applies: on the CPU, without rule="official").

    Returns
    -------
    Trajectory
        W (or K, Q), the probabilities and the loss at the recorded steps.

    Raises
    ------
    ValueError
        If an argument is invalid (the message names it), e.g. :math:`p \le 1`, or ``eps`` with rule="official".

    Examples
    --------
    >>> from attnsvm import data, train
    >>> problems = data.random_problem(n=3, T=4, d=4, seed=0, batch=2)
    >>> run = train.mirror_descent(problems, p=3.0, steps=200, lr=0.1, record_every=100)
    >>> run.steps.tolist(), tuple(run.W.shape)
    ([0, 100, 200], (3, 2, 4, 4))
    >>> bool((run.loss[-1] < run.loss[0]).all())
    True
    """
    p = _exponent(p)
    rule = _option(rule, "rule", RULES)
    problem = _checked_problem(problem, min_T=2, why=_TRAINING, needs_Z=True)
    if rule == "official" and eps is not None:
        raise ValueError(f'rule="official" fixes eps={OFFICIAL_EPS:.3g} (the authors\' update): do not pass eps '
                         f'with it')
    eps = OFFICIAL_EPS if rule == "official" else eps
    if eps is not None:
        eps = as_tensor(eps, "eps")
        if eps.dim() and tuple(eps.shape) != tuple(problem.batch_shape):
            raise ValueError(f"eps must be a number or hold one number per problem, shape "
                             f"{tuple(problem.batch_shape)}, got shape {tuple(eps.shape)}")
        if (eps < 0).any():
            raise ValueError(f"eps must be >= 0 (0: the exact step), got a minimum {float(eps.min())!r}")
        eps = eps.expand(problem.batch_shape)
    return _train(problem, param, steps, lr, init, m, seed, record_every, loss, rule, _Mirror(p, eps),
                  "mirror descent", engine)


@torch.no_grad()  # a run records data, not a graph
def sign_descent(problem: Problem, *, steps: int, lr: float, param: str = "W",
                 init: str | np.ndarray | torch.Tensor | tuple | None = None, m: int | None = None, seed: int = 0,
                 record_every: int = 1, loss: str = "logistic", engine: str = "auto") -> Trajectory:
    r"""Sign descent, :math:`w \leftarrow w - \eta\,\mathrm{sign}(G)`, on W or on each of K and Q.

    It is the steepest descent for the entrywise :math:`\ell_\infty` norm, the limit :math:`p \to \infty` of
    normalized steepest descent in the :math:`\ell_p` norm; sign(G) is taken from the exact direction of the
    gradient, so it never vanishes by underflow.

    Parameters
    ----------
    problem : Problem
        The problems (a batch).
    steps : int
        The number of steps.
    lr : float
        The step size :math:`\eta`.
    param : {'W', 'KQ'}, default='W'
        Train W, or the factors (K, Q).
    init : str, ArrayLike, tuple or None, default=None
        As in ``mirror_descent``.
    m : int or None, default=None
        The width of K and Q (None: d).
    seed : int, default=0
        The seed of "uniform".
    record_every : int, default=1
        Record every this many steps.
    loss : str, default='logistic'
        A name of ``model.LOSSES``.
    engine : {'auto', 'compiled', 'torch'}, default='auto'
        As in ``mirror_descent``.

    Returns
    -------
    Trajectory
        W (or K, Q), the probabilities and the loss at the recorded steps.

    Raises
    ------
    ValueError
        If an argument is invalid (the message names it and the fix).

    Examples
    --------
    >>> from attnsvm import data, train
    >>> problem = data.random_problem(n=3, T=4, d=4, seed=0)
    >>> run = train.sign_descent(problem, steps=100, lr=0.01, record_every=100)
    >>> tuple(run.W.shape), bool(run.loss[-1] < run.loss[0])
    ((2, 4, 4), True)
    """
    return _train(problem, param, steps, lr, init, m, seed, record_every, loss, None, _Sign(), "sign descent",
                  engine)
