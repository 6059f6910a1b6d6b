"""Gradient descent on diagonal attention: W = diag(w) trained directly, or factorized as W = diag(k) diag(q).

With K = diag(k) and Q = diag(q) the product K Q^T is diag(k * q), so the factorized model is the (K, Q)
parameterization restricted to diagonal matrices. The logit of token t is <phi_it, w> with phi_it = x_it * z_i
(``svm.diagonal_features``), and the gradient of the risk with respect to w is g = diag(dL/dW); with respect to
(k, q) it is (g * q, g * k). g is computed exactly however far softmax saturates (``train.logit_gradient``'s
log-space form): a normalized step needs only its direction.
"""

from __future__ import annotations

import numpy as np
import torch
from numpy.typing import ArrayLike

from .._checks import boolean, positive_float, positive_int, which_problems
from ..data import Problem
from ..model import _TRAINING, LOSSES, _checked_problem, _option, _overflow, _risk, _token_values
from . import _diagonal_loop as compiled
from . import _gradients as gradients
from ._descent import ENGINES, Trajectory, _blame, _finite_trajectory, _recorder, _unit
from ._initial import initial_vector

__all__ = ["diagonal_gd"]


def _starts(problem: Problem, factorized: bool, init) -> tuple[torch.Tensor, ...]:
    """The initial (w,) or (k, q), each (..., d), from `init` (see ``diagonal_gd``)."""
    batch, d = problem.batch_shape, problem.d
    if not factorized:
        if init is None:
            return (torch.zeros(batch + (d,), dtype=torch.float64),)
        if isinstance(init, (tuple, list)) and len(init) == 2 and all(torch.is_tensor(p) or hasattr(p, "shape")
                                                                        for p in init):
            raise ValueError("init for factorized=False must be one initial w (d,) or (..., d), got a pair (k0, q0): "
                             "pass factorized=True to train the factors")
        return (initial_vector(init, "init", batch, d, None),)
    if init is None:
        raise ValueError("init=None: the factorized model needs a start (k0, q0) (k = q = 0 is a stationary point, "
                         "where the gradient with respect to k and q vanishes); pass init=(k0, q0)")
    if not isinstance(init, (tuple, list)) or len(init) != 2:
        raise ValueError(f"init for factorized=True must be a pair (k0, q0) of vectors (d,) or (..., d), got "
                         f"{type(init).__name__}")
    k0, q0 = (initial_vector(part, f"init[{j}] ({name})", batch, d, None)
              for j, (part, name) in enumerate(zip(init, ("k0", "q0"))))
    stuck = ((k0 == 0) & (q0 == 0)).all(-1)  # (...): k = q = 0 in every coordinate
    if stuck.any():
        raise ValueError(f"init=(k0, q0) is zero in every coordinate{which_problems(stuck)}: (0, 0) is a "
                         "stationary point of the factorized model (the gradients with respect to k and q vanish there), so gradient "
                         "descent would not move; start from a nonzero pair, e.g. init=(0.1 * ones, 0 * ones)")
    return k0, q0


@torch.no_grad()  # a run records data, not a graph
def diagonal_gd(problem: Problem, *, factorized: bool, steps: int, lr: float, init: ArrayLike | tuple | None = None,
                normalized: bool = True, record_every: int = 1, loss: str = "logistic",
                engine: str = "auto") -> Trajectory:
    r"""Gradient descent on diagonal attention: on w for :math:`W = \mathrm{diag}(w)`, or on (k, q) for
    :math:`W = \mathrm{diag}(k)\,\mathrm{diag}(q) = \mathrm{diag}(k \odot q)`, for every problem in the batch.

    With :math:`g = \partial L/\partial w` (the diagonal of :math:`\partial L/\partial W`), a step is
    :math:`w \leftarrow w - \eta g`, or :math:`k \leftarrow k - \eta\, g \odot q` and
    :math:`q \leftarrow q - \eta\, g \odot k` (simultaneously).

    Parameters
    ----------
    problem : Problem
        The problems (a batch).
    factorized : bool
        Train (k, q) for :math:`W = \mathrm{diag}(k \odot q)`; False: w for :math:`W = \mathrm{diag}(w)`.
    steps : int
        The number of steps.
    lr : float
        The step size.
    init : ArrayLike, tuple or None, default=None
        For factorized=False, None (w = 0) or an initial w, (d,) or (..., d); for factorized=True a pair (k0, q0)
        of such vectors (required, and not zero in every coordinate of a problem: k = q = 0 is a stationary
        point).
    normalized : bool, default=True
        :math:`\eta = \mathrm{lr}/\|g\|_2`, so that both models take steps of the same gradient-flow time (a
        W-step of length lr); a zero gradient gives no step. False: :math:`\eta = \mathrm{lr}`.
    record_every : int, default=1
        Record every this many steps.
    loss : str, default='logistic'
        A name of ``model.LOSSES``.
    engine : {'auto', 'compiled', 'torch'}, default='auto'
        "compiled" (a compiled CPU loop: the same steps, many times faster), "torch" (the batched torch loop), or
        "auto" (the compiled loop). The two agree to round-off step by step, but deep in saturation the
        factorized runs amplify round-off (as a change of init in its last digit does), and over tens of thousands
        of steps their trajectories agree only as two such perturbed runs do.

    Returns
    -------
    Trajectory
        Its ``W`` (and, factorized, ``K`` and ``Q``) hold the diagonal matrices diag(w) (diag(k), diag(q)), shape
        (records, ..., d, d), recorded at steps 0, ``record_every``, ..., and ``steps``.

    Raises
    ------
    ValueError
        If factorized=True and ``init`` is missing or zero in every coordinate of a problem, or an argument is
        invalid.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import data, train
    >>> problem = data.random_problem(n=5, T=2, d=12, seed=1)
    >>> ones = torch.ones(12, dtype=torch.float64)
    >>> run = train.diagonal_gd(problem, factorized=True, steps=200, lr=0.1, init=(0.1 * ones, 0.1 * ones),
    ...                         record_every=100)
    >>> run.steps.tolist(), tuple(run.W.shape), bool(torch.equal(run.K, run.Q))  # k = q stays k = q
    ([0, 100, 200], (3, 12, 12), True)
    >>> bool(run.loss[-1] < run.loss[0])
    True
    """
    problem = _checked_problem(problem, min_T=2, why=_TRAINING, needs_Z=True)
    factorized, normalized = boolean(factorized, "factorized"), boolean(normalized, "normalized")
    steps, lr = positive_int(steps, "steps", minimum=0), positive_float(lr, "lr")
    record_every, loss = positive_int(record_every, "record_every"), _option(loss, "loss", tuple(LOSSES))
    engine = _option(engine, "engine", ENGINES)
    params = _starts(problem, factorized, init)
    batch, n, T, d = problem.batch_shape, problem.n, problem.T, problem.d
    entries = float(torch.tensor(batch, dtype=torch.float64).prod()) * (3 * d * d + n * T + 1)
    recorder = _recorder(steps, record_every, entries)
    blame = _blame(f"lr={lr!r}", "init")
    if engine != "torch":  # the problem is on the CPU (`_checked_problem`): the compiled loop runs every option
        k, q, probs, risk = compiled.gd(problem, params, factorized, loss, lr, normalized, recorder.steps)
        factors = dict(K=torch.diag_embed(k), Q=torch.diag_embed(q)) if factorized else {}
        return _finite_trajectory(Trajectory(steps=np.array(recorder.steps), probs=probs, loss=risk,
                                             W=torch.diag_embed(k * q if factorized else k), **factors), blame)
    phi = problem.X * problem.Z[..., None, :]
    values = _token_values(problem, problem.v)
    with _overflow("gradient descent's iterates", blame, "lower lr"):
        for step in range(steps + 1):
            w = params[0] if not factorized else params[0] * params[1]
            grad = gradients._logit_gradient(problem, (phi * w[..., None, None, :]).sum(-1), loss, None, values)
            if recorder.wants(step):
                factors = dict(K=torch.diag_embed(params[0]), Q=torch.diag_embed(params[1])) if factorized else {}
                recorder.add(W=torch.diag_embed(w), probs=grad.probs,
                             loss=_risk(LOSSES[loss], problem, grad.outputs), **factors)
            if step == steps:
                break
            g = (grad.direction[..., None] * phi).sum((-3, -2))  # dL/dw = exp(log_scale) g
            move = lr * (_unit(g, dims=(-1,)) if normalized else torch.exp(grad.log_scale)[..., None] * g)
            params = (w - move,) if not factorized else (params[0] - move * params[1], params[1] - move * params[0])
    return _finite_trajectory(recorder.trajectory(), blame)
