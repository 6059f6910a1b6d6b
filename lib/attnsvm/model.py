"""The one-layer attention model f(X_i) = v^T X_i^T softmax(X_i W z_i) and its losses.

Convention (paper A): the logit of token t of sequence i is x_it^T W z_i; with the (K, Q)
parameterization W = K Q^T.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
import torch

from .checks import as_index, as_tensor, choice
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


def _selection(problem: Problem, alpha) -> torch.Tensor:
    """`alpha` checked to hold one token index per sequence, as a long tensor (..., n) on the problem's device."""
    shape = problem.batch_shape + (problem.n,)
    return torch.as_tensor(as_index(alpha, "alpha", shape, problem.T), device=problem.X.device)


def support_gradient(problem: Problem, alpha, W, support, kind: str = "logistic") -> torch.Tensor:
    """The local-convergence proof sketch's approximation of the negative gradient -dL/dW, shape (..., d, d):

        sum_i c_i sum_{t in support_i} s_it (gamma_{i alpha_i} - gamma_it) (x_{i alpha_i} - x_it) z_i^T,

    with c_i = |l'(Y_i f(X_i))| / n, s the attention at W and gamma_it = Y_i v^T x_it the token scores.
    alpha: the selected token of each sequence (..., n); support: a boolean mask (..., n, T) of the tokens
    kept in the sum (the support tokens of the Att-SVM of alpha, `theory.support_tokens`); kind: the loss.
    """
    W, alpha = weights(problem, W), _selection(problem, alpha)
    mask = torch.as_tensor(np.asarray(support), device=problem.X.device)
    shape = problem.batch_shape + (problem.n, problem.T)
    if mask.dtype != torch.bool or tuple(mask.shape) != shape:
        raise ValueError(f"support must be a boolean mask of shape {shape} (one flag per token), "
                         f"got dtype {mask.dtype} and shape {tuple(mask.shape)}")
    loss_fn = LOSSES[choice(kind, "loss", tuple(LOSSES))]
    s, u = attention(problem, W), token_values(problem)
    c = -loss_fn.derivative(problem.Y * (s * u).sum(-1)) / problem.n
    gamma = problem.Y[..., None] * u
    gap = gamma.gather(-1, alpha[..., None]) - gamma
    index = alpha[..., None, None].expand(alpha.shape + (1, problem.d))
    D = problem.X.gather(-2, index) - problem.X  # x_{i alpha_i} - x_it
    weight = c[..., None] * s * gap * mask
    return torch.einsum("...nt,...ntd,...ne->...de", weight, D, queries(problem))


def min_margin(problem: Problem, alpha, W) -> torch.Tensor:
    """The smallest margin min_{i, t != alpha_i} (x_{i alpha_i} - x_it)^T W z_i, shape (...,) (one per problem).
    alpha: the selected token of each sequence (..., n); needs T >= 2 tokens per sequence."""
    if problem.T < 2:
        raise ValueError("min_margin needs T >= 2 tokens per sequence: with one token there is no margin")
    alpha = _selection(problem, alpha)
    scores = logits(problem, W)
    gaps = scores.gather(-1, alpha[..., None]) - scores
    chosen = torch.nn.functional.one_hot(alpha, problem.T).bool()
    return gaps.masked_fill(chosen, torch.inf).amin((-2, -1))
