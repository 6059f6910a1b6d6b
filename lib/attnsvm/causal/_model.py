"""The causal model: logits, attention, outputs and loss of every query, the exact gradient, and gradient descent
(on the training loop of ``train.gd``).

Each query (i, k) is paper A's model with one sequence, its own head and label +1, in which the tokens that are
not candidates have logit -inf, so the exact log-space gradient of ``train.logit_gradient`` applies query by query;
``weight_gradient`` combines the queries in log space."""

from __future__ import annotations

import numpy as np
import torch
from numpy.typing import ArrayLike

from .. import model
from .._checks import memory as _memory, number as _positive
from .._checks import as_tensor, boolean, finite_result, positive_int, require_shape
from ..data import Problem, _seed
from ..model import LOSSES, _loss_kind, _option
from ..train import LogitGradient, Trajectory, uniform_init
from ..train import _gradients as gradients
from ..train._descent import ENGINES, _descend, _recorder  # the training loop of train.gd, which causal.gd runs on
from . import _causal_loop as compiled
from ._problems import SequenceProblem, _problem, _values, candidates

__all__ = ["attention", "gd", "logits", "loss", "loss_gradient", "outputs", "weight_gradient"]


def _weights(problem: SequenceProblem, W, name: str = "W") -> torch.Tensor:
    """`W` as the model checks it ((..., d, d), broadcasting against the problem's batch), with at least one W."""
    W = model._weights(problem, W, name)
    if 0 in W.shape[:-2]:
        raise ValueError(f"{name} has an empty batch dimension, shape {tuple(W.shape)}: pass at least one W")
    return W


def _flat(tensor: torch.Tensor, batch: tuple, tail: tuple) -> torch.Tensor:
    """`tensor` broadcast to batch + tail and flattened to (B, *tail) (B = prod(batch), at least 1)."""
    return tensor.expand(batch + tail).reshape((-1,) + tail)


def _raw_logits(problem: SequenceProblem, W: torch.Tensor) -> torch.Tensor:
    """x_it^T W x_ik for all (k, t), shape (..., n, K, T), finite everywhere (candidates not applied)."""
    batch = torch.broadcast_shapes(W.shape[:-2], problem.batch_shape)
    n, T, K, d = problem.n, problem.T, problem.K, problem.d
    X = _flat(problem.X, batch, (n, T, d)).reshape(-1, n * T, d)
    XW = X @ W if W.ndim == 2 else torch.bmm(X, _flat(W, batch, (d, d)))  # rows x_it^T W
    Q = _flat(problem.queries, batch, (n, K, d)).reshape(-1, K, d)
    return torch.bmm(Q, XW.reshape(-1, T, d).transpose(1, 2)).reshape(batch + (n, K, T))


def _checked_logits(problem: SequenceProblem, W, name: str = "W") -> torch.Tensor:
    """`_raw_logits` of a checked problem and W (called `name` by the caller), refused where they overflow."""
    raw = _raw_logits(_problem(problem), _weights(problem, W, name))
    return finite_result(raw, "the attention logits x_it^T W x_ik",
                         f"{name} or the problem's tokens are too large (scale them down)")


def logits(problem: SequenceProblem, W: ArrayLike) -> torch.Tensor:
    r"""Attention logits :math:`x_{it}^\top W x_{ik}`, :math:`-\infty` where t is not a candidate of query k.

    Parameters
    ----------
    problem : SequenceProblem
        The problems (a batch).
    W : ArrayLike
        The key-query matrix, (d, d) or (..., d, d).

    Returns
    -------
    Tensor
        The logits, shape (..., n, K, T).

    Raises
    ------
    ValueError
        If W does not fit the problem.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import causal
    >>> problem = causal.random_problem(n=2, T=3, d=4, seed=0)
    >>> scores = causal.logits(problem, torch.eye(4, dtype=torch.float64))
    >>> tuple(scores.shape), bool(scores[:, 1, 2].isneginf().all())  # query 1 cannot see token 2
    ((2, 3, 3), True)
    """
    return _checked_logits(problem, W).masked_fill(~candidates(problem), -torch.inf)


def attention(problem: SequenceProblem, W: ArrayLike) -> torch.Tensor:
    """Attention probabilities :math:`s_{ikt}` (softmax over the candidates), 0 off the candidates.

    Parameters
    ----------
    problem : SequenceProblem
        The problems (a batch).
    W : ArrayLike
        The key-query matrix, (d, d) or (..., d, d).

    Returns
    -------
    Tensor
        The probabilities, shape (..., n, K, T).

    Raises
    ------
    ValueError
        If W does not fit the problem.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import causal
    >>> problem = causal.random_problem(n=2, T=3, d=4, seed=0)
    >>> s = causal.attention(problem, torch.zeros(4, 4, dtype=torch.float64))  # uniform over the prefix
    >>> s[0, 2].tolist(), s[0, 1].tolist()
    ([0.3333333333333333, 0.3333333333333333, 0.3333333333333333], [0.5, 0.5, 0.0])
    """
    return torch.softmax(logits(problem, W), dim=-1)


def outputs(problem: SequenceProblem, W: ArrayLike) -> torch.Tensor:
    r"""The outputs :math:`f_{ik} = \sum_t s_{ikt}\gamma_{ikt} = v_{ik}^\top X_i^\top s_{ik}`.

    Parameters
    ----------
    problem : SequenceProblem
        The problems (a batch).
    W : ArrayLike
        The key-query matrix, (d, d) or (..., d, d).

    Returns
    -------
    Tensor
        The outputs, shape (..., n, K).

    Raises
    ------
    ValueError
        If W does not fit the problem.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import causal
    >>> problem = causal.random_problem(n=2, T=3, d=4, seed=0)
    >>> causal.outputs(problem, torch.zeros(4, 4, dtype=torch.float64)).shape
    torch.Size([2, 3])
    """
    return finite_result((attention(problem, W) * _values(problem)).sum(-1), "the attention outputs f_ik",
                         "the problem's token scores are too large (scale X or V down)")


def loss(problem: SequenceProblem, W: ArrayLike, loss: str = "logistic") -> torch.Tensor:
    r"""The risk :math:`\frac{1}{nK}\sum_{i,k} \ell(f_{ik})` (labels +1).

    Parameters
    ----------
    problem : SequenceProblem
        The problems (a batch).
    W : ArrayLike
        The key-query matrix, (d, d) or (..., d, d).
    loss : str, default='logistic'
        A name of ``model.LOSSES``.

    Returns
    -------
    Tensor
        The risk, shape (...).

    Raises
    ------
    ValueError
        If W does not fit the problem or loss is not a name of ``model.LOSSES``.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import causal
    >>> problems = causal.random_problem(n=2, T=3, d=4, seed=0, batch=5)
    >>> causal.loss(problems, torch.zeros(4, 4, dtype=torch.float64), loss="exponential").shape
    torch.Size([5])
    """
    _loss_kind(loss)
    return finite_result(LOSSES[loss].value(outputs(problem, W)).mean((-2, -1)), "the loss",
                         f"the {loss} loss of the outputs overflows (scale W or the problem's tokens down)")


_risk = loss  # `gd` and `_Plan` take a `loss` argument (the loss's name), as `train.gd` does


class _Plan:
    """The pieces of the gradient that do not depend on W, for W of batch shape `batch` (built once by `gd`).

    Every query (i, k) with at least two candidates is a problem of paper A's model with one sequence of T
    tokens, the query's own head and label +1, in which the tokens that are not candidates have logit -inf
    (attention exactly 0; `gradients.logit_gradient` then gives them gradient exactly 0). Causal query 0 has a
    single candidate: its loss does not depend on W, and it is left out.
    """

    def __init__(self, problem: SequenceProblem, batch: tuple):
        self.problem, self.batch = problem, torch.broadcast_shapes(batch, problem.batch_shape)
        n, K, T, d = problem.n, problem.K, problem.T, problem.d
        self.first = 1 if problem.causal else 0  # the first query with two candidates or more
        shape = self.batch + (n, K - self.first)
        self.one = Problem(problem.X[..., :, None, None, :, :].expand(shape + (1, T, d)),
                           torch.ones(shape + (1,), dtype=torch.float64, device=problem.X.device),
                           problem.queries[..., self.first:, None, :].expand(shape + (1, d)),
                           problem.V[..., self.first:, :].expand(shape + (d,)))
        self.values = _values(problem)[..., self.first:, None, :]
        self.excluded = ~candidates(problem)[self.first:, None, :]

    def gradient(self, W: torch.Tensor, loss: str):
        """(direction (..., d, d), log_scale (...,), logit direction (..., n, K, T), the per-query LogitGradient of
        the queries from `first` on, or None where no query has two candidates)."""
        problem, batch = self.problem, self.batch
        n, K, T, d = problem.n, problem.K, problem.T, problem.d
        if K == self.first or T < 2:
            return (torch.zeros(batch + (d, d), dtype=torch.float64, device=problem.X.device),
                    torch.full(batch, -torch.inf, dtype=torch.float64),
                    torch.zeros(batch + (n, K, T), dtype=torch.float64, device=problem.X.device), None)
        raw = _raw_logits(problem, W)[..., self.first:, None, :].masked_fill(self.excluded, -torch.inf)
        grad = gradients._logit_gradient(self.one, raw, loss, None, self.values)  # unchecked: per step
        top = grad.log_scale.amax((-2, -1))  # M: the largest log scale of a query, (...,)
        direction = torch.exp(grad.log_scale - top[..., None, None])[..., None] * grad.direction[..., 0, :]
        direction = torch.nn.functional.pad(direction, (0, 0, self.first, 0))  # (..., n, K, T), 0 for query 0
        X = _flat(problem.X, batch, (n, T, d)).reshape(-1, T, d)
        weighted = torch.bmm(direction.reshape(-1, K, T), X).reshape(-1, n * K, d)  # sum_t g_ikt x_it
        Q = _flat(problem.queries, batch, (n, K, d)).reshape(-1, n * K, d)
        G = torch.bmm(weighted.transpose(1, 2), Q).reshape(batch + (d, d))
        log_scale = top - np.log(n * K)  # the risk is a mean over the n K queries
        return G, log_scale, direction, grad

    def logit_gradient(self, loss: str, log_scale: torch.Tensor, direction: torch.Tensor, grad) -> LogitGradient:
        """The LogitGradient of all queries (..., n, K, T) from the parts `gradient` returns: a query with a single
        candidate (causal query 0, or every query when T = 1) attends to token 0 alone."""
        problem, batch = self.problem, self.batch
        first = self.first if grad is not None else problem.K
        probs = torch.zeros(batch + (problem.n, problem.K, problem.T), dtype=torch.float64)
        probs[..., :first, 0] = 1.0
        f = _values(problem)[..., 0].expand(batch + (problem.n, problem.K)).clone()
        if grad is not None:
            probs[..., first:, :] = grad.probs[..., 0, :]
            f[..., first:] = grad.outputs[..., 0]
        log_slopes = LOSSES[loss].log_slope(f) - np.log(problem.n * problem.K)
        return LogitGradient(direction, log_scale, probs, f, log_slopes)


def weight_gradient(problem: SequenceProblem, W: ArrayLike,
                    loss: str = "logistic") -> tuple[torch.Tensor, torch.Tensor, LogitGradient]:
    r"""The exact gradient :math:`\partial L/\partial W = e^{\mathrm{log\_scale}}\,\mathrm{direction}`, however far
    softmax saturates, as ``train.weight_gradient`` returns it.

    Each query is paper A's model with one sequence, its own head and label +1, whose logit gradient
    ``train.logit_gradient`` computes exactly as :math:`e^{\mathrm{log\_scale}_q}\,\mathrm{direction}_q`. The
    queries are combined in log space, :math:`\sum_q e^{\mathrm{log\_scale}_q - M}\,\mathrm{direction}_q` with M
    the largest log scale, so that no query's contribution underflows before the sum:
    :math:`\partial L/\partial W = \frac{e^M}{nK}\sum_{ikt} g_{ikt}\, x_{it} x_{ik}^\top`.

    Parameters
    ----------
    problem : SequenceProblem
        The problems (a batch).
    W : ArrayLike
        The key-query matrix, (d, d) or (..., d, d).
    loss : str, default='logistic'
        A name of ``model.LOSSES``.

    Returns
    -------
    tuple
        (direction (..., d, d), log_scale (...), LogitGradient). The LogitGradient holds the logit gradient of
        every query, :math:`\partial L/\partial\,\mathrm{logits}` (..., n, K, T) (0 off the candidates and for a
        query with one candidate), and the probabilities (..., n, K, T), outputs f and log slopes
        :math:`\log|\partial L/\partial f_{ik}|` (..., n, K).

    Raises
    ------
    ValueError
        If W does not fit the problem or loss is not a name of ``model.LOSSES``.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import causal
    >>> problem = causal.random_problem(n=2, T=3, d=4, seed=0)
    >>> direction, log_scale, logit = causal.weight_gradient(problem, torch.eye(4, dtype=torch.float64))
    >>> tuple(direction.shape), tuple(logit.direction.shape), tuple(logit.outputs.shape)
    ((4, 4), (2, 3, 3), (2, 3))
    >>> G = torch.exp(log_scale) * direction
    >>> bool(torch.allclose(G, causal.loss_gradient(problem, torch.eye(4, dtype=torch.float64))))
    True
    """
    _loss_kind(loss)
    W = _weights(_problem(problem), W)
    batch = torch.broadcast_shapes(W.shape[:-2], problem.batch_shape)
    _memory(16.0 * np.prod(batch, dtype=float) * problem.n * problem.K * (problem.T + problem.d),
            "problem and W (the gradient's terms of every query)")
    _checked_logits(problem, W)
    plan = _Plan(problem, W.shape[:-2])
    direction, log_scale, logit_direction, grad = plan.gradient(W, loss)
    result = (direction, log_scale, plan.logit_gradient(loss, log_scale, logit_direction, grad))
    return _checked_gradient(result, "W or the problem's tokens")


def _checked_gradient(result: tuple, blame: str) -> tuple:
    """`result` if its parts are finite (log_scale may be -inf: a gradient exactly 0), else a FloatingPointError."""
    direction, log_scale, logit = result
    for name, value in (("direction", direction), ("logit direction", logit.direction), ("probs", logit.probs),
                        ("outputs", logit.outputs)):
        finite_result(value, f"the gradient's {name}", f"{blame} are too large (scale them down)")
    if (torch.isnan(log_scale) | (log_scale == torch.inf)).any():
        raise FloatingPointError(f"the gradient's log_scale is NaN or +inf: {blame} are too large (scale them down)")
    return result


def loss_gradient(problem: SequenceProblem, W: ArrayLike, loss: str = "logistic") -> torch.Tensor:
    r"""The gradient :math:`\partial L/\partial W`; it underflows to 0 only where the true gradient is below the
    smallest float64.

    Parameters
    ----------
    problem : SequenceProblem
        The problems (a batch).
    W : ArrayLike
        The key-query matrix, (d, d) or (..., d, d).
    loss : str, default='logistic'
        A name of ``model.LOSSES``.

    Returns
    -------
    Tensor
        The gradient, shape (..., d, d).

    Raises
    ------
    ValueError
        If W does not fit the problem or loss is not a name of ``model.LOSSES``.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import causal
    >>> problems = causal.random_problem(n=2, T=3, d=4, seed=0, batch=5)
    >>> causal.loss_gradient(problems, torch.zeros(4, 4, dtype=torch.float64)).shape
    torch.Size([5, 4, 4])
    """
    direction, log_scale, _ = weight_gradient(problem, W, loss)
    return finite_result(torch.exp(log_scale)[..., None, None] * direction, "dL/dW",
                         "it exceeds float64 (use weight_gradient, which returns it as exp(log_scale) * direction)")


def _initial(problem: SequenceProblem, init, seed: int) -> torch.Tensor:
    """The initial W (..., d, d) of `gd`: zeros (init None or "zeros", as `train.gd`), "uniform" (seeded), or a
    given W, (d, d) for every problem or one per problem (a copy)."""
    shape = problem.batch_shape + (problem.d, problem.d)
    if init is None or isinstance(init, str):
        init = "zeros" if init is None else _option(init, "init", ("zeros", "uniform"))
        W = uniform_init(shape, seed) if init == "uniform" else torch.zeros(shape, dtype=torch.float64)
    else:
        W = as_tensor(init, "init", device=problem.X.device).detach()
        if tuple(W.shape) == shape[-2:]:
            W = W.expand(shape)
        require_shape(W, "init", shape, "an initial W for every problem")
    return W.to(problem.X.device).clone()


@torch.no_grad()  # a run records data, not a graph
def gd(problem: SequenceProblem, *, steps: int, lr: float, normalized: bool = True,
       init: str | ArrayLike | None = None, seed: int = 0, record_every: int = 1,
       loss: str = "logistic", engine: str = "auto") -> Trajectory:
    r"""Gradient descent on W for every problem of the batch: :math:`W \leftarrow W - \eta\, G/\|G\|_F` (normalized) or
    :math:`W - \eta\, G` (plain, paper C's Definition 3.7).

    G is the exact ``weight_gradient``, on the training loop of ``train.gd``, or in a compiled loop that takes the
    same steps in the space of the logits (its cost does not grow with d; see ``causal._causal_loop``).

    Parameters
    ----------
    problem : SequenceProblem
        The problems (a batch).
    steps : int
        The number of steps.
    lr : float
        The step size :math:`\eta`.
    normalized : bool, default=True
        Normalized steps, or plain.
    init : str, ArrayLike or None, default=None
        None or "zeros" (as ``train.gd``), "uniform" (torch.nn.Linear's default, seeded by ``seed``), or an
        initial W (d, d) or (..., d, d).
    seed : int, default=0
        The seed of "uniform".
    record_every : int, default=1
        Record every this many steps.
    loss : str, default='logistic'
        A name of ``model.LOSSES``.
    engine : {'auto', 'compiled', 'torch'}, default='auto'
        "compiled" (a compiled CPU loop in the space of the logits: the same steps, many times faster), "torch"
        (the torch loop of ``train.gd``), or "auto": the compiled loop where a problem has at most
        ``causal._causal_loop.MAX_TOKENS`` tokens n T (its step costs (n T)^2 K operations), else the torch loop.

    Returns
    -------
    Trajectory
        W, the attention probabilities (..., n, K, T) and the loss at steps 0, ``record_every``, ..., ``steps``.

    Raises
    ------
    ValueError
        If an argument is invalid, or the run would take more than ``model.MAX_STEPS`` steps or
        ``model.MAX_RECORDS`` records.
    FloatingPointError
        If W overflows (lower lr).

    Examples
    --------
    >>> from attnsvm import causal
    >>> problems = causal.random_problem(n=2, T=3, d=4, seed=0, batch=3)
    >>> run = causal.gd(problems, steps=20, lr=0.5, record_every=10, init="uniform")
    >>> run.steps.tolist(), tuple(run.W.shape), tuple(run.probs.shape)
    ([0, 10, 20], (3, 3, 4, 4), (3, 3, 2, 3, 3))
    >>> bool((run.loss[-1] < run.loss[0]).all())
    True
    """
    _problem(problem)
    _option(loss, "loss", tuple(LOSSES))
    steps, lr = positive_int(steps, "steps", minimum=0), _positive(lr, "lr")
    record_every = positive_int(record_every, "record_every")
    normalized, seed = boolean(normalized, "normalized"), _seed(seed)
    engine = _option(engine, "engine", ENGINES)
    size = np.prod(problem.batch_shape, dtype=float)
    recorder = _recorder(steps, record_every, size * (problem.d ** 2 + problem.n * problem.K * problem.T + 1))
    _memory(size * 16.0 * problem.n * problem.K * (problem.T + problem.d),
            "problem (the gradient's terms of every query)")
    W = _initial(problem, init, seed)
    initial_logits = _checked_logits(problem, W, "init")

    def diverged(k: int, why: str) -> FloatingPointError:
        return FloatingPointError(f"gd diverged at step {k} ({why}): lower lr (got {lr!r}), or scale the problem's "
                                  f"tokens (or init) down")
    if engine == "compiled" or (engine == "auto" and problem.n * problem.T <= compiled.MAX_TOKENS):
        _memory(size * 2.0 * (problem.n * problem.T) ** 2, "problem (the Gram matrix of its tokens, engine 'compiled')")
        Ws, step = compiled.gd(problem, W, initial_logits, _values(problem), 1 if problem.causal else 0, loss, lr,
                               normalized, recorder.steps)
        if step is not None:
            raise diverged(step, "W overflowed float64")
        try:  # `attention` and `loss` of every record, their operations once
            probs = torch.softmax(_checked_logits(problem, Ws).masked_fill(~candidates(problem), -torch.inf), dim=-1)
            f = finite_result((probs * _values(problem)).sum(-1), "the attention outputs f_ik",
                              "the problem's token scores are too large (scale X or V down)")
            risk = finite_result(LOSSES[loss].value(f).mean((-2, -1)), "the loss",
                                 f"the {loss} loss of the outputs overflows (scale W or the problem's tokens down)")
        except (ValueError, FloatingPointError) as err:  # the arguments are checked: only an overflow gets here
            unbounded = ~torch.isfinite(Ws).flatten(1).all(-1)
            raise diverged(int(recorder.steps[int(unbounded.nonzero()[0, 0])]) if unbounded.any() else steps,
                           str(err)) from err
        return Trajectory(steps=np.array(recorder.steps), W=Ws, probs=probs, loss=risk)
    plan = _Plan(problem, problem.batch_shape)

    def evaluate(params: tuple, k: int, wants: bool):
        (W,) = params
        try:
            if not torch.isfinite(W).all():
                raise FloatingPointError("W overflowed float64")
            record = dict(W=W, probs=attention(problem, W), loss=_risk(problem, W, loss)) if wants else None
            if k == steps:
                return None, None, record
            try:  # a non-finite gradient makes W non-finite, which the next step reports
                G, log_scale, *_ = plan.gradient(W, loss)
            except ValueError as err:  # the arguments are checked: only overflowing logits get here
                raise FloatingPointError(str(err)) from err
        except FloatingPointError as err:
            raise diverged(k, str(err)) from err
        return (G,), log_scale, record
    _descend((W,), evaluate, recorder, steps, lr, normalized)
    return recorder.trajectory()
