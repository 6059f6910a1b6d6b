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

PARAMS = ("W", "KQ")
GRADIENTS = ("exact", "autograd")


@dataclass(frozen=True)
class Trajectory:
    """Iterates of gradient descent recorded at `steps`; arrays have shape (records, *batch, ...)."""

    steps: np.ndarray
    W: torch.Tensor  # (records, ..., d, d); for "KQ", W = K Q^T
    probs: torch.Tensor  # (records, ..., n, T) softmax probabilities
    loss: torch.Tensor  # (records, ...) empirical risk
    K: torch.Tensor | None = None  # (records, ..., d, m) for "KQ"
    Q: torch.Tensor | None = None

    def selection(self) -> torch.Tensor:
        """The token each sequence attends to most at the last recorded step, shape (..., n)."""
        return self.probs[-1].argmax(-1)


def loss_gradient(problem: Problem, W, kind: str = "logistic") -> torch.Tensor:
    """The exact gradient dL/dW (..., d, d) in pairwise form (see the module docstring)."""
    choice(kind, "loss", tuple(LOSSES))
    return _exact_gradient(problem, token_values(problem), weights(problem, W), kind)[0]


def _exact_gradient(problem: Problem, u: torch.Tensor, W: torch.Tensor, kind: str):
    """(dL/dW, softmax probabilities), given the token values u = X v."""
    s = torch.softmax(raw_logits(problem, W), dim=-1)
    centred = ((u[..., :, None] - u[..., None, :]) * s[..., None, :]).sum(-1)  # sum_tau s_tau (u_t - u_tau)
    c = problem.Y * LOSSES[kind][1](problem.Y * (s * u).sum(-1)) / problem.n
    return torch.einsum("...nt,...ntd,...ne->...de", c[..., None] * s * centred, problem.X, problem.Z), s


def _autograd_gradient(problem: Problem, u: torch.Tensor, W: torch.Tensor, kind: str):
    """The same by autograd through softmax: correct until softmax saturates, then steered by round-off."""
    W = W.detach().requires_grad_(True)
    (grad,) = torch.autograd.grad(loss(problem, W, kind).sum(), W)
    return grad, torch.softmax(raw_logits(problem, W.detach()), dim=-1)


def _unit(G: torch.Tensor) -> torch.Tensor:
    """G / ||G||_F over the last two dimensions, scaling by the largest entry first (a tiny G's square underflows);
    a zero gradient gives a zero step."""
    scale = G.abs().amax((-2, -1), keepdim=True)
    G = G / torch.where(scale > 0, scale, 1.0)
    norm = G.norm(dim=(-2, -1), keepdim=True)
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

    recorded = sorted(set(range(0, steps + 1, record_every)) | {steps})
    records = {"W": [], "probs": [], "loss": [], "K": [], "Q": []}
    for k in range(steps + 1):
        W = params[0] if param == "W" else params[0] @ params[1].transpose(-2, -1)
        G, probs = grad_fn(problem, u, W, loss)
        if k == recorded[len(records["W"])]:
            records["W"].append(W)
            records["probs"].append(probs)
            records["loss"].append(LOSSES[loss][0](problem.Y * (probs * u).sum(-1)).mean(-1))
            if param == "KQ":
                records["K"].append(params[0])
                records["Q"].append(params[1])
        if k == steps:
            break
        if param == "W":
            params = (params[0] - lr * step_of(G),)
        else:
            K, Q = params
            params = (K - lr * step_of(G @ Q), Q - lr * step_of(G.transpose(-2, -1) @ K))
    stacked = {key: torch.stack(value) if value else None for key, value in records.items()}
    return Trajectory(steps=np.array(recorded), **stacked)

