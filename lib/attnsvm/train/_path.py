"""The regularization path: the loss minimized over balls of increasing radius."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .._checks import as_tensor, budget, positive_float, positive_int, require_shape
from ..data import Problem, _seed
from ._gradients import _weight_gradient
from ._initial import PARAMS, initial_parameters
from ..model import (_TRAINING, LOSSES, MAX_STEPS, _checked_problem, _finite, _logits, _memory_budget, _option,
                    _outputs, _overflow, _risk, _token_values)

__all__ = ["Path", "regularization_path", "MAX_RADIUS"]

MAX_RADIUS = float(np.sqrt(np.finfo(np.float64).max))  # 1.3e154: the steps divide by R^2


@dataclass(frozen=True)
class Path:
    """What ``regularization_path`` returns: the points its local method finds at increasing radii.

    They form a branch of constrained stationary points, or the best of several starts; they are not certified
    minimizers. Tensors have shape (len(radii), *batch, ...).

    Parameters
    ----------
    radii : ndarray
        The radii R, increasing.
    W : Tensor
        The point at each radius, shape (len(radii), ..., d, d).
    loss : Tensor
        Its empirical risk, shape (len(radii), ...).
    K : Tensor or None, default=None
        The balanced key factor (param="KQ"), shape (len(radii), ..., d, m).
    Q : Tensor or None, default=None
        The balanced query factor (param="KQ"), shape (len(radii), ..., d, m).
    start : Tensor or None, default=None
        With ``starts``: the start that won at each radius (0 the continuation, k ``starts[k - 1]``).
    excess : Tensor or None, default=None
        With ``starts``: :math:`L - L_{opt}` reached from each start, shape (len(radii), 1 + S, ...).

    Examples
    --------
    >>> from attnsvm import data, train
    >>> problem = data.random_problem(n=2, T=3, d=2, seed=0)
    >>> path = train.regularization_path(problem, [1.0, 2.0], steps=5)
    >>> path.radii.tolist(), tuple(path.W.shape), tuple(path.loss.shape), path.K is None
    ([1.0, 2.0], (2, 2, 2), (2,), True)
    """

    radii: np.ndarray
    W: torch.Tensor  # (len(radii), ..., d, d); for "KQ", W = K Q^T
    loss: torch.Tensor  # (len(radii), ...)
    K: torch.Tensor | None = None  # (len(radii), ..., d, m) for "KQ"
    Q: torch.Tensor | None = None
    start: torch.Tensor | None = None  # with ``starts``: (len(radii), ...) the start that won, 0 = continuation
    excess: torch.Tensor | None = None  # with ``starts``: (len(radii), 1 + S, ...) L - L_opt reached from each start


def _excess_loss(problem: Problem, scores: torch.Tensor, W: torch.Tensor, reference: torch.Tensor, loss: str):
    """L(W) minus the loss of full attention on `reference` (..., n), without cancellation (see `Loss.excess`).

    W may carry extra leading dimensions (candidates). Only differences between values matter, and those
    stay accurate even when every probability off the reference is below float64 resolution.
    """
    s = torch.softmax(_logits(problem, W), dim=-1)
    best = scores.gather(-1, reference[..., None])
    return LOSSES[loss].excess(best[..., 0], (s * (best - scores)).sum(-1)).mean(-1)


def _project_capped_simplex(s: torch.Tensor, R: float) -> torch.Tensor:
    """The Euclidean projection of nonnegative, descending vectors s (..., r) on {s >= 0, sum(s) <= R}."""
    k = torch.arange(1, s.shape[-1] + 1, dtype=s.dtype, device=s.device)
    excess = s.cumsum(-1) - R
    last = ((s - excess / k > 0) * k).argmax(-1, keepdim=True)  # the last index kept positive
    shift = excess.gather(-1, last) / (last + 1).to(s.dtype)
    return torch.where(s.sum(-1, keepdim=True) <= R, s, torch.clamp(s - shift, min=0.0))


def _nuclear_ball(W: torch.Tensor, R: float, m: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The projection of W on {rank <= m, ||W||_* <= R} (the products K Q^T with ||K||^2 + ||Q||^2 <= 2R,
    K, Q in R^{d x m}): the top m singular values projected on the capped simplex. Returns the projection and
    its balanced factors K = U S^(1/2), Q = V S^(1/2)."""
    U, S, Vh = torch.linalg.svd(W)
    root = _project_capped_simplex(S[..., :m], R).sqrt()
    K, Q = U[..., :m] * root[..., None, :], Vh[..., :m, :].transpose(-2, -1) * root[..., None, :]
    return K @ Q.transpose(-2, -1), K, Q


@torch.no_grad()  # the path is data, not a graph (whatever requires grad)
def regularization_path(problem: Problem, radii: float | ArrayLike, *, param: str = "W", steps: int = 200,
                        loss: str = "logistic", m: int | None = None, seed: int = 0, candidates: int = 12,
                        starts: ArrayLike | None = None) -> Path:
    r"""The regularization path: :math:`W_R = \arg\min_{\|W\|_F \le R} L(W)` (param="W"), or :math:`(K_R, Q_R) =
    \arg\min_{\|K\|^2 + \|Q\|^2 \le 2R} L(KQ^\top)` (param="KQ", so that :math:`\|K_R Q_R^\top\|_* \le R`), for
    each radius R.

    param="W": Riemannian gradient descent on the sphere of each radius (the minimizer lies on it once R is
    large). param="KQ": projected gradient descent on :math:`W = KQ^\top` over :math:`\{\mathrm{rank} \le m,
    \|W\|_* \le R\}`, the set of products the (K, Q) budget allows (the factorization lemma); the factors returned
    are the balanced ones. Both warm start from the previous radius and take the exact gradient and a line search
    over ``candidates`` halving step sizes. Local methods on a non-convex problem: each follows one branch of
    constrained stationary points, which need not be the global minimizers. Initialization as ``gd``'s "uniform".

    A batch is not bit for bit a loop over its problems. Steps, step sizes and the stopping rule (``steps`` steps
    per radius) are per problem, but (1) "uniform" draws one tensor for the whole batch, so problem i starts from
    its slice i, not from the draw of the problem alone, and (2) torch's vectorized log and exp may round an
    entry differently by its place in memory. ``steps`` steps do not converge to round-off, so these differences
    remain at the size of the optimization error left, largest where a branch converges slowly: on chapter 2's
    20 problems (its radii and steps) the batched and single-problem W differ by up to 2e-3 R in Frobenius norm
    and 2e-6 in 1 - correlation, with the same tokens selected at the last radius.

    Parameters
    ----------
    problem : Problem
        The problems (a batch).
    radii : float or ArrayLike
        The radii R, increasing.
    param : {'W', 'KQ'}, default='W'
        The path of W, or of the factors (K, Q).
    steps : int, default=200
        Steps per radius.
    loss : str, default='logistic'
        A name of ``model.LOSSES``.
    m : int or None, default=None
        The width of K and Q (None: d).
    seed : int, default=0
        The seed of the "uniform" initialization.
    candidates : int, default=12
        The number of halving step sizes the line search tries.
    starts : ArrayLike or None, default=None
        S directions (e.g. Att-SVM solutions), shape (S, ..., d, d). At every radius the method then also
        restarts from R times each direction (normalized in the budget's norm; for "KQ" projected on rank
        :math:`\le m`), runs ``steps`` steps from each of these 1 + S points at once and keeps, per problem, the
        end with the lowest loss (the continuation wins ties). The result is the best of the starts tried, not a
        certified global minimizer; it costs 1 + S times as much.

    Returns
    -------
    Path
        The points at each radius; with ``starts``, ``Path.start`` says which start won (0: the continuation,
        k: ``starts[k - 1]``) and ``Path.excess`` holds :math:`L - L_{opt}` reached from each start, where
        :math:`L_{opt}` is the loss of full attention on the optimal tokens.

    Raises
    ------
    ValueError
        If an argument is invalid, e.g. radii not increasing or beyond ``MAX_RADIUS`` (the message names it).

    Examples
    --------
    >>> import torch
    >>> from attnsvm import data, train
    >>> problem = data.random_problem(n=2, T=3, d=2, seed=0)
    >>> path = train.regularization_path(problem, [0.5, 1.0, 2.0], steps=10)
    >>> norms = torch.linalg.matrix_norm(path.W)
    >>> [round(float(R), 4) for R in norms]
    [0.5, 1.0, 2.0]
    >>> bool((path.loss.diff() <= 0).all())
    True
    >>> best = train.regularization_path(problem, [0.5, 1.0, 2.0], steps=10, starts=path.W[-1:])
    >>> tuple(best.start.shape), tuple(best.excess.shape), bool((best.loss <= path.loss + 1e-12).all())
    ((3,), (3, 2), True)
    """
    problem = _checked_problem(problem, min_T=2, why=_TRAINING, needs_Z=True)
    param, loss = _option(param, "param", PARAMS), _option(loss, "loss", tuple(LOSSES))
    radii = _radii(radii)
    steps, candidates, seed = positive_int(steps, "steps"), positive_int(candidates, "candidates"), _seed(seed)
    d = problem.d
    m = d if m is None else positive_int(m, "m")
    budget(steps * radii.size * (candidates + 1), "steps * len(radii) * (candidates + 1)", MAX_STEPS,
           "loss evaluations (gradient steps times step sizes tried)")
    size, width = float(np.prod(problem.batch_shape, dtype=float)), min(m, d) if param == "KQ" else 0
    _memory_budget((candidates + 1) * size * (d * d + problem.n * problem.T), "candidates")
    _memory_budget(radii.size * size * (d * d + 2 * d * width + 1), "radii")
    starts = _starts(starts, problem, param, m)
    if starts is not None:
        size *= 1 + starts.shape[0]
        _memory_budget((candidates + 1) * size * (d * d + problem.n * problem.T), "starts")
    start = initial_parameters(problem, param, "uniform", m, seed)
    W = start[0] if param == "W" else start[0] @ start[1].transpose(-2, -1)
    blame = f"radii up to {radii[-1]:.3g} are too large for this problem (or its tokens are)"
    with _overflow("the path", blame, "pass smaller radii"):
        records = _follow(problem, radii, W, param, steps, loss, m, candidates, starts)
    W, losses, K, Q, won, excess = zip(*records)
    W, losses = torch.stack(W), torch.stack(losses)
    factors = {} if param == "W" else {"K": torch.stack(K), "Q": torch.stack(Q)}
    if starts is not None:
        factors.update(start=torch.stack(won), excess=torch.stack(excess))
    for name, value in dict(W=W, loss=losses, **factors).items():
        _finite(value, f"the path's {name}", blame, "pass smaller radii")
    return Path(radii=radii, W=W, loss=losses, **factors)


def _starts(starts, problem: Problem, param: str, m: int) -> torch.Tensor | None:
    """`starts` checked to be (S, *batch, d, d) non-zero directions, returned of unit norm in the budget's norm."""
    if starts is None:
        return None
    starts = as_tensor(starts, "starts").detach()
    d, batch = problem.d, problem.batch_shape
    if starts.ndim != 3 + len(batch) or starts.shape[0] < 1:
        raise ValueError(f"starts must have shape (S, *batch, d, d) = (S, {', '.join(map(str, batch + (d, d)))}) with "
                         f"S >= 1 (S directions per problem), got {tuple(starts.shape)}")
    require_shape(starts, "starts", (starts.shape[0],) + batch + (d, d), "S directions per problem")
    largest = starts.abs().amax((-2, -1), keepdim=True)  # scaled first: no overflow or underflow in the norm
    if not (largest > 0).all():
        raise ValueError("starts holds a zero matrix, which has no direction: pass non-zero directions")
    starts = starts / largest
    return starts / torch.linalg.matrix_norm(starts, "fro" if param == "W" else "nuc")[..., None, None]


def _follow(problem: Problem, radii: np.ndarray, W: torch.Tensor, param: str, steps: int, loss: str, m: int,
            candidates: int, starts: torch.Tensor | None = None) -> list[tuple]:
    """`regularization_path`'s (W, loss, K, Q, winning start, excess of each start) at each radius, from W."""
    if starts is not None:  # the problem repeated for the continuation and each start: batch (1 + S, *batch)
        wide = (1 + starts.shape[0],)
        problem = Problem(*(None if part is None else part.expand(wide + part.shape)
                            for part in (problem.X, problem.Y, problem.Z, problem.v)))
    u = _token_values(problem, problem.v)
    scores = problem.Y[..., None] * u

    def retract(W, R):
        """W moved back to the set of radius R (and the factors for "KQ")."""
        if param == "W":
            return R * W / W.norm(dim=(-2, -1), keepdim=True), None, None
        return _nuclear_ball(W, R, m)

    fractions = 2.0 ** -torch.arange(candidates, dtype=W.dtype, device=W.device)
    records = []
    for R in radii:
        W, K, Q = retract(W, R)
        if starts is not None:
            W = torch.cat([W[None], retract(R * starts, R)[0]])
        step = torch.full(W.shape[:-2], 0.5, dtype=W.dtype, device=W.device)  # relative to R, adapted per problem
        for _ in range(steps):
            G, _, grad = _weight_gradient(problem, W, loss, values=u)
            if param == "W":  # the tangent part of the gradient on the sphere
                G = G - (G * W).sum((-2, -1), keepdim=True) * W / R**2
            norm = G.norm(dim=(-2, -1), keepdim=True)
            direction = -G / torch.where(norm > 0, norm, 1.0)
            tries = (step[None] * fractions.reshape((-1,) + (1,) * step.ndim))[..., None, None]
            moved = torch.cat([W[None], retract(W + tries * R * direction, R)[0]])  # "stay" comes first
            scored = _excess_loss(problem, scores, moved, grad.probs.argmax(-1), loss)
            best = scored.argmin(0)
            W = moved.gather(0, best[(None, ...) + (None,) * 2].expand((1,) + W.shape))[0]
            taken = torch.where(best > 0, step * 2.0 ** -(best - 1).to(W.dtype), step * fractions[-1])
            step = torch.clamp(4 * taken, max=1.0)
        won = excess = None
        if starts is not None:  # keep the lowest loss, compared through the excess over the optimal tokens
            excess = _excess_loss(problem, scores, W, scores.argmax(-1), loss)
            won = excess.argmin(0)
            W = W.gather(0, won[(None, ...) + (None,) * 2].expand((1,) + W.shape[1:]))[0]
        if param == "KQ":
            W, K, Q = _nuclear_ball(W, R, m)  # W = K Q^T, with the balanced factors
        single = problem if starts is None else problem[0]
        records.append((W, _risk(LOSSES[loss], single, _outputs(single, W, None)), K, Q, won, excess))
    return records


def _radii(radii) -> np.ndarray:
    """`radii` checked to be one radius or a 1-D list of increasing radii > 0, as a float64 array."""
    if torch.is_tensor(radii):
        radii = as_tensor(radii, "radii").detach().numpy()
    try:
        values = np.atleast_1d(np.asarray(radii, dtype=object))
    except (TypeError, ValueError) as err:
        raise TypeError(f"radii must be a number or a list of numbers, got {type(radii).__name__}") from err
    if values.ndim != 1:
        raise ValueError(f"radii must be one radius or a 1-D list of radii, got an array of shape {values.shape}")
    radii = np.asarray([positive_float(R, "radii") for R in values])
    if radii.size == 0:
        raise ValueError("radii must hold at least one radius")
    if np.any(np.diff(radii) <= 0):
        raise ValueError("radii must be increasing: the path is followed from the smallest radius up")
    if radii[-1] > MAX_RADIUS:
        raise ValueError(f"radii must be at most {MAX_RADIUS:.3g} (R^2 overflows float64 beyond), got {radii[-1]:.3g}")
    return radii
