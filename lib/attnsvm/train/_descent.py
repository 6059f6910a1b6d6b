"""Gradient descent on the attention weights, batched over problems, with gradients exact under saturation.

`gd` trains W or (K, Q) (paper A), `gd_prompt` the query p of paper B's model, `gd_joint` its query and head
together; `regularization_path` (from `path`) follows the constrained minimizers. The gradients come from
`gradients`, exact however far softmax saturates, so gradient descent never stalls on round-off. On the CPU, W
and (K, Q) train in compiled loops (`compiled`, `_kq_loop`: the same steps, several times faster) wherever
they apply, and so does p (`_prompt_loop`); elsewhere `gd`'s torch loop (without a head) and the torch loops of
mirror and sign descent run a CPU batch of SIDE_BY_SIDE problems or more in blocks side by side (`_side_by_side`).
`gd(..., rule="official")` runs paper A's own update instead (autograd gradients divided by their norm
plus machine epsilon, and an epsilon ridge on (K, Q)); on W it stalls once the gradient falls below epsilon,
on (K, Q) the ridge stops the growth where its gradient balances the loss's (the loss gradient stays above
2 epsilon there, and the two parts, each many times epsilon, only partly cancel: in Chapter 4's experiment their sum
is about a third of the larger part at the median): the normalized steps stay close to lr long and the iterates
hover without growing.
"""

from __future__ import annotations

import math
import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass

import numpy as np
import torch
from numpy.typing import ArrayLike

from . import _cpu_loop as compiled
from . import _kq_loop
from . import _gradients as gradients
from . import _prompt_loop
from .. import tensor
from .._checks import as_tensor, boolean, budget, nonnegative_float, positive_float, positive_int, require_shape
from .._session import _threads_for_loops
from ..data import Problem
from ..heads import Head
from ..linear import SCHEDULES
from ._gradients import GRADIENTS, _gradient_arguments
from ._initial import PARAMS, initial_parameters, initial_vector, uniform_init
from ..model import (_TRAINING, LOSSES, MAX_RECORDS, MAX_STEPS, _attention, _checked_head, _checked_problem, _finite,
                    _memory_budget, _option, _overflow, _risk, _token_values)

from ._path import Path, regularization_path

ENGINES = ("auto", "compiled", "torch")
RULES = (None, "official")
OFFICIAL_EPS = float(torch.finfo(torch.float64).eps)  # 2.22e-16: paper A's eps, in its step and its (K, Q) ridge
SIDE_BY_SIDE = 256  # the torch loops cut a CPU batch of at least this many problems into blocks (`_torch_blocks`)
__all__ = ["Trajectory", "Path", "gd", "gd_prompt", "gd_joint", "loss_gradient", "lipschitz_W",
           "regularization_path", "uniform_init", "OFFICIAL_EPS"]


@dataclass(frozen=True)
class Trajectory:
    """Iterates of a training run, recorded at ``steps``.

    Tensors have shape (records, *batch, ...); the fields a run does not train are None.

    Parameters
    ----------
    steps : ndarray
        The recorded step numbers, shape (records,).
    probs : Tensor
        The softmax probabilities, shape (records, ..., n, T).
    loss : Tensor
        The empirical risk, shape (records, ...).
    W : Tensor or None, default=None
        The attention weights, shape (records, ..., d, d).
    K : Tensor or None, default=None
        The key matrices of a (K, Q) run, shape (records, ..., d, m).
    Q : Tensor or None, default=None
        The query matrices of a (K, Q) run, shape (records, ..., d, m).
    p : Tensor or None, default=None
        The prompt of ``gd_prompt`` and ``gd_joint``, shape (records, ..., d).
    v : Tensor or None, default=None
        The head of ``gd_joint``, shape (records, ..., d).

    Examples
    --------
    >>> from attnsvm import data, train
    >>> problem = data.random_problem(n=2, T=3, d=2, seed=0)
    >>> run = train.gd(problem, steps=10, lr=0.5, record_every=5)
    >>> run.steps.tolist(), tuple(run.W.shape), tuple(run.probs.shape), tuple(run.loss.shape)
    ([0, 5, 10], (3, 2, 2), (3, 2, 3), (3,))
    """

    steps: np.ndarray
    probs: torch.Tensor  # (records, ..., n, T) softmax probabilities
    loss: torch.Tensor  # (records, ...) empirical risk
    W: torch.Tensor | None = None  # (records, ..., d, d); for "KQ", W = K Q^T
    K: torch.Tensor | None = None  # (records, ..., d, m) for "KQ"
    Q: torch.Tensor | None = None
    p: torch.Tensor | None = None  # (records, ..., d) for gd_prompt and gd_joint
    v: torch.Tensor | None = None  # (records, ..., d) for gd_joint

    def selection(self) -> torch.Tensor:
        """The token each sequence attends to most at the last recorded step.

        Returns
        -------
        Tensor
            Token indices, shape (..., n).

        Examples
        --------
        >>> from attnsvm import data, train
        >>> problem = data.random_problem(n=2, T=3, d=2, seed=0)
        >>> train.gd(problem, steps=50, lr=0.5).selection().shape
        torch.Size([2])
        """
        return self.probs[-1].argmax(-1)


class _Recorder:
    """Collects iterates at steps 0, every, 2 every, ..., and the last step, into a Trajectory (build it with
    `_recorder`, which refuses runs beyond the budgets)."""

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


def _torch_blocks(size: int) -> list[slice]:
    """The problems 0, ..., size - 1 of a batch cut into the blocks that the torch loops run side by side: one
    block below SIDE_BY_SIDE problems (on smaller blocks the threads wait for the GIL more than a second core
    gains: at 128 problems a step took longer in two blocks than in one), else as few blocks as hold 256 problems
    or fewer on average, an even number, of about equal sizes, each cut rounded to a multiple of 16 problems (a
    block may then hold a few more than 256). The blocks depend on the size alone, never on the threads: a run is
    the same on any number of threads. Cut there, each problem also keeps the arithmetic it has in the whole batch,
    as far as measured (tests/lib), with torch on one thread (``setup()``'s; on more, torch may split a large
    operation of the whole batch between its threads elsewhere: in a test of 1001 problems one differed): ATen's
    elementwise kernels take 8 doubles a loop on the AVX2 path (16 on AVX-512) and the entries past the last whole
    group another code path, and a cut at a multiple of 16 problems moves no problem's entries across that
    boundary."""
    if size < SIDE_BY_SIDE:
        return [slice(0, size)]
    count = -(-size // 256)
    count += count % 2
    ends = [16 * round(size * k / count / 16) for k in range(1, count)] + [size]
    return [slice(start, end) for start, end in zip([0] + ends[:-1], ends)]


class _Stopped(Exception):
    """A block's loop stopped because another block failed or the caller was interrupted."""


class _BlockRecorder(_Recorder):
    """A `_Recorder` of one block of `_side_by_side`, which ends its loop (at its next step) once ``stop`` is set."""

    def __init__(self, recorder: _Recorder, stop: threading.Event):
        self.steps, self.rows, self.stop = recorder.steps, [], stop

    def wants(self, k: int) -> bool:
        if self.stop.is_set():
            raise _Stopped
        return super().wants(k)


def _side_by_side(loop, problem: Problem, recorder: _Recorder) -> None:
    """``loop(block, recorder)``, a torch loop on the problems ``block`` (a slice of the batch, or None for all of
    them) that asks ``recorder.wants`` at every step: run on the `_torch_blocks` of a one-dimensional CPU batch
    side by side on ``setup()``'s ``loop_threads`` threads (torch's kernels release the GIL), in the caller's
    grad mode, the blocks' rows joined along the batch into ``recorder``; on the whole batch otherwise. An error
    in a block, or an interrupt (Ctrl-C), stops the other blocks at their next step."""
    batch = problem.batch_shape
    blocks = _torch_blocks(batch[0]) if len(batch) == 1 and problem.X.device.type == "cpu" else []
    if len(blocks) < 2:
        loop(None, recorder)
        return
    grad_mode, stop = torch.is_grad_enabled(), threading.Event()
    parts = [_BlockRecorder(recorder, stop) for _ in blocks]

    def run(block: slice, part: _Recorder) -> None:
        with torch.set_grad_enabled(grad_mode):  # the mode is the thread's own
            loop(block, part)
    threads = min(_threads_for_loops(), len(blocks))
    if threads == 1:
        for block, part in zip(blocks, parts):
            run(block, part)
    else:
        with ThreadPoolExecutor(threads) as pool:  # a pool per call: safe in a forked child
            futures = [pool.submit(run, block, part) for block, part in zip(blocks, parts)]
            try:
                done, _ = wait(futures, return_when=FIRST_EXCEPTION)
                failed = [error for error in (future.exception() for future in futures if future in done)
                          if error is not None]  # in the blocks' order
                if failed:
                    raise failed[0]
            except BaseException:
                stop.set()  # the running blocks end at their next step, the waiting ones never start
                pool.shutdown(wait=False, cancel_futures=True)
                raise
    recorder.rows = [{name: torch.cat([part.rows[r][name] for part in parts]) for name in row}
                     for r, row in enumerate(parts[0].rows)]


def _part(value, block: slice | None):
    """``value`` (a Problem, a tensor or a tuple of them) cut to the problems ``block`` of the batch (None: all)."""
    if block is None:
        return value
    return tuple(a[block] for a in value) if isinstance(value, tuple) else value[block]


def _recorder(steps: int, every: int, entries: float) -> _Recorder:
    """A _Recorder for `steps` steps recorded every `every` steps, each record `entries` float64 numbers; a
    ValueError (checks.budget) instead of a run that would not end or would exhaust memory."""
    budget(steps, "steps", MAX_STEPS, "gradient steps")
    records = steps // every + 2
    budget(records, "steps / record_every", MAX_RECORDS, "recorded iterates")
    _memory_budget(records * entries, "steps / record_every")
    return _Recorder(steps, every)


def _blame(steps: str, others: str) -> str:
    """Why gradient descent overflowed: the step sizes `steps` (e.g. "lr=1e+308"), or the scale of the problem's
    tokens or of the `others` (e.g. "init")."""
    return f"{steps} takes steps too large for this problem (or its tokens, {others} are too large)"


def _finite_trajectory(trajectory: Trajectory, blame: str) -> Trajectory:
    """`trajectory`, or a FloatingPointError with the `blame` of `_blame` if an iterate overflowed."""
    for name, value in vars(trajectory).items():
        if torch.is_tensor(value):
            _finite(value, f"the recorded {name}", blame, "lower lr")
    return trajectory


def _unit(G: torch.Tensor, dims=(-2, -1), log_scale=None, eps: float = 0.0) -> torch.Tensor:
    """G / ||G|| over `dims`, scaling by the largest entry first (a tiny G's square underflows); a zero gradient
    gives a zero step. With eps > 0, paper A's step G_true / (||G_true|| + eps) for the true gradient
    G_true = exp(log_scale) G (over the last two dims), its length computed in log space, exact where G_true
    underflows."""
    scale = G.abs().amax(dims, keepdim=True)
    G = G / torch.where(scale > 0, scale, 1.0)
    norm = G.norm(dim=dims, keepdim=True)
    unit = G / torch.where(norm > 0, norm, 1.0)
    if not eps:
        return unit
    log_norm = torch.log(scale) + torch.log(norm)  # log ||G||
    return unit * torch.sigmoid(log_scale[..., None, None] + log_norm - np.log(eps))


def _descend(params: tuple, evaluate, recorder: _Recorder, steps: int, lr: float, normalized: bool,
             eps: float = 0.0, dims: tuple = (-2, -1), sqrt_schedule: bool = False) -> tuple:
    """The loop of gradient descent, shared by `gd`'s torch loop, `gd_prompt` and `causal.gd`; returns the last
    parameters. From `params` (a tuple of tensors), at each step k = 0, ..., `steps`, evaluate(params, k, wants)
    returns (grads, log_scale, record): the gradient of each parameter as exp(log_scale) * grad (log_scale of
    the batch shape; None at the last step, where no step follows) and, where `wants` (`recorder.wants(k)`), the
    values to record at step k (a dict). Each parameter then steps by -lr grad / ||grad|| over `dims` (normalized;
    with eps > 0 paper A's -lr G / (||G|| + eps), see `_unit`) or by the plain -lr exp(log_scale) grad; with
    `sqrt_schedule`, lr / sqrt(k + 1) in place of lr at step k."""
    for k in range(steps + 1):
        wants = recorder.wants(k)
        grads, log_scale, record = evaluate(params, k, wants)
        if wants:
            recorder.add(**record)
        if k == steps:
            return params
        if normalized:
            moves = [_unit(g, dims, log_scale, eps) for g in grads]
        else:
            scale = torch.exp(log_scale)[(...,) + (None,) * len(dims)]
            moves = [scale * g for g in grads]
        rate = lr / math.sqrt(k + 1) if sqrt_schedule else lr
        params = tuple(p - rate * move for p, move in zip(params, moves))
    return params


def loss_gradient(problem: Problem, W: ArrayLike, loss: str = "logistic", head: Head | None = None) -> torch.Tensor:
    r"""The gradient :math:`\partial L/\partial W`, exact under saturation (see ``weight_gradient``).

    It underflows to 0 only where the true gradient is below the smallest float64. With T = 1 token per sequence
    attention is constant and the gradient exactly 0.

    Parameters
    ----------
    problem : Problem
        The problems (a batch).
    W : ArrayLike
        The attention weights, (d, d) or (..., d, d).
    loss : str, default='logistic'
        A name of ``model.LOSSES``.
    head : Head or None, default=None
        None (the problem's linear head v) or a head of ``attnsvm.heads``.

    Returns
    -------
    Tensor
        The gradient, shape (..., d, d).

    Raises
    ------
    ValueError
        If an argument is invalid (the message names it and the fix).

    Examples
    --------
    >>> import torch
    >>> from attnsvm import data, train
    >>> problem = data.random_problem(n=3, T=4, d=2, seed=0)
    >>> G = train.loss_gradient(problem, torch.zeros(2, 2, dtype=torch.float64), loss="logistic")
    >>> G.shape, G.dtype
    (torch.Size([2, 2]), torch.float64)
    """
    problem, W, head, values = _gradient_arguments(problem, W, loss, head, None, min_T=1)
    if problem.T == 1:  # `weight_gradient`'s log scale needs a second token
        return torch.zeros(torch.broadcast_shapes(W.shape[:-2], problem.batch_shape) + (problem.d, problem.d),
                           dtype=torch.float64)
    blame = "W, the head or the problem's tokens is too large for this loss"
    with _overflow("the gradient dL/dW", blame):
        direction, log_scale, _ = gradients._weight_gradient(problem, W, loss, head, values)
    return _finite(torch.exp(log_scale)[..., None, None] * direction, "the gradient dL/dW", blame)


def lipschitz_W(problem: Problem) -> torch.Tensor:
    r"""A Lipschitz constant :math:`L_W` of :math:`W \mapsto \nabla L(W)` on all of :math:`\mathbb{R}^{d\times d}` for
    the logistic loss.

    The mean over the sequences of chapter 7's bound (``tensor.lipschitz_bound``) for the loss of sequence i,
    :math:`\|X_i\|_2^2 \|z_i\|^2 (\rho_i^2/16 + 5\rho_i/4)`, with :math:`\rho_i` the range of its token values
    :math:`v^\top x_{it}`. So gradient descent with :math:`\eta \le 1/L_W` meets the step condition of the global
    theorem (chapter 3).

    Parameters
    ----------
    problem : Problem
        The problems (a batch), with queries Z.

    Returns
    -------
    Tensor
        :math:`L_W`, shape: the problem's batch shape.

    Raises
    ------
    ValueError
        If ``problem.Z`` is None (paper B's prompt model).
    FloatingPointError
        If the constant overflows float64.

    Examples
    --------
    >>> from attnsvm import data, train
    >>> problems = data.random_problem(n=2, T=3, d=2, seed=0, batch=4)
    >>> L = train.lipschitz_W(problems)
    >>> L.shape, bool((L > 0).all())
    (torch.Size([4]), True)
    """
    problem = _checked_problem(problem)
    if problem.Z is None:
        raise ValueError("problem.Z is None (paper B's prompt model, which trains p, not W): lipschitz_W needs "
                         "the queries z_i of the W-model")
    A = torch.einsum("...ntd,...ne->...ntde", problem.X, problem.Z).flatten(-2)  # A_i: W -> X_i W z_i
    blame = "the problem's tokens X, queries Z or head v are too large"
    u = _finite(_token_values(problem, problem.v), "the token values v^T x_it", blame)
    try:
        bound = tensor.lipschitz_bound(_finite(A, "the products x_it z_i^T", blame), u, problem.Y)
    except FloatingPointError as err:  # it names its own arguments, which the caller did not pass
        raise FloatingPointError(f"the Lipschitz constant is not finite (overflow in float64): {blame}") from err
    return _finite(bound.mean(-1), "the Lipschitz constant", blame)


def _autograd_gradient(problem: Problem, params: tuple, kind: str, head, ridge: float, values=None):
    """The gradients of L + ridge (||K||_F^2 + ||Q||_F^2) with respect to W, or to K and Q, by autograd through
    softmax (correct until softmax saturates, then steered by round-off), with the outputs f and the attention of
    the same forward pass (the operations of `model._outputs` and `model._attention` on the same values: the bits
    of separate passes). ``values``: the token values, when the caller computed them once (head None)."""
    with torch.enable_grad():  # the runs go without a graph, but for this gradient
        leaves = [p.detach().requires_grad_(True) for p in params]
        W = leaves[0] if len(leaves) == 1 else leaves[0] @ leaves[1].transpose(-2, -1)
        probs = _attention(problem, W)
        if head is None:
            f = (probs * (_token_values(problem, problem.v) if values is None else values)).sum(-1)
        else:
            f = head.value((probs[..., None] * problem.X).sum(-2))
        risk = _risk(LOSSES[kind], problem, f).sum()
        if ridge:
            risk = risk + ridge * sum((p * p).sum() for p in leaves)
        grads = torch.autograd.grad(risk, leaves)
    return grads, f.detach(), probs.detach()


@torch.no_grad()  # a run records data, not a graph (whatever requires grad)
def gd(problem: Problem, *, param: str = "W", steps: int, lr: float, normalized: bool = True,
       schedule: str = "constant", init: str | ArrayLike | tuple[ArrayLike, ArrayLike] | None = None,
       record_every: int = 1, loss: str = "logistic", m: int | None = None, seed: int = 0, gradient: str | None = None,
       head: Head | None = None, eps: float | None = None, ridge: float | None = None, rule: str | None = None,
       engine: str = "auto") -> Trajectory:
    r"""Gradient descent on W, or on (K, Q) with :math:`W = KQ^\top`, for every problem in the batch.

    The step is :math:`-\eta\, G/\|G\|_F` (``normalized``; for (K, Q) each factor normalized separately), as in
    the papers' experiments, or the plain :math:`-\eta\, G`. Records W, the softmax probabilities and the loss at
    steps 0, ``record_every``, 2 ``record_every``, ..., and ``steps``.

    Parameters
    ----------
    problem : Problem
        The problems (a batch).
    param : {'W', 'KQ'}, default='W'
        Train W, or the factors (K, Q).
    steps : int
        The number of steps.
    lr : float
        The step size :math:`\eta`.
    normalized : bool, default=True
        Normalized steps :math:`-\eta\, G/\|G\|_F`; False: plain steps :math:`-\eta\, G`.
    schedule : {'constant', 'sqrt'}, default='constant'
        Step size :math:`\eta` at every step, or :math:`\eta/\sqrt{k+1}` at step k (as in ``linear.gd``).
    init : str, ArrayLike, tuple or None, default=None
        None (zeros for W, "uniform" for (K, Q)), "zeros", "uniform" (seeded by ``seed``), an initial W
        (..., d, d) or a pair (K0, Q0).
    record_every : int, default=1
        Record every this many steps.
    loss : str, default='logistic'
        A name of ``model.LOSSES``.
    m : int or None, default=None
        The width of K and Q (None: d).
    seed : int, default=0
        The seed of init="uniform".
    gradient : {'exact', 'autograd'} or None, default=None
        The exact gradient (None: "exact", see ``weight_gradient``) or autograd through softmax, for comparison.
    head : Head or None, default=None
        None for the problem's linear head v, or a head from ``attnsvm.heads`` (e.g. ReLU).
    eps : float or None, default=None
        Normalize by :math:`\|G\|_F + \varepsilon` instead (None: 0), as paper A's code does with
        :math:`\varepsilon = 2.2\times 10^{-16}` (machine epsilon): steps then shrink, and training all but stops,
        once :math:`\|G\|_F` falls to eps.
    ridge : float or None, default=None
        param="KQ" only (None: 0): minimize :math:`L + \mathrm{ridge}\,(\|K\|_F^2 + \|Q\|_F^2)`, as paper A's
        (K, Q) code does with ridge = eps.
    rule : {'official'} or None, default=None
        None (the options above) or "official", paper A's update in full (``local_converge.ipynb``): the gradient
        by autograd through softmax (unless gradient="exact" is passed), each of W, K, Q stepped by
        :math:`-\eta\, g/(\|g\|_F + \mathrm{OFFICIAL\_EPS})`, and for (K, Q) the ridge ``OFFICIAL_EPS``.
    engine : {'auto', 'compiled', 'torch'}, default='auto'
        "compiled" (a compiled CPU loop: the same steps, several times faster), "torch" (the batched torch loop,
        for every option), or "auto": compiled wherever it applies (``why_not_compiled`` says where not).

    Returns
    -------
    Trajectory
        W (or K, Q), the probabilities and the loss at the recorded steps.

    Raises
    ------
    ValueError
        If an argument is invalid (the message names it); if rule="official" is passed with eps, ridge or
        normalized (it fixes them); if ridge is passed with param="W"; if engine="compiled" cannot run this
        training; if the run would take more than :math:`10^8` steps, :math:`10^7` records or 2 GiB of them.

    Examples
    --------
    >>> from attnsvm import data, train
    >>> problems = data.random_problem(n=2, T=3, d=2, seed=0, batch=5)
    >>> run = train.gd(problems, steps=100, lr=0.5, record_every=50)
    >>> run.steps.tolist(), tuple(run.W.shape)
    ([0, 50, 100], (3, 5, 2, 2))
    >>> bool((run.loss[-1] < run.loss[0]).all())
    True
    >>> run_KQ = train.gd(problems, param="KQ", steps=10, lr=0.1, m=3, record_every=10)
    >>> tuple(run_KQ.K.shape)
    (2, 5, 2, 3)
    """
    problem = _checked_problem(problem, min_T=2, why=_TRAINING, needs_Z=True)
    param, loss = _option(param, "param", PARAMS), _option(loss, "loss", tuple(LOSSES))
    normalized = boolean(normalized, "normalized")
    sqrt_schedule = _option(schedule, "schedule", SCHEDULES) == "sqrt"
    if _option(rule, "rule", RULES) == "official":
        given = [name for name, value in (("eps", eps), ("ridge", ridge)) if value is not None]
        given += [] if normalized else ["normalized"]
        if given:
            raise ValueError(f'rule="official" fixes {", ".join(given)} (paper A\'s update: eps = ridge = '
                             f'{OFFICIAL_EPS:.3g}, normalized steps): do not pass {" or ".join(given)} with it')
        eps, ridge = OFFICIAL_EPS, (OFFICIAL_EPS if param == "KQ" else 0.0)
        gradient = "autograd" if gradient is None else gradient
    gradient = _option("exact" if gradient is None else gradient, "gradient", GRADIENTS)
    engine, head = _option(engine, "engine", ENGINES), _checked_head(head, problem)
    steps, lr = positive_int(steps, "steps", minimum=0), positive_float(lr, "lr")
    record_every = positive_int(record_every, "record_every")
    m = problem.d if m is None else positive_int(m, "m")
    eps = 0.0 if eps is None else nonnegative_float(eps, "eps")
    ridge = 0.0 if ridge is None else nonnegative_float(ridge, "ridge")
    if ridge and param != "KQ":
        raise ValueError(f'ridge={ridge!r} applies to param="KQ" only (the term ridge (||K||_F^2 + ||Q||_F^2) of '
                         f'paper A\'s (K, Q) code); param="W" has none')
    params = initial_parameters(problem, param, init, m, seed)
    d, width = problem.d, 0 if param == "W" else params[0].shape[-1]
    entries = np.prod(problem.batch_shape, dtype=float) * (d * d + 2 * d * width + problem.n * problem.T + 1)
    recorder = _recorder(steps, record_every, entries)
    unsupported = compiled.why_not_compiled(param, head, gradient, problem.X.device)
    if engine == "compiled" and unsupported:
        raise ValueError(f'engine="compiled" cannot run this training: {unsupported}; use engine="auto" or "torch"')
    blame = _blame(f"lr={lr!r}" + (f" with ridge={ridge!r}" if ridge else ""),
                   "the head or init" if head is not None else "init")
    if engine != "torch" and not unsupported:
        if param == "W":
            (W, probs, risk), factors = compiled._gd(problem, params[0], head, loss, lr, normalized, eps,
                                                     recorder.steps, sqrt_schedule), {}
        else:
            W, K, Q, probs, risk = _kq_loop._gd(problem, *params, head, loss, lr, normalized, eps, ridge,
                                                recorder.steps, sqrt_schedule)
            factors = {"K": K, "Q": Q}
        return _finite_trajectory(Trajectory(steps=np.array(recorder.steps), probs=probs, loss=risk, W=W,
                                             **factors), blame)
    with _overflow("gradient descent's iterates", blame, "lower lr"):
        loop = lambda block, recorder: _torch_loop(  # noqa: E731
            _part(problem, block), _part(params, block), recorder, steps, lr, normalized, loss, gradient, head, eps,
            ridge, sqrt_schedule)
        if head is None:
            _side_by_side(loop, problem, recorder)
        else:  # a head's parameters may have a batch shape of their own: the run stays whole
            loop(None, recorder)
    return _finite_trajectory(recorder.trajectory(), blame)


def _torch_loop(problem: Problem, params: tuple, recorder: _Recorder, steps: int, lr: float, normalized: bool,
                loss: str, gradient: str, head, eps: float, ridge: float, sqrt_schedule: bool) -> None:
    """`gd`'s torch loop, from `params` (W,) or (K, Q), recording into `recorder`."""
    param = "W" if len(params) == 1 else "KQ"
    values = _token_values(problem, problem.v) if head is None else None

    def evaluate(params: tuple, k: int, wants: bool):
        W = params[0] if param == "W" else params[0] @ params[1].transpose(-2, -1)
        if gradient == "exact":
            G, log_scale, grad = gradients._weight_gradient(problem, W, loss, head, values)
            probs, f = grad.probs, grad.outputs
        else:
            grads, f, probs = _autograd_gradient(problem, params, loss, head, ridge, values)
            log_scale = torch.zeros(problem.batch_shape, dtype=W.dtype, device=W.device)
        factors = {} if param == "W" else {"K": params[0], "Q": params[1]}
        record = dict(W=W, probs=probs, loss=_risk(LOSSES[loss], problem, f), **factors) if wants else None
        if k == steps:
            return None, None, record
        if gradient == "exact":
            if ridge or not normalized:  # the true scale (exp(0) = 1 in the step): the ridge's gradient is added
                G, log_scale = torch.exp(log_scale)[..., None, None] * G, torch.zeros_like(log_scale)
            grads = (G,) if param == "W" else (G @ params[1], G.transpose(-2, -1) @ params[0])
            if ridge:
                grads = tuple(g + 2 * ridge * p for g, p in zip(grads, params))
        return grads, log_scale, record
    _descend(params, evaluate, recorder, steps, lr, normalized, eps, sqrt_schedule=sqrt_schedule)


def _prompt_setup(problem: Problem, key, steps, lr, normalized, record_every, loss, vectors: int):
    """Checked arguments of the prompt-model trainers (which record `vectors` vectors of R^d), and the keys
    x~_it = key^T x_it (..., n, T, d)."""
    problem = _checked_problem(problem, min_T=2, why=_TRAINING)
    loss, normalized = _option(loss, "loss", tuple(LOSSES)), boolean(normalized, "normalized")
    steps, lr = positive_int(steps, "steps", minimum=0), positive_float(lr, "lr")
    record_every = positive_int(record_every, "record_every")
    key = as_tensor(key, "key", device=problem.X.device)
    require_shape(key, "key", (problem.d, problem.d), "the fixed key-query matrix of paper B's model")
    keys = _finite(problem.X @ key.detach(), "the keys key^T x_it", "key (or the problem's tokens) is too large")
    entries = np.prod(problem.batch_shape, dtype=float) * (vectors * problem.d + problem.n * problem.T + 1)
    return problem, loss, normalized, steps, lr, _recorder(steps, record_every, entries), keys


@torch.no_grad()  # a run records data, not a graph
def gd_prompt(problem: Problem, key: ArrayLike, *, steps: int, lr: float, normalized: bool = True,
              init: ArrayLike | None = None, record_every: int = 1, loss: str = "logistic",
              engine: str = "auto") -> Trajectory:
    r"""Gradient descent on the query p of paper B's model :math:`f(X) = \langle Xv, \mathrm{softmax}(X\,\mathrm{key}\,
    p)\rangle`.

    The problem's queries Z are not used.

    Parameters
    ----------
    problem : Problem
        The problems (a batch).
    key : ArrayLike
        The fixed product of the key and query matrices, shape (d, d).
    steps : int
        The number of steps.
    lr : float
        The step size :math:`\eta`.
    normalized : bool, default=True
        Normalized steps :math:`-\eta\, g/\|g\|`, as in paper B; False: plain steps.
    init : ArrayLike or None, default=None
        None (zeros) or an initial p, (d,) or (..., d).
    record_every : int, default=1
        Record every this many steps.
    loss : str, default='logistic'
        A name of ``model.LOSSES``.
    engine : {'auto', 'compiled', 'torch'}, default='auto'
        "compiled" (a compiled CPU loop: the same steps, many times faster), "torch" (the batched torch loop), or
        "auto": the compiled loop, which runs every option of this function.

    Returns
    -------
    Trajectory
        Its ``p`` holds the recorded iterates, shape (records, ..., d).

    Raises
    ------
    ValueError
        If an argument is invalid (the message names it and the fix).
    FloatingPointError
        If an iterate overflows float64 (the message names lr, key and init).

    Examples
    --------
    >>> import torch
    >>> from attnsvm import data, train
    >>> problem = data.random_problem(n=2, T=3, d=2, seed=0)
    >>> run = train.gd_prompt(problem, torch.eye(2, dtype=torch.float64), steps=20, lr=0.5, record_every=10)
    >>> tuple(run.p.shape), run.W is None
    ((3, 2), True)
    """
    problem, loss, normalized, steps, lr, recorder, keys = _prompt_setup(problem, key, steps, lr, normalized,
                                                                         record_every, loss, 1)
    engine = _option(engine, "engine", ENGINES)
    batch, d = problem.batch_shape, problem.d
    p = initial_vector(torch.zeros(d) if init is None else init, "init", batch, d, problem.X.device)
    values = _finite(_token_values(problem, problem.v), "the token values v^T x_it",
                     "the problem's tokens are too large")
    blame = _blame(f"lr={lr!r}", "key or init")
    if engine != "torch":  # the problem is on the CPU (`_checked_problem`): the compiled loop runs every option
        p, probs, risk = _prompt_loop._gd(problem, keys, values, p, loss, lr, normalized, recorder.steps)
        return _finite_trajectory(Trajectory(steps=np.array(recorder.steps), probs=probs, loss=risk, p=p), blame)

    def evaluate(params: tuple, k: int, wants: bool):
        (p,) = params
        grad = gradients._logit_gradient(problem, (keys * p[..., None, None, :]).sum(-1), loss, None, values)
        record = dict(p=p, probs=grad.probs, loss=_risk(LOSSES[loss], problem, grad.outputs)) if wants else None
        if k == steps:
            return None, None, record
        return ((grad.direction[..., None] * keys).sum((-3, -2)),), grad.log_scale, record
    _descend((p,), evaluate, recorder, steps, lr, normalized, dims=(-1,))
    return _finite_trajectory(recorder.trajectory(), blame)


@torch.no_grad()  # a run records data, not a graph
def gd_joint(problem: Problem, key: ArrayLike, *, steps: int, lr: float, init_p: ArrayLike, init_v: ArrayLike,
             normalized: bool = True, record_every: int = 1, loss: str = "logistic") -> Trajectory:
    r"""Joint gradient descent on the query p and the head v of paper B's model :math:`f(X) = \langle Xv,
    \mathrm{softmax}(X\,\mathrm{key}\,p)\rangle`.

    Each of p and v takes its own step, normalized by default. The problem's v and Z are not used.

    Parameters
    ----------
    problem : Problem
        The problems (a batch).
    key : ArrayLike
        The fixed product of the key and query matrices, shape (d, d).
    steps : int
        The number of steps.
    lr : float
        The step size :math:`\eta`.
    init_p : ArrayLike
        The initial query, (d,) or (..., d).
    init_v : ArrayLike
        The initial head, (d,) or (..., d).
    normalized : bool, default=True
        Normalize each of the two steps by its gradient's norm.
    record_every : int, default=1
        Record every this many steps.
    loss : str, default='logistic'
        A name of ``model.LOSSES``.

    Returns
    -------
    Trajectory
        Its ``p`` and ``v`` hold the recorded iterates, shape (records, ..., d).

    Raises
    ------
    ValueError
        If an argument is invalid (the message names it and the fix).

    Examples
    --------
    >>> import torch
    >>> from attnsvm import data, train
    >>> problem = data.random_problem(n=2, T=3, d=2, seed=0)
    >>> key, start = torch.eye(2, dtype=torch.float64), torch.zeros(2, dtype=torch.float64)
    >>> run = train.gd_joint(problem, key, steps=20, lr=0.1, init_p=start, init_v=start + 0.1, record_every=10)
    >>> tuple(run.p.shape), tuple(run.v.shape)
    ((3, 2), (3, 2))
    """
    problem, loss, normalized, steps, lr, recorder, keys = _prompt_setup(problem, key, steps, lr, normalized,
                                                                         record_every, loss, 2)
    batch, d, device = problem.batch_shape, problem.d, problem.X.device
    p, v = (initial_vector(value, name, batch, d, device) for value, name in ((init_p, "init_p"), (init_v, "init_v")))
    for k in range(steps + 1):
        values = (problem.X * v[..., None, None, :]).sum(-1)
        grad = gradients._logit_gradient(problem, (keys * p[..., None, None, :]).sum(-1), loss, None, values)
        if recorder.wants(k):
            recorder.add(p=p, v=v, probs=grad.probs, loss=_risk(LOSSES[loss], problem, grad.outputs))
        if k == steps:
            break
        G_p = (grad.direction[..., None] * keys).sum((-3, -2))
        # dL/dv = sum_i (dL/df_i) X_i^T s_i, with dL/df_i = -Y_i exp(log_slopes_i)
        top = grad.log_slopes.amax(-1, keepdim=True)
        slopes = -problem.Y * torch.exp(grad.log_slopes - top)
        G_v = (slopes[..., None] * (grad.probs[..., None] * problem.X).sum(-2)).sum(-2)
        if normalized:
            p, v = p - lr * _unit(G_p, dims=(-1,)), v - lr * _unit(G_v, dims=(-1,))
        else:
            p = p - lr * torch.exp(grad.log_scale)[..., None] * G_p
            v = v - lr * torch.exp(top) * G_v
    return _finite_trajectory(recorder.trajectory(), _blame(f"lr={lr!r}", "key, init_p or init_v"))
