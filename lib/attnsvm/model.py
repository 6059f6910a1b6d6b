"""The one-layer attention model f(X_i) = v^T X_i^T softmax(X_i W z_i) and its losses.

Convention (paper A): the logit of token t of sequence i is x_it^T W z_i; with the (K, Q)
parameterization W = K Q^T.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import torch

from .checks import as_tensor, choice
from .data import Problem


class Loss(NamedTuple):
    """A loss l of the margin x = Y f(X), decreasing in x."""

    value: Callable  # l(x)
    derivative: Callable  # l'(x) < 0
    log_slope: Callable  # log(-l'(x)), accurate where l'(x) underflows
    excess: Callable  # (x, delta) -> l(x - delta) - l(x), accurate when delta is tiny


LOSSES = {
    "logistic": Loss(lambda x: torch.logaddexp(torch.zeros_like(x), -x), lambda x: -torch.sigmoid(-x),
                     lambda x: -torch.logaddexp(torch.zeros_like(x), x),
                     lambda x, delta: torch.log1p(torch.sigmoid(-x) * torch.expm1(delta))),
    "exponential": Loss(lambda x: torch.exp(-x), lambda x: -torch.exp(-x), lambda x: -x,
                        lambda x, delta: torch.exp(-x) * torch.expm1(delta)),
    "linear": Loss(lambda x: -x, lambda x: -torch.ones_like(x), lambda x: torch.zeros_like(x),
                   lambda x, delta: torch.broadcast_tensors(x, delta)[1]),
}


def weights(problem: Problem, W) -> torch.Tensor:
    """`W` as a float64 tensor on the problem's device, checked to be (..., d, d)."""
    W = as_tensor(W, "W", device=problem.X.device)
    d = problem.d
    if W.ndim < 2 or W.shape[-2:] != (d, d):
        raise ValueError(f"W must have shape (..., {d}, {d}) (the key-query matrix in R^(d x d)), got {tuple(W.shape)}")
    try:
        torch.broadcast_shapes(W.shape[:-2], problem.batch_shape)
    except RuntimeError as err:
        raise ValueError(f"W's batch shape {tuple(W.shape[:-2])} does not match the problem's {problem.batch_shape}: "
                         f"pass one W (d, d) for all problems or one per problem") from err
    return W


def logits(problem: Problem, W) -> torch.Tensor:
    """Attention logits x_it^T W z_i, shape (..., n, T)."""
    return raw_logits(problem, weights(problem, W))


def raw_logits(problem: Problem, W: torch.Tensor) -> torch.Tensor:
    """`logits` without checking W (for inner loops that built W themselves)."""
    return torch.einsum("...ntd,...de,...ne->...nt", problem.X, W, queries(problem))


def queries(problem: Problem) -> torch.Tensor:
    """The problem's query tokens Z, or a clear error for a prompt-model problem (which has none)."""
    if problem.Z is None:
        raise ValueError("this Problem has no query tokens Z (it is a prompt-model problem, trained by "
                         "train.gd_prompt): build it with Z to use the cross-attention model")
    return problem.Z


def attention(problem: Problem, W: torch.Tensor) -> torch.Tensor:
    """Softmax attention probabilities s_it = softmax_t(x_it^T W z_i), shape (..., n, T)."""
    return torch.softmax(logits(problem, W), dim=-1)


def token_values(problem: Problem, v: torch.Tensor | None = None) -> torch.Tensor:
    """The linear head applied to each token, u_it = v^T x_it, shape (..., n, T); v: the problem's by default."""
    return torch.einsum("...ntd,...d->...nt", problem.X, problem.v if v is None else v)


def outputs(problem: Problem, W, head=None) -> torch.Tensor:
    """Model outputs f(X_i) = h(X_i^T s_i), shape (..., n): the linear head v of the problem (h(a) = v^T a)
    unless a head from `attnsvm.heads` is given."""
    s = attention(problem, W)
    if head is None:
        return (s * token_values(problem)).sum(-1)
    return head.value((s[..., None] * problem.X).sum(-2))


def loss(problem: Problem, W, kind: str = "logistic", head=None) -> torch.Tensor:
    """Empirical risk (1/n) sum_i l(Y_i f(X_i)), shape (...,)."""
    return LOSSES[choice(kind, "loss", tuple(LOSSES))].value(problem.Y * outputs(problem, W, head)).mean(-1)
