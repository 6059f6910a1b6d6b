"""The cone around a locally-optimal selection's Att-SVM direction (Chapter 4's local theorem, proved by reduction).

For a locally-optimal selection alpha, with A_it = (x_{i alpha_i} - x_it) z_i^T, W_hat = W^mm_alpha / ||W^mm_alpha||
and m = 1 / ||W^mm_alpha||, the cone lemma says: if corr(W, W_hat) >= 1 - zeta' and ||W|| >= R(eps, zeta'), then
<-grad L(W), W_hat> > 0 and <-grad L(W), W / ||W||> <= (1 + 2 eps) <-grad L(W), W_hat>. These functions compute the
lemma's constants and radii, the radii from which gradient descent (plain or normalized) provably stays in the cone
and converges in direction to W_hat, and the quantities of the lemma's three parts at given W (``ConeSides``). One
unbatched problem.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch
from numpy.typing import ArrayLike

from . import svm
from .data import Problem, _as_problem
from .model import _loss_kind
from .theory import _margins, _selection, _with_queries, locally_optimal, margins, support_tokens, token_scores

__all__ = ["Cone", "ConeSides", "cone_constants", "cone_sides"]


class Cone(NamedTuple):
    r"""The constants of the cone lemma for one problem, one locally-optimal selection and one loss.

    Parameters
    ----------
    W_mm : ndarray
        :math:`W^{mm}_\alpha`.
    m : float
        :math:`1/\|W^{mm}_\alpha\|`.
    A_max : float
        The largest :math:`\|A_{it}\|`.
    delta : float
        :math:`\min \mu_{it}(W^{mm}_\alpha) - 1` over the tokens off the support (inf if none).
    gap : float
        g, the smallest :math:`\gamma_{i\alpha_i} - \gamma_{it}` over the support tokens.
    spread : float
        :math:`\Gamma`, the largest :math:`\max_t \gamma_{it} - \min_t \gamma_{it}`.
    slope_min : float
        The smallest :math:`|\ell'|` on the score range I.
    slope_max : float
        The largest :math:`|\ell'|` on I.
    c_min : float
        slope_min :math:`g/(4n)`.
    c_max : float
        slope_max :math:`\Gamma/n`.
    n_support : int
        The number of support pairs :math:`(i, t \ne \alpha_i)`.
    n_other : int
        The number of other pairs.
    T : int
        Tokens per sequence.
    loss_drop : float
        :math:`D = \ell(\min I) - \ell(\max I) \ge L(W) - \inf L` for every W.
    zeta_max : float
        :math:`(m \min(1, \delta)/(4 A_{max}))^2`, the widest start cone the theorem allows.

    Examples
    --------
    >>> from attnsvm import data, theory
    >>> problem = data.random_problem(4, 5, 6, seed=0)
    >>> cone = theory.cone_constants(problem, theory.optimal_tokens(problem))
    >>> bool(0 < cone.zeta_max < 1 and cone.c_min <= cone.c_max)
    True
    """

    W_mm: np.ndarray
    m: float
    A_max: float
    delta: float
    gap: float
    spread: float
    slope_min: float
    slope_max: float
    c_min: float
    c_max: float
    n_support: int
    n_other: int
    T: int
    loss_drop: float
    zeta_max: float

    def radius(self, eps: float, zeta: float) -> float:
        r"""The radius :math:`R(\varepsilon, \zeta)`: the cone lemma holds with factor :math:`1 + 2\varepsilon` at
        every W with :math:`\mathrm{corr}(W, \hat W) \ge 1 - \zeta` and :math:`\|W\| \ge R`.

        Parameters
        ----------
        eps : float
            :math:`0 < \varepsilon \le 1`.
        zeta : float
            :math:`0 < \zeta \le 2\zeta_{max}` (so that :math:`A_{max}\sqrt{2\zeta} \le m \min(1, \delta)/2`).

        Returns
        -------
        float
            R.

        Raises
        ------
        ValueError
            If eps or zeta is out of range.

        Examples
        --------
        >>> from attnsvm import data, theory
        >>> problem = data.random_problem(4, 5, 6, seed=0)
        >>> cone = theory.cone_constants(problem, theory.optimal_tokens(problem))
        >>> bool(cone.radius(0.5, cone.zeta_max) > cone.radius(1.0, cone.zeta_max) > 0)  # smaller eps, larger R
        True
        """
        eps = _in_range(eps, "eps", 0.0, 1.0)
        zeta = _in_range(zeta, "zeta", 0.0, 2 * self.zeta_max)
        m = self.m
        terms = [2 / m * math.log((self.T - 1) * max(2.0, 2 * self.spread / self.gap)), 1 / m,
                 1 / (eps * m) * math.log(2 * (1 + eps) * self.n_support * self.c_max / (eps * self.c_min))]
        if self.n_other:
            terms.append(2 / (m * self.delta) * math.log(
                4 * (1 + eps) * self.n_other * self.c_max * self.A_max / (eps * self.c_min * m)))
        return max(terms)

    def start_radius(self, zeta: float, eta: float, *, normalized: bool) -> float:
        r"""The start radius :math:`R_0`: gradient descent with step :math:`\eta` from any W(0) with
        :math:`\mathrm{corr}(W(0), \hat W) \ge 1 - \zeta` and :math:`\|W(0)\| \ge R_0` stays at correlation
        :math:`\ge 1 - 2\zeta` and converges in direction to :math:`\hat W`.

        Parameters
        ----------
        zeta : float
            :math:`0 < \zeta \le \zeta_{max}`.
        eta : float
            The step size (plain: :math:`\eta \le 1/L_W`; normalized: any :math:`\eta > 0`).
        normalized : bool
            Normalized gradient descent, or plain.

        Returns
        -------
        float
            :math:`R_0`.

        Raises
        ------
        ValueError
            If zeta or eta is out of range.

        Examples
        --------
        >>> from attnsvm import data, theory
        >>> problem = data.random_problem(4, 5, 6, seed=0)
        >>> cone = theory.cone_constants(problem, theory.optimal_tokens(problem))
        >>> zeta = cone.zeta_max
        >>> bool(cone.start_radius(zeta, 0.1, normalized=True) >= cone.radius(zeta / 2, 2 * zeta) / (1 - zeta))
        True
        """
        zeta = _in_range(zeta, "zeta", 0.0, self.zeta_max)
        eta = _in_range(eta, "eta", 0.0, math.inf)
        second = eta / (self.slope() * zeta) if normalized else math.sqrt(eta * self.loss_drop / zeta)
        return max(self.radius(zeta / 2, 2 * zeta), second) / (1 - zeta)

    def slope(self) -> float:
        r"""The slope :math:`q = m/(2 A_{max})`: in the cone, every normalized step raises
        :math:`\langle W, \hat W\rangle` by at least :math:`q\eta`.

        Returns
        -------
        float
            q.

        Examples
        --------
        >>> from attnsvm import data, theory
        >>> problem = data.random_problem(4, 5, 6, seed=0)
        >>> cone = theory.cone_constants(problem, theory.optimal_tokens(problem))
        >>> bool(0 < cone.slope() <= 0.5)  # m <= A_max
        True
        """
        return self.m / (2 * self.A_max)


def _in_range(value: object, name: str, low: float, high: float) -> float:
    """`value` as a float in (low, high] (high excluded when infinite), else a ValueError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = float(value)
    if not (low < value <= high and math.isfinite(value)):
        raise ValueError(f"{name} must be in ({low:g}, {high:g}], got {value!r}")
    return value


def _checked(problem: object, alpha: ArrayLike) -> tuple[Problem, torch.Tensor]:
    """(problem, alpha) for one problem with T >= 2 and a locally-optimal alpha, else a ValueError."""
    problem = _with_queries(_as_problem(problem))
    if problem.batch_shape:
        raise ValueError(f"problem must be one problem, got a batch of shape {tuple(problem.batch_shape)}: pass "
                         "problem[b]")
    alpha = _selection(problem, alpha)
    if not locally_optimal(problem, alpha):
        raise ValueError("alpha is not locally optimal for problem (its Att-SVM is infeasible, or a support token "
                         "scores at least as high as the selected token): the cone theorem needs a locally-optimal "
                         "selection; check it with theory.locally_optimal")
    return problem, alpha


def cone_constants(problem: Problem, alpha: ArrayLike, loss: str = "logistic") -> Cone:
    r"""The constants of the cone lemma for a problem, a locally-optimal selection and a loss: see ``Cone``.

    Parameters
    ----------
    problem : Problem
        One problem.
    alpha : ArrayLike
        A locally-optimal selection, shape (n,).
    loss : str, default='logistic'
        A name of ``model.LOSSES``.

    Returns
    -------
    Cone
        The constants.

    Raises
    ------
    ValueError
        If alpha is not locally optimal, or :math:`|\ell'|` under- or overflows on the score range.

    Examples
    --------
    >>> from attnsvm import data, theory
    >>> problem = data.random_problem(4, 5, 6, seed=0)
    >>> cone = theory.cone_constants(problem, theory.optimal_tokens(problem), loss="exponential")
    >>> bool(cone.delta > 0 and cone.gap > 0 and cone.n_support >= 1)
    True
    """
    kind = _loss_kind(loss)
    problem, alpha = _checked(problem, alpha)
    W_mm = svm.att_svm(problem.X, problem.Z, alpha)
    W_mm = np.asarray(W_mm.numpy() if isinstance(W_mm, torch.Tensor) else W_mm, dtype=float)
    a = alpha.numpy()
    off = np.arange(problem.T)[None, :] != a[:, None]
    support = support_tokens(problem, W_mm, alpha)
    mu = margins(problem, W_mm, alpha)
    X, Z = problem.X.numpy(), problem.Z.numpy()
    A = (X[np.arange(problem.n), a][:, None, :] - X)[..., :, None] * Z[:, None, None, :]  # A_it (n, T, d, d)
    gamma = token_scores(problem).numpy()
    ends = torch.tensor([gamma.min(), gamma.max()], dtype=torch.float64)
    slopes = torch.exp(kind.log_slope(ends)).numpy()
    if not (slopes.min() >= np.finfo(float).tiny and slopes.max() < math.inf):
        raise ValueError(f"problem has scores in [{ends[0]:.4g}, {ends[1]:.4g}], where |l'| of the {loss} loss under- "
                         "or overflows float64: scale the tokens or the head v down")
    values = kind.value(ends).numpy()
    m = 1 / float(np.linalg.norm(W_mm))
    A_max = float(np.linalg.norm(A[off], axis=(-2, -1)).max())
    other = off & ~support
    delta = float((mu[other] - 1).min()) if other.any() else math.inf
    gap = float((gamma[np.arange(problem.n), a][:, None] - gamma)[support].min())
    spread = float((gamma.max(-1) - gamma.min(-1)).max())
    n = problem.n
    # |l'| is monotone on I for the library's losses, so its extremes on I are at the ends
    slope_min, slope_max = float(slopes.min()), float(slopes.max())
    zeta_max = (m * min(1.0, delta) / (4 * A_max)) ** 2
    return Cone(W_mm, m, A_max, delta, gap, spread, slope_min, slope_max, slope_min * gap / (4 * n),
                slope_max * spread / n, int(support.sum()), int(other.sum()), problem.T,
                float(values[0] - values[1]), zeta_max)


class ConeSides(NamedTuple):
    r"""The quantities of the cone lemma at W (arrays over W's leading dimensions).

    Each gradient term is multiplied by :math:`e^{\mathrm{shift}}`, with shift = :math:`\min \mu_{it}(W)` the
    smallest margin (far out in the cone the gradient underflows float64, its scaled terms do not).

    Parameters
    ----------
    along : ndarray
        :math:`\langle -\nabla L(W), \hat W\rangle`.
    own : ndarray
        :math:`\langle -\nabla L(W), W/\|W\|\rangle`.
    corr : ndarray
        :math:`\mathrm{corr}(W, \hat W)`.
    shift : ndarray
        The smallest margin.
    support : ndarray
        :math:`P = \sum` over the support pairs of :math:`c_{it}(W) e^{-\mu_{it}(W)} m` (parts 1 and 3 of the lemma
        bound ``along`` and ``gradient`` by it).
    gradient : ndarray
        :math:`\|\nabla L(W)\|`.

    Examples
    --------
    >>> from attnsvm import data, theory
    >>> problem = data.random_problem(4, 5, 6, seed=0)
    >>> opt = theory.optimal_tokens(problem)
    >>> cone = theory.cone_constants(problem, opt)
    >>> sides = theory.cone_sides(problem, 5000 * cone.W_mm, opt)
    >>> bool(sides.along >= 7 / 8 * sides.support and sides.gradient <= 9 / 8 * cone.A_max / cone.m * sides.support)
    True
    """

    along: np.ndarray
    own: np.ndarray
    corr: np.ndarray
    shift: np.ndarray
    support: np.ndarray
    gradient: np.ndarray


def cone_sides(problem: Problem, W: ArrayLike, alpha: ArrayLike, loss: str = "logistic") -> ConeSides:
    r"""The cone lemma's quantities at W: both sides of its inequalities, scaled by :math:`e^s` with s the smallest
    margin, and the correlation that places W in a cone.

    Computed from the exact gradient :math:`-\nabla L = \sum c_{it}(W) e^{-\mu_{it}(W)} A_{it}`, with
    :math:`\bar\gamma_i - \gamma_{it}` summed pairwise.

    Parameters
    ----------
    problem : Problem
        One problem.
    W : ArrayLike
        Non-zero matrices, shape (..., d, d).
    alpha : ArrayLike
        A locally-optimal selection, shape (n,).
    loss : str, default='logistic'
        A name of ``model.LOSSES``.

    Returns
    -------
    ConeSides
        The quantities.

    Raises
    ------
    ValueError
        If W has a zero matrix, or alpha is not locally optimal.

    Examples
    --------
    >>> from attnsvm import data, theory
    >>> problem = data.random_problem(4, 5, 6, seed=0)
    >>> opt = theory.optimal_tokens(problem)
    >>> W_mm = theory.cone_constants(problem, opt).W_mm
    >>> sides = theory.cone_sides(problem, 5000 * W_mm, opt)  # on the axis: both sides agree
    >>> bool(sides.along > 0 and abs(sides.own / sides.along - 1) < 1e-12 and abs(sides.corr - 1) < 1e-12)
    True
    """
    kind = _loss_kind(loss)
    problem, alpha = _checked(problem, alpha)
    W = torch.as_tensor(np.asarray(W, dtype=float))
    if W.ndim < 2 or W.shape[-2:] != (problem.d, problem.d):
        raise ValueError(f"W must have shape (..., {problem.d}, {problem.d}), got {tuple(W.shape)}")
    norms = W.norm(dim=(-2, -1))
    if not (norms > 0).all():
        raise ValueError("W must be non-zero: the cone is defined by the direction W / ||W||")
    W_mm = torch.as_tensor(np.asarray(svm.att_svm(problem.X, problem.Z, alpha), dtype=float))
    W_hat = W_mm / W_mm.norm()
    off = torch.arange(problem.T) != alpha[:, None]
    mu = _margins(problem, W, alpha)  # mu_it(W), 0 at alpha_i
    shift = mu.masked_fill(~off, math.inf).flatten(-2).amin(-1)
    gamma = token_scores(problem)
    s = torch.softmax(-mu, -1)  # the attention: logits differ from -mu_it by a per-sequence constant
    gbar = (s * gamma).sum(-1)
    pair = (s[..., :, None] * (gamma[:, :, None] - gamma[:, None, :])).sum(-2)  # gbar_i - gamma_it
    s_alpha = s.gather(-1, alpha.expand(s.shape[:-1])[..., None])
    c = torch.exp(kind.log_slope(gbar))[..., None] * s_alpha * pair / problem.n
    w = torch.where(off, c * torch.exp(-(mu - shift[..., None, None])), 0.0)
    along = (w * _margins(problem, W_hat, alpha)).sum((-2, -1))
    own = (w * mu).sum((-2, -1)) / norms
    corr = (W * W_hat).sum((-2, -1)) / norms
    support = torch.as_tensor(support_tokens(problem, W_mm, alpha))
    P = (w * support).sum((-2, -1)) / W_mm.norm()
    X = problem.X
    pulls = X.gather(1, alpha[:, None, None].expand(-1, 1, problem.d)) - X  # x_{i alpha_i} - x_it (n, T, d)
    G = torch.einsum("...it,ita,ib->...ab", w, pulls, problem.Z)  # sum w_it A_it
    sides = ConeSides(along, own, corr, shift, P, G.norm(dim=(-2, -1)))
    if not all(torch.isfinite(value).all() for value in sides):
        raise ValueError("the margins of W overflow float64: scale W down")
    return ConeSides(*(value.numpy() for value in sides))
