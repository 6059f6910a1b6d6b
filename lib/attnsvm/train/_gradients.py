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
from numpy.typing import ArrayLike

from .._checks import as_tensor
from ..data import Problem
from ..heads import Head
from ..model import (_TRAINING, LOSSES, _checked_head, _checked_problem, _finite, _logits, _loss_kind, _overflow,
                    _token_values, _weights)

__all__ = ["LogitGradient", "logit_gradient", "weight_gradient", "GRADIENTS"]

GRADIENTS = ("exact", "autograd")  # how `train.gd` computes the gradient: this module's, or autograd's


class LogitGradient(NamedTuple):
    r"""The gradient with respect to the logits, :math:`\partial L/\partial\,\mathrm{logits} = e^{\mathrm{log\_scale}}\,
    \mathrm{direction}`, and the quantities computed on the way.

    What ``logit_gradient`` returns, and the third part of what ``weight_gradient`` returns.

    Parameters
    ----------
    direction : Tensor
        The finite direction, shape (..., n, T).
    log_scale : Tensor
        The log of its scale, shape (...).
    probs : Tensor
        The softmax probabilities, shape (..., n, T).
    outputs : Tensor
        The model's outputs, shape (..., n).
    log_slopes : Tensor
        :math:`\log|\partial L/\partial f_i|` (the sign of :math:`\partial L/\partial f_i` is :math:`-Y_i`),
        shape (..., n).

    Examples
    --------
    >>> from attnsvm import train
    >>> train.LogitGradient._fields
    ('direction', 'log_scale', 'probs', 'outputs', 'log_slopes')
    """

    direction: torch.Tensor  # (..., n, T), entries at most of order one
    log_scale: torch.Tensor  # (...,)
    probs: torch.Tensor  # (..., n, T) softmax probabilities
    outputs: torch.Tensor  # (..., n) model outputs f(X_i)
    log_slopes: torch.Tensor  # (..., n) log |dL/df_i| (the sign of dL/df_i is -Y_i)


def logit_gradient(problem: Problem, logits: ArrayLike, loss: str = "logistic", head: Head | None = None,
                   values: ArrayLike | None = None) -> LogitGradient:
    r"""The gradient of the empirical risk with respect to the logits (..., n, T).

    Parameters
    ----------
    problem : Problem
        The problems (a batch).
    logits : ArrayLike
        Finite, or :math:`-\infty` for a token left out (attention exactly 0, gradient exactly 0), with at least
        two finite logits per sequence; shape (..., n, T).
    loss : str, default='logistic'
        A name of ``model.LOSSES``.
    head : Head or None, default=None
        None for the linear head v of the problem, or a head of ``attnsvm.heads``, whose gradient at the attention
        output :math:`a_i = X_i^\top s_i` gives the token values.
    values : ArrayLike or None, default=None
        The token values Xv of the linear head (None: ``model.token_values(problem)``; loops pass them, computed
        once).

    Returns
    -------
    LogitGradient
        The gradient as a finite direction and a log scale, with the probabilities, outputs and log slopes.

    Raises
    ------
    ValueError
        If an argument is invalid, e.g. a sequence with fewer than two finite logits.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import data, train
    >>> problem = data.random_problem(n=2, T=3, d=2, seed=0)
    >>> grad = train.logit_gradient(problem, torch.zeros(2, 3, dtype=torch.float64), loss="logistic")
    >>> grad.direction.shape, grad.log_scale.shape
    (torch.Size([2, 3]), torch.Size([]))
    >>> dL = torch.exp(grad.log_scale) * grad.direction  # dL/dlogits; each row sums to 0
    >>> bool(dL.sum(-1).abs().max() < 1e-15)
    True
    """
    problem = _checked_problem(problem, min_T=2, why=_TRAINING)
    _loss_kind(loss)
    head = _checked_head(head, problem)
    logits = _checked_logits(logits, problem)
    values = _checked_values(values, head, problem, logits.shape)
    blame = "the logits, the token values, the head or the problem's tokens are too large"
    with _overflow("the logit gradient", blame):
        grad = _logit_gradient(problem, logits, loss, head, values)
    _finite(grad.direction, "the logit gradient", blame)
    _finite(grad.log_scale, "the logit gradient's scale", blame)
    return grad


def _checked_logits(logits, problem: Problem) -> torch.Tensor:
    """`logits` as a float64 CPU tensor (..., n, T) whose entries are finite or -inf, two finite per sequence."""
    if not torch.is_tensor(logits):
        try:
            logits = torch.as_tensor(np.asarray(logits, dtype=np.float64))
        except (TypeError, ValueError) as err:
            raise TypeError(f"logits must be a real array or tensor (..., n, T), got {type(logits).__name__}") from err
    elif logits.device.type != "cpu" or logits.is_complex() or logits.dtype == torch.bool:
        as_tensor(logits, "logits")  # its error: the device or the dtype
    logits = logits.to(torch.float64)
    if logits.ndim < 2 or logits.shape[-2:] != (problem.n, problem.T) or \
            not _extends(logits.shape[:-2], problem.batch_shape):
        raise ValueError(f"logits must have shape (..., {problem.n}, {problem.T}) with the problem's batch shape "
                         f"{problem.batch_shape} (one logit per token), got {tuple(logits.shape)}")
    if logits.numel() and not logits.amax() < torch.inf:  # amax propagates NaN
        raise ValueError("logits contains NaN or +inf entries: pass finite logits (-inf for a token left out)")
    if logits.numel() and logits.amin() == -torch.inf and not bool(((logits > -torch.inf).sum(-1) >= 2).all()):
        raise ValueError("logits has a sequence with fewer than two finite logits: the gradient needs a token "
                         "besides the top one (-inf marks a token left out)")
    return logits


def _extends(shape: tuple, batch: tuple) -> bool:
    """Whether `shape` broadcast with `batch` is `shape` (the logits may carry extra leading dimensions)."""
    if len(shape) < len(batch):
        return False
    return all(b in (1, s) for s, b in zip(shape[len(shape) - len(batch):], batch))


def _checked_values(values, head, problem: Problem, shape: torch.Size) -> torch.Tensor | None:
    """The linear head's token values (default X v) checked to expand to `shape`; None for another head."""
    if head is not None:
        if values is not None:
            raise ValueError("values applies to the linear head (head=None) only: a head of attnsvm.heads gives "
                             "its own token values, pass values=None")
        return None
    if values is None:
        return _token_values(problem, problem.v)
    values = as_tensor(values, "values")
    try:
        values.expand(shape)
    except RuntimeError as err:
        raise ValueError(f"values must have a shape that expands to the logits' {tuple(shape)} (the token values "
                         f"X v, e.g. model.token_values(problem)), got {tuple(values.shape)}") from err
    return values


def _logit_gradient(problem: Problem, logits: torch.Tensor, loss: str, head, values) -> LogitGradient:
    """`logit_gradient` without checks."""
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
    log_slopes = LOSSES[loss].log_slope(problem.Y * f) - np.log(problem.n)
    weight = log_slopes + log_second[..., 0]
    log_scale = weight.amax(-1)
    direction = (-problem.Y * torch.exp(weight - log_scale[..., None]))[..., None] * h
    return LogitGradient(direction, log_scale, s, f, log_slopes)


def weight_gradient(problem: Problem, W: ArrayLike, loss: str = "logistic", head: Head | None = None,
                    values: ArrayLike | None = None) -> tuple[torch.Tensor, torch.Tensor, LogitGradient]:
    r"""The gradient :math:`\partial L/\partial W = e^{\mathrm{log\_scale}}\,\mathrm{direction}`, with the direction
    finite however far softmax saturates.

    ``train.loss_gradient`` returns the product.

    Parameters
    ----------
    problem : Problem
        The problems (a batch).
    W : ArrayLike
        The attention weights, (d, d) or (..., d, d).
    loss : str, default='logistic'
        A name of ``model.LOSSES``.
    head : Head or None, default=None
        As in ``logit_gradient``.
    values : ArrayLike or None, default=None
        As in ``logit_gradient``.

    Returns
    -------
    tuple
        (direction, log_scale, LogitGradient): the direction (..., d, d), its log scale (...) and the gradient
        with respect to the logits.

    Raises
    ------
    ValueError
        If an argument is invalid (the message names it and the fix).

    Examples
    --------
    >>> import torch
    >>> from attnsvm import data, train
    >>> problem = data.random_problem(n=2, T=3, d=2, seed=0)
    >>> W = 1e4 * torch.eye(2, dtype=torch.float64)  # softmax saturated: dL/dW underflows to 0
    >>> direction, log_scale, _ = train.weight_gradient(problem, W, loss="logistic")
    >>> direction.shape, bool(direction.abs().max() > 0), bool(log_scale < -745)
    (torch.Size([2, 2]), True, True)
    """
    problem, W, head, values = _gradient_arguments(problem, W, loss, head, values, min_T=2)
    blame = "W, the head or the problem's tokens is too large"
    with _overflow("the gradient", blame):
        direction, log_scale, grad = _weight_gradient(problem, W, loss, head, values)
    _finite(direction, "the gradient's direction", blame)
    _finite(log_scale, "the gradient's scale", blame)
    _finite(grad.direction, "the logit gradient", blame)
    return direction, log_scale, grad


def _gradient_arguments(problem, W, loss, head, values, *, min_T: int):
    """The checked problem, W, head and values of `weight_gradient` (and `train.loss_gradient`)."""
    problem = _checked_problem(problem, min_T=min_T, why=_TRAINING, needs_Z=True)
    W = _weights(problem, W, "W")
    _finite(_logits(problem, W), "the logits x_it^T W z_i", "W (or the problem's tokens) is too large")
    _loss_kind(loss)
    head = _checked_head(head, problem)
    shape = torch.broadcast_shapes(W.shape[:-2], problem.batch_shape) + (problem.n, problem.T)
    return problem, W, head, _checked_values(values, head, problem, shape)


def _weight_gradient(problem: Problem, W: torch.Tensor, loss: str, head=None, values=None):
    """`weight_gradient` without checks."""
    Z = problem.Z
    Wz = torch.einsum("...de,...ne->...nd", W, Z)  # W z_i
    grad = _logit_gradient(problem, (problem.X * Wz[..., None, :]).sum(-1), loss, head, values)
    weighted = (grad.direction[..., None] * problem.X).sum(-2)  # sum_t g_it x_it, (..., n, d)
    return weighted.transpose(-2, -1) @ Z, grad.log_scale, grad
