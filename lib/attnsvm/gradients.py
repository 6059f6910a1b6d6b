"""The loss gradient with respect to the attention logits, exact however far softmax saturates.

With s = softmax(logits), u_it the head's value of token t and c_i = dL/df_i = Y_i l'(Y_i f_i) / n,

    dL/dlogit_it = c_i s_it sum_tau s_itau (u_it - u_itau)        (the pairwise form)

Two things go wrong in floating point once training drives the logits apart. (1) The selected token's
probability rounds to 1, so 1 - s_alpha, the size of its own gradient, is lost; autograd through softmax then
follows round-off. The pairwise form avoids it: for t = alpha the sum runs over the other tokens' small,
accurately represented probabilities. (2) Later, every probability off the selected token and the loss slopes
c_i underflow to exactly 0, and the gradient vanishes although its direction is perfectly defined. So the
gradient is returned as exp(log_scale) * g: with L_i the log of the largest non-selected probability of
sequence i,

    dL/dlogit_it = c_i e^{L_i} h_it,   h_it = (s_it / e^{L_i}) sum_tau s_itau (u_it - u_itau)   (t != alpha_i),
                                       h_ialpha = s_ialpha sum_{tau != alpha} (s_itau / e^{L_i}) (u_ialpha - u_itau),

every factor computed in log space, and each problem's sequences weighted by exp(log|c_i| + L_i - log_scale).
(3) Off alpha_i, the sum is taken as (u_it - u_ialpha) + e^{L_i} (h_ialpha / s_ialpha), never as u_it - f_i:
where u_it = u_ialpha (equal scores, Assumption B.2) the round-off of f_i would swamp the true value.
Normalized gradient descent needs only g; plain gradient descent multiplies by exp(log_scale).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from .data import Problem
from .model import LOSSES, queries


class LogitGradient(NamedTuple):
    """dL/dlogits = exp(log_scale)[..., None, None] * direction, with the quantities computed on the way."""

    direction: torch.Tensor  # (..., n, T), entries at most of order one
    log_scale: torch.Tensor  # (...,)
    probs: torch.Tensor  # (..., n, T) softmax probabilities
    outputs: torch.Tensor  # (..., n) model outputs f(X_i)
    log_slopes: torch.Tensor  # (..., n) log |dL/df_i| (the sign of dL/df_i is -Y_i)


def logit_gradient(problem: Problem, logits: torch.Tensor, kind: str, head=None,
                   values: torch.Tensor | None = None) -> LogitGradient:
    """The gradient of the empirical risk with respect to the logits (..., n, T).

    head: None for the linear head v of the problem (then pass `values` = X v, computed once), or a head of
    `attnsvm.heads`, whose gradient at the attention output a_i = X_i^T s_i gives the token values.
    """
    shifted = logits - logits.amax(-1, keepdim=True)  # 0 at the top token
    e = torch.exp(shifted)
    total = e.sum(-1, keepdim=True)
    s = e / total
    if head is None:
        u = values.expand(logits.shape)  # W may carry extra leading dimensions
        f = (s * u).sum(-1)
    else:
        a = (s[..., None] * problem.X).sum(-2)
        f, slope = head.value_and_gradient(a)
        u = (problem.X * slope[..., None, :]).sum(-1)
    top = logits.argmax(-1, keepdim=True)
    is_top = torch.zeros_like(s, dtype=torch.bool).scatter_(-1, top, True)
    others = shifted.masked_fill(is_top, -torch.inf)
    second = others.amax(-1, keepdim=True)
    ratio = torch.exp(others - second)  # s_it / e^{L_i} (L_i = second - log total), 0 at the top token
    u_top = u.gather(-1, top)
    top_sum = (ratio * (u_top - u)).sum(-1, keepdim=True)  # the top token's sum, over e^{L_i}
    log_second = second - torch.log(total)  # L_i
    # Off the top token, u_it - f_i = (u_it - u_ialpha) + e^{L_i} top_sum: subtracting f_i itself would leave
    # a round-off of eps |f_i| where u_it = u_ialpha (equal scores), and the true difference is far smaller.
    h = torch.where(is_top, s * top_sum, ratio * (u - u_top + torch.exp(log_second) * top_sum))
    log_slopes = LOSSES[kind].log_slope(problem.Y * f) - np.log(problem.n)
    weight = log_slopes + log_second[..., 0]
    log_scale = weight.amax(-1)
    direction = (-problem.Y * torch.exp(weight - log_scale[..., None]))[..., None] * h
    return LogitGradient(direction, log_scale, s, f, log_slopes)


def weight_gradient(problem: Problem, W: torch.Tensor, kind: str, head=None, values=None):
    """(direction (..., d, d), log_scale (...,), LogitGradient): dL/dW = exp(log_scale) * direction."""
    Z = queries(problem)
    Wz = torch.einsum("...de,...ne->...nd", W, Z)  # W z_i
    grad = logit_gradient(problem, (problem.X * Wz[..., None, :]).sum(-1), kind, head, values)
    weighted = (grad.direction[..., None] * problem.X).sum(-2)  # sum_t g_it x_it, (..., n, d)
    return weighted.transpose(-2, -1) @ Z, grad.log_scale, grad
