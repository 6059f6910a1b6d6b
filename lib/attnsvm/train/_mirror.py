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
"""

from __future__ import annotations

import math

import numpy as np
import torch

from numpy.typing import ArrayLike

from .._checks import as_tensor, positive_float, positive_int
from ..data import Problem
from ..model import (_TRAINING, LOSSES, _attention, _checked_problem, _option, _overflow, _risk,
                     _token_values)
from . import _gradients as gradients
from ._descent import (OFFICIAL_EPS, RULES, Trajectory, _autograd_gradient, _blame, _finite_trajectory,
                       _recorder)
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
    """The entrywise q-norm of ``G`` over ``dims`` (q >= 1 or ``math.inf``), computed after dividing by the
    largest entry, so that neither tiny nor huge entries underflow or overflow in the powers |g|^q; keeps ``dims``.

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
    return safe * ((G / safe).abs() ** q).sum(dims, keepdim=True) ** (1.0 / q)


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
    return torch.sign(theta) * (theta.abs().sqrt() if power == 0.5 else theta.abs() ** power)


def _dual(w: torch.Tensor, p: float) -> torch.Tensor:
    return torch.sign(w) * w.abs() ** (p - 1.0)


def _train(problem: Problem, param: str, steps: int, lr: float, init, m, seed: int, record_every: int, loss: str,
           rule, update, name: str) -> Trajectory:
    """The shared loop of mirror and sign descent: update(params, grads, log_scale) -> new params."""
    problem = _checked_problem(problem, min_T=2, why=_TRAINING, needs_Z=True)
    param, loss = _option(param, "param", PARAMS), _option(loss, "loss", tuple(LOSSES))
    official = _option(rule, "rule", RULES) == "official"
    steps, lr = positive_int(steps, "steps", minimum=0), positive_float(lr, "lr")
    record_every = positive_int(record_every, "record_every")
    m = problem.d if m is None else positive_int(m, "m")
    params = initial_parameters(problem, param, init, m, seed)
    d, width = problem.d, 0 if param == "W" else params[0].shape[-1]
    entries = np.prod(problem.batch_shape, dtype=float) * (d * d + 2 * d * width + problem.n * problem.T + 1)
    recorder = _recorder(steps, record_every, entries)
    values = _token_values(problem, problem.v)
    ridge = OFFICIAL_EPS if official and param == "KQ" else 0.0
    with _overflow(f"{name}'s iterates", _blame(f"lr={lr!r}", "init"), "lower lr"):
        state = update.start(params)
        for k in range(steps + 1):
            params = update.params(state)
            W = params[0] if param == "W" else params[0] @ params[1].transpose(-2, -1)
            if official:
                grads, f = _autograd_gradient(problem, params, loss, None, ridge)
                log_scale = torch.zeros(problem.batch_shape, dtype=torch.float64)
                probs = _attention(problem, W)
            else:
                G, log_scale, grad = gradients._weight_gradient(problem, W, loss, None, values)
                probs, f = grad.probs, grad.outputs
                grads = (G,) if param == "W" else (G @ params[1], G.transpose(-2, -1) @ params[0])
            if recorder.wants(k):
                factors = {} if param == "W" else {"K": params[0], "Q": params[1]}
                recorder.add(W=W, probs=probs, loss=_risk(LOSSES[loss], problem, f), **factors)
            if k == steps:
                break
            state = update.step(state, grads, log_scale, lr)
    return _finite_trajectory(recorder.trajectory(), _blame(f"lr={lr!r}", "init"))


class _Mirror:
    """State: the dual variables theta of the parameters."""

    def __init__(self, p: float, eps):
        self.p, self.move = p, _mirror_step(p, p / (p - 1.0), eps)

    def start(self, params):
        return tuple(_dual(w, self.p) for w in params)

    def params(self, state):
        return tuple(_primal(theta, self.p) for theta in state)

    def step(self, state, grads, log_scale, lr):
        return tuple(theta - lr * self.move(g, log_scale) for theta, g in zip(state, grads))


class _Sign:
    """State: the parameters themselves."""

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
                   eps: float | ArrayLike | None = None) -> Trajectory:
    """Normalized mirror descent with the potential ||.||_p^p (entrywise, p > 1) on W (param="W") or on each of
    K and Q (param="KQ", W = K Q^T), for every problem in the batch: the dual variable sign(w)|w|^(p-1) moves by
    -lr G / ||G||_q (q = p / (p - 1)), with the gradient's direction exact under saturation (see the module).
    p = 2 is normalized gradient descent (``gd``'s steps).

    ``eps``: None (the exact step) or the ridge of the authors' normalization G / (||G||_q + eps), a number >= 0
    or one per problem (batch shape; 0 gives the exact step): with the exact gradient, it isolates that
    normalization's freeze. ``rule``: None (exact) or "official" (the authors' update: autograd's gradient
    divided by ||G||_q + 2.2e-16, and the ridge 2.2e-16 (||K||^2 + ||Q||^2) for (K, Q); it freezes once the
    gradient underflows; do not pass ``eps`` with it).
    ``init``: as in ``gd`` (None: zeros for W, "uniform" for (K, Q); an initial W or a pair (K0, Q0), refused
    where K0 = Q0 = 0, a saddle point, as init="zeros" is for (K, Q)); ``m``: the width of K and Q; ``seed``:
    the seed of "uniform". Records W, the softmax probabilities and the loss at
    steps 0, record_every, ..., ``steps``.

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
                  "mirror descent")


@torch.no_grad()  # a run records data, not a graph
def sign_descent(problem: Problem, *, steps: int, lr: float, param: str = "W",
                 init: str | np.ndarray | torch.Tensor | tuple | None = None, m: int | None = None, seed: int = 0,
                 record_every: int = 1, loss: str = "logistic") -> Trajectory:
    """Sign descent, w <- w - lr sign(G), on W or on each of K and Q (the steepest descent for the entrywise
    l-infinity norm, the limit p -> infinity of normalized steepest descent in the lp norm); sign(G) is taken from the
    exact direction of the gradient, so it never vanishes by underflow. Arguments as in ``mirror_descent``.

    Examples
    --------
    >>> from attnsvm import data, train
    >>> problem = data.random_problem(n=3, T=4, d=4, seed=0)
    >>> run = train.sign_descent(problem, steps=100, lr=0.01, record_every=100)
    >>> tuple(run.W.shape), bool(run.loss[-1] < run.loss[0])
    ((2, 4, 4), True)
    """
    return _train(problem, param, steps, lr, init, m, seed, record_every, loss, None, _Sign(), "sign descent")
