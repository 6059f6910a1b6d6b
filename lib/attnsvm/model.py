"""The one-layer attention model f(X_i) = v^T X_i^T softmax(X_i W z_i) and its losses.

Convention (paper A): the logit of token t of sequence i is x_it^T W z_i; with the (K, Q)
parameterization W = K Q^T. Every function takes its arguments in one order: the problem, then the
key-query matrix ``W``, then a selection ``alpha`` (one token per sequence), then options such as ``loss``.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, NamedTuple

import numpy as np
import torch
from numpy.typing import ArrayLike

from . import heads
from ._checks import option as _option, memory as _memory_budget
from ._checks import as_index, as_tensor, budget, choice, finite_result
from .data import Problem, Sequences

__all__ = ["Loss", "as_key_query", "attention", "logits", "loss", "min_margin", "outputs", "queries",
           "support_gradient", "token_values", "LOSSES", "MAX_STEPS", "MAX_RECORDS"]


class Loss(NamedTuple):
    r"""A loss :math:`\ell` of the margin :math:`x = Y f(X)`, decreasing in x: its value, derivative, log-slope and
    excess.

    The losses the library knows are in ``LOSSES`` ("logistic", "exponential", "linear"); functions that take a
    ``loss`` argument take one of these names.

    Parameters
    ----------
    value : Callable
        :math:`x \mapsto \ell(x)`.
    derivative : Callable
        :math:`x \mapsto \ell'(x) < 0`.
    log_slope : Callable
        :math:`x \mapsto \log(-\ell'(x))`, accurate where :math:`\ell'(x)` underflows.
    excess : Callable
        :math:`(x, \delta) \mapsto \ell(x - \delta) - \ell(x)`, accurate when :math:`\delta` is tiny.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import model
    >>> logistic = model.LOSSES["logistic"]
    >>> x = torch.tensor(0.0, dtype=torch.float64)
    >>> round(float(logistic.value(x)), 4), round(float(logistic.derivative(x)), 4)
    (0.6931, -0.5)
    """

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

# ------------------------------------------------------------------ validators shared by the training modules
# (private: checks.py has none for a Problem, a head or a training run's size)

MAX_STEPS = 10**8  # more gradient steps than this would run for hours or days: refused
MAX_RECORDS = 10**7  # recorded iterates kept in memory


def _checked_problem(problem: object, *, min_T: int = 1, why: str = "", needs_Z: bool = False,
                     expected: type = Problem) -> Problem:
    """`problem` checked to be a Problem (or another subclass `expected` of data.Sequences) on the CPU with n >= 1
    sequences of T >= min_T tokens in R^d, d >= 1 (and query tokens Z if `needs_Z`), else a TypeError/ValueError
    naming `problem` (`why`: why min_T)."""
    if not isinstance(problem, expected):
        raise TypeError(f"problem must be an attnsvm.data.Problem (e.g. data.random_problem(n, T, d, seed=0)), "
                        f"got {type(problem).__name__}")
    if problem.X.device.type != "cpu":
        raise ValueError(f"problem is on the device {problem.X.device.type!r}: attnsvm computes on the CPU, build "
                         f"the problem there (without device=)")
    if problem.n < 1:
        raise ValueError("problem has n = 0 sequences: the empirical risk is a mean over the sequences, pass at "
                         "least one")
    if problem.d < 1:
        raise ValueError("problem has tokens in R^0 (d = 0): pass tokens with d >= 1 coordinates")
    if problem.T < min_T:
        raise ValueError(f"problem has T = {problem.T} token(s) per sequence: this function needs T >= {min_T}"
                         + (f" ({why})" if why else ""))
    if needs_Z and problem.Z is None:
        raise ValueError("problem has no query tokens Z (it is a prompt-model problem, trained by "
                         "train.gd_prompt): build it with Z to use the cross-attention model")
    return problem


_TRAINING = "with one token attention is constant: there is no gradient and no margin"


def _checked_head(head, problem: Problem | None = None, name: str = "head"):
    """`head` checked to be None (the problem's linear head v) or a head of `attnsvm.heads` whose parameters are
    finite float64 CPU tensors on tokens in R^d (the problem's d, if `problem` is given); returned as such."""
    if head is None:
        return None
    if not isinstance(head, (heads.Linear, heads.ReLU, heads.Lambda)):
        raise TypeError(f"{name} must be None (the problem's linear head v) or a head of attnsvm.heads: "
                        f"heads.Linear(v), heads.ReLU(V) (e.g. heads.random_relu(d, seed=0)) or "
                        f"heads.Lambda(v, lam), got {head!r}")
    if isinstance(head, heads.ReLU):
        V = _parameter(head.V, f"{name}.V", problem, "k", "k hidden units on tokens in R^d")
        return head if V is head.V else heads.ReLU(V)
    v = _parameter(head.v, f"{name}.v", problem)
    if isinstance(head, heads.Lambda) and torch.is_tensor(head.lam) and problem is not None:
        _within_batch(head.lam.shape, f"{name}.lam", problem)
    if v is head.v:
        return head
    return heads.Linear(v) if isinstance(head, heads.Linear) else heads.Lambda(v, head.lam)


def _parameter(value, name: str, problem: Problem | None, last: str = "", meaning: str = "a head on tokens in R^d"):
    """A head's parameter: a finite float64 CPU tensor (..., d) (or (..., d, `last`)), its leading dimensions
    broadcast against the problem's batch shape."""
    tensor = as_tensor(value, name)
    core = 2 if last else 1
    d = "d" if problem is None else problem.d
    if tensor.ndim < core or (problem is not None and tensor.shape[-core] != problem.d):
        shape = f"(..., {d}, {last})" if last else f"(..., {d})"
        raise ValueError(f"{name} must have shape {shape} ({meaning.replace('R^d', f'R^{d}')}), "
                         f"got {tuple(tensor.shape)}")
    if problem is not None:
        _within_batch(tensor.shape[:-core], name, problem)
    return tensor


def _within_batch(shape: tuple, name: str, problem: Problem) -> None:
    """Refuse leading dimensions `shape` that do not broadcast to the problem's batch shape."""
    try:
        fits = torch.broadcast_shapes(shape, problem.batch_shape) == problem.batch_shape
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(f"{name}'s batch shape {tuple(shape)} does not match the problem's {problem.batch_shape}: "
                         f"pass one for all problems or one per problem")


def _loss_kind(loss: object) -> Loss:
    """The Loss named by the argument ``loss`` (a key of LOSSES), or an error naming ``loss`` and listing them."""
    return LOSSES[_option(loss, "loss", tuple(LOSSES))]


def _finite(tensor: torch.Tensor, what: str, blame: str, fix: str = "scale it down") -> torch.Tensor:
    """`checks.finite_result` blaming the arguments in `blame` (e.g. "W is too large") and saying the `fix`."""
    return finite_result(tensor, what, f"{blame}: {fix}")


@contextmanager
def _overflow(what: str, blame: str, fix: str = "scale it down") -> Iterator[None]:
    """Around a computation on checked arguments: an error raised inside (a head refusing the non-finite input an
    overflow led to, an SVD failing on it) is an overflow, re-raised as `_finite`'s FloatingPointError, which
    names the caller's arguments, not the internal ones."""
    try:
        yield
    except (ValueError, FloatingPointError, torch.linalg.LinAlgError) as err:
        raise FloatingPointError(f"{what} is not finite (overflow in float64): {blame}: {fix}") from err


def as_key_query(problem: Sequences, W: ArrayLike) -> torch.Tensor:
    """The key-query matrix W as a float64 CPU tensor, checked against the problem.

    Parameters
    ----------
    problem : Sequences
        A ``data.Problem``, or the sequences of another model (``causal.SequenceProblem``).
    W : ArrayLike
        The key-query matrix, (d, d) or (..., d, d), with a batch shape that broadcasts against the problem's.

    Returns
    -------
    Tensor
        W, shape (..., d, d).

    Raises
    ------
    TypeError
        If W is not a real array.
    ValueError
        If W does not have shape (..., d, d) with the problem's d, or its batch shape does not broadcast.

    Examples
    --------
    >>> from attnsvm import data, model
    >>> problem = data.random_problem(3, 4, 2, seed=0)
    >>> W = model.as_key_query(problem, [[1, 0], [0, 1]])
    >>> W.dtype, tuple(W.shape)
    (torch.float64, (2, 2))
    """
    return _weights(_checked_problem(problem, expected=Sequences), W, "W")


def _weights(problem: Problem, W: ArrayLike, name: str) -> torch.Tensor:
    """`weights` for an argument the caller calls `name`."""
    W = as_tensor(W, name, device=problem.X.device)
    d = problem.d
    if W.ndim < 2 or W.shape[-2:] != (d, d):
        raise ValueError(f"{name} must have shape (..., {d}, {d}) (the key-query matrix in R^(d x d)), "
                         f"got {tuple(W.shape)}")
    try:
        torch.broadcast_shapes(W.shape[:-2], problem.batch_shape)
    except RuntimeError as err:
        raise ValueError(f"{name}'s batch shape {tuple(W.shape[:-2])} does not match the problem's "
                         f"{problem.batch_shape}: pass one {name} (d, d) for all problems or one per problem") from err
    return W


def logits(problem: Problem, W: ArrayLike) -> torch.Tensor:
    r"""Attention logits :math:`x_{it}^\top W z_i`.

    Parameters
    ----------
    problem : Problem
        The problems (a batch).
    W : ArrayLike
        One key-query matrix (d, d) for every problem of a batch, or one per problem (..., d, d).

    Returns
    -------
    Tensor
        The logits, shape (..., n, T).

    Raises
    ------
    ValueError
        If W does not fit the problem (shape (..., d, d), batch shape), or the problem has no queries Z.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import data, model
    >>> problem = data.random_problem(3, 4, 2, seed=0)
    >>> tuple(model.logits(problem, torch.eye(2, dtype=torch.float64)).shape)
    (3, 4)
    """
    problem = _checked_problem(problem, needs_Z=True)
    return _finite(_logits(problem, _weights(problem, W, "W")), "the logits x_it^T W z_i",
                   "W (or the problem's tokens) is too large")


def _logits(problem: Problem, W: torch.Tensor) -> torch.Tensor:
    """`logits` without checks, for inner loops that built W themselves."""
    return torch.einsum("...ntd,...de,...ne->...nt", problem.X, W, problem.Z)


def queries(problem: Problem) -> torch.Tensor:
    """The problem's query tokens Z.

    Parameters
    ----------
    problem : Problem
        The problems (a batch).

    Returns
    -------
    Tensor
        Z, shape (..., n, d).

    Raises
    ------
    ValueError
        If the problem is a prompt-model problem (it has no queries).

    Examples
    --------
    >>> from attnsvm import data, model
    >>> tuple(model.queries(data.random_problem(3, 4, 2, seed=0)).shape)
    (3, 2)
    """
    return _checked_problem(problem, needs_Z=True).Z


def attention(problem: Problem, W: ArrayLike) -> torch.Tensor:
    r"""Softmax attention probabilities :math:`s_{it} = \mathrm{softmax}_t(x_{it}^\top W z_i)`.

    Parameters
    ----------
    problem : Problem
        The problems (a batch).
    W : ArrayLike
        The key-query matrix, (d, d) or one per problem (..., d, d).

    Returns
    -------
    Tensor
        The probabilities, shape (..., n, T).

    Raises
    ------
    ValueError
        If W does not fit the problem (shape (..., d, d), batch shape), or the problem has no queries Z.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import data, model
    >>> problem = data.random_problem(3, 4, 2, seed=0)
    >>> s = model.attention(problem, torch.zeros(2, 2, dtype=torch.float64))
    >>> tuple(s.shape), s[0].tolist()  # W = 0 attends uniformly
    ((3, 4), [0.25, 0.25, 0.25, 0.25])
    """
    return torch.softmax(logits(problem, W), dim=-1)


def _attention(problem: Problem, W: torch.Tensor) -> torch.Tensor:
    """`attention` without checks."""
    return torch.softmax(_logits(problem, W), dim=-1)


def token_values(problem: Problem, v: ArrayLike | None = None) -> torch.Tensor:
    r"""The linear head applied to each token, :math:`u_{it} = v^\top x_{it}`.

    Parameters
    ----------
    problem : Problem
        The problems (a batch).
    v : ArrayLike or None, default=None
        The problem's head by default, else one head (d,) or one per problem (..., d).

    Returns
    -------
    Tensor
        The values, shape (..., n, T).

    Raises
    ------
    ValueError
        If v does not have shape (d,) or (..., d).

    Examples
    --------
    >>> import torch
    >>> from attnsvm import data, model
    >>> problem = data.random_problem(3, 4, 2, seed=0)
    >>> tuple(model.token_values(problem).shape)
    (3, 4)
    >>> model.token_values(problem, torch.zeros(2, dtype=torch.float64)).abs().max().item()
    0.0
    """
    problem = _checked_problem(problem)
    if v is None:
        return _finite(_token_values(problem, problem.v), "the token values v^T x_it",
                       "the problem's v or X is too large")
    v = _parameter(v, "v", problem, meaning="a linear head on tokens in R^d")
    return _finite(_token_values(problem, v), "the token values v^T x_it", "v (or the problem's tokens) is too large")


def _token_values(problem: Problem, v: torch.Tensor) -> torch.Tensor:
    return torch.einsum("...ntd,...d->...nt", problem.X, v)


def outputs(problem: Problem, W: ArrayLike, head: heads.Head | None = None) -> torch.Tensor:
    r"""Model outputs :math:`f(X_i) = h(X_i^\top s_i)`.

    Parameters
    ----------
    problem : Problem
        The problems (a batch).
    W : ArrayLike
        The key-query matrix, (d, d) or (..., d, d).
    head : Head or None, default=None
        None for the linear head v of the problem (:math:`h(a) = v^\top a`), or a head from ``attnsvm.heads``.

    Returns
    -------
    Tensor
        The outputs, shape (..., n).

    Raises
    ------
    ValueError
        If W or the head does not fit the problem.
    TypeError
        If ``head`` is not None or a head of ``attnsvm.heads``.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import data, heads, model
    >>> problem = data.random_problem(3, 4, 2, seed=0)
    >>> W = torch.eye(2, dtype=torch.float64)
    >>> tuple(model.outputs(problem, W).shape)
    (3,)
    >>> tuple(model.outputs(problem, W, head=heads.random_relu(2, seed=0)).shape)
    (3,)
    """
    problem = _checked_problem(problem, needs_Z=True)
    W, head = _weights(problem, W, "W"), _checked_head(head, problem)
    logits(problem, W)  # finite, or an error blaming W
    blame = "W, the head or the problem's tokens is too large"
    with _overflow("the outputs f(X_i)", blame):
        f = _outputs(problem, W, head)
    return _finite(f, "the outputs f(X_i)", blame)


def _outputs(problem: Problem, W: torch.Tensor, head) -> torch.Tensor:
    """`outputs` without checks."""
    s = _attention(problem, W)
    if head is None:
        return (s * _token_values(problem, problem.v)).sum(-1)
    return head.value((s[..., None] * problem.X).sum(-2))


def loss(problem: Problem, W: ArrayLike, loss: str = "logistic", head: heads.Head | None = None) -> torch.Tensor:
    r"""Empirical risk :math:`\frac{1}{n}\sum_i \ell(Y_i f(X_i))`, one per problem.

    Parameters
    ----------
    problem : Problem
        The problems (a batch).
    W : ArrayLike
        The key-query matrix, (d, d) or (..., d, d).
    loss : str, default='logistic'
        The loss :math:`\ell`, a key of ``LOSSES`` ("logistic", "exponential" or "linear").
    head : Head or None, default=None
        As in ``outputs``.

    Returns
    -------
    Tensor
        The risk, shape (...).

    Raises
    ------
    ValueError
        If an argument does not fit the problem, or ``loss`` is not a key of ``LOSSES``.
    FloatingPointError
        If the risk overflows float64.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import data, model
    >>> problem = data.random_problem(3, 4, 2, seed=0)
    >>> W = torch.zeros(2, 2, dtype=torch.float64)
    >>> round(float(model.loss(problem, W)), 4)
    0.7365
    >>> model.loss(data.random_problem(3, 4, 2, seed=0, batch=5), W, loss="exponential").shape
    torch.Size([5])
    """
    loss_fn, f = _loss_kind(loss), outputs(problem, W, head)  # outputs checks the other arguments
    return _finite(_risk(loss_fn, problem, f), "the loss", "W, the head or the problem's tokens is too large for "
                   "this loss")


def _risk(loss_fn: Loss, problem: Problem, f: torch.Tensor) -> torch.Tensor:
    """The empirical risk (1/n) sum_i l(Y_i f_i) of the outputs f (..., n)."""
    return loss_fn.value(problem.Y * f).mean(-1)


def _selection(problem: Problem, alpha: ArrayLike) -> torch.Tensor:
    """`alpha` checked to hold one token index per sequence, as a long tensor (..., n) on the problem's device."""
    if torch.is_tensor(alpha) and alpha.device.type != "cpu":
        raise ValueError(f"alpha is on the device {alpha.device.type!r}: attnsvm computes on the CPU, pass alpha.cpu()")
    shape = problem.batch_shape + (problem.n,)
    return torch.as_tensor(as_index(alpha, "alpha", shape, problem.T), device=problem.X.device)


def support_gradient(problem: Problem, W: ArrayLike, alpha: ArrayLike, support: ArrayLike,
                     loss: str = "logistic") -> torch.Tensor:
    r"""The local-convergence proof sketch's approximation of the negative gradient :math:`-\partial L/\partial W`,
    :math:`\sum_i c_i \sum_{t \in \mathrm{support}_i} s_{it} (\gamma_{i\alpha_i} - \gamma_{it})
    (x_{i\alpha_i} - x_{it}) z_i^\top`.

    Here :math:`c_i = |\ell'(Y_i f(X_i))|/n`, s is the attention at W and :math:`\gamma_{it} = Y_i v^\top x_{it}`
    are the token scores.

    Parameters
    ----------
    problem : Problem
        The problems (a batch).
    W : ArrayLike
        The key-query matrix, (d, d) or (..., d, d).
    alpha : ArrayLike
        The selected token of each sequence, shape (..., n).
    support : ArrayLike
        A boolean mask (..., n, T) of the tokens kept in the sum (the support tokens of the Att-SVM of alpha,
        ``theory.support_tokens``).
    loss : str, default='logistic'
        A key of ``LOSSES``.

    Returns
    -------
    Tensor
        The approximation, shape (..., d, d).

    Raises
    ------
    ValueError
        If an argument does not fit the problem (e.g. ``support`` not of shape (..., n, T)).
    TypeError
        If ``support`` is not a boolean mask.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import data, model
    >>> problem = data.random_problem(3, 4, 2, seed=0)
    >>> W = torch.eye(2, dtype=torch.float64)
    >>> support = torch.ones(3, 4, dtype=torch.bool)
    >>> tuple(model.support_gradient(problem, W, [0, 1, 2], support).shape)
    (2, 2)
    """
    problem = _checked_problem(problem, needs_Z=True)
    W, alpha, loss_fn = _weights(problem, W, "W"), _selection(problem, alpha), _loss_kind(loss)
    shape = problem.batch_shape + (problem.n, problem.T)
    mask = _mask(support, "support", shape)
    s, u = _attention(problem, W), _token_values(problem, problem.v)
    c = -loss_fn.derivative(problem.Y * (s * u).sum(-1)) / problem.n
    gamma = problem.Y[..., None] * u
    gap = gamma.gather(-1, alpha[..., None]) - gamma
    index = alpha[..., None, None].expand(alpha.shape + (1, problem.d))
    D = problem.X.gather(-2, index) - problem.X  # x_{i alpha_i} - x_it
    weight = c[..., None] * s * gap * mask
    return _finite(torch.einsum("...nt,...ntd,...ne->...de", weight, D, problem.Z), "the support gradient",
                   "W or the problem's tokens is too large")


def _mask(value: ArrayLike, name: str, shape: tuple) -> torch.Tensor:
    """`value` checked to be a boolean CPU array or tensor of the given shape (one flag per token)."""
    if torch.is_tensor(value) and value.device.type != "cpu":
        raise ValueError(f"{name} is on the device {value.device.type!r}: attnsvm computes on the CPU, "
                         f"pass {name}.cpu()")
    try:
        mask = value.detach() if torch.is_tensor(value) else torch.as_tensor(np.asarray(value))
    except (TypeError, ValueError, RuntimeError) as err:
        raise TypeError(f"{name} must be a boolean mask of shape {shape} (one flag per token), "
                        f"got {type(value).__name__}") from err
    if mask.dtype != torch.bool or tuple(mask.shape) != shape:
        raise ValueError(f"{name} must be a boolean mask of shape {shape} (one flag per token), "
                         f"got dtype {mask.dtype} and shape {tuple(mask.shape)}")
    return mask


def min_margin(problem: Problem, W: ArrayLike, alpha: ArrayLike) -> torch.Tensor:
    r"""The smallest margin :math:`\min_{i,\, t \ne \alpha_i} (x_{i\alpha_i} - x_{it})^\top W z_i`, one per problem.

    Parameters
    ----------
    problem : Problem
        The problems (a batch), with T >= 2 tokens per sequence.
    W : ArrayLike
        The key-query matrix, (d, d) or (..., d, d).
    alpha : ArrayLike
        The selected token of each sequence, shape (..., n).

    Returns
    -------
    Tensor
        The margin, shape (...).

    Raises
    ------
    ValueError
        If T < 2, or W or alpha does not fit the problem.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import data, model
    >>> # one sequence: tokens e1, e2, -e2 and the query e1; W = e1 e1^T selects token 0 with margin 1
    >>> problem = data.Problem([[[1.0, 0.0], [0.0, 1.0], [0.0, -1.0]]], [1.0], [[1.0, 0.0]], [1.0, 0.0])
    >>> W = torch.tensor([[1.0, 0.0], [0.0, 0.0]], dtype=torch.float64)
    >>> float(model.min_margin(problem, W, [0]))
    1.0
    """
    problem = _checked_problem(problem, min_T=2, why="with one token there is no margin", needs_Z=True)
    alpha = _selection(problem, alpha)
    scores = logits(problem, W)
    gaps = scores.gather(-1, alpha[..., None]) - scores
    chosen = torch.nn.functional.one_hot(alpha, problem.T).bool()
    return _finite(gaps.masked_fill(chosen, torch.inf).amin((-2, -1)), "the margin", "W is too large")
