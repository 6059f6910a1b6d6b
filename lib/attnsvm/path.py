"""The regularization path: the loss minimized over balls of increasing radius."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .checks import choice, positive_float, positive_int
from .data import Problem
from .gradients import weight_gradient
from .initial import initial_parameters
from .model import LOSSES, raw_logits, token_values
from .model import loss as loss_of

PARAMS = ("W", "KQ")


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
    x = torch.cat([p.flatten(-2) for p in initial_parameters(problem, param, "uniform", m, seed)], -1)
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
            G, _, grad = weight_gradient(problem, weights_of(x), loss, values=u)
            g, s = flat_gradient(x, G), grad.probs
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
