"""The reduction of the central theorem to the linear case (the page "The central theorem, proved by reduction").

Near selection, -grad L(W) = sum_{i, t != o_i} c*_it r_it(W) e^{-mu_it(W)} A_it with A_it = (x_{i o_i} - x_it) z_i^T,
mu_it(W) = <W, A_it> and o_i the optimal token: the gradient of the weighted exponential loss
Phi(W) = sum c*_it e^{-mu_it(W)} up to weight ratios r_it(W) -> 1. These functions compute the limiting weights
c*_it, Phi, the ratios r_it, the attention leaked off the optimal tokens eps_i(W) = 1 - s_{i o_i}(W), and the
constants of the selected region (K, eps_bar and the selection level E_0). One unbatched problem with T >= 2
and a unique optimal token per sequence; W may carry leading dimensions (e.g. the iterates of a run).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch
from numpy.typing import ArrayLike

from . import svm
from .data import Problem, _as_problem
from .model import _loss_kind, logits
from ._checks import positive_float
from .theory import _margins, _with_queries, optimal_tokens, support_tokens, token_scores

__all__ = ["Reduction", "ResidualOffset", "leak", "limiting_weights", "reduction_constants", "residual_offset",
           "surrogate", "weight_ratios"]

# Lambda(top): a Lipschitz constant of log|l'| on an interval whose right end is `top` ((log sigma(-x))' = -sigma(x))
_LOG_SLOPE_LIPSCHITZ = {"logistic": lambda top: (math.exp(top) / (1 + math.exp(top)) if top < 0  # sigma(top)
                                                  else 1 / (1 + math.exp(-top))),
                        "exponential": lambda top: 1.0, "linear": lambda top: 0.0}


class Reduction(NamedTuple):
    r"""The constants of the reduction for one problem and one loss (the page's notation table).

    Parameters
    ----------
    optimal : ndarray
        The optimal tokens :math:`o_i`, shape (n,).
    gaps : ndarray
        :math:`\Delta_{it} = \gamma_{io_i} - \gamma_{it}`, shape (n, T), 0 at :math:`o_i`.
    weights : ndarray
        :math:`c^\star_{it}`, shape (n, T), 0 at :math:`o_i`.
    delta_min : float
        The smallest gap.
    delta_max : float
        The largest gap.
    slope_min : float
        The smallest :math:`|\ell'|` on the score range I.
    slope_max : float
        The largest :math:`|\ell'|` on I.
    log_slope_lipschitz : float
        :math:`\Lambda`, a Lipschitz constant of :math:`\log|\ell'|` on I.
    K : float
        :math:`1 + \delta_{max}/\delta_{min} + \Lambda\delta_{max} e^{\Lambda\delta_{max}/4}`.
    eps_bar : float
        :math:`\bar\varepsilon = 1/(2K)`.
    E_0 : float
        slope_min :math:`\delta_{min}\bar\varepsilon/n`, the selection level.

    Examples
    --------
    >>> from attnsvm import data, theory
    >>> problem = data.equal_scores_problem(1, 3, 4, seed=0)  # one sequence, both gaps equal
    >>> constants = theory.reduction_constants(problem, loss="linear")  # Lambda = 0: K = 1 + 1
    >>> float(constants.K), float(constants.eps_bar)
    (2.0, 0.25)
    """

    optimal: np.ndarray
    gaps: np.ndarray
    weights: np.ndarray
    delta_min: float
    delta_max: float
    slope_min: float
    slope_max: float
    log_slope_lipschitz: float
    K: float
    eps_bar: float
    E_0: float


def _checked(problem: object) -> tuple[Problem, torch.Tensor, torch.Tensor]:
    """(problem, scores gamma (n, T), optimal tokens o (n,)) for one problem with queries, T >= 2 and unique
    optimal tokens, else a ValueError naming `problem`."""
    problem = _with_queries(_as_problem(problem))
    if problem.batch_shape:
        raise ValueError(f"problem must be one problem, got a batch of shape {tuple(problem.batch_shape)}: pass "
                         "problem[b]")
    if problem.T < 2:
        raise ValueError("problem has T = 1 token per sequence: the reduction needs T >= 2 (with one token the "
                         "attention does not depend on W)")
    gamma = token_scores(problem)
    if ((gamma == gamma.amax(-1, keepdim=True)).sum(-1) > 1).any():
        raise ValueError("problem has a sequence whose optimal token is not unique (tied top scores gamma_it): "
                         "the reduction needs a unique optimal token per sequence; perturb the tokens or the head")
    return problem, gamma, optimal_tokens(problem)


def _gaps(gamma: torch.Tensor, o: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(Delta_it with 0 at o_i, mask of t != o_i)."""
    off = torch.arange(gamma.shape[-1]) != o[:, None]
    top = gamma.gather(-1, o[:, None])
    return torch.where(off, top - gamma, 0.0), off


class _Weights(NamedTuple):
    """The checked problem, o, the gaps and their mask t != o_i, log c*_it (-inf at o_i), I's ends and |l'| there."""

    problem: Problem
    o: torch.Tensor
    gaps: torch.Tensor
    off: torch.Tensor
    log_c: torch.Tensor
    ends: torch.Tensor
    slopes: torch.Tensor


def _log_weights(problem: Problem, loss: str) -> _Weights:
    """The limiting weights in the log domain, else a ValueError naming `problem` where |l'| under- or overflows on
    the score range I."""
    kind = _loss_kind(loss)
    problem, gamma, o = _checked(problem)
    ends = torch.stack([gamma.min(), gamma.max()])  # the score range I; |l'| is monotone for the library's losses
    slopes = torch.exp(kind.log_slope(ends))
    if not (slopes.min() >= torch.finfo(slopes.dtype).tiny and slopes.max() < math.inf):
        raise ValueError(f"problem has scores in [{float(ends[0]):.4g}, {float(ends[1]):.4g}], where |l'| of the "
                         f"{loss} loss under- or overflows float64 (the limiting weights and the selection level "
                         "would be 0 or infinite): scale the tokens or the head v down")
    gaps, off = _gaps(gamma, o)
    log_c = kind.log_slope(gamma.gather(-1, o[:, None])) + torch.log(gaps) - math.log(problem.n)
    return _Weights(problem, o, gaps, off, torch.where(off, log_c, -torch.inf), ends, slopes)


def limiting_weights(problem: Problem, loss: str = "logistic") -> np.ndarray:
    r"""The limiting weights :math:`c^\star_{it} = |\ell'(\gamma_{io_i})|\,\Delta_{it}/n`, 0 at the optimal token.

    They are the weights that the gradient's weights :math:`c_{it}(W)` tend to as the attention concentrates on the
    optimal tokens.

    Parameters
    ----------
    problem : Problem
        One problem.
    loss : str, default='logistic'
        A name of ``model.LOSSES``.

    Returns
    -------
    ndarray
        :math:`c^\star`, shape (n, T).

    Raises
    ------
    ValueError
        If the problem is a batch or its optimal tokens are not unique.

    Examples
    --------
    >>> from attnsvm import data, theory
    >>> problem = data.Problem([[[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]], [1.0], [[1.0, 0.0]], [1.0, 0.0])
    >>> theory.limiting_weights(problem, loss="exponential").round(4).tolist()  # |l'(1)| = e^{-1}
    [[0.0, 0.3679, 0.7358]]
    """
    return torch.exp(_log_weights(problem, loss).log_c).numpy()


def reduction_constants(problem: Problem, loss: str = "logistic") -> Reduction:
    """The constants of the selected region for a problem and a loss: see ``Reduction``.

    Parameters
    ----------
    problem : Problem
        One problem.
    loss : str, default='logistic'
        A name of ``model.LOSSES``.

    Returns
    -------
    Reduction
        The constants.

    Raises
    ------
    ValueError
        If the problem is a batch or its optimal tokens are not unique.

    Examples
    --------
    >>> from attnsvm import data, theory
    >>> problem = data.equal_scores_problem(3, 4, 6, seed=1)
    >>> constants = theory.reduction_constants(problem)
    >>> bool(0 < constants.E_0 < constants.eps_bar <= 0.25)
    True
    """
    problem, o, gaps, off, log_c, ends, slopes = _log_weights(problem, loss)
    delta_min, delta_max = float(gaps[off].min()), float(gaps[off].max())
    lam = _LOG_SLOPE_LIPSCHITZ[loss](float(ends[1]))
    try:
        K = 1 + delta_max / delta_min + lam * delta_max * math.exp(lam * delta_max / 4)
    except OverflowError:
        K = math.inf
    if math.isinf(K):
        raise ValueError(f"problem has a largest gap Delta_max = {delta_max:.4g} with Lambda = {lam:.3g}, for which "
                         "K = 1 + Delta_max/Delta_min + Lambda Delta_max e^{Lambda Delta_max/4} overflows float64; "
                         "scale the tokens or the head v down")
    eps_bar = 1 / (2 * K)
    E_0 = float(slopes.min()) * delta_min * eps_bar / problem.n
    if not E_0 >= np.finfo(float).tiny:
        raise ValueError(f"problem's selection level E_0 = |l'|_min Delta_min eps_bar / n underflows float64 (K = "
                         f"{K:.3g}, smallest |l'| on the score range {float(slopes.min()):.3g}); scale the tokens or "
                         "the head v down")
    return Reduction(o.numpy(), gaps.numpy(), torch.exp(log_c).numpy(), delta_min, delta_max,
                     float(slopes.min()), float(slopes.max()), lam, K, eps_bar, E_0)


def leak(problem: Problem, W: ArrayLike) -> np.ndarray:
    r"""The attention leaked off the optimal token of each sequence, :math:`\varepsilon_i(W) = 1 - s_{io_i}(W) =
    \sum_{t \ne o_i} s_{it}(W)`.

    Accurate when tiny (summed from the other tokens, never as 1 - s).

    Parameters
    ----------
    problem : Problem
        The problems (a batch).
    W : ArrayLike
        The key-query matrix, (d, d) or (..., d, d).

    Returns
    -------
    ndarray
        :math:`\varepsilon_i(W)`, shape (..., n).

    Raises
    ------
    ValueError
        If W does not fit the problem.

    Examples
    --------
    >>> from attnsvm import data, svm, theory
    >>> problem = data.equal_scores_problem(2, 3, 4, seed=0)
    >>> W_mm = svm.att_svm(problem, theory.optimal_tokens(problem))
    >>> eps = theory.leak(problem, 40 * W_mm)  # every margin >= 40: eps_i <= (T - 1) e^{-40}
    >>> bool((eps > 0).all() and (eps <= 2 * 2.0**-57).all())
    True
    """
    problem, _, o = _checked(problem)
    a = logits(problem, W).detach()
    log_s = a - torch.logsumexp(a, -1, keepdim=True)
    log_s = log_s.masked_fill(torch.arange(problem.T) == o[:, None], -torch.inf)
    return torch.exp(torch.logsumexp(log_s, -1)).numpy()


def surrogate(problem: Problem, W: ArrayLike, loss: str = "logistic", *, log: bool = False) -> np.ndarray:
    r"""The surrogate :math:`\Phi(W) = \sum_{i,\, t \ne o_i} c^\star_{it} e^{-\mu_{it}(W)}`, the weighted exponential
    loss on the matrices :math:`A_{it}`.

    Parameters
    ----------
    problem : Problem
        One problem.
    W : ArrayLike
        Matrices, shape (..., d, d).
    loss : str, default='logistic'
        A name of ``model.LOSSES``.
    log : bool, default=False
        Return :math:`\log\Phi`, accurate where :math:`\Phi` under- or overflows.

    Returns
    -------
    ndarray
        :math:`\Phi(W)` (or its log), shape (...).

    Raises
    ------
    ValueError
        If W does not fit the problem.

    Examples
    --------
    >>> import numpy as np
    >>> from attnsvm import data, svm, theory
    >>> problem = data.equal_scores_problem(2, 3, 4, seed=0)
    >>> W_mm = svm.att_svm(problem, theory.optimal_tokens(problem))
    >>> c = theory.limiting_weights(problem)
    >>> Phi = theory.surrogate(problem, 2 * W_mm)  # every margin >= 2, and exactly 2 at the support tokens
    >>> bool(Phi <= np.exp(-2) * c.sum())
    True
    """
    if not isinstance(log, bool):
        raise TypeError(f"log must be True or False, got {type(log).__name__}")
    w = _log_weights(problem, loss)
    terms = torch.where(w.off, w.log_c - _margins(w.problem, W, w.o), -torch.inf)
    log_phi = torch.logsumexp(terms.flatten(-2), -1)
    return (log_phi if log else torch.exp(log_phi)).numpy()


def weight_ratios(problem: Problem, W: ArrayLike, loss: str = "logistic") -> np.ndarray:
    r"""The ratios :math:`r_{it}(W) = c_{it}(W)/c^\star_{it} = \frac{|\ell'(\bar\gamma_i)|}{|\ell'(\gamma_{io_i})|}
    s_{io_i} (\bar\gamma_i - \gamma_{it})/\Delta_{it}`, 1 at the optimal token, where
    :math:`\bar\gamma_i = \sum_t s_{it}\gamma_{it}`.

    Then :math:`-\nabla L(W) = \sum_{i,\, t \ne o_i} c^\star_{it} r_{it} e^{-\mu_{it}} A_{it}`.
    :math:`\bar\gamma_i - \gamma_{it}` is summed pairwise, :math:`\sum_\tau s_{i\tau}(\gamma_{i\tau} -
    \gamma_{it})`, so it does not cancel when :math:`s_{io_i}` is tiny.

    Parameters
    ----------
    problem : Problem
        One problem.
    W : ArrayLike
        Matrices, shape (..., d, d).
    loss : str, default='logistic'
        A name of ``model.LOSSES``.

    Returns
    -------
    ndarray
        :math:`r_{it}(W)`, shape (..., n, T).

    Raises
    ------
    ValueError
        If W does not fit the problem.

    Examples
    --------
    >>> from attnsvm import data, svm, theory
    >>> problem = data.equal_scores_problem(2, 3, 4, seed=0)
    >>> W_mm = svm.att_svm(problem, theory.optimal_tokens(problem))
    >>> r = theory.weight_ratios(problem, 30 * W_mm)  # attention almost one-hot: ratios near 1
    >>> bool(abs(r - 1).max() < 1e-11)
    True
    """
    kind = _loss_kind(loss)
    problem, gamma, o = _checked(problem)
    gaps, off = _gaps(gamma, o)
    s = torch.softmax(logits(problem, W).detach(), -1)
    gbar = (s * gamma).sum(-1)
    pair = (s[..., :, None] * (gamma[:, :, None] - gamma[:, None, :])).sum(-2)  # gbar_i - gamma_it
    top = gamma.gather(-1, o[:, None])[:, 0]
    s_opt = s.gather(-1, o.expand(s.shape[:-1])[..., None])[..., 0]
    factor = torch.exp(kind.log_slope(gbar) - kind.log_slope(top)) * s_opt
    return torch.where(off, factor[..., None] * pair / torch.where(off, gaps, 1.0), 1.0).numpy()


class ResidualOffset(NamedTuple):
    r"""Hypothesis :math:`(H_{att})` of the central theorem's residual bound, checked for one problem and one step
    :math:`\eta`.

    Parameters
    ----------
    W_tilde : ndarray
        The least-norm solution (d, d) of :math:`\langle W, A_{it}\rangle = \log(\eta c^\star_{it}/\lambda_{it})`
        over the support tokens.
    support : ndarray
        The support tokens of :math:`W^{mm}`, shape (n, T).
    rank : int
        The rank of their matrices :math:`A_{it}` (their number, as :math:`(H_{att})` asks).
    min_multiplier : float
        The smallest KKT multiplier :math:`\lambda_{it}` on the support (positive).

    Examples
    --------
    >>> from attnsvm import data, theory
    >>> H = theory.residual_offset(data.equal_scores_problem(3, 4, 6, seed=1), 1.0)
    >>> H.W_tilde.shape, bool(H.rank == H.support.sum() and H.min_multiplier > 0)
    ((6, 6), True)
    """

    W_tilde: np.ndarray
    support: np.ndarray
    rank: int
    min_multiplier: float


def residual_offset(problem: Problem, eta: float, loss: str = "logistic") -> ResidualOffset:
    r"""Hypothesis :math:`(H_{att})` for a problem and the step :math:`\eta`, and the offset :math:`\tilde W` it
    defines.

    The support matrices :math:`A_{it}` of the optimal tokens' Att-SVM must be linearly independent and their
    multipliers positive.

    Parameters
    ----------
    problem : Problem
        One problem.
    eta : float
        The step size, > 0.
    loss : str, default='logistic'
        A name of ``model.LOSSES``.

    Returns
    -------
    ResidualOffset
        :math:`\tilde W` and what it was checked on.

    Raises
    ------
    ValueError
        If :math:`(H_{att})` fails (the message says which part).

    Examples
    --------
    >>> import numpy as np
    >>> from attnsvm import data, svm, theory
    >>> problem = data.equal_scores_problem(3, 4, 6, seed=1)
    >>> H = theory.residual_offset(problem, 0.5)
    >>> o = theory.optimal_tokens(problem)
    >>> A = svm.constraint_matrix(problem, o).reshape(-1, 6, 6)  # rows: the pairs (i, t != o_i)
    >>> off = theory.limiting_weights(problem) > 0  # the pairs (i, t != o_i)
    >>> on = H.support[off]
    >>> _, lam = svm.att_svm(problem, o, return_multipliers=True)
    >>> u = np.einsum("de,kde->k", H.W_tilde, A[on])
    >>> c = theory.limiting_weights(problem)[off][on]
    >>> bool(np.allclose(u, np.log(0.5 * c / lam[off][on]), atol=1e-10) and H.rank == on.sum())
    True
    """
    eta = positive_float(eta, "eta")
    w = _log_weights(problem, loss)
    problem, o, off = w.problem, w.o, w.off.numpy()
    W_mm, lam = svm.att_svm(problem, o, return_multipliers=True)
    support = support_tokens(problem, W_mm, o)
    on = support[off]  # the support, in the order of the rows of the constraint matrix
    A = svm.constraint_matrix(problem, o)[on]
    rank, multipliers = int(np.linalg.matrix_rank(A)), lam[off][on]
    if rank < on.sum():
        raise ValueError(f"(H_att) fails for problem: its {on.sum()} support matrices A_it have rank {rank}, so they "
                         "are linearly dependent and the offset W_tilde is not determined (the residual bound of the "
                         "central theorem does not apply)")
    if not (multipliers > 0).all():
        raise ValueError(f"(H_att) fails for problem: {int((multipliers <= 0).sum())} support token(s) have KKT "
                         "multiplier 0, where log(eta c*_it / lambda_it) is undefined (the residual bound of the "
                         "central theorem does not apply)")
    rhs = math.log(eta) + w.log_c.numpy()[off][on] - np.log(multipliers)
    W_tilde = np.linalg.lstsq(A, rhs, rcond=None)[0].reshape(problem.d, problem.d)
    return ResidualOffset(W_tilde, support, rank, float(multipliers.min()))
