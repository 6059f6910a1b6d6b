"""Gradient descent on the attention weights, batched over problems, with gradients exact under saturation.

`gd` trains W or (K, Q) (paper A), `gd_prompt` the query p of paper B's model, `gd_joint` its query and head
together; `regularization_path` (from `path`) follows the constrained minimizers. The gradients come from
`gradients`, exact however far softmax saturates, so gradient descent never stalls on round-off. On the CPU, W
trains in the compiled loop of `compiled` (the same steps, several times faster) wherever it applies.
`gd(..., rule="official")` runs paper A's own update instead (autograd gradients divided by their norm
plus machine epsilon, and an epsilon ridge on (K, Q)); on W it stalls once the gradient falls below epsilon,
on (K, Q) the ridge's gradient keeps the normalized steps lr long and the iterates hover without growing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from . import compiled, tensor
from .checks import as_tensor, choice, nonnegative_float, positive_float, positive_int, require_shape
from .data import Problem
from .gradients import logit_gradient, weight_gradient
from .initial import initial_parameters, initial_vector, uniform_init
from .model import LOSSES, attention, loss, outputs, token_values, weights
from .path import Path, regularization_path

PARAMS = ("W", "KQ")
GRADIENTS = ("exact", "autograd")
ENGINES = ("auto", "compiled", "torch")
RULES = (None, "official")
OFFICIAL_EPS = float(torch.finfo(torch.float64).eps)  # 2.22e-16: paper A's eps, in its step and its (K, Q) ridge
__all__ = ["Trajectory", "Path", "gd", "gd_prompt", "gd_joint", "loss_gradient", "lipschitz_W",
           "regularization_path", "uniform_init", "OFFICIAL_EPS"]


@dataclass(frozen=True)
class Trajectory:
    """Iterates of gradient descent recorded at `steps`; arrays have shape (records, *batch, ...)."""

    steps: np.ndarray
    probs: torch.Tensor  # (records, ..., n, T) softmax probabilities
    loss: torch.Tensor  # (records, ...) empirical risk
    W: torch.Tensor | None = None  # (records, ..., d, d); for "KQ", W = K Q^T
    K: torch.Tensor | None = None  # (records, ..., d, m) for "KQ"
    Q: torch.Tensor | None = None
    p: torch.Tensor | None = None  # (records, ..., d) for gd_prompt and gd_joint
    v: torch.Tensor | None = None  # (records, ..., d) for gd_joint

    def selection(self) -> torch.Tensor:
        """The token each sequence attends to most at the last recorded step, shape (..., n)."""
        return self.probs[-1].argmax(-1)


class _Recorder:
    """Collects iterates at steps 0, every, 2 every, ..., and the last step, into a Trajectory."""

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


def _risk(kind: str, Y: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
    return LOSSES[kind].value(Y * f).mean(-1)


def loss_gradient(problem: Problem, W, kind: str = "logistic", head=None) -> torch.Tensor:
    """The gradient dL/dW (..., d, d), exact under saturation (see `gradients`); it underflows to 0 only where
    the true gradient is below the smallest float64."""
    choice(kind, "loss", tuple(LOSSES))
    direction, log_scale, _ = weight_gradient(problem, weights(problem, W), kind, head,
                                              token_values(problem) if head is None else None)
    return torch.exp(log_scale)[..., None, None] * direction


def lipschitz_W(problem: Problem) -> torch.Tensor:
    """A Lipschitz constant L_W of W -> grad L(W) on all of R^{d x d} for the logistic loss, shape: batch.

    The mean over the sequences of chapter 7's bound (`tensor.lipschitz_bound`) for the loss of sequence i:
    ||X_i||_2^2 ||z_i||^2 (rho_i^2 / 16 + 5 rho_i / 4), with rho_i the range of its token values v^T x_it.
    So gradient descent with lr <= 1 / L_W meets the step condition of the global theorem (chapter 3).
    """
    if not isinstance(problem, Problem):
        raise TypeError(f"problem must be an attnsvm.data.Problem, got {type(problem).__name__}")
    if problem.Z is None:
        raise ValueError("problem.Z is None (paper B's prompt model, which trains p, not W): lipschitz_W needs "
                         "the queries z_i of the W-model")
    A = torch.einsum("...ntd,...ne->...ntde", problem.X, problem.Z).flatten(-2)  # A_i: W -> X_i W z_i
    return tensor.lipschitz_bound(A, token_values(problem), problem.Y).mean(-1)


def _autograd_gradient(problem: Problem, params: tuple, kind: str, head, ridge: float):
    """The gradients of L + ridge (||K||_F^2 + ||Q||_F^2) with respect to W, or to K and Q, by autograd through
    softmax (correct until softmax saturates, then steered by round-off), and the outputs f."""
    leaves = [p.detach().requires_grad_(True) for p in params]
    W = leaves[0] if len(leaves) == 1 else leaves[0] @ leaves[1].transpose(-2, -1)
    risk = loss(problem, W, kind, head).sum()
    if ridge:
        risk = risk + ridge * sum((p * p).sum() for p in leaves)
    grads = torch.autograd.grad(risk, leaves)
    return grads, outputs(problem, W.detach(), head)


def gd(problem: Problem, *, param: str = "W", steps: int, lr: float, normalized: bool = True, init=None,
       record_every: int = 1, loss: str = "logistic", m: int | None = None, seed: int = 0,
       gradient: str | None = None, head=None, eps: float | None = None, ridge: float | None = None,
       rule: str | None = None, engine: str = "auto") -> Trajectory:
    """Gradient descent on W (param="W") or on (K, Q) with W = K Q^T (param="KQ"), for every problem in the batch.

    normalized: step -lr G/||G||_F (each of K and Q normalized separately), as in the papers' experiments;
    otherwise the plain step -lr G. eps: normalize by ||G||_F + eps instead (default 0), as paper A's code does
    with eps = 2.2e-16 (machine epsilon): steps then shrink, and training all but stops, once ||G||_F falls to
    eps. ridge (param="KQ" only, default 0): minimize L + ridge (||K||_F^2 + ||Q||_F^2), as paper A's (K, Q)
    code does with ridge = eps. rule: None (the options above) or "official", paper A's update in full
    (`local_converge.ipynb`): the gradient by autograd through softmax (unless gradient="exact" is passed),
    each of W, K, Q stepped by -lr g / (||g||_F + OFFICIAL_EPS), and for (K, Q) the ridge OFFICIAL_EPS; it fixes
    eps, ridge and normalized, so passing any of them with it is an error.
    init: None (zeros for W, "uniform" for (K, Q)), "zeros", "uniform"
    (seeded by `seed`), an initial W (..., d, d) or a pair (K0, Q0). m: the width of K and Q (default d).
    head: None for the problem's linear head v, or a head from `attnsvm.heads` (e.g. ReLU).
    gradient: "exact" (the default, see `gradients`) or "autograd" (through softmax, for comparison).
    engine: "compiled" (`compiled`: the same steps, several times faster), "torch" (the batched torch loop, on
    any device, for every option), or "auto": compiled wherever it applies (W on the CPU, exact gradient,
    linear or ReLU head).
    Records W, softmax probabilities and the loss at steps 0, record_every, 2 record_every, ..., and `steps`.
    """
    choice(param, "param", PARAMS)
    choice(loss, "loss", tuple(LOSSES))
    if choice(rule, "rule", RULES) == "official":
        given = [name for name, value in (("eps", eps), ("ridge", ridge)) if value is not None]
        given += [] if normalized is True else ["normalized"]
        if given:
            raise ValueError(f'rule="official" fixes {", ".join(given)} (paper A\'s update: eps = ridge = '
                             f'{OFFICIAL_EPS:.3g}, normalized steps): do not pass {" or ".join(given)} with it')
        eps, ridge = OFFICIAL_EPS, (OFFICIAL_EPS if param == "KQ" else 0.0)
        gradient = "autograd" if gradient is None else gradient
    gradient = choice("exact" if gradient is None else gradient, "gradient", GRADIENTS)
    steps, lr = positive_int(steps, "steps", minimum=0), positive_float(lr, "lr")
    record_every = positive_int(record_every, "record_every")
    m = problem.d if m is None else positive_int(m, "m")
    eps = 0.0 if eps is None else nonnegative_float(eps, "eps")
    ridge = 0.0 if ridge is None else nonnegative_float(ridge, "ridge")
    if ridge and param != "KQ":
        raise ValueError(f'ridge={ridge!r} applies to param="KQ" only (the term ridge (||K||_F^2 + ||Q||_F^2) of '
                         f'paper A\'s (K, Q) code); param="W" has none')
    params = initial_parameters(problem, param, init, m, seed)
    unsupported = compiled.supports(param, head, gradient, problem.X.device)
    if choice(engine, "engine", ENGINES) == "compiled" and unsupported:
        raise ValueError(f'engine="compiled" cannot run this training: {unsupported}; use engine="auto" or "torch"')
    recorder = _Recorder(steps, record_every)
    if engine != "torch" and not unsupported:
        W, probs, risk = compiled.gd(problem, params[0], head, loss=loss, lr=lr, normalized=normalized, eps=eps,
                                     record=recorder.steps)
        return Trajectory(steps=np.array(recorder.steps), probs=probs, loss=risk, W=W)
    values = token_values(problem) if head is None else None
    for k in range(steps + 1):
        W = params[0] if param == "W" else params[0] @ params[1].transpose(-2, -1)
        if gradient == "exact":
            G, log_scale, grad = weight_gradient(problem, W, loss, head, values)
            probs, f = grad.probs, grad.outputs
        else:
            grads, f = _autograd_gradient(problem, params, loss, head, ridge)
            log_scale, probs = torch.zeros(problem.batch_shape, dtype=W.dtype, device=W.device), attention(problem, W)
        if recorder.wants(k):
            factors = {} if param == "W" else {"K": params[0], "Q": params[1]}
            recorder.add(W=W, probs=probs, loss=_risk(loss, problem.Y, f), **factors)
        if k == steps:
            break
        if gradient == "exact":
            if ridge or not normalized:  # the true scale: the ridge's gradient is added to the loss's
                G, log_scale = torch.exp(log_scale)[..., None, None] * G, torch.zeros_like(log_scale)
            grads = (G,) if param == "W" else (G @ params[1], G.transpose(-2, -1) @ params[0])
            if ridge:
                grads = tuple(g + 2 * ridge * p for g, p in zip(grads, params))
        params = tuple(p - lr * (_unit(g, log_scale=log_scale, eps=eps) if normalized else g)
                       for p, g in zip(params, grads))
    return recorder.trajectory()


def _prompt_setup(problem: Problem, key, steps, lr, record_every, loss):
    """Checked arguments of the prompt-model trainers, and the keys x~_it = key^T x_it (..., n, T, d)."""
    choice(loss, "loss", tuple(LOSSES))
    steps, lr = positive_int(steps, "steps", minimum=0), positive_float(lr, "lr")
    record_every = positive_int(record_every, "record_every")
    key = as_tensor(key, "key", device=problem.X.device)
    require_shape(key, "key", (problem.d, problem.d), "the fixed key-query matrix of paper B's model")
    return steps, lr, _Recorder(steps, record_every), problem.X @ key


def gd_prompt(problem: Problem, key, *, steps: int, lr: float, normalized: bool = True, init=None,
              record_every: int = 1, loss: str = "logistic") -> Trajectory:
    """Gradient descent on the query p of paper B's model f(X) = <X v, softmax(X key p)>, with `key` (d, d)
    fixed (the product of its key and query matrices); the problem's queries Z are not used.

    init: None (zeros) or an initial p, (d,) or (..., d). normalized: step -lr g/||g||, as in paper B.
    Returns a Trajectory whose `.p` holds the recorded iterates (records, ..., d).
    """
    steps, lr, recorder, keys = _prompt_setup(problem, key, steps, lr, record_every, loss)
    batch, d = problem.batch_shape, problem.d
    p = initial_vector(torch.zeros(d) if init is None else init, "init", batch, d, problem.X.device)
    values = token_values(problem)
    for k in range(steps + 1):
        grad = logit_gradient(problem, (keys * p[..., None, None, :]).sum(-1), loss, values=values)
        if recorder.wants(k):
            recorder.add(p=p, probs=grad.probs, loss=_risk(loss, problem.Y, grad.outputs))
        if k == steps:
            break
        G = (grad.direction[..., None] * keys).sum((-3, -2))
        p = p - lr * (_unit(G, dims=(-1,)) if normalized else torch.exp(grad.log_scale)[..., None] * G)
    return recorder.trajectory()


def gd_joint(problem: Problem, key, *, steps: int, lr: float, init_p, init_v, normalized: bool = True,
             record_every: int = 1, loss: str = "logistic") -> Trajectory:
    """Joint gradient descent on the query p and the head v of paper B's model f(X) = <X v, softmax(X key p)>
    (the problem's v and Z are not used). Each of p and v takes its own step, normalized by default.
    Returns a Trajectory with `.p` and `.v` (records, ..., d).
    """
    steps, lr, recorder, keys = _prompt_setup(problem, key, steps, lr, record_every, loss)
    batch, d, device = problem.batch_shape, problem.d, problem.X.device
    p, v = (initial_vector(value, name, batch, d, device) for value, name in ((init_p, "init_p"), (init_v, "init_v")))
    for k in range(steps + 1):
        values = (problem.X * v[..., None, None, :]).sum(-1)
        grad = logit_gradient(problem, (keys * p[..., None, None, :]).sum(-1), loss, values=values)
        if recorder.wants(k):
            recorder.add(p=p, v=v, probs=grad.probs, loss=_risk(loss, problem.Y, grad.outputs))
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
    return recorder.trajectory()
