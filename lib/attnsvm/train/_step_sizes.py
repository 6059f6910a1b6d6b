"""Polyak steps on W, and the two quantities whose rates a run is judged by, computed exactly in log space.

The infimum of the empirical risk is L* = (1/n) sum_i l(gamma_i*), gamma_i* = max_t Y_i v^T x_it (the optimal
token's score; chapter 1): it is approached, never reached, as attention becomes one-hot on the optimal tokens.
With Y_i f_i = gamma_i* - delta_i, delta_i = sum_t s_it (gamma_i* - gamma_it) >= 0,

    L(W) - L* = (1/n) sum_i [l(gamma_i* - delta_i) - l(gamma_i*)],

and ``log_loss_gap`` evaluates its logarithm from log delta_i = logsumexp_t(log s_it + log(gamma_i* - gamma_it)),
never by subtracting L* from L: that difference loses every digit once L - L* < 1e-16 L*, and underflows to 0
below 1e-308, while its logarithm stays exact. ``log_attention_gap`` gives log(1 - s_{i,alpha_i}) the same way.
``polyak`` runs gradient descent with the Polyak step size (L - L*) / ||grad L||^2, its length computed from
these logarithms and the log-scaled exact gradient (``weight_gradient``); ``gradient="autograd"`` runs the
plain float64 version instead (L and L* as numbers, the gradient by autograd through softmax), for comparison.
On the CPU the exact rule runs in a compiled loop (`_polyak_loop`: the same steps, to round-off, tens of times
faster); ``engine="torch"`` runs this module's torch loop.
"""

from __future__ import annotations

import numpy as np
import torch
from numpy.typing import ArrayLike

from . import _gradients as gradients
from . import _polyak_loop
from .. import svm, theory
from .._checks import as_index, option, positive_int, which_problems
from .._checks import seed as _seed
from ..data import Problem
from ..model import (_TRAINING, LOSSES, _checked_problem, _finite, _logits, _outputs, _overflow, _risk,
                     _token_values, _weights)
from ._descent import ENGINES, Trajectory, _autograd_gradient, _blame, _recorder
from ._initial import initial_parameters

__all__ = ["optimal_loss", "log_loss_gap", "log_attention_gap", "polyak", "POLYAK_GRADIENTS"]

POLYAK_GRADIENTS = ("exact", "autograd")  # `polyak`: log-space step lengths, or plain float64 with autograd
_FIRST_ORDER = -40.0  # below log delta = -40 the excess l(x - delta) - l(x) is |l'(x)| delta to float64 accuracy


def _scores(problem: Problem) -> torch.Tensor:
    """Token scores gamma_it = Y_i v^T x_it, (..., n, T)."""
    return problem.Y[..., None] * _token_values(problem, problem.v)


def optimal_loss(problem: Problem, loss: str = "logistic") -> torch.Tensor:
    r""":math:`L^* = \frac{1}{n}\sum_i \ell(\max_t \gamma_{it})`.

    It is the infimum of the empirical risk when the Att-SVM of the optimal tokens is feasible (chapter 1), and a
    lower bound in any case.

    Parameters
    ----------
    problem : Problem
        The problems (a batch).
    loss : str, default='logistic'
        A name of ``model.LOSSES``.

    Returns
    -------
    Tensor
        :math:`L^*`, shape: the problem's batch shape.

    Raises
    ------
    ValueError
        If ``loss`` is not a name of ``model.LOSSES``.

    Examples
    --------
    >>> from attnsvm import data, train
    >>> problem = data.random_problem(3, 4, 2, seed=0)
    >>> L_star = train.optimal_loss(problem)
    >>> L_star.shape, bool(L_star > 0)
    (torch.Size([]), True)
    """
    problem = _checked_problem(problem, min_T=1, why=_TRAINING)
    loss_fn = LOSSES[option(loss, "loss", tuple(LOSSES))]
    blame = "the problem's tokens or head are too large for this loss"
    with _overflow("the optimal loss", blame):
        value = loss_fn.value(_scores(problem).amax(-1)).mean(-1)
    return _finite(value, "the optimal loss L*", blame)


def _log_loss_gap(problem: Problem, W: torch.Tensor, loss: str) -> torch.Tensor:
    """`log_loss_gap` without checks."""
    loss_fn, gamma = LOSSES[loss], _scores(problem)
    best = gamma.amax(-1)
    log_s = torch.log_softmax(_logits(problem, W), -1)
    log_delta = torch.logsumexp(log_s + torch.log(best[..., None] - gamma), -1)  # log 0 = -inf at the best
    tiny = log_delta < _FIRST_ORDER
    delta = torch.exp(torch.where(tiny, torch.zeros_like(log_delta), log_delta))
    best = best.expand(log_delta.shape)
    direct = torch.log(loss_fn.excess(best, delta))
    excess = torch.where(tiny, loss_fn.log_slope(best) + log_delta, direct)
    return torch.logsumexp(excess, -1) - np.log(problem.n)


def log_loss_gap(problem: Problem, W: ArrayLike, loss: str = "logistic") -> torch.Tensor:
    r""":math:`\log(L(W) - L^*)`, exact however far softmax saturates (``optimal_loss`` gives :math:`L^*`).

    It is :math:`-\infty` only where every sequence has all its scores equal (then :math:`L = L^*` for every W).

    Parameters
    ----------
    problem : Problem
        The problems (a batch).
    W : ArrayLike
        The attention weights, (d, d) or (..., d, d).
    loss : str, default='logistic'
        A name of ``model.LOSSES``.

    Returns
    -------
    Tensor
        The log gap, shape: the broadcast of W's leading dimensions with the problem's batch shape.

    Raises
    ------
    ValueError
        If an argument is invalid (the message names it and the fix).
    FloatingPointError
        If the gap overflows float64.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import data, model, svm, theory, train
    >>> problem = data.random_problem(3, 4, 4, seed=0)
    >>> W = torch.as_tensor(svm.att_svm(problem.X, problem.Z, theory.optimal_tokens(problem)))
    >>> plain = model.loss(problem, W) - train.optimal_loss(problem)
    >>> bool(torch.isclose(train.log_loss_gap(problem, W), torch.log(plain)))
    True
    >>> round(float(train.log_loss_gap(problem, 1000 * W)))  # e^-1000: far below the smallest float64
    -1001
    """
    problem = _checked_problem(problem, min_T=1, why=_TRAINING, needs_Z=True)
    W = _weights(problem, W, "W")
    loss = option(loss, "loss", tuple(LOSSES))
    blame = "W or the problem's tokens are too large"
    _finite(_logits(problem, W), "the logits x_it^T W z_i", blame)
    with _overflow("the loss gap", blame):
        gap = _log_loss_gap(problem, W, loss)
    if torch.isnan(gap).any() or (gap == torch.inf).any():
        raise FloatingPointError(f"the loss gap is not finite (overflow in float64): {blame}")
    return gap


def log_attention_gap(problem: Problem, W: ArrayLike, alpha: ArrayLike | None = None) -> torch.Tensor:
    r""":math:`\log(1 - s_{i\alpha_i}(W))`, the log of the attention left off the selected token of each sequence.

    Exact however far softmax saturates: :math:`1 - s` rounds to 0 in float64 once it falls below
    :math:`10^{-16}`, its log does not.

    Parameters
    ----------
    problem : Problem
        The problems (a batch).
    W : ArrayLike
        The attention weights, (d, d) or (..., d, d).
    alpha : ArrayLike or None, default=None
        The selected tokens (..., n) (None: the optimal tokens).

    Returns
    -------
    Tensor
        The log gaps, shape (..., n).

    Raises
    ------
    ValueError
        If an argument is invalid, e.g. a token index out of range.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import data, model, train
    >>> problem = data.random_problem(3, 4, 2, seed=0)
    >>> W = torch.eye(2, dtype=torch.float64)
    >>> gap = train.log_attention_gap(problem, W, alpha=[0, 0, 0])
    >>> plain = torch.log(1 - model.attention(problem, W)[:, 0])
    >>> gap.shape, bool(torch.allclose(gap, plain))
    (torch.Size([3]), True)
    """
    problem = _checked_problem(problem, min_T=1, why=_TRAINING, needs_Z=True)
    W = _weights(problem, W, "W")
    logits = _finite(_logits(problem, W), "the logits x_it^T W z_i", "W or the problem's tokens are too large")
    if alpha is None:
        alpha = _scores(problem).argmax(-1)
    alpha = torch.as_tensor(as_index(alpha, "alpha", problem.batch_shape + (problem.n,), problem.T))
    alpha = alpha.expand(logits.shape[:-1])[..., None]
    chosen = logits.gather(-1, alpha)
    others = (logits - chosen).scatter(-1, alpha, -torch.inf)  # a_it - a_ialpha, t != alpha
    return -torch.logaddexp(torch.zeros_like(chosen[..., 0]), -torch.logsumexp(others, -1))


def _unit(G: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(G / ||G||_F, log ||G||_F) over the last two dimensions, scaling by the largest entry first; a zero G gives
    a zero direction and log-norm -inf."""
    scale = G.abs().amax((-2, -1), keepdim=True)
    G = G / torch.where(scale > 0, scale, 1.0)
    norm = G.norm(dim=(-2, -1), keepdim=True)
    return G / torch.where(norm > 0, norm, 1.0), (torch.log(scale) + torch.log(norm))[..., 0, 0]


def _require_infimum(problem: Problem) -> None:
    """An InfeasibleSVM (a ValueError) where the Att-SVM of the optimal tokens (``svm.feasible``; with ties for
    the best score, the first best token, as ``theory.optimal_tokens``) is infeasible: there L* of
    ``optimal_loss`` is only a lower bound that the loss does not approach, and Polyak steps sized by L - L*
    overshoot (W jumps far out and the loss freezes above L*)."""
    alpha = theory.optimal_tokens(problem).detach()
    flags = np.asarray(svm.feasible(problem.X.detach(), problem.Z.detach(), alpha.numpy()))
    if flags.all():
        return
    raise svm.InfeasibleSVM(
        f"the problem's optimal tokens are not separable{which_problems(~flags)} (their Att-SVM is infeasible): "
        f"the loss does not approach L* = train.optimal_loss(problem) (or only beyond ||W|| = {svm.MAX_NORM:g}), "
        f"and Polyak steps, sized by L - L*, need L* to be the infimum; increase d (generic data are separable "
        f"when d >= max(T - 1, n)) or use train.gd",
        np.flatnonzero(~flags.reshape(-1)).tolist())


def _finite_run(run: Trajectory, blame: str) -> Trajectory:
    """`run`, or a FloatingPointError with the `blame` of `_blame` if a recorded value overflowed."""
    for name in ("W", "probs", "loss"):
        _finite(getattr(run, name), f"the recorded {name}", blame, "start from a smaller init")
    return run


@torch.no_grad()  # a run records data, not a graph
def polyak(problem: Problem, *, steps: int, init: str | ArrayLike | None = None, record_every: int = 1,
           loss: str = "logistic", gradient: str = "exact", seed: int = 0, engine: str = "auto") -> Trajectory:
    r"""Gradient descent on W with the Polyak step size, :math:`W \leftarrow W - \frac{L(W) - L^*}{\|\nabla
    L(W)\|_F^2} \nabla L(W)`, for every problem in the batch.

    :math:`L^*` (from ``optimal_loss``) must be the infimum of the loss, so a problem whose optimal tokens are not
    separable (their Att-SVM, ``svm.att_svm``, is infeasible; ``svm.feasible`` tells) is refused: there the loss
    stays above :math:`L^*` and the steps overshoot.

    Parameters
    ----------
    problem : Problem
        The problems (a batch).
    steps : int
        The number of steps.
    init : str, ArrayLike or None, default=None
        None or "zeros", "uniform" (seeded by ``seed``) or an initial W (..., d, d).
    record_every : int, default=1
        Record every this many steps.
    loss : str, default='logistic'
        A name of ``model.LOSSES``.
    gradient : {'exact', 'autograd'}, default='exact'
        "exact" computes the step's length :math:`(L - L^*)/\|\nabla L\|` from ``log_loss_gap`` and the
        log-scaled exact gradient, so it stays exact after :math:`L - L^*` and the gradient have underflowed;
        "autograd" is the plain float64 rule: L and :math:`L^*` as numbers and the gradient by autograd through
        softmax (a step is skipped where :math:`L - L^* \le 0` or the gradient is 0 in float64, so such a run
        stalls once round-off has eaten the gap).
    seed : int, default=0
        The seed of "uniform".
    engine : {'auto', 'compiled', 'torch'}, default='auto'
        "compiled" (a compiled CPU loop for gradient="exact": the same steps, to round-off, tens of times faster),
        "torch" (the torch loop, for every option), or "auto": compiled wherever it applies (on the CPU, with
        gradient="exact").

    Returns
    -------
    Trajectory
        W, the softmax probabilities and the loss at steps 0, ``record_every``, ..., ``steps``.

    Raises
    ------
    ~attnsvm.svm.InfeasibleSVM
        (a ValueError) If the optimal tokens of a problem are not separable.
    ValueError
        If an argument is invalid (the message names it and the fix); if engine="compiled" cannot run this
        training (gradient="autograd", or a problem off the CPU).

    Examples
    --------
    >>> from attnsvm import data, train
    >>> problem = data.random_problem(n=3, T=4, d=4, seed=0)
    >>> run = train.polyak(problem, steps=20, record_every=10)
    >>> run.steps.tolist(), tuple(run.W.shape)
    ([0, 10, 20], (3, 4, 4))
    >>> gaps = train.log_loss_gap(problem, run.W)
    >>> bool(gaps[2] < gaps[1] < gaps[0])
    True
    """
    problem = _checked_problem(problem, min_T=2, why=_TRAINING, needs_Z=True)
    loss = option(loss, "loss", tuple(LOSSES))
    gradient = option(gradient, "gradient", POLYAK_GRADIENTS)
    engine = option(engine, "engine", ENGINES)
    unsupported = ('it computes the exact rule only (gradient="exact")' if gradient != "exact" else
                   None if problem.X.device.type == "cpu" else
                   f"it runs on the CPU only (the problem is on {problem.X.device})")
    if engine == "compiled" and unsupported:
        raise ValueError(f'engine="compiled" cannot run this training: {unsupported}; use engine="auto" or "torch"')
    steps = positive_int(steps, "steps", minimum=0)
    record_every = positive_int(record_every, "record_every")
    (W,) = initial_parameters(problem, "W", init, problem.d, _seed(seed))
    entries = np.prod(problem.batch_shape, dtype=float) * (problem.d**2 + problem.n * problem.T + 1)
    recorder = _recorder(steps, record_every, entries)
    loss_fn, values = LOSSES[loss], _token_values(problem, problem.v)
    L_star = optimal_loss(problem, loss)
    _require_infimum(problem)
    blame = _blame("the Polyak step", "init")
    if engine != "torch" and not unsupported:
        W, probs, f = _polyak_loop.polyak(problem, W, loss, recorder.steps, _FIRST_ORDER)
        return _finite_run(Trajectory(steps=np.array(recorder.steps), probs=probs, loss=_risk(loss_fn, problem, f),
                                      W=W), blame)
    with _overflow("Polyak steps' iterates", blame, "start from a smaller init"):
        for k in range(steps + 1):
            if recorder.wants(k):
                f = _outputs(problem, W, None)
                recorder.add(W=W, probs=torch.softmax(_logits(problem, W), -1), loss=_risk(loss_fn, problem, f))
            if k == steps:
                break
            if gradient == "exact":
                direction, log_scale, _ = gradients._weight_gradient(problem, W, loss, None, values)
                unit, log_norm = _unit(direction)
                length = torch.exp(_log_loss_gap(problem, W, loss) - log_scale - log_norm)
                length = torch.where(log_norm > -torch.inf, length, torch.zeros_like(length))
                W = W - length[..., None, None] * unit
            else:
                (G,), f, _ = _autograd_gradient(problem, (W,), loss, None, 0.0, values)
                gap = _risk(loss_fn, problem, f) - L_star
                squared = (G * G).sum((-2, -1))
                ok = (gap > 0) & (squared > 0)
                W = W - torch.where(ok, gap / torch.where(ok, squared, 1.0), 0.0)[..., None, None] * G
    return _finite_run(recorder.trajectory(), blame)
