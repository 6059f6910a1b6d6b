"""Gradient descent on the attention weights, batched over problems, with gradients exact under saturation.

Once softmax saturates, the probability of the selected token rounds to 1 and 1 - s_alpha is lost, so
autograd through softmax computes the gradient from round-off. Here the gradient is evaluated in its
pairwise form, in which every term is a product of accurately-computed small probabilities:

    dL/dW = sum_i c_i sum_t s_it [sum_tau s_itau (u_it - u_itau)] x_it z_i^T,   u = X v, c_i = Y_i l'(Y_i f_i) / n.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .checks import as_tensor, choice, positive_float, positive_int, require_shape
from .data import Problem
from .model import LOSSES, loss, raw_logits, token_values, weights
from .model import loss as loss_of

PARAMS = ("W", "KQ")
GRADIENTS = ("exact", "autograd")


@dataclass(frozen=True)
class Trajectory:
    """Iterates of gradient descent recorded at `steps`; arrays have shape (records, *batch, ...)."""

    steps: np.ndarray
    probs: torch.Tensor  # (records, ..., n, T) softmax probabilities
    loss: torch.Tensor  # (records, ...) empirical risk
    W: torch.Tensor | None = None  # (records, ..., d, d); for "KQ", W = K Q^T
    K: torch.Tensor | None = None  # (records, ..., d, m) for "KQ"
    Q: torch.Tensor | None = None
    p: torch.Tensor | None = None  # (records, ..., d) for gd_prompt and gd_joint
    v: torch.Tensor | None = None  # (records, ..., d) for gd_joint

    def selection(self) -> torch.Tensor:
        """The token each sequence attends to most at the last recorded step, shape (..., n)."""
        return self.probs[-1].argmax(-1)


def loss_gradient(problem: Problem, W, kind: str = "logistic") -> torch.Tensor:
    """The exact gradient dL/dW (..., d, d) in pairwise form (see the module docstring)."""
    choice(kind, "loss", tuple(LOSSES))
    return _exact_gradient(problem, token_values(problem), weights(problem, W), kind)[0]


def _logit_gradient(problem: Problem, u: torch.Tensor, logits: torch.Tensor, kind: str):
    """(dL/dlogits, softmax probabilities) (..., n, T) and dL/df (..., n), given the token values u = X v."""
    s = torch.softmax(logits, dim=-1)
    centred = ((u[..., :, None] - u[..., None, :]) * s[..., None, :]).sum(-1)  # sum_tau s_tau (u_t - u_tau)
    c = problem.Y * LOSSES[kind].derivative(problem.Y * (s * u).sum(-1)) / problem.n
    return c[..., None] * s * centred, s, c


def _exact_gradient(problem: Problem, u: torch.Tensor, W: torch.Tensor, kind: str):
    """(dL/dW, softmax probabilities), given the token values u = X v."""
    g, s, _ = _logit_gradient(problem, u, raw_logits(problem, W), kind)
    return torch.einsum("...nt,...ntd,...ne->...de", g, problem.X, problem.Z), s


def _autograd_gradient(problem: Problem, u: torch.Tensor, W: torch.Tensor, kind: str):
    """The same by autograd through softmax: correct until softmax saturates, then steered by round-off."""
    W = W.detach().requires_grad_(True)
    (grad,) = torch.autograd.grad(loss(problem, W, kind).sum(), W)
    return grad, torch.softmax(raw_logits(problem, W.detach()), dim=-1)


def _unit(G: torch.Tensor, dims=(-2, -1)) -> torch.Tensor:
    """G / ||G|| over `dims`, scaling by the largest entry first (a tiny G's square underflows);
    a zero gradient gives a zero step."""
    scale = G.abs().amax(dims, keepdim=True)
    G = G / torch.where(scale > 0, scale, 1.0)
    norm = G.norm(dim=dims, keepdim=True)
    return G / torch.where(norm > 0, norm, 1.0)


def uniform_init(shape: tuple, seed: int, device=None) -> torch.Tensor:
    """Entries uniform in [-1/sqrt(d), 1/sqrt(d)] (torch.nn.Linear's default), d = shape[-2]."""
    gen = torch.Generator().manual_seed(int(seed))
    bound = 1.0 / np.sqrt(shape[-2])
    return ((torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1) * bound).to(device)


def _initial(problem: Problem, param: str, init, m: int, seed: int):
    """The initial parameters: a tuple (W,) or (K, Q), each of shape (..., d, d) or (..., d, m)."""
    batch, d, device = problem.batch_shape, problem.d, problem.X.device
    if init is None:
        init = "zeros" if param == "W" else "uniform"
    if isinstance(init, str):
        choice(init, "init", ("zeros", "uniform"))
        if param == "W":
            zeros = torch.zeros(batch + (d, d), dtype=torch.float64, device=device)
            return (zeros if init == "zeros" else uniform_init(batch + (d, d), seed, device),)
        if init == "zeros":
            raise ValueError('init="zeros" is a saddle point of the (K, Q) parameterization (zero gradient): '
                             'use init="uniform" or pass (K0, Q0)')
        return uniform_init(batch + (d, m), seed, device), uniform_init(batch + (d, m), seed + 1, device)
    if param == "W":
        W0 = as_tensor(init, "init", device=device)
        require_shape(W0, "init", batch + (d, d), "an initial W for every problem")
        return (W0,)
    if not (isinstance(init, (tuple, list)) and len(init) == 2):
        raise ValueError('init for param="KQ" must be "uniform" or a pair (K0, Q0) of (..., d, m) arrays')
    K0, Q0 = (as_tensor(value, name, device=device) for value, name in zip(init, ("init[0] (K0)", "init[1] (Q0)")))
    require_shape(K0, "init[0] (K0)", batch + (d, K0.shape[-1]), "the initial key matrix K, (..., d, m)")
    require_shape(Q0, "init[1] (Q0)", tuple(K0.shape), "the initial query matrix Q, the same shape as K0")
    return K0, Q0


def gd(problem: Problem, *, param: str = "W", steps: int, lr: float, normalized: bool = True, init=None,
       record_every: int = 1, loss: str = "logistic", m: int | None = None, seed: int = 0,
       gradient: str = "exact") -> Trajectory:
    """Gradient descent on W (param="W") or on (K, Q) with W = K Q^T (param="KQ"), for every problem in the batch.

    normalized: step -lr G/||G||_F (each of K and Q normalized separately), as in the papers' experiments;
    otherwise the plain step -lr G. init: None (zeros for W, "uniform" for (K, Q)), "zeros", "uniform"
    (seeded by `seed`), an initial W (..., d, d) or a pair (K0, Q0). m: the width of K and Q (default d).
    gradient: "exact" (pairwise form, accurate when softmax saturates) or "autograd" (for comparison).
    Records W, softmax probabilities and the loss at steps 0, record_every, 2 record_every, ..., and `steps`.
    """
    choice(param, "param", PARAMS)
    choice(loss, "loss", tuple(LOSSES))
    choice(gradient, "gradient", GRADIENTS)
    steps = positive_int(steps, "steps", minimum=0)
    lr = positive_float(lr, "lr")
    record_every = positive_int(record_every, "record_every")
    m = problem.d if m is None else positive_int(m, "m")
    params = _initial(problem, param, init, m, seed)
    grad_fn = _exact_gradient if gradient == "exact" else _autograd_gradient
    u = token_values(problem)
    step_of = _unit if normalized else (lambda G: G)

    recorder = _Recorder(steps, record_every)
    for k in range(steps + 1):
        W = params[0] if param == "W" else params[0] @ params[1].transpose(-2, -1)
        G, probs = grad_fn(problem, u, W, loss)
        if recorder.wants(k):
            factors = {} if param == "W" else {"K": params[0], "Q": params[1]}
            recorder.add(W=W, probs=probs, loss=_risk(problem, u, probs, loss), **factors)
        if k == steps:
            break
        if param == "W":
            params = (params[0] - lr * step_of(G),)
        else:
            K, Q = params
            params = (K - lr * step_of(G @ Q), Q - lr * step_of(G.transpose(-2, -1) @ K))
    return recorder.trajectory()


class _Recorder:
    """Collects iterates at steps 0, every, 2 every, ..., and the last step, into a Trajectory."""

    def __init__(self, steps: int, every: int):
        self.steps = sorted(set(range(0, steps + 1, every)) | {steps})
        self.rows = []

    def wants(self, k: int) -> bool:
        return k == self.steps[len(self.rows)]

    def add(self, **values) -> None:
        self.rows.append(values)

    def trajectory(self) -> Trajectory:
        fields = {name: torch.stack([row[name] for row in self.rows]) for name in self.rows[0]}
        return Trajectory(steps=np.array(self.steps), **fields)


def _risk(problem: Problem, u: torch.Tensor, probs: torch.Tensor, kind: str) -> torch.Tensor:
    """The empirical risk from the softmax probabilities and the token values u = X v."""
    return LOSSES[kind].value(problem.Y * (probs * u).sum(-1)).mean(-1)



@dataclass(frozen=True)
class Path:
    """The regularization path: constrained minimizers of the loss at increasing radii."""

    radii: np.ndarray
    W: torch.Tensor  # (len(radii), ..., d, d); for "KQ", W = K Q^T
    loss: torch.Tensor  # (len(radii), ...)
    K: torch.Tensor | None = None  # (len(radii), ..., d, m) for "KQ"
    Q: torch.Tensor | None = None


def _excess_loss(problem: Problem, scores: torch.Tensor, W: torch.Tensor, reference: torch.Tensor, kind: str):
    """L(W) minus the loss of full attention on `reference` (..., n), without cancellation (see `Loss.excess`).

    W may carry extra leading dimensions (candidates). Only differences between values matter, and those
    stay accurate even when every probability off the reference is below float64 resolution.
    """
    s = torch.softmax(raw_logits(problem, W), dim=-1)
    best = scores.gather(-1, reference[..., None])
    return LOSSES[kind].excess(best[..., 0], (s * (best - scores)).sum(-1)).mean(-1)


def regularization_path(problem: Problem, radii, *, param: str = "W", steps: int = 200, loss: str = "logistic",
                        m: int | None = None, seed: int = 0, candidates: int = 12) -> Path:
    """W_R = argmin_{||W||_F <= R} L(W) (param="W"), or (K_R, Q_R) = argmin_{||K||^2 + ||Q||^2 <= 2R} L(K Q^T)
    (param="KQ", so that ||K_R Q_R^T||_* <= R), for each radius R of `radii` (increasing).

    Riemannian gradient descent on the sphere of each radius (the minimizer lies on it once R is large), warm
    started from the previous radius, with the exact gradient and a line search over `candidates` halving
    step sizes scored by `_excess_loss`. A local method on a non-convex problem: it follows one branch of
    minimizers, usually the global one when started at a small radius. Initialization as `gd`'s "uniform".
    """
    choice(param, "param", PARAMS)
    choice(loss, "loss", tuple(LOSSES))
    radii = np.asarray([positive_float(R, "radii") for R in np.atleast_1d(radii)])
    if radii.size == 0:
        raise ValueError("radii must hold at least one radius")
    if np.any(np.diff(radii) <= 0):
        raise ValueError("radii must be increasing: the path is followed from the smallest radius up")
    steps, candidates = positive_int(steps, "steps"), positive_int(candidates, "candidates")
    d = problem.d
    m = d if m is None else positive_int(m, "m")
    x = torch.cat([p.flatten(-2) for p in _initial(problem, param, "uniform", m, seed)], -1)
    u, scores = token_values(problem), problem.Y[..., None] * token_values(problem)

    def weights_of(x):
        if param == "W":
            return x.unflatten(-1, (d, d))
        K, Q = x[..., : d * m].unflatten(-1, (d, m)), x[..., d * m:].unflatten(-1, (d, m))
        return K @ Q.transpose(-2, -1)

    def flat_gradient(x, G):
        if param == "W":
            return G.flatten(-2)
        K, Q = x[..., : d * m].unflatten(-1, (d, m)), x[..., d * m:].unflatten(-1, (d, m))
        return torch.cat([(G @ Q).flatten(-2), (G.transpose(-2, -1) @ K).flatten(-2)], -1)

    fractions = 2.0 ** -torch.arange(candidates, dtype=x.dtype, device=x.device)
    records = []
    for R in radii:
        rho = R if param == "W" else np.sqrt(2 * R)
        x = rho * x / x.norm(dim=-1, keepdim=True)
        step = torch.full(x.shape[:-1], 0.5, dtype=x.dtype, device=x.device)  # angle-like, adapted per problem
        for _ in range(steps):
            G, s = _exact_gradient(problem, u, weights_of(x), loss)
            g = flat_gradient(x, G)
            tangent = g - (g * x).sum(-1, keepdim=True) * x / rho**2
            direction = -tangent / torch.where(tangent.norm(dim=-1, keepdim=True) > 0,
                                               tangent.norm(dim=-1, keepdim=True), 1.0)
            tries = (step[None] * fractions.reshape((-1,) + (1,) * step.ndim))[..., None]  # (candidates, ..., 1)
            moved = x + tries * rho * direction
            moved = torch.cat([x[None], rho * moved / moved.norm(dim=-1, keepdim=True)])  # "stay" comes first
            scored = _excess_loss(problem, scores, weights_of(moved), s.argmax(-1), loss)
            best = scored.argmin(0)
            x = moved.gather(0, best[None, ..., None].expand((1,) + x.shape))[0]
            taken = torch.where(best > 0, step * 2.0 ** -(best - 1).to(x.dtype), step * fractions[-1])
            step = torch.clamp(4 * taken, max=1.0)
        W = weights_of(x)
        records.append((W, loss_of(problem, W, loss), x))
    W, losses, xs = (torch.stack(parts) for parts in zip(*records))
    if param == "W":
        return Path(radii=radii, W=W, loss=losses)
    return Path(radii=radii, W=W, loss=losses, K=xs[..., : d * m].unflatten(-1, (d, m)),
                Q=xs[..., d * m:].unflatten(-1, (d, m)))


def gd_prompt(problem: Problem, key, *, steps: int, lr: float, normalized: bool = True, init=None,
              record_every: int = 1, loss: str = "logistic") -> Trajectory:
    """Gradient descent on the query p of paper B's model f(X) = <X v, softmax(X key p)>, with `key` (d, d)
    fixed (the product of its key and query matrices); the problem's queries Z are not used.

    init: None (zeros) or an initial p (..., d). normalized: step -lr g/||g||, as in paper B's experiments.
    Returns a Trajectory whose `.p` holds the recorded iterates (records, ..., d).
    """
    choice(loss, "loss", tuple(LOSSES))
    steps, lr = positive_int(steps, "steps", minimum=0), positive_float(lr, "lr")
    record_every = positive_int(record_every, "record_every")
    batch, d, device = problem.batch_shape, problem.d, problem.X.device
    key = as_tensor(key, "key", device=device)
    require_shape(key, "key", (d, d), "the fixed key-query matrix of paper B's model")
    if init is None:
        p = torch.zeros(batch + (d,), dtype=torch.float64, device=device)
    else:
        p = _initial_vector(init, "init", batch, d, device)
    keys = problem.X @ key  # k_it = key^T x_it, so that the logits are k_it^T p = x_it^T key p
    u = token_values(problem)
    recorder = _Recorder(steps, record_every)
    for k in range(steps + 1):
        g, probs, _ = _logit_gradient(problem, u, torch.einsum("...ntd,...d->...nt", keys, p), loss)
        if recorder.wants(k):
            recorder.add(p=p, probs=probs, loss=_risk(problem, u, probs, loss))
        if k == steps:
            break
        G = torch.einsum("...nt,...ntd->...d", g, keys)
        p = p - lr * (_unit(G, dims=(-1,)) if normalized else G)
    return recorder.trajectory()


def gd_joint(problem: Problem, key, *, steps: int, lr: float, init_p, init_v, normalized: bool = True,
             record_every: int = 1, loss: str = "logistic") -> Trajectory:
    """Joint gradient descent on the query p and the head v of paper B's model f(X) = <X v, softmax(X key p)>
    (the problem's v and Z are not used). Each of p and v takes its own normalized step -lr g/||g||.
    Returns a Trajectory with `.p` and `.v` (records, ..., d).
    """
    choice(loss, "loss", tuple(LOSSES))
    steps, lr = positive_int(steps, "steps", minimum=0), positive_float(lr, "lr")
    record_every = positive_int(record_every, "record_every")
    batch, d, device = problem.batch_shape, problem.d, problem.X.device
    key = as_tensor(key, "key", device=device)
    require_shape(key, "key", (d, d), "the fixed key-query matrix of paper B's model")
    p, v = (_initial_vector(value, name, batch, d, device) for value, name in ((init_p, "init_p"), (init_v, "init_v")))
    keys = problem.X @ key
    step = (lambda G: _unit(G, dims=(-1,))) if normalized else (lambda G: G)
    recorder = _Recorder(steps, record_every)
    for k in range(steps + 1):
        u = torch.einsum("...ntd,...d->...nt", problem.X, v)
        g, probs, c = _logit_gradient(problem, u, torch.einsum("...ntd,...d->...nt", keys, p), loss)
        if recorder.wants(k):
            recorder.add(p=p, v=v, probs=probs, loss=_risk(problem, u, probs, loss))
        if k == steps:
            break
        G_p = torch.einsum("...nt,...ntd->...d", g, keys)
        G_v = torch.einsum("...n,...nt,...ntd->...d", c, probs, problem.X)  # sum_i c_i X_i^T s_i
        p, v = p - lr * step(G_p), v - lr * step(G_v)
    return recorder.trajectory()


def _initial_vector(value, name: str, batch: tuple, d: int, device) -> torch.Tensor:
    """An initial vector (d,) shared by all problems, or one per problem (..., d)."""
    vector = as_tensor(value, name, device=device)
    if tuple(vector.shape) not in ((d,), batch + (d,)):
        raise ValueError(f"{name} must have shape ({d},) or {batch + (d,)} (one vector per problem), "
                         f"got {tuple(vector.shape)}")
    return vector.expand(batch + (d,)).clone()
