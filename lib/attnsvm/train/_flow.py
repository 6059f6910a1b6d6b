"""Gradient flow on the attention loss, integrated with error control: W, (K, Q), diag(w) or diag(k) diag(q).

The flow d theta/dt = -grad L(theta) is integrated in the time s with ds = ||d theta|| / (1 + ||theta||),
||.|| the Euclidean norm of ALL parameters together (for (K, Q), of the pair), so that

    d theta / ds = -(1 + ||theta||) grad L / ||grad L||.

The factor (1 + ||theta||) / ||grad L|| is one positive number per problem at each point, the same for every
parameter: a time change of the flow, so the trajectory is the flow's (normalizing K and Q separately would not
be one) as long as grad L is not 0. s measures length relative to the current scale:
||theta(s)|| <= (1 + ||theta(0)||) e^s - 1. A flow that converges to a finite stationary point has finite length,
so it reaches the point at a finite s (at t = infinity), beyond which the time change has no meaning: the
integrator then stalls at that point and ends with max_steps' RuntimeError. The
direction of grad L is exact however far softmax saturates (``train.weight_gradient``), so the flow never
stalls on underflow. The integrator is Dormand and Prince's embedded Runge-Kutta pair of orders 5 and 4, each
problem of a batch with its own step, accepted when ||y5 - y4|| <= rtol (1 + ||theta||).

The flow on factors conserves K^T K - Q^T Q (diagonal: k * k - q * q); a Runge-Kutta method does not conserve
it exactly, so each record carries its drift ||C(s) - C(0)||_F, a check on the integration.

On the CPU the integrator runs compiled with Numba (`_run`, engine "compiled"): at the book's sizes a step of the
batched torch loop is some three hundred tiny tensor operations (six evaluations of the velocity), and their
overhead, not the arithmetic, sets its time. It follows `_cpu_loop`'s design: every array ends in the lane axis,
one problem per lane, blocks of up to BLOCK problems, so a problem's flow does not depend on the batch it is in. Its
velocity takes the exact log-space gradient of `_diagonal_loop` (``gradients.logit_gradient``'s formulas); its
Dormand-Prince loop is the torch loop's, operation for operation (the stages' sums in the same order, without
fast-math), every lane stepping in lockstep as the torch loop's problems do. The two sum the gradient in other
orders and agree to round-off (tests/lib/test_flow.py). Numba's cache keys on the file that defines a function:
after an edit of `_diagonal_loop` or `_cpu_loop`, clear this module's files in ``__pycache__``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np
import torch
from numpy.typing import ArrayLike

from .._checks import as_array, positive_float, positive_int
from ..data import Problem
from ..model import _TRAINING, LOSSES, _checked_problem, _memory_budget, _option, _overflow, _risk, _token_values
from . import _gradients as gradients
from ._cpu_loop import LOSS_CODES, _each_block, _lanes
from ._descent import ENGINES
from ._diagonal import _starts
from ._cpu_loop import _logits, _outer_sums, _row_products
from ._diagonal_loop import LANE_MATH, ROWS, _combine, _features_gradient, _sequence
from ._initial import initial_parameters

__all__ = ["Flow", "gradient_flow", "FLOW_PARAMS"]

FLOW_PARAMS = ("W", "KQ", "diagonal", "diagonal_KQ")  # W, W = K Q^T, W = diag(w), W = diag(k) diag(q)

# Dormand-Prince 5(4): the nodes' coefficients, the 5th-order weights, and the 5th minus the 4th-order weights.
_A = ((), (1 / 5,), (3 / 40, 9 / 40), (44 / 45, -56 / 15, 32 / 9),
      (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
      (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
      (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84))
_E = (71 / 57600, 0.0, -71 / 16695, 71 / 1920, -17253 / 339200, 22 / 525, -1 / 40)


@dataclass(frozen=True)
class Flow:
    r"""Gradient flow recorded at the times s (the time change of ``gradient_flow``).

    Tensors have shape (records, *batch, ...).

    Parameters
    ----------
    s : ndarray
        The recorded times, shape (records,).
    W : Tensor
        The attention weights, shape (records, ..., d, d).
    probs : Tensor
        The softmax probabilities, shape (records, ..., n, T).
    loss : Tensor
        The empirical risk, shape (records, ...).
    K : Tensor or None
        The key factor (None for the unfactorized models).
    Q : Tensor or None
        The query factor (None for the unfactorized models).
    drift : Tensor or None
        :math:`\|C(s) - C(0)\|_F` with :math:`C = K^\top K - Q^\top Q` (None for the unfactorized models).
    steps : Tensor
        The integrator's accepted steps per problem.
    rejected : Tensor
        Its rejected steps per problem.

    Examples
    --------
    >>> from attnsvm import data, train
    >>> problem = data.random_problem(n=2, T=3, d=2, seed=0)
    >>> flow = train.gradient_flow(problem, param="W", init=None, record_at=[1.0, 2.0])
    >>> flow.s.tolist(), tuple(flow.W.shape), flow.drift is None
    ([0.0, 1.0, 2.0], (3, 2, 2), True)
    """

    s: np.ndarray
    W: torch.Tensor  # (records, ..., d, d)
    probs: torch.Tensor  # (records, ..., n, T)
    loss: torch.Tensor  # (records, ...)
    K: torch.Tensor | None
    Q: torch.Tensor | None
    drift: torch.Tensor | None  # (records, ...)
    steps: torch.Tensor  # (...,) accepted steps
    rejected: torch.Tensor  # (...,)

    def selection(self) -> torch.Tensor:
        """The token each sequence attends to most at the last record.

        Returns
        -------
        Tensor
            Token indices, shape (..., n).

        Examples
        --------
        >>> from attnsvm import data, train
        >>> problem = data.random_problem(n=2, T=3, d=2, seed=0)
        >>> train.gradient_flow(problem, param="W", init=None, record_at=[1.0]).selection().shape
        torch.Size([2])
        """
        return self.probs[-1].argmax(-1)


def _record_times(record_at) -> np.ndarray:
    """`record_at` checked to be a non-empty, strictly increasing sequence of finite times > 0."""
    times = as_array(record_at, "record_at", "the times s > 0 at which to record, increasing").astype(np.float64)
    if times.ndim != 1 or times.size == 0:
        raise ValueError(f"record_at must be a non-empty 1-d sequence of times s > 0, got shape {times.shape}")
    if not np.isfinite(times).all() or times[0] <= 0 or (np.diff(times) <= 0).any():
        raise ValueError("record_at must hold finite times s > 0 in strictly increasing order (s = 0, the start, is "
                         f"always recorded), got {times.tolist()[:6]}")
    if times[-1] > 700:
        raise ValueError(f"record_at reaches s = {times[-1]:g}: ||theta|| grows up to e^s, which overflows float64 "
                         "beyond s ~ 700; record at smaller times")
    return times


def _velocity(problem: Problem, param: str, theta: tuple, phi, values, loss: str) -> tuple:
    """-(1 + ||theta||) grad L / ||grad L|| at theta (zero where the gradient is zero), per problem (B leading)."""
    if param in ("diagonal", "diagonal_KQ"):
        w = theta[0] if param == "diagonal" else theta[0] * theta[1]
        grad = gradients._logit_gradient(problem, (phi * w[:, None, None, :]).sum(-1), loss, None, values)
        g = (grad.direction[..., None] * phi).sum((-3, -2))
        parts = (g,) if param == "diagonal" else (g * theta[1], g * theta[0])
    else:
        W = theta[0] if param == "W" else theta[0] @ theta[1].transpose(-2, -1)
        D, _, _ = gradients._weight_gradient(problem, W, loss, None, values)
        parts = (D,) if param == "W" else (D @ theta[1], D.transpose(-2, -1) @ theta[0])
    scale = torch.stack([p.flatten(1).abs().amax(1) for p in parts]).amax(0)  # a tiny gradient's square underflows
    scale = torch.where(scale > 0, scale, 1.0)
    norm = torch.sqrt(sum(((p.flatten(1) / scale[:, None]) ** 2).sum(1) for p in parts))
    factor = torch.where(norm > 0, (1 + _norm(theta)) / (scale * torch.where(norm > 0, norm, 1.0)), 0.0)
    return tuple(-_bcast(factor, p) * p for p in parts)


def _norm(parts: tuple) -> torch.Tensor:
    return torch.sqrt(sum((p.flatten(1) ** 2).sum(1) for p in parts))


def _bcast(x: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return x.reshape(x.shape + (1,) * (like.ndim - 1))


def _invariant(param: str, theta: tuple) -> torch.Tensor | None:
    if param == "KQ":
        K, Q = theta
        return K.transpose(-2, -1) @ K - Q.transpose(-2, -1) @ Q
    if param == "diagonal_KQ":
        return theta[0] ** 2 - theta[1] ** 2
    return None


@torch.no_grad()  # a flow records data, not a graph
def gradient_flow(problem: Problem, *, param: str, init: str | ArrayLike | tuple | None, record_at: ArrayLike,
                  rtol: float = 1e-10, loss: str = "logistic", m: int | None = None, seed: int = 0,
                  max_steps: int = 200_000, engine: str = "auto") -> Flow:
    r"""Gradient flow on W, on (K, Q) with :math:`W = KQ^\top`, on w with :math:`W = \mathrm{diag}(w)` or on (k, q)
    with :math:`W = \mathrm{diag}(k \odot q)`, for every problem in the batch.

    An adaptive embedded Runge-Kutta method (Dormand-Prince 5(4)) integrates it in the time s of
    :math:`ds = \|d\theta\|/(1 + \|\theta\|)`, the norm over all parameters together: a time change, so the
    trajectory is exactly the flow's (see the module's note).

    Parameters
    ----------
    problem : Problem
        The problems (a batch).
    param : {'W', 'KQ', 'diagonal', 'diagonal_KQ'}
        The parameters.
    init : str, ArrayLike, tuple or None
        For "W" and "KQ" as ``train.gd``'s (None, "zeros", "uniform" seeded by ``seed`` with width ``m``, an
        initial W or a pair (K0, Q0)); for "diagonal" None (w = 0) or a vector (d,) or (..., d); for
        "diagonal_KQ" a pair (k0, q0) of such vectors.
    record_at : ArrayLike
        The times s > 0 to record, increasing (s = 0 is recorded too).
    rtol : float, default=1e-10
        A step is accepted when its local error estimate is at most :math:`\mathrm{rtol}\,(1 + \|\theta\|)`.
    loss : str, default='logistic'
        A name of ``model.LOSSES``.
    m : int or None, default=None
        The width of K and Q (None: d).
    seed : int, default=0
        The seed of "uniform".
    max_steps : int, default=200000
        The most steps (accepted or rejected) per problem.
    engine : {'auto', 'compiled', 'torch'}, default='auto'
        "compiled" (the integrator compiled for the CPU: the same steps, many times faster), "torch" (the batched
        torch loop), or "auto": the compiled one, which runs every option of this function.

    Returns
    -------
    Flow
        The flow at the recorded times; for the factorized models its ``drift`` is :math:`\|C(s) - C(0)\|_F` with
        :math:`C = K^\top K - Q^\top Q` (diagonal: :math:`k \odot k - q \odot q`), which the exact flow keeps at 0.

    Raises
    ------
    ValueError
        If an argument is invalid, e.g. ``record_at`` not positive and increasing, rtol outside
        :math:`[10^{-14}, 10^{-2}]`, or m with a param other than "KQ".
    RuntimeError
        If a problem needs more than ``max_steps`` steps.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import data, train
    >>> problems = data.random_problem(n=4, T=3, d=3, seed=[0, 1])
    >>> K0, Q0 = 0.3 * torch.eye(3, dtype=torch.float64), 0.1 * torch.ones(3, 3, dtype=torch.float64)
    >>> flow = train.gradient_flow(problems, param="KQ", init=(K0.expand(2, 3, 3), Q0.expand(2, 3, 3)),
    ...                            record_at=[1.0, 3.0])
    >>> tuple(flow.W.shape), bool((flow.loss[-1] < flow.loss[0]).all())
    ((3, 2, 3, 3), True)
    >>> bool(flow.drift.max() < 1e-8)  # K^T K - Q^T Q is conserved
    True
    """
    problem = _checked_problem(problem, min_T=2, why=_TRAINING, needs_Z=True)
    param, loss = _option(param, "param", FLOW_PARAMS), _option(loss, "loss", tuple(LOSSES))
    times, rtol = _record_times(record_at), positive_float(rtol, "rtol")
    if rtol > 1e-2 or rtol < 1e-14:
        raise ValueError(f"rtol must lie in [1e-14, 1e-2] (float64 cannot meet less; more is no integration), got "
                         f"{rtol!r}")
    max_steps, engine = positive_int(max_steps, "max_steps"), _option(engine, "engine", ENGINES)
    batch, d = problem.batch_shape, problem.d
    if param in ("W", "KQ"):
        theta = initial_parameters(problem, param, init, d if m is None else m, seed)
    else:
        if m is not None:
            raise ValueError(f"m={m!r} applies to param=\"KQ\" only (the width of K and Q): pass m=None")
        theta = _starts(problem, param == "diagonal_KQ", init)
    B = int(np.prod(batch, dtype=np.int64))
    _memory_budget(float(B) * (len(times) + 1) * (3 * d * d + problem.n * problem.T), "record_at")
    flat = Problem(*(t.reshape((B,) + t.shape[len(batch):]) for t in (problem.X, problem.Y, problem.Z, problem.v)))
    theta = tuple(p.reshape((B,) + p.shape[len(batch):]).clone().to(torch.float64) for p in theta)
    phi = flat.X * flat.Z[..., None, :] if "diagonal" in param else None
    values = _token_values(flat, flat.v)
    blame = "the problem's tokens or init are too large, or rtol too loose"
    with _overflow("the gradient flow", blame):
        if engine == "torch":
            records, steps, rejected = _integrate(flat, param, theta, times, rtol, phi, values, loss, max_steps)
            outputs = None
        else:  # the problem is on the CPU (`_checked_problem`): the compiled loop runs every option
            records, steps, rejected, probs, risk, failure = _compiled(flat, param, theta, times, rtol, loss,
                                                                       max_steps)
            if failure is not None:
                _fail(failure[0], max_steps, failure[1])
            outputs = (probs, risk)
    return _flow_record(problem, param, records, times, steps, rejected, loss, batch, B, outputs)


# ------------------------------------------------------------------ the compiled integrator (engine "compiled")

_PARAM_CODES = {name: code for code, name in enumerate(FLOW_PARAMS)}  # W, KQ, diagonal, diagonal_KQ
_RUNNING, _TOO_MANY_STEPS, _STEP_TOO_SMALL = 0, 1, 2  # how `_run` ends


@numba.njit(cache=True, fastmath=LANE_MATH, error_model="numpy")
def _lane_velocity(param, m, y, out, X, Z, phi, Y, U, counts, loss, log_n, W, WZ, A, w, grad, g, s, e, f, weights,
                   lanes):
    """out = -(1 + ||y||) G / ||G|| on every lane (0 where G = 0; G scaled by its largest entry first), G the
    gradient of the loss at the parameters y (P, L) of `param` (`_PARAM_CODES`; W row by row, K then Q (d, m) row
    by row, w, or k then q), as `_velocity` computes it; the gradient is `_diagonal_loop`'s exact one."""
    n, T, d, L = X.shape
    if param >= 2:  # diagonal: logits phi_it . w, dL/dw = sum_it g_it phi_it
        for p in range(d):
            for b in range(L):
                w[p, b] = y[p, b] if param == 2 else y[p, b] * y[d + p, b]
        _features_gradient(phi, w, Y, U, counts, loss, log_n, g, s, e, f, weights, grad, lanes)
        for p in range(d):
            for b in range(L):
                if param == 2:
                    out[p, b] = grad[p, b]
                else:
                    out[p, b], out[d + p, b] = grad[p, b] * y[d + p, b], grad[p, b] * y[p, b]
    else:
        for p in range(d):
            for q in range(d):
                for b in range(L):
                    W[p, q, b] = 0.0
                if param == 0:
                    for b in range(L):
                        W[p, q, b] = y[p * d + q, b]
                else:  # W = K Q^T
                    for c in range(m):
                        for b in range(L):
                            W[p, q, b] += y[p * m + c, b] * y[d * m + q * m + c, b]
        _row_products(Z, W, WZ, L)  # WZ[i] = W z_i
        for i in range(n):
            _logits(i, X, WZ, g, L)
            _sequence(i, T, Y, U, loss, log_n, g, s, e, f, weights, lanes)
        _combine(n, counts, Y, g, weights, lanes)
        for i in range(n):  # A_i = sum_t g_it x_it; D = sum_i A_i z_i^T (in W)
            for p in range(d):
                for b in range(L):
                    A[i, p, b] = 0.0
                for t in range(T):
                    for b in range(L):
                        A[i, p, b] += g[i, t, b] * X[i, t, p, b]
        _outer_sums(A, Z, W, L)
        if param == 0:
            for p in range(d):
                for q in range(d):
                    for b in range(L):
                        out[p * d + q, b] = W[p, q, b]
        else:  # dL/dK = D Q, dL/dQ = D^T K
            for p in range(d):
                for c in range(m):
                    for b in range(L):
                        out[p * m + c, b], out[d * m + p * m + c, b] = 0.0, 0.0
                    for q in range(d):
                        for b in range(L):
                            out[p * m + c, b] += W[p, q, b] * y[d * m + q * m + c, b]
                            out[d * m + p * m + c, b] += W[q, p, b] * y[q * m + c, b]
    P = y.shape[0]
    for b in range(L):
        lanes[0, b], lanes[1, b], lanes[2, b] = 0.0, 0.0, 0.0  # scale, ||G / scale||^2, ||y||^2
    for a in range(P):
        for b in range(L):
            lanes[0, b] = max(lanes[0, b], abs(out[a, b]))
    for b in range(L):
        lanes[0, b] = lanes[0, b] if lanes[0, b] > 0 else 1.0
    for a in range(P):
        for b in range(L):
            unit = out[a, b] / lanes[0, b]
            lanes[1, b] += unit * unit
            lanes[2, b] += y[a, b] * y[a, b]
    for b in range(L):
        norm = math.sqrt(lanes[1, b])
        lanes[1, b] = -((1 + math.sqrt(lanes[2, b])) / (lanes[0, b] * norm)) if norm > 0 else 0.0
    for a in range(P):
        for b in range(L):
            out[a, b] = lanes[1, b] * out[a, b]


@numba.njit(cache=True, error_model="numpy")
def _record_outputs(r, b, loss, Y, s, f, probs, risks):
    """Record r of lane b: the attention s into probs (R + 1, n, T, L) and the risk of the outputs f (the loss with
    code `loss`, as `model.LOSSES`) into risks (R + 1, L)."""
    n, T = s.shape[0], s.shape[1]
    risk = 0.0
    for i in range(n):
        margin = Y[i, b] * f[i, b]
        risk += (max(-margin, 0.0) + math.log1p(math.exp(-abs(margin))) if loss == 0 else
                 (math.exp(-margin) if loss == 1 else -margin))
        for t in range(T):
            probs[r, i, t, b] = s[i, t, b]
    risks[r, b] = risk / n


@numba.njit(cache=True, error_model="numpy")
def _norms(parts, out):
    """out[b] = the Euclidean norm of parts[:, b] (P, L)."""
    for b in range(parts.shape[1]):
        out[b] = 0.0
    for a in range(parts.shape[0]):
        for b in range(parts.shape[1]):
            out[b] += parts[a, b] * parts[a, b]
    for b in range(parts.shape[1]):
        out[b] = math.sqrt(out[b])


# no fast-math: the torch loop's arithmetic, operation for operation
@numba.njit(cache=True, error_model="numpy", nogil=True)
def _run(param, m, theta0, X, Z, phi, Y, U, loss, times, rtol, max_steps, records, probs, risks, steps, rejected, s):
    """Every lane's flow from theta0 (P, L) to the last of `times`, as `_integrate` takes it (lockstep, each lane its
    own step); the parameters at s = 0 and at `times` go to records (R + 1, P, L), the attention there to probs
    (R + 1, n, T, L) and the risk to risks (R + 1, L), the accepted and rejected steps to steps and rejected (L,),
    the lanes' times to s (L,). Returns _RUNNING when every lane reached its last record, else _TOO_MANY_STEPS or
    _STEP_TOO_SMALL (the torch loop's errors)."""
    n, T, d, L = X.shape
    P, R = theta0.shape[0], len(times)
    W, WZ, A = np.empty((d, d, L)), np.empty((n, d, L)), np.empty((n, d, L))
    w, grad = np.empty((d, L)), np.empty((d, L))
    g, s_, e = np.empty((n, T, L)), np.empty((n, T, L)), np.empty((n, T, L))
    f, weights, lanes = np.empty((n, L)), np.empty((n, L)), np.empty((ROWS, L))
    counts = np.full(n, T, dtype=np.int64)
    log_n = math.log(n)
    theta, ks, y, acc = theta0.copy(), np.empty((7, P, L)), np.empty((P, L)), np.empty((P, L))
    error, norm_theta, norm_new, norm_error = np.empty((P, L)), np.empty(L), np.empty(L), np.empty(L)
    h, hh, index, done, clipped, accept = (np.empty(L), np.empty(L), np.zeros(L, dtype=np.int64),
                                           np.empty(L, dtype=np.bool_), np.empty(L, dtype=np.bool_),
                                           np.empty(L, dtype=np.bool_))
    for b in range(L):
        s[b], h[b], steps[b], rejected[b] = 0.0, min(1e-3, times[0]), 0, 0
    records[0] = theta
    _lane_velocity(param, m, theta, ks[0], X, Z, phi, Y, U, counts, loss, log_n, W, WZ, A, w, grad, g, s_, e, f,
                   weights, lanes)
    for b in range(L):
        _record_outputs(0, b, loss, Y, s_, f, probs, risks)
    while True:
        running = False
        for b in range(L):
            running |= index[b] < R
        if not running:
            return _RUNNING
        for b in range(L):
            done[b] = index[b] >= R
            gap = times[min(index[b], R - 1)] - s[b]
            clipped[b] = h[b] >= gap
            hh[b] = 0.0 if done[b] else (gap if clipped[b] else h[b])
        for stage in range(1, 7):
            for a in range(P):
                for b in range(L):
                    acc[a, b] = 0.0
            for j in range(stage):
                if _A_TABLE[stage, j] != 0.0:
                    for a in range(P):
                        for b in range(L):
                            acc[a, b] = acc[a, b] + _A_TABLE[stage, j] * ks[j, a, b]
            for a in range(P):
                for b in range(L):
                    y[a, b] = theta[a, b] + hh[b] * acc[a, b]
            _lane_velocity(param, m, y, ks[stage], X, Z, phi, Y, U, counts, loss, log_n, W, WZ, A, w, grad, g, s_,
                           e, f, weights, lanes)
        for a in range(P):  # y is the 5th-order solution (FSAL: ks[6] is the velocity there)
            for b in range(L):
                error[a, b] = 0.0
        for j in range(7):
            if _E_TABLE[j] != 0.0:
                for a in range(P):
                    for b in range(L):
                        error[a, b] = error[a, b] + _E_TABLE[j] * ks[j, a, b]
        for a in range(P):
            for b in range(L):
                error[a, b] = hh[b] * error[a, b]
        _norms(error, norm_error)
        _norms(theta, norm_theta)
        _norms(y, norm_new)
        too_many, too_small = False, False
        for b in range(L):
            err = norm_error[b] / (rtol * (1 + max(norm_theta[b], norm_new[b])))
            err = err if math.isfinite(err) else np.inf
            accept[b] = err <= 1 and not done[b]
            if accept[b]:
                for a in range(P):
                    theta[a, b], ks[0, a, b] = y[a, b], ks[6, a, b]
                s[b] = times[min(index[b], R - 1)] if clipped[b] else s[b] + hh[b]
                if clipped[b]:  # the last stage was evaluated at the new theta: its attention and outputs
                    index[b] += 1
                    for a in range(P):
                        records[index[b], a, b] = theta[a, b]
                    _record_outputs(index[b], b, loss, Y, s_, f, probs, risks)
            factor = min(max(0.9 * max(err, 1e-10) ** -0.2, 0.2), 5.0)
            proposed = hh[b] * factor
            if not done[b]:
                h[b] = max(h[b], proposed) if accept[b] and clipped[b] else proposed
            steps[b] += accept[b]
            rejected[b] += not accept[b] and not done[b]
            too_many |= steps[b] + rejected[b] > max_steps
            too_small |= h[b] < 1e-14 * (1 + s[b]) and not done[b]
        if too_many:
            return _TOO_MANY_STEPS
        if too_small:
            return _STEP_TOO_SMALL


_A_TABLE = np.zeros((7, 7))
for _row, _coefficients in enumerate(_A):
    _A_TABLE[_row, :len(_coefficients)] = _coefficients
_E_TABLE = np.array(_E)


def _compiled(problem: Problem, param: str, theta: tuple, times: np.ndarray, rtol: float, loss: str,
              max_steps: int):
    """`_integrate` on the compiled loop: the records (R+1, B, ...), the step counts (B,), the attention
    (R+1, B, n, T) and the risk (R+1, B) at the records and, if a lane ended with an error, (the code, the smallest
    s of its block)."""
    B, R = theta[0].shape[0], len(times)
    n, T, d = problem.n, problem.T, problem.d
    shapes = [p.shape[1:] for p in theta]
    m = shapes[0][-1] if param == "KQ" else 0
    size, padded, lanes_last = _lanes((B,))
    flat = torch.cat([p.flatten(1) for p in theta], 1)  # (B, P), also for B = 0
    phi = problem.X * problem.Z[..., None, :] if "diagonal" in param else torch.zeros(B, n, T, 1, dtype=torch.float64)
    values = _token_values(problem, problem.v)
    arrays = (lanes_last(flat, flat.shape[1:]), lanes_last(problem.X, (n, T, d)), lanes_last(problem.Z, (n, d)),
              lanes_last(phi, phi.shape[1:]), lanes_last(problem.Y, (n,)), lanes_last(values, (n, T)))
    records, probs, risks = np.empty((R + 1, flat.shape[1], padded)), np.empty((R + 1, n, T, padded)), \
        np.empty((R + 1, padded))
    counts = [np.empty(padded, dtype=np.int64) for _ in range(2)]

    def run_block(block: slice) -> tuple | None:
        """None, or (the code, the smallest s of the block) where a lane ended with an error."""
        parts = [np.empty(a[..., block].shape) for a in (records, probs, risks)]
        steps, rejected = (np.empty(parts[0].shape[-1], dtype=np.int64) for _ in range(2))
        reached = np.empty(parts[0].shape[-1])
        code = _run(_PARAM_CODES[param], m, *(np.ascontiguousarray(a[..., block]) for a in arrays), LOSS_CODES[loss],
                    times, float(rtol), int(max_steps), *parts, steps, rejected, reached)
        if code != _RUNNING:
            return code, float(reached.min())
        for a, part in zip((records, probs, risks), parts):
            a[..., block] = part
        counts[0][block], counts[1][block] = steps, rejected
        return None
    failures = [failure for failure in _each_block(run_block, padded) if failure is not None]
    if failures:
        return None, None, None, None, None, failures[0]
    flat_records = torch.from_numpy(np.moveaxis(records[..., :size], -1, 1).copy())  # (R+1, B, P)
    sizes = [int(np.prod(shape)) for shape in shapes]
    parts = torch.split(flat_records, sizes, dim=-1)
    records = tuple(part.reshape((R + 1, B) + tuple(shape)) for part, shape in zip(parts, shapes))
    return (records, torch.from_numpy(counts[0][:size]), torch.from_numpy(counts[1][:size]),
            torch.from_numpy(np.moveaxis(probs[..., :size], -1, 1).copy()), torch.from_numpy(risks[:, :size].copy()),
            None)


def _integrate(problem, param, theta, times, rtol, phi, values, loss, max_steps):
    """The Dormand-Prince loop; returns the records (a tuple of (R+1, B, ...) tensors) and the step counts."""
    B, R = theta[0].shape[0], len(times)
    targets = torch.as_tensor(times)
    records = tuple(torch.empty((R + 1,) + p.shape, dtype=torch.float64) for p in theta)
    for rec, p in zip(records, theta):
        rec[0] = p
    f = lambda y: _velocity(problem, param, y, phi, values, loss)  # noqa: E731
    s = torch.zeros(B, dtype=torch.float64)
    h = torch.full((B,), min(1e-3, times[0]), dtype=torch.float64)
    index = torch.zeros(B, dtype=torch.long)  # the next record of each problem
    steps, rejected = torch.zeros(B, dtype=torch.long), torch.zeros(B, dtype=torch.long)
    k1 = f(theta)
    while bool((index < R).any()):
        done = index >= R
        gap = targets[index.clamp(max=R - 1)] - s
        clipped = h >= gap
        hh = torch.where(done, 0.0, torch.where(clipped, gap, h))
        ks = [k1]
        for row in _A[1:]:
            y = tuple(p + _bcast(hh, p) * sum(a * k[j] for a, k in zip(row, ks) if a) for j, p in enumerate(theta))
            ks.append(f(y))
        new = y  # the last row is the 5th-order solution (FSAL: ks[-1] is f there)
        error = tuple(_bcast(hh, p) * sum(e * k[j] for e, k in zip(_E, ks) if e) for j, p in enumerate(theta))
        err = _norm(error) / (rtol * (1 + torch.maximum(_norm(theta), _norm(new))))
        err = torch.where(torch.isfinite(err), err, torch.inf)
        accept = (err <= 1) & ~done
        theta = tuple(torch.where(_bcast(accept, p), q, p) for p, q in zip(theta, new))
        k1 = tuple(torch.where(_bcast(accept, p), q, p) for p, q in zip(k1, ks[-1]))
        reached = accept & clipped
        s = torch.where(accept, torch.where(clipped, targets[index.clamp(max=R - 1)], s + hh), s)
        if reached.any():
            rows = index[reached] + 1
            for rec, p in zip(records, theta):
                rec[rows, reached.nonzero()[:, 0]] = p[reached]
            index = index + reached.long()
        factor = (0.9 * err.clamp(min=1e-10) ** -0.2).clamp(0.2, 5.0)
        proposed = hh * factor
        h = torch.where(done, h, torch.where(accept & clipped, torch.maximum(h, proposed), proposed))
        steps += accept.long()
        rejected += (~accept & ~done).long()
        if bool(((steps + rejected) > max_steps).any()):
            _fail(_TOO_MANY_STEPS, max_steps, float(s.min()))
        if bool(((h < 1e-14 * (1 + s)) & ~done).any()):
            _fail(_STEP_TOO_SMALL, max_steps, float(s.min()))
    return records, steps, rejected


def _fail(code: int, max_steps: int, reached: float):
    """The integrator's error `code` (both engines): too many steps (it had reached s = `reached`), or a step
    below 1e-14."""
    if code == _TOO_MANY_STEPS:
        raise RuntimeError(f"the gradient flow needed more than max_steps={max_steps} steps for a problem (it had "
                           f"reached s = {reached:.4g}): raise max_steps, loosen rtol or record at "
                           "earlier times; if the loss has a finite minimizer the flow reaches it at a finite "
                           "s, beyond which the time s does not go on (record before it)")
    raise FloatingPointError("the gradient flow's step fell below 1e-14 (the integrator cannot meet rtol "
                             "there): loosen rtol, or the problem's tokens are too large")


def _flow_record(problem, param, records, times, steps, rejected, loss, batch, B, outputs=None) -> Flow:
    """The Flow of the records (R+1, B, ...), reshaped to the problems' batch shape; its attention and risk are
    `outputs` ((R+1, B, n, T), (R+1, B)), or computed here from W where None."""
    R1 = len(times) + 1
    if param == "W":
        W = records[0]
    elif param == "KQ":
        W = records[0] @ records[1].transpose(-2, -1)
    else:
        W = torch.diag_embed(records[0] if param == "diagonal" else records[0] * records[1])
    shape = lambda x: x.reshape((R1,) + batch + x.shape[2:])  # noqa: E731
    W = shape(W)
    if outputs is None:
        grad = gradients._weight_gradient(problem, W, loss, None, _token_values(problem, problem.v))[2]
        probs, risk = grad.probs, _risk(LOSSES[loss], problem, grad.outputs)
    else:
        probs, risk = (shape(part) for part in outputs)
    K = Q = drift = None
    if param in ("KQ", "diagonal_KQ"):
        C = _invariant(param, records)
        drift = shape((C - C[0]).flatten(2).norm(dim=-1)[..., None])[..., 0]
        K, Q = (shape(r if param == "KQ" else torch.diag_embed(r)) for r in records)
    return Flow(s=np.concatenate([[0.0], times]), W=W, probs=probs, loss=risk, K=K, Q=Q, drift=drift,
                steps=steps.reshape(batch), rejected=rejected.reshape(batch))
