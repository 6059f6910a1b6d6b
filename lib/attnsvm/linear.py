"""Linear classifiers on separable data, the prelude's science: the hard-margin SVM and gradient descent on the
exponential and logistic losses, with the quantities its proofs are about.

With margins m_i(w) = y_i x_i^T w and the empirical loss L(w) = (1/n) sum_i l(m_i(w)), l(m) = exp(-m)
("exponential") or log(1 + exp(-m)) ("logistic"): ``svm`` solves min ||w|| s.t. every m_i(w) >= 1 (w_hat, its
dual multipliers alpha and support vectors); ``gd`` runs gradient descent, plain or normalized (step
-lr grad L / ||grad L||), exact however small the loss gets (its weights and log-loss are computed in log space);
``smoothness`` is the step bound of the prelude's descent lemma; ``offset`` and ``residual`` are the finite part
w_tilde and the residual rho(t) = w(t) - w_hat log t of the implicit-bias theorem. Arrays are numpy float64; X is
(..., n, d), y (..., n) with entries +-1, a weight vector w (..., d); functions broadcast over leading dimensions.

Examples
--------
>>> from attnsvm import linear
>>> X, y = linear.separable(6, 2, seed=0)
>>> sol = linear.svm(X, y)
>>> run = linear.gd(X, y, lr=1.0, steps=1000, record_every=1000)
>>> bool(linear.normalized_margin(X, y, run.w[-1]) <= sol.margin + 1e-12)
True
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from itertools import combinations
from math import gcd

import numba
import numpy as np
from numpy.typing import ArrayLike

from ._checks import (as_tensor, boolean, budget, finite_result, memory, option, positive_float, positive_int,
                      seed as checked_seed)
from .model import MAX_RECORDS, MAX_STEPS
from .svm import GAP_TOL, MAX_NORM, InfeasibleSVM, SolverError, soft_margin_svm

__all__ = ["SVM", "Run", "separable", "svm", "margins", "normalized_margin", "log_loss", "gradient", "hessian",
           "weights", "smoothness", "gd", "offset", "residual", "LOSSES", "SCHEDULES", "ACTIVE_TOL", "NEAR_MAX",
           "NEAR_TOL", "EXACT_MAX", "OFFSET_TOL"]

LOSSES = ("exponential", "logistic")
SCHEDULES = ("constant", "sqrt")  # step lr, or lr / sqrt(t + 1) at step t
ACTIVE_TOL = 1e-6  # a multiplier above ACTIVE_TOL times the largest is positive: its point is on the margin
NEAR_MAX = 12  # svm: where its walk fails, every face of at most this many points near the margin is tried
NEAR_TOL = 1e-10  # offset: a point whose margin is this close to 1 may be a support vector or not, at float64
EXACT_MAX = 30  # offset: the most points near the margin whose support it decides in exact arithmetic
OFFSET_TOL = 1e-8  # offset: sum_i alpha_i y_i x_i over the support must give solution.w to this relative accuracy
# (the exact solver's to ~1e-12; svm(solver="clarabel") returns the face's w_S, within its solution's accuracy)


@dataclass(frozen=True)
class SVM:
    r"""The hard-margin SVM of separable data.

    Parameters
    ----------
    w : ndarray
        The solution :math:`\hat w`, shape (..., d).
    alpha : ndarray
        Dual multipliers, shape (..., n): :math:`\hat w = \sum_i \alpha_i y_i x_i`, :math:`\alpha \ge 0`, zero off
        the support.
    support : ndarray
        The points on the margin, :math:`m_i(\hat w) = 1` up to the accuracy of the margins, shape (..., n) (a
        support vector may have :math:`\alpha_i = 0`; see ``svm``).
    margin : ndarray
        :math:`\gamma = 1/\|\hat w\|`, shape (...).

    Examples
    --------
    >>> from attnsvm import linear
    >>> sol = linear.svm([[1.0, 0.0], [1.0, 1.0]], [1.0, 1.0])  # both points on the margin, one with alpha = 0
    >>> sol.w.round(12).tolist(), sol.alpha.round(12).tolist(), sol.support.tolist(), round(float(sol.margin), 12)
    ([1.0, 0.0], [1.0, 0.0], [True, True], 1.0)
    """

    w: np.ndarray
    alpha: np.ndarray
    support: np.ndarray
    margin: np.ndarray


@dataclass(frozen=True)
class Run:
    r"""Iterates of ``gd`` recorded at ``steps``.

    Parameters
    ----------
    steps : ndarray
        The recorded steps, shape (records,).
    w : ndarray
        The iterates w(t), shape (records, ..., d).
    log_loss : ndarray
        :math:`\log L(w(t))`, exact where L underflows, shape (records, ...).

    Examples
    --------
    >>> from attnsvm import linear
    >>> X, y = linear.separable(4, 2, seed=0)
    >>> run = linear.gd(X, y, lr=0.5, steps=10, record_every=5)
    >>> run.steps.tolist(), run.w.shape, run.log_loss.shape
    ([0, 5, 10], (3, 2), (3,))
    """

    steps: np.ndarray
    w: np.ndarray
    log_loss: np.ndarray


# ------------------------------------------------------------------ arguments

def _data(X, y) -> tuple[np.ndarray, np.ndarray]:
    """X (..., n, d) and y (..., n) validated: finite, n, d >= 1, labels exactly +-1, matching shapes."""
    X = as_tensor(X, "X").detach().numpy()
    if X.ndim < 2 or 0 in X.shape[-2:]:
        raise ValueError(f"X must have shape (..., n, d) with n >= 1 points in R^d, d >= 1, got {X.shape}")
    y = as_tensor(y, "y").detach().numpy()
    if y.shape != X.shape[:-1]:
        raise ValueError(f"y must have shape {X.shape[:-1]} (one label per row of X), got {y.shape}")
    if not np.isin(y, (-1.0, 1.0)).all():
        raise ValueError("y must hold labels -1 or +1 only (for labels in {0, 1} pass y = 2 * labels - 1)")
    return X, y


def _signed(X, y) -> np.ndarray:
    """The points y_i x_i (..., n, d) of validated data."""
    return y[..., None] * X


def _vector(w, name: str, d: int) -> np.ndarray:
    """A weight vector (..., d)."""
    w = as_tensor(w, name).detach().numpy()
    if w.ndim < 1 or w.shape[-1] != d:
        raise ValueError(f"{name} must have shape (..., {d}) (weight vectors in R^{d}, the space of the rows of X), "
                         f"got {w.shape}")
    return w


def _norm(w: np.ndarray) -> np.ndarray:
    """||w|| over the last axis, without overflow or underflow of the squares."""
    scale = np.abs(w).max(-1, keepdims=True)
    return scale[..., 0] * np.linalg.norm(w / np.where(scale > 0, scale, 1.0), axis=-1)


def _loss(loss) -> bool:
    """Whether the checked loss name is the logistic loss."""
    return option(loss, "loss", LOSSES) == "logistic"


# ------------------------------------------------------------------ log-space pieces of the losses (one kernel each,
# shared by the numpy functions and the compiled loop)

@numba.njit(cache=True)
def _log_slopes(m, logistic, out):
    """out[k] = log(-l'(m[k])): -m, or -log(1 + e^m) for the logistic loss."""
    for k in range(m.size):
        out[k] = -(max(m[k], 0.0) + np.log1p(np.exp(-abs(m[k])))) if logistic else -m[k]


@numba.njit(cache=True)
def _log_values(m, logistic, out):
    """out[k] = log l(m[k]), exact where l underflows: -m, or log log(1 + e^-m) for the logistic loss."""
    for k in range(m.size):
        if not logistic:
            out[k] = -m[k]
        elif m[k] > 0:
            x = np.exp(-m[k])
            out[k] = -m[k] if x == 0.0 else -m[k] + np.log(np.log1p(x) / x)
        else:
            out[k] = np.log(-m[k] + np.log1p(np.exp(m[k])))


def _apply(kernel, m: np.ndarray, logistic: bool) -> np.ndarray:
    """A log-space kernel applied to an array of margins."""
    flat = np.ascontiguousarray(m, dtype=np.float64).ravel()
    out = np.empty_like(flat)
    kernel(flat, logistic, out)
    return out.reshape(np.shape(m))


def _logsumexp(a: np.ndarray) -> np.ndarray:
    top = a.max(-1, keepdims=True)
    return (top + np.log(np.exp(a - top).sum(-1, keepdims=True)))[..., 0]


# ------------------------------------------------------------------ data, SVM, margins

def separable(n: int, d: int, *, seed: int, gap: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    r"""A random linearly separable dataset.

    Gaussian points labelled by a random unit teacher u, :math:`y_i = \mathrm{sign}(u^\top x_i)` (+1 on the
    hyperplane), each pushed ``gap`` further along :math:`y_i u`, then all scaled by one factor so that
    :math:`\max_i \|x_i\| = 1`. So every point has :math:`y_i u^\top x_i \ge \mathrm{gap}/\mathrm{scale} > 0`:
    the data are separable through the origin.

    Parameters
    ----------
    n : int
        The number of points.
    d : int
        Their dimension.
    seed : int
        The seed.
    gap : float, default=0.5
        How far each point is pushed from the teacher's hyperplane (before the scaling).

    Returns
    -------
    tuple of ndarray
        X (n, d) and y (n,).

    Raises
    ------
    ValueError
        If n or d is not a positive integer, or gap is so large that the points' squared norms overflow float64.

    Examples
    --------
    >>> import numpy as np
    >>> from attnsvm import linear
    >>> X, y = linear.separable(5, 3, seed=1)
    >>> X.shape, float(np.linalg.norm(X, axis=1).max()), sorted(set(y.tolist())) == [-1.0, 1.0]
    ((5, 3), 1.0, True)
    """
    n, d, gap = positive_int(n, "n"), positive_int(d, "d"), positive_float(gap, "gap")
    memory(n * d, "n, d")
    rng = np.random.default_rng(checked_seed(seed))
    u = rng.standard_normal(d)
    u /= np.linalg.norm(u)
    X = rng.standard_normal((n, d))
    y = np.where(X @ u >= 0, 1.0, -1.0)
    X += gap * y[:, None] * u
    with np.errstate(over="ignore"):
        scale = np.linalg.norm(X, axis=1).max()
    if not np.isfinite(scale):
        raise ValueError(f"gap={gap!r} is too large: the squared norms of the points overflow float64 before "
                         "scaling (pass gap <= 1e150)")
    return X / scale, y


def svm(X: ArrayLike, y: ArrayLike, *, solver: str = "nnls") -> SVM:
    r"""The hard-margin SVM :math:`\min \|w\|` s.t. :math:`y_i x_i^\top w \ge 1` for every i, for each problem of a
    batch.

    Parameters
    ----------
    X : ArrayLike
        The points, shape (..., n, d).
    y : ArrayLike
        Their labels, -1 or +1, shape (..., n).
    solver : {'nnls', 'clarabel'}, default='nnls'
        "nnls" (the library's least-distance solver, ``svm.soft_margin_svm``: exact, its margins polished to
        machine precision; its w and alpha are returned) or "clarabel" (an interior-point method through cvxpy,
        independent of it, accurate to about 1e-5 here by its duality gap; the :math:`w_S` and multipliers of the
        face below are returned).

    Returns
    -------
    SVM
        The solution, its multipliers, its support and its margin.

    Raises
    ------
    ~attnsvm.svm.InfeasibleSVM
        (a ValueError) If the data are not linearly separable through the origin.
    ValueError
        If X is so large that the multipliers :math:`\alpha \sim 1/\max_i \|x_i\|^2` fall below the normal range
        of float64 (they would lose precision); if "clarabel" cannot certify its solution (the message names the
        fix, solver="nnls").
    ~attnsvm.svm.SolverError
        If the exact solver finds no face that passes the certificate (on the data of the tests this does not
        happen).

    Notes
    -----
    ``support`` is decided for either solver by a certificate: from :math:`S_0` = the active points A
    (:math:`\alpha_i` above ``ACTIVE_TOL`` times the largest) and every point whose margin is 1 within its accuracy
    :math:`|m_i - 1| \le 4 d \varepsilon |z_i|^\top |w| + \|(Z_A^+)^\top z_i\|\, \|Z_A w - 1\|` (rounding, and how
    far the error of w that the margins of A show moves :math:`m_i`; :math:`z_i = y_i x_i`), a walk over faces S
    stops at the first S whose minimum-norm :math:`w_S` with :math:`m_i(w_S) = 1` on S satisfies the KKT conditions
    to rounding: margins 1 on S, every margin :math:`\ge 1`, and multipliers :math:`a \ge 0` on S with
    :math:`Z_S^\top a = w_S` up to their first-order rounding error, bounded point by point. A failing S loses a
    point (if no w has margins 1 on S: the one whose removal leaves the smallest residual, preferring one the smaller
    face keeps feasible; else the most negative multiplier) or gains the point of smallest margin (the walk stops,
    no face found, rather than add back a dropped point); a passing S with some
    :math:`a_i \le \mathrm{ACTIVE\_TOL} \max_j a_j` gives way to :math:`S \mathbin{\backslash} \{i\}` where that face passes
    too and keeps :math:`m_i \ge 1` to the rounding of :math:`m_i` (its :math:`w_S` has the smaller norm).

    What is certified: :math:`w_S` is optimal for data within rounding of X (:math:`O(k d \varepsilon \|Z\|)`), not
    that :math:`w_S` is :math:`\hat w` to a given accuracy where the face is ill-conditioned; so "clarabel" returns
    :math:`(w_S, a)` only where :math:`\|w_S - w\|` is within its solution's accuracy (:math:`\|w - \hat w\| \le
    \sqrt{2\,\mathrm{gap}}` + the distance to feasibility, by weak duality) and raises a ValueError naming the fix,
    solver="nnls", otherwise; "nnls" returns its own w and alpha. ``support`` is :math:`S_0`'s rule applied to
    :math:`(w_S, a)`: a point nearer the margin than that accuracy counts as a support vector (float64 cannot tell
    it from one). Where the walk finds no passing face within 2n steps, every face of the points within the
    solution's accuracy of the margin is tried, largest first (if there are at most ``NEAR_MAX``); where none
    passes, the exact solver raises ``SolverError`` and "clarabel" a ValueError naming those points and the fix,
    solver="nnls".

    Examples
    --------
    >>> from attnsvm import linear
    >>> sol = linear.svm([[2.0, 0.0], [0.0, 1.0]], [1.0, -1.0])  # 2 w_1 >= 1 and -w_2 >= 1
    >>> sol.w.round(12).tolist(), sol.alpha.round(12).tolist()
    ([0.5, -1.0], [0.25, 1.0])
    """
    X, y = _data(X, y)
    solver = option(solver, "solver", ("nnls", "clarabel"))
    Z = _signed(X, y)
    batch, (n, d) = Z.shape[:-2], Z.shape[-2:]
    w, alpha, support = np.empty(batch + (d,)), np.empty(batch + (n,)), np.empty(batch + (n,), dtype=bool)
    for b in np.ndindex(batch):
        radius = _norm(Z[b]).max()
        if radius == 0:
            raise InfeasibleSVM(f"X{f'[{b}]' if b else ''} is all zeros: no w separates it", [b])
        e = _exponent(radius)
        try:
            rows = np.ldexp(Z[b], -e)
            w_b, alpha_b = soft_margin_svm(rows, return_multipliers=True) if solver == "nnls" else _clarabel(rows)
        except InfeasibleSVM:
            where = f" (problem {b} of the batch)" if b else ""
            raise InfeasibleSVM(f"X, y are not linearly separable through the origin{where}: no w has "
                                f"y_i x_i^T w > 0 for every i (or only with a margin below "
                                f"{1 / MAX_NORM:.0e} max_i ||x_i||), so the hard-margin SVM does not exist",
                                [b]) from None
        decided, undecided = _support(rows, w_b, alpha_b)  # on the rows scaled by 2^-e: the same margins
        if decided is None:
            if solver == "nnls":
                raise SolverError(f"svm: no face of support vectors near the exact solver's solution of X, y"
                                  f"{f' (problem {b} of the batch)' if b else ''} satisfies the KKT conditions to "
                                  "rounding (X too ill-conditioned for float64: remove points that nearly repeat "
                                  "others)")
            raise ValueError(f"solver={solver!r} cannot decide the support vectors of X, y"
                             f"{f' (problem {b} of the batch)' if b else ''}: the points {undecided.tolist()} lie "
                             "within the solution's accuracy of the margin, and its multipliers do not single out a "
                             "face of support vectors that satisfies the KKT conditions to rounding; pass "
                             "solver='nnls' (exact)")
        support[b] = decided[0]
        if solver == "clarabel":  # its w_S and multipliers, if w_S is within the solver's accuracy of its w
            distance, bound = _norm(decided[1] - w_b), _distance(rows, w_b, alpha_b)
            if not distance <= bound:
                where = f" (problem {b} of the batch)" if b else ""
                raise ValueError(f"solver={solver!r} cannot certify the SVM of X, y{where}: "
                                 f"the face of support vectors that satisfies the KKT conditions to rounding has w "
                                 f"{distance:.1e} from the solver's w, more than its accuracy {bound:.1e} (by its "
                                 "duality gap; rows scaled to max_i ||x_i|| ~ 1), so float64 cannot tell which is "
                                 "w_hat; pass solver='nnls' (exact)")
            w_b, alpha_b = decided[1:]
        with np.errstate(over="ignore", under="ignore"):
            w[b], alpha[b] = np.ldexp(w_b, -e), np.ldexp(alpha_b, -2 * e)
    finite_result(alpha, "the dual multipliers alpha", "X is too small for float64 to hold them (rescale X)")
    if (alpha.max(-1) < np.finfo(float).tiny).any():
        raise ValueError("X is too large: the dual multipliers alpha (about 1 / max_i ||x_i||^2) fall below the "
                         "normal range of float64 and would lose precision; rescale X (e.g. by a power of two) so "
                         "that max_i ||x_i|| <= 1e150")
    return SVM(w=w, alpha=alpha, support=support, margin=1 / _norm(w))


def _exponent(radius: float) -> int:
    """e with 2^e nearest max_i ||z_i|| = radius > 0: the rows scaled by 2^-e (exactly) have radius about 1."""
    return int(np.round(np.log2(radius)))


def _on_margin(Z: np.ndarray, w: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """The rule of ``svm`` for the points (n,) on the margin of (w, alpha) (signed points Z (n, d)): the active
    points A and those whose margin is 1 within its accuracy."""
    eps = np.finfo(float).eps
    active = alpha > ACTIVE_TOL * alpha.max()
    _, sv, Vt = np.linalg.svd(Z[active], full_matrices=False)
    rank = int((sv > active.sum() * eps * sv[0]).sum())  # w lies in the row space of Z_A
    # w - Z_A^+ 1 = Z_A^+ r, r = Z_A w - 1: it moves m_i by z_i^T Z_A^+ r, at most ||(Z_A^+)^T z_i|| ||r||
    reach = np.linalg.norm((Z @ Vt[:rank].T) / sv[:rank], axis=1)
    accuracy = 4 * Z.shape[1] * eps * (np.abs(Z) @ np.abs(w)) + reach * np.linalg.norm(Z[active] @ w - 1)
    return active | (np.abs(Z @ w - 1) <= accuracy)


def _face(Z: np.ndarray, S: np.ndarray, alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray, int | None]:
    """(w_S, a, None) for the face S (n,) of the signed points Z (n, d) when w_S, the minimum-norm w with
    m_i(w) = 1 on S, and a (n,), the multipliers nearest alpha with Z_S^T a = w_S (0 off S), satisfy the KKT
    conditions to rounding; else (w_S, a, i) with i the point to drop from S (its margin not 1, or the most negative
    multiplier) or to add to it (the smallest margin, below 1)."""
    eps, d, k = np.finfo(float).eps, Z.shape[1], int(S.sum())
    U, sv, Vt = np.linalg.svd(Z[S], full_matrices=False)
    rank = int((sv > k * eps * sv[0]).sum())
    U, sv, Vt = U[:, :rank], sv[:rank], Vt[:rank]
    w_S = Vt.T @ (U.sum(0) / sv)
    a = np.zeros_like(alpha)
    a[S] = alpha[S] + U @ ((Vt @ (w_S - Z[S].T @ alpha[S])) / sv)
    rounding = 4 * k * d * eps * sv[0] * _norm(w_S)
    # first-order error of a_i from a backward error ||E|| <= k d eps sv[0] in Z_S (w_S and a computed from it):
    # (Z_S Z_S^T)^+ E w_S + 2 (Z_S^T)^+ E^T a, bounded row by row (not by cond(Z_S)^2 for every i)
    slack = 10 * k * d * eps * sv[0] * (_norm(w_S) * np.linalg.norm(U / sv**2, axis=1)
                                        + 2 * _norm(a) * np.linalg.norm(U / sv, axis=1))
    points, margins = np.flatnonzero(S), Z @ w_S
    off = np.abs(margins[S] - 1)
    if off.max() > rounding:  # overdetermined: drop the point whose removal leaves the smallest residual (and,
        # among those, one that the smaller face's w keeps on the feasible side, then the farthest off the margin)
        left, kept = np.zeros(k), np.ones(k, bool)
        for j in range(k):
            T = np.delete(points, j)
            if T.size:
                w_T = np.linalg.lstsq(Z[T], np.ones(k - 1), rcond=None)[0]
                left[j], kept[j] = _norm(Z[T] @ w_T - 1), Z[points[j]] @ w_T >= 1 - rounding
        best = left <= left.min() + rounding
        best &= kept if (best & kept).any() else best
        return w_S, a, int(points[np.argmax(np.where(best, off, -1.0))])
    if (a[S] < -slack).any():
        return w_S, a, int(points[np.argmin(a[S] + slack)])
    if margins.min() < 1 - rounding * _norm(Z).max() / sv[0]:
        return w_S, a, int(margins.argmin())
    return w_S, a, None


def _support(Z: np.ndarray, w: np.ndarray, alpha: np.ndarray) \
        -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray] | None, np.ndarray | None]:
    """((support (n,), w_S, a), None) for the solution (w, alpha) of the signed points Z (n, d), by the rule of
    ``svm`` (w_S, a: the certified face's solution and multipliers, a >= 0), or (None, the points within the
    solution's accuracy of the margin) where no face reached from S0 satisfies the KKT conditions to rounding (the
    support is ambiguous)."""
    S, n = _on_margin(Z, w, alpha), Z.shape[0]
    dropped = np.zeros(n, bool)  # tabu: a point dropped from S is never added back
    for _ in range(2 * n):  # an active-set walk: drop a point that breaks the KKT conditions, or add one
        w_S, a, change = _face(Z, S, alpha)
        if change is None:  # S passes; where S \ {i} for an a_i ~ 0 passes too, keeping m_i >= 1 to the rounding
            # of m_i, its w_S has the smaller norm
            vanishing = np.flatnonzero(S & (a <= ACTIVE_TOL * a.max()))
            smaller = [T for T, i in ((S & (np.arange(n) != i), i) for i in vanishing)
                       if T.any() and _smaller(Z, T, i, alpha)]
            if not smaller:
                a = np.maximum(a, 0.0)
                return (_on_margin(Z, w_S, a), w_S, a), None
            dropped |= S & ~smaller[0]
            S = smaller[0]
            continue
        if dropped[change]:
            break
        dropped[change] = S[change]
        S[change] = not S[change]
        if not S.any():
            break
    eps, d = np.finfo(float).eps, Z.shape[1]
    accuracy = _norm(Z) * _distance(Z, w, alpha) + 4 * d * eps * (np.abs(Z) @ np.abs(w))
    near = np.flatnonzero(np.abs(Z @ w - 1) <= accuracy)
    # the walk took a wrong turn: try every face of the points near the margin, largest first (at most 2^NEAR_MAX)
    for size in range(len(near), 0, -1) if len(near) <= NEAR_MAX else ():
        for face in combinations(near, size):
            T = np.zeros(n, bool)
            T[list(face)] = True
            w_T, a, change = _face(Z, T, alpha)
            if change is None:
                a = np.maximum(a, 0.0)
                return (_on_margin(Z, w_T, a), w_T, a), None
    return None, near


def _distance(Z: np.ndarray, w: np.ndarray, alpha: np.ndarray) -> float:
    """A bound on ||w - w_hat|| for a solution (w, alpha >= 0) of the signed points Z (n, d), by weak duality:
    ||v - w_hat||^2 <= 2 gap for the feasible v = w / min(1, min_i m_i(w)) and the duality gap
    gap = ||v||^2 / 2 - sum_i alpha_i + ||Z^T alpha||^2 / 2 (plus its rounding); infinite if no m_i(w) > 0."""
    low = (Z @ w).min()
    if not low > 0:
        return np.inf
    feasible = w / min(1.0, low)
    terms = (0.5 * feasible @ feasible, alpha.sum(), 0.5 * _norm(Z.T @ alpha) ** 2)
    gap = max(terms[0] - terms[1] + terms[2], 0.0) + 4 * len(Z) * np.finfo(float).eps * sum(terms)
    return float(np.sqrt(2 * gap) + _norm(feasible - w))


def _smaller(Z: np.ndarray, T: np.ndarray, i: int, alpha: np.ndarray) -> bool:
    """Whether the face T (n,) passes the KKT conditions to rounding with the point i, left out, on its feasible
    side to the rounding of its margin: m_i(w_T) >= 1 - 4 d eps |z_i|^T |w_T|."""
    w_T, _, change = _face(Z, T, alpha)
    return change is None and Z[i] @ w_T >= 1 - 4 * Z.shape[1] * np.finfo(float).eps * (np.abs(Z[i]) @ np.abs(w_T))


def _clarabel(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(w, alpha) of min (1/2)||w||^2 s.t. rows w >= 1 by Clarabel through cvxpy; InfeasibleSVM if none exists."""
    import cvxpy as cp  # here: importing it takes a second that only this solver needs

    w = cp.Variable(rows.shape[1])
    margin = rows @ w >= 1
    problem = cp.Problem(cp.Minimize(0.5 * cp.sum_squares(w)), [margin])
    problem.solve(solver=cp.CLARABEL, tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10)
    if problem.status in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE):
        raise InfeasibleSVM("infeasible", [0])
    if problem.status != cp.OPTIMAL:
        raise SolverError(f"clarabel stopped with status {problem.status!r} on the hard-margin SVM of X, y; "
                          "try solver='nnls'")
    return w.value, np.maximum(margin.dual_value, 0.0)


def margins(X: ArrayLike, y: ArrayLike, w: ArrayLike) -> np.ndarray:
    r"""The margins :math:`m_i(w) = y_i x_i^\top w`.

    Parameters
    ----------
    X : ArrayLike
        The points, shape (..., n, d).
    y : ArrayLike
        Their labels, -1 or +1, shape (..., n).
    w : ArrayLike
        Weight vectors, shape (..., d), broadcast against the data's batch.

    Returns
    -------
    ndarray
        The margins, shape (..., n).

    Raises
    ------
    ValueError
        If the shapes do not fit (X (..., n, d), y (..., n), w (..., d)) or y holds a label other than -1, +1.

    Examples
    --------
    >>> from attnsvm import linear
    >>> linear.margins([[1.0, 2.0], [3.0, 0.0]], [1.0, -1.0], [1.0, 1.0]).tolist()
    [3.0, -3.0]
    """
    X, y = _data(X, y)
    return _margins(X, y, _vector(w, "w", X.shape[-1]))


def _margins(X: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``margins`` of validated X, y, w."""
    with np.errstate(over="ignore", invalid="ignore"):
        m = (_signed(X, y) * w[..., None, :]).sum(-1)
    return finite_result(m, "the margins y_i x_i^T w", "w (or X) is too large")


def normalized_margin(X: ArrayLike, y: ArrayLike, w: ArrayLike) -> np.ndarray:
    r"""The normalized margin :math:`\gamma(w) = \min_i y_i x_i^\top w / \|w\|`.

    It is at most the SVM's margin :math:`1/\|\hat w\|` for every :math:`w \ne 0`.

    Parameters
    ----------
    X : ArrayLike
        The points, shape (..., n, d).
    y : ArrayLike
        Their labels, -1 or +1, shape (..., n).
    w : ArrayLike
        Non-zero weight vectors, shape (..., d).

    Returns
    -------
    ndarray
        :math:`\gamma(w)`, shape (...).

    Raises
    ------
    ValueError
        If w has a zero vector, or the shapes or labels are invalid.

    Examples
    --------
    >>> from attnsvm import linear
    >>> float(linear.normalized_margin([[1.0, 0.0], [0.0, 1.0]], [1.0, 1.0], [3.0, 4.0]))
    0.6
    """
    X, y = _data(X, y)
    w = _vector(w, "w", X.shape[-1])
    norm = _norm(w)
    if (norm == 0).any():
        raise ValueError("w has a zero vector: the normalized margin min_i m_i(w) / ||w|| needs w != 0")
    return _margins(X, y, w).min(-1) / norm


def log_loss(X: ArrayLike, y: ArrayLike, w: ArrayLike, loss: str = "exponential") -> np.ndarray:
    r""":math:`\log L(w)`, with :math:`L(w) = \frac{1}{n}\sum_i \ell(y_i x_i^\top w)`, exact in log space, also where L
    underflows.

    Parameters
    ----------
    X : ArrayLike
        The points, shape (..., n, d).
    y : ArrayLike
        Their labels, -1 or +1, shape (..., n).
    w : ArrayLike
        Weight vectors, shape (..., d).
    loss : {'exponential', 'logistic'}, default='exponential'
        The loss :math:`\ell`.

    Returns
    -------
    ndarray
        :math:`\log L(w)`, shape (...).

    Raises
    ------
    ValueError
        If the shapes or labels are invalid, or ``loss`` is not one of ``LOSSES``.

    Examples
    --------
    >>> import numpy as np
    >>> from attnsvm import linear
    >>> float(linear.log_loss([[1.0]], [1.0], [2000.0]))  # L = e^-2000 underflows; its log does not
    -2000.0
    >>> bool(np.isclose(linear.log_loss([[1.0]], [1.0], [0.0], loss="logistic"), np.log(np.log(2))))
    True
    """
    logistic = _loss(loss)
    m = margins(X, y, w)
    return _logsumexp(_apply(_log_values, m, logistic)) - np.log(m.shape[-1])


def gradient(X: ArrayLike, y: ArrayLike, w: ArrayLike, loss: str = "exponential") -> np.ndarray:
    r"""The gradient :math:`\nabla L(w) = \frac{1}{n}\sum_i \ell'(m_i(w))\, y_i x_i`.

    Its scale is taken out in log space, so it underflows only where the true gradient is below the smallest
    float64.

    Parameters
    ----------
    X : ArrayLike
        The points, shape (..., n, d).
    y : ArrayLike
        Their labels, -1 or +1, shape (..., n).
    w : ArrayLike
        Weight vectors, shape (..., d).
    loss : {'exponential', 'logistic'}, default='exponential'
        The loss :math:`\ell`.

    Returns
    -------
    ndarray
        The gradient, shape (..., d).

    Raises
    ------
    ValueError
        If the shapes or labels are invalid, or ``loss`` is not one of ``LOSSES``.

    Examples
    --------
    >>> from attnsvm import linear
    >>> linear.gradient([[1.0, 0.0], [0.0, 1.0]], [1.0, 1.0], [0.0, 0.0]).tolist()
    [-0.5, -0.5]
    """
    logistic = _loss(loss)
    X, y = _data(X, y)
    a = _apply(_log_slopes, _margins(X, y, _vector(w, "w", X.shape[-1])), logistic)
    top = a.max(-1, keepdims=True)
    with np.errstate(over="ignore", invalid="ignore"):
        g = -np.exp(top) * (np.exp(a - top)[..., None] * _signed(X, y)).sum(-2) / X.shape[-2]
    return finite_result(g, "the gradient", "the loss at w is too large (w far on the wrong side): a smaller w")


def hessian(X: ArrayLike, y: ArrayLike, w: ArrayLike, loss: str = "exponential") -> np.ndarray:
    r"""The Hessian :math:`\frac{1}{n}\sum_i \ell''(m_i(w))\, x_i x_i^\top` of L.

    Parameters
    ----------
    X : ArrayLike
        The points, shape (..., n, d).
    y : ArrayLike
        Their labels, -1 or +1, shape (..., n).
    w : ArrayLike
        Weight vectors, shape (..., d).
    loss : {'exponential', 'logistic'}, default='exponential'
        The loss :math:`\ell`.

    Returns
    -------
    ndarray
        The Hessian, shape (..., d, d).

    Raises
    ------
    ValueError
        If the shapes or labels are invalid, or ``loss`` is not one of ``LOSSES``.

    Examples
    --------
    >>> from attnsvm import linear
    >>> linear.hessian([[1.0, 0.0], [0.0, 2.0]], [1.0, -1.0], [0.0, 0.0]).tolist()
    [[0.5, 0.0], [0.0, 2.0]]
    """
    logistic = _loss(loss)
    X, y = _data(X, y)
    m = _margins(X, y, _vector(w, "w", X.shape[-1]))
    with np.errstate(over="ignore", invalid="ignore"):
        curvature = np.exp(-m - 2 * np.logaddexp(0.0, -m)) if logistic else np.exp(-m)  # sigma(m) sigma(-m), e^-m
        H = np.einsum("...n,...ni,...nj->...ij", curvature, X, X) / X.shape[-2]
    return finite_result(H, "the Hessian", "the loss at w is too large (w far on the wrong side): a smaller w")


def weights(X: ArrayLike, y: ArrayLike, w: ArrayLike, loss: str = "exponential") -> np.ndarray:
    r"""The gradient's weights :math:`q_i = \ell'(m_i)/\sum_j \ell'(m_j)`, summing to one.

    :math:`-\nabla L(w)` is a positive multiple of :math:`\sum_i q_i y_i x_i`. Exact in log space however small the
    loss is.

    Parameters
    ----------
    X : ArrayLike
        The points, shape (..., n, d).
    y : ArrayLike
        Their labels, -1 or +1, shape (..., n).
    w : ArrayLike
        Weight vectors, shape (..., d).
    loss : {'exponential', 'logistic'}, default='exponential'
        The loss :math:`\ell`.

    Returns
    -------
    ndarray
        The weights, shape (..., n).

    Raises
    ------
    ValueError
        If the shapes or labels are invalid, or ``loss`` is not one of ``LOSSES``.

    Examples
    --------
    >>> from attnsvm import linear
    >>> linear.weights([[1.0], [2.0]], [1.0, 1.0], [1000.0]).round(12).tolist()  # e^-1000 : e^-2000
    [1.0, 0.0]
    """
    a = _apply(_log_slopes, margins(X, y, w), _loss(loss))
    q = np.exp(a - a.max(-1, keepdims=True))
    return q / q.sum(-1, keepdims=True)


def smoothness(X: ArrayLike, y: ArrayLike, w0: ArrayLike | None = None, loss: str = "exponential") -> np.ndarray:
    r"""The smoothness bound :math:`\beta_0 = R^2 L(w_0)`, :math:`R = \max_i \|x_i\|`.

    A bound on the Hessian of L over the sublevel set :math:`\{w : L(w) \le L(w_0)\}` for both losses
    (:math:`\ell'' \le \ell`), and the step bound of the prelude's descent lemma: gradient descent from
    :math:`w_0` with :math:`\eta \le 1/\beta_0` decreases L at every step.

    Parameters
    ----------
    X : ArrayLike
        The points, shape (..., n, d).
    y : ArrayLike
        Their labels, -1 or +1, shape (..., n).
    w0 : ArrayLike or None, default=None
        The start, shape (..., d); None for :math:`w_0 = 0` (then :math:`L(w_0) = 1` for the exponential loss,
        :math:`\log 2` for the logistic loss).
    loss : {'exponential', 'logistic'}, default='exponential'
        The loss :math:`\ell`.

    Returns
    -------
    ndarray
        :math:`\beta_0`, shape (...).

    Raises
    ------
    ValueError
        If the shapes or labels are invalid, or ``loss`` is not one of ``LOSSES``.

    Examples
    --------
    >>> from attnsvm import linear
    >>> float(linear.smoothness([[3.0, 4.0], [0.0, 1.0]], [1.0, 1.0]))  # R^2 L(0) = 25 * 1
    25.0
    """
    X, y = _data(X, y)
    w0 = np.zeros(X.shape[-1]) if w0 is None else _vector(w0, "w0", X.shape[-1])
    radius = _norm(X).max(-1)
    with np.errstate(over="ignore", invalid="ignore"):
        beta = radius**2 * np.exp(log_loss(X, y, w0, loss))
    return finite_result(beta, "the smoothness bound R^2 L(w0)", "w0 (or X) is too large")


# ------------------------------------------------------------------ gradient descent

@numba.njit(cache=True)
def _loop(Z, w0, lr, steps, normalized, logistic, sqrt_schedule, record, W, log_L):
    """Gradient descent on each problem b of Z (B, n, d) from w0 (B, d), recording w and log L at the steps in
    `record` into W (R, B, d) and log_L (R, B). The step is -lr_t g / ||g|| (normalized) or -lr_t g, with
    g = -(1/n) e^top sum_i e^(a_i - top) y_i x_i and a_i = log(-l'(m_i)) (top = max a_i: exact in log space)."""
    B, n, d = Z.shape
    a, m, values, s, w = np.empty(n), np.empty(n), np.empty(n), np.empty(d), np.empty(d)
    for b in range(B):
        for j in range(d):
            w[j] = w0[b, j]
        k = 0
        for t in range(steps + 1):
            for i in range(n):
                m[i] = 0.0
                for j in range(d):
                    m[i] += Z[b, i, j] * w[j]
            _log_slopes(m, logistic, a)
            top = a.max()
            if k < record.size and record[k] == t:
                _log_values(m, logistic, values)
                big = values.max()
                log_L[k, b] = big + np.log(np.exp(values - big).sum() / n)
                for j in range(d):
                    W[k, b, j] = w[j]
                k += 1
            if t == steps:
                break
            for j in range(d):
                s[j] = 0.0
            for i in range(n):
                e = np.exp(a[i] - top)
                for j in range(d):
                    s[j] += e * Z[b, i, j]
            rate = lr / np.sqrt(t + 1.0) if sqrt_schedule else lr
            if normalized:
                norm = 0.0
                for j in range(d):
                    norm += s[j] * s[j]
                scale = rate / np.sqrt(norm) if norm > 0 else 0.0
            else:
                scale = rate / n * np.exp(top)
            for j in range(d):
                w[j] += scale * s[j]


def gd(X: ArrayLike, y: ArrayLike, *, lr: float, steps: int, loss: str = "exponential", normalized: bool = False,
       schedule: str = "constant", init: ArrayLike | None = None, record_every: int = 1,
       record_at: ArrayLike | None = None) -> Run:
    r"""Gradient descent :math:`w(t+1) = w(t) - \eta_t \nabla L(w(t))` on each problem of the batch, or normalized
    gradient descent :math:`w(t+1) = w(t) - \eta_t \nabla L/\|\nabla L\|` (the step of ``train.gd``).

    The weights of the step are formed in log space, so the direction of a normalized step is exact however small
    the loss gets. A compiled loop (Numba).

    Parameters
    ----------
    X : ArrayLike
        The points, shape (..., n, d).
    y : ArrayLike
        Their labels, -1 or +1, shape (..., n).
    lr : float
        The step size :math:`\eta`.
    steps : int
        The number of steps.
    loss : {'exponential', 'logistic'}, default='exponential'
        The loss :math:`\ell`.
    normalized : bool, default=False
        Normalized steps.
    schedule : {'constant', 'sqrt'}, default='constant'
        :math:`\eta_t = \eta`, or :math:`\eta_t = \eta/\sqrt{t+1}`.
    init : ArrayLike or None, default=None
        None (w(0) = 0) or w(0), shape (..., d).
    record_every : int, default=1
        Record at t = 0, ``record_every``, 2 ``record_every``, ... and ``steps``.
    record_at : ArrayLike or None, default=None
        If given, record at these sorted steps instead (integers in [0, steps]).

    Returns
    -------
    Run
        w(t) and :math:`\log L(w(t))` at the recorded steps.

    Raises
    ------
    ValueError
        If an argument is invalid (the message names it), e.g. ``record_at`` not increasing integers in
        [0, steps] or ``init`` of the wrong shape.
    FloatingPointError
        If the iterates overflow (lr too large for these X, init).

    Examples
    --------
    >>> import numpy as np
    >>> from attnsvm import linear
    >>> X, y = linear.separable(5, 2, seed=0)
    >>> run = linear.gd(X, y, lr=1.0, steps=100, record_at=[0, 1, 10, 100])
    >>> run.steps.tolist(), bool(np.all(np.diff(run.log_loss) < 0))
    ([0, 1, 10, 100], True)
    """
    X, y = _data(X, y)
    logistic, normalized = _loss(loss), boolean(normalized, "normalized")
    sqrt_schedule = option(schedule, "schedule", SCHEDULES) == "sqrt"
    lr, steps = positive_float(lr, "lr"), positive_int(steps, "steps", minimum=0)
    budget(steps, "steps", MAX_STEPS, "gradient steps")
    if record_at is None:
        record = np.array(sorted(set(range(0, steps + 1, positive_int(record_every, "record_every"))) | {steps}))
    else:
        record = np.asarray(record_at)
        if record.ndim != 1 or record.size == 0 or record.dtype.kind not in "iu" or (np.diff(record) <= 0).any() \
                or record[0] < 0 or record[-1] > steps:
            raise ValueError(f"record_at must be increasing integers in [0, steps={steps}], got {record_at!r}")
    Z = _signed(X, y)
    batch, (n, d) = Z.shape[:-2], Z.shape[-2:]
    budget(record.size, "record_every / record_at", MAX_RECORDS, "recorded iterates")
    memory(record.size * (np.prod(batch, dtype=float) * (d + 1)), "record_every / record_at")
    w0 = np.zeros(batch + (d,)) if init is None else _vector(init, "init", d)
    try:
        w0 = np.broadcast_to(w0, batch + (d,))
    except ValueError:
        raise ValueError(f"init must have shape (d,) or (..., d) broadcastable to the batch of X, {batch + (d,)}, "
                         f"got {w0.shape}") from None
    B = int(np.prod(batch, dtype=int))
    W, log_L = np.empty((record.size, B, d)), np.empty((record.size, B))
    with np.errstate(over="ignore"):
        _loop(np.ascontiguousarray(Z.reshape(B, n, d)), np.ascontiguousarray(w0.reshape(B, d)), lr, steps,
              normalized, logistic, sqrt_schedule, record.astype(np.int64), W, log_L)
    if not (np.isfinite(W).all() and np.isfinite(log_L).all()):
        raise FloatingPointError(f"gradient descent overflowed (lr={lr!r} is too large for these X, init): "
                                 "lower lr (the descent lemma's bound is 1 / linear.smoothness(X, y, init))")
    return Run(steps=record.astype(np.int64), w=W.reshape((record.size,) + batch + (d,)),
               log_loss=log_L.reshape((record.size,) + batch))


# ------------------------------------------------------------------ the implicit-bias theorem's quantities

def _solution(X: np.ndarray, y: np.ndarray, solution) -> SVM:
    """`solution` checked to be the SVM of the validated X, y, or that SVM solved here if None. Checked: its shapes
    and the KKT conditions to the relative accuracy GAP_TOL["hard"]: smallest margin 1, alpha >= 0, stationarity
    w = sum_i alpha_i y_i x_i, and sum_i alpha_i = ||w||^2 (with the others, complementary slackness), so a feasible
    w that is not optimal is refused."""
    if solution is None:
        return svm(X, y)
    fits = isinstance(solution, SVM) and np.shape(solution.w) == X.shape[:-2] + X.shape[-1:] \
        and np.shape(solution.alpha) == np.shape(solution.support) == X.shape[:-1]
    failed = [] if fits else ["its shapes (w (..., d), alpha and support (..., n))"]
    if fits:
        w, alpha, tol = np.asarray(solution.w, float), np.asarray(solution.alpha, float), GAP_TOL["hard"]
        size = _norm(w)
        with np.errstate(all="ignore"):
            conditions = {"smallest margin 1": np.abs(_margins(X, y, w).min(-1) - 1) <= tol,
                          "alpha >= 0": (alpha >= 0).all(-1),
                          "w = sum_i alpha_i y_i x_i": _norm((alpha[..., None] * _signed(X, y)).sum(-2) - w)
                          <= tol * size,
                          "sum_i alpha_i = ||w||^2": np.abs(alpha.sum(-1) - size**2) <= tol * size**2}
        failed = [name for name, holds in conditions.items() if not np.all(holds)]
    if failed:
        raise ValueError(f"solution must be linear.svm(X, y) of these X, y (or None to solve it here); it fails "
                         f"{', '.join(failed)} (relative accuracy {GAP_TOL['hard']:.0e})")
    Z, marked = _signed(X, y), np.asarray(solution.support, bool)
    for b in np.ndindex(X.shape[:-2]):
        e = _exponent(_norm(Z[b]).max())
        decided, undecided = _support(np.ldexp(Z[b], -e), np.ldexp(w[b], e), np.ldexp(alpha[b], 2 * e))
        where = f" (problem {b})" if b else ""
        if decided is None:
            raise ValueError(f"solution.support is ambiguous{where}: the points {undecided.tolist()} lie within the "
                             "accuracy of solution.w, solution.alpha of the margin, and the multipliers do not single "
                             "out a face of support vectors that satisfies the KKT conditions to rounding; pass "
                             "solution=None (or linear.svm(X, y), the exact solver)")
        support = decided[0]
        if (support != marked[b]).any():
            missing, extra = np.flatnonzero(support & ~marked[b]), np.flatnonzero(~support & marked[b])
            raise ValueError(f"solution.support must mark the points on the margin of solution.w{where}: it misses "
                             f"{missing.tolist()} and marks {extra.tolist()} off it; pass solution=None (or "
                             "linear.svm(X, y))")
    return solution


def _multipliers_of_h(Z_S: np.ndarray, rank: int) -> tuple[np.ndarray | None, np.ndarray | None, float, bool]:
    """For the signed support vectors Z_S (k, d) of exact rank ``rank``: (log alpha, pinv, cond, converged). alpha
    (k,) are the dual multipliers of hypothesis (H): alpha = c e^(-m) at the minimizer of F(v) = sum_i c e^(-m_i(v))
    + <w_hat, v>, found by damped Newton on m = Z_S v in the column space of Z_S (its gradient vanishes iff
    Z_S^T alpha = w_hat). pinv (d, k) is the pseudo-inverse of Z_S and cond its condition number, from its ``rank``
    largest singular values. (None, None, cond, False) where the rank-th singular value is not above k eps times the
    largest: float64 cannot tell Z_S from a matrix of smaller rank."""
    U, sv, Vt = np.linalg.svd(Z_S, full_matrices=False)
    k, eps = len(Z_S), np.finfo(float).eps
    if not sv[rank - 1] > k * eps * sv[0]:
        return None, None, float(sv[0] / sv[rank - 1]) if sv[rank - 1] > 0 else np.inf, False
    U, sv, Vt = U[:, :rank], sv[:rank], Vt[:rank]
    p = U @ (U.sum(0) / (sv / sv[0]) ** 2)  # sv[0]^2 (Z_S Z_S^T)^+ 1, multipliers times sv[0]^2
    log_total, p = np.log(p.sum()) - 2 * np.log(sv[0]), p / p.sum()  # log ||w_hat||^2, and p sums to 1
    # F / ||w_hat||^2 with c = ||w_hat||^2 is sum_i e^(-m_i) + <p, m>: minimized over m = U s
    s, converged = U.T @ np.full(k, np.log(k)), False  # start from alpha = ||w_hat||^2 / k, m = log k
    with np.errstate(over="ignore", invalid="ignore"):
        for _ in range(100):
            e = np.exp(-(U @ s))
            gradient = U.T @ (p - e)
            step = -np.linalg.lstsq((U.T * e) @ U, gradient, rcond=None)[0]
            dm, decrement, length = U @ step, -gradient @ step, 1.0
            # backtrack until F / ||w_hat||^2 falls by a quarter of the decrement (change summed without cancellation)
            while not e @ np.expm1(-length * dm) + length * (p @ dm) <= -length * decrement / 4 and length >= 1e-12:
                length /= 2
            # converged: no descent left in float64 (a minimizer, or the end of a descent to infinity), or no margin
            # moved by more than 1e-10
            converged = length < 1e-12 or np.abs(length * dm).max() <= 1e-10
            if length >= 1e-12:
                s = s + length * step
            if converged:
                break
    return log_total - U @ s, Vt.T @ (U.T / sv[:, None]), sv[0] / sv[-1], converged


def _exact_rank(Z_S: np.ndarray) -> int | None:
    """The rank of Z_S (k, d) in exact arithmetic on its float64 entries: min(k, d) where float64 shows it (the
    smallest singular value above 2^-20 times the largest, far beyond the rounding of singular values, a few k d eps
    times the largest), else by Gaussian elimination on the rows scaled to integers (each row by the largest
    denominator of its entries, a power of two; every row reduced by the gcd of its entries); None where that would
    take more than ``EXACT_MAX`` rows (its cost grows like k^4: 15 s at k = 150)."""
    sv = np.linalg.svd(Z_S, compute_uv=False)
    if sv[-1] > 2.0**-20 * sv[0]:
        return len(sv)
    if len(Z_S) > EXACT_MAX:
        return None
    rows = []
    for z in Z_S:
        entries = [Fraction(v) for v in z]
        scale = max(v.denominator for v in entries)
        rows.append([int(v * scale) for v in entries])
    rank = 0
    for col in range(Z_S.shape[1]):
        pivot = next((i for i in range(rank, len(rows)) if rows[i][col]), None)
        if pivot is None:
            continue
        rows[rank], rows[pivot] = rows[pivot], rows[rank]
        p = rows[rank][col]
        for i in range(rank + 1, len(rows)):
            if rows[i][col]:
                row = [p * a - rows[i][col] * b for a, b in zip(rows[i], rows[rank])]
                g = gcd(*row)
                rows[i] = [a // g for a in row] if g else row
        rank += 1
    return rank


def _exact_certificate(Z: np.ndarray, F: np.ndarray) -> np.ndarray | None:
    """The support {j : m_j(w_hat) = 1} (n,) of the signed points Z (n, d), decided in exact rational arithmetic on
    the float64 data, if the face F (n,) certifies w_hat exactly: its rows are independent, the minimum-norm w_F
    with m_i(w_F) = 1 on F has multipliers lam >= 0 (w_F = Z_F^T lam, (Z_F Z_F^T) lam = 1) and every m_j(w_F) >= 1
    (then w_F = w_hat by the KKT conditions); else None. A margin is computed exactly only where float64 cannot
    decide it: ``_undecided`` bounds the error of m_j(fl(w_F)) computed in float64."""
    rows = [[Fraction(v) for v in Z[i]] for i in np.flatnonzero(F)]
    k = len(rows)
    system = [[sum((p * q for p, q in zip(rows[i], rows[j])), Fraction(0)) for j in range(k)] + [Fraction(1)]
              for i in range(k)]
    for col in range(k):  # Gauss-Jordan elimination of the Gram system, exact
        pivot = next((i for i in range(col, k) if system[i][col] != 0), None)
        if pivot is None:
            return None  # dependent rows: the multipliers are not unique
        system[col], system[pivot] = system[pivot], system[col]
        system[col] = [v / system[col][col] for v in system[col]]
        for i in range(k):
            if i != col and system[i][col] != 0:
                system[i] = [v - system[i][col] * p for v, p in zip(system[i], system[col])]
    lam = [system[i][k] for i in range(k)]
    if any(v < 0 for v in lam):
        return None
    w = [sum((lam[i] * rows[i][a] for i in range(k)), Fraction(0)) for a in range(Z.shape[1])]
    undecided, below = _undecided(Z, w)
    if below:
        return None
    support = np.zeros(len(Z), bool)
    for j in np.flatnonzero(undecided):
        margin = sum((Fraction(v) * c for v, c in zip(Z[j], w)), Fraction(0))
        if margin < 1:
            return None
        support[j] = margin == 1
    return support


def _undecided(Z: np.ndarray, w: list[Fraction]) -> tuple[np.ndarray, bool]:
    """(the points (n,) of the signed points Z (n, d) whose exact margin under the rational w float64 cannot tell
    from 1, whether float64 shows some margin below 1). m_j = Z_j fl(w) is computed with fl(w) rounded to nearest;
    its error is at most (d + 1) u |z_j|^T |fl(w)| (1 + O(u)) plus d + ||z_j||_1 times 2^-1075 (underflow), u =
    eps / 2, in any order of summation; the bound used is twice that. All points are undecided where fl(w)
    overflows."""
    n, d = Z.shape
    try:
        w_f = np.array([float(v) for v in w])
    except OverflowError:
        return np.ones(n, bool), False
    with np.errstate(all="ignore"):
        margins = Z @ w_f
        bound = (d + 1) * np.finfo(float).eps * (np.abs(Z) @ np.abs(w_f)) \
            + (d + np.abs(Z).sum(1)) * 2.0**-1074
    decided = np.abs(margins - 1) > bound  # False where any of them is not finite
    return ~decided, bool((decided & (margins < 1)).any())


def _exact_face(Z: np.ndarray, C: np.ndarray) -> np.ndarray | None:
    """The face F (n,) of the exact SVM of the points C (n,) of the signed points Z (n, d): the minimum-norm w_C
    with every m_i(w_C) >= 1 on C is Z_F^T lam with lam > 0, the rows of Z_F independent and m_i(w_C) = 1 on F (so
    ``_exact_certificate(Z, F)`` certifies w_hat where the other margins are >= 1 too). Lawson and Hanson's NNLS
    for the least-distance problem, min ||E u - f|| over u >= 0 with E = [Z_C^T; 1^T] and f = e_(d+1) (then
    w_C = -r[:d] / r[d] for r = E u - f, and lam = u / (1 - sum u)), in exact rational arithmetic on the float64
    data, through the Gram matrix E^T E = Z_C Z_C^T + 1, from the empty set; each step lowers ||E u - f|| strictly, so it ends in finitely many steps (None
    after 3 |C| + 10, or where a step breaks its invariants, which exact arithmetic rules out)."""
    points = np.flatnonzero(C)
    m = len(points)
    rows = [[Fraction(v) for v in Z[i]] + [Fraction(1)] for i in points]
    gram = [[Fraction(0)] * m for _ in range(m)]
    for i in range(m):
        for j in range(i, m):
            gram[i][j] = gram[j][i] = sum((a * b for a, b in zip(rows[i], rows[j])), Fraction(0))

    def solve(P):  # the least-squares coefficients s of E_P s = f: (E_P^T E_P) s = E_P^T f = 1; None if singular
        system = [[gram[i][j] for j in P] + [Fraction(1)] for i in P]
        for col in range(len(P)):
            pivot = next((i for i in range(col, len(P)) if system[i][col] != 0), None)
            if pivot is None:
                return None
            system[col], system[pivot] = system[pivot], system[col]
            system[col] = [v / system[col][col] for v in system[col]]
            for i in range(len(P)):
                if i != col and system[i][col] != 0:
                    system[i] = [v - system[i][col] * p for v, p in zip(system[i], system[col])]
        return [row[-1] for row in system]

    P, u = [], {}
    for _ in range(3 * m + 10):
        dual = [1 - sum((gram[j][i] * u[i] for i in P), Fraction(0)) for j in range(m)]  # E^T (f - E u)
        entering = [j for j in range(m) if j not in u and dual[j] > 0]
        if not entering:
            F = np.zeros(len(C), bool)
            F[points[P]] = True
            return F if P and sum(u.values()) < 1 else None
        P.append(max(entering, key=lambda j: dual[j]))
        u[P[-1]] = Fraction(0)
        while True:
            s = solve(P)
            if s is None:
                return None
            if all(v > 0 for v in s):
                u = dict(zip(P, s))
                break
            steps = [u[j] / (u[j] - v) for j, v in zip(P, s) if v <= 0 and u[j] > 0]
            if not steps:
                return None
            step = min(steps)
            u = {j: u[j] + step * (v - u[j]) for j, v in zip(P, s)}
            P = [j for j in P if u[j] > 0]
            u = {j: u[j] for j in P}
    return None


def _decided_support(Z: np.ndarray, S: np.ndarray, alpha: np.ndarray, w: np.ndarray) -> np.ndarray | None:
    """The support vectors that (H) is about, for the support S (n,) of ``svm``'s solution (w, alpha) of the signed
    points Z (n, d) (scaled to max ||z_i|| ~ 1), decided in exact rational arithmetic on the data: by S if it
    certifies w_hat exactly (``_exact_certificate``), else by the face of the exact SVM of the candidates C = S, the
    points within ``NEAR_TOL`` of the margin and the active points of alpha (``_exact_face``), if that certifies
    it; None where neither does. Where C has more than ``EXACT_MAX`` points, S itself if it is clear at float64 (no
    near point outside S, and no point of S that S can lose and still pass the KKT conditions to rounding), else
    None."""
    n = len(S)
    near = np.abs(Z @ w - 1) <= NEAR_TOL
    candidates = S | near | (alpha > ACTIVE_TOL * alpha.max())
    if candidates.sum() > EXACT_MAX:
        clear = not (near & ~S).any() and not any(
            (T := S & (np.arange(n) != i)).any() and _smaller(Z, T, i, alpha) for i in np.flatnonzero(S))
        return S if clear else None
    if S.any() and (support := _exact_certificate(Z, S)) is not None:
        return support
    F = _exact_face(Z, candidates)
    return None if F is None else _exact_certificate(Z, F)


def offset(X: ArrayLike, y: ArrayLike, c: float = 1.0, *, solution: SVM | None = None) -> np.ndarray:
    r"""The finite part :math:`\tilde w` of the prelude's hypothesis (H): the minimum-norm w with
    :math:`y_i x_i^\top w = \log(c/\alpha_i)` for every support vector i.

    The dual multipliers :math:`\alpha` are those for which such a w exists (they are unique and do not depend on
    c). Gradient descent with step :math:`\eta` on the mean loss has :math:`w(t) = \hat w \log t + \tilde w + r(t)`
    with :math:`c = \eta/n`; normalized gradient descent uses c = 1 (the prelude).

    Parameters
    ----------
    X : ArrayLike
        The points, shape (..., n, d).
    y : ArrayLike
        Their labels, -1 or +1, shape (..., n).
    c : float, default=1.0
        The constant c.
    solution : SVM or None, default=None
        The SVM of X, y if already solved.

    Returns
    -------
    ndarray
        :math:`\tilde w`, shape (..., d).

    Raises
    ------
    ValueError
        If F below has no minimizer ((H) fails) or only one where some :math:`\alpha_i/\sum_j \alpha_j` is at most
        :math:`10 k \varepsilon\, \mathrm{cond}(Z_S)^2`, the accuracy of the multipliers (:math:`Z_S`: the k signed
        support vectors; float64 cannot tell such an :math:`\alpha_i` from 0); if the support vectors have exact
        rank r but their r-th singular value is not above :math:`k\varepsilon` times the largest (float64 cannot
        tell them from vectors of smaller rank), or more than ``EXACT_MAX`` of them look dependent in float64 (their
        rank is decided in exact arithmetic for at most that many); if no face near the support certifies the SVM
        exactly (the message names the points within ``NEAR_TOL`` of the margin; the candidates also include the
        solver's active points); if ``solution`` misses a support vector or has one too many.
    ~attnsvm.svm.SolverError
        If ``solution`` is None and the computed SVM misses a support vector, or Newton's method does not converge.

    Notes
    -----
    (H) is about the support vectors, which float64 cannot always tell ((H) jumps with them: x = (1, 0.5),
    (1, -0.5), :math:`(1 + 2^{-52}, 0)` has log 2 where (1, 0) has log 3), so they are decided in exact rational
    arithmetic on the data, by a face that certifies the SVM exactly (independent rows, multipliers :math:`\ge 0`,
    every margin :math:`\ge 1`): the support S of ``solution`` (see ``svm``), or else the face of the exact SVM of
    the candidates (S, the points within ``NEAR_TOL`` of the margin and the solver's active points), which
    Lawson and Hanson's NNLS finds in rational arithmetic. A margin is computed
    exactly only where its float64 value, with its rounding bound, cannot tell it from 1. Where the candidates
    number more than ``EXACT_MAX``, S is used if float64 decides it clearly, and refused otherwise.

    The gradient of the convex :math:`F(v) = \sum_{i \in S} c\, e^{-m_i(v)} + \langle \hat w, v\rangle` vanishes iff
    the :math:`\alpha_i = c\, e^{-m_i(v)}` are dual multipliers, so :math:`\tilde w` is the minimum-norm minimizer of
    F, found by Newton's method whatever multipliers ``svm`` returned, on the r largest singular values of
    :math:`Z_S`, r its rank decided in exact arithmetic (skipped where float64 shows full rank); support vectors
    within rounding of linear dependence but not exactly dependent (x = (1, -h), (1, 2h) for :math:`h \le 10^{-16}`,
    or a point set to a rounded average of others) are refused: treating them as dependent would give a wrong
    :math:`\tilde w`. The multipliers found must give back :math:`\sum_{i \in S} \alpha_i y_i x_i` = ``solution.w``
    to the relative accuracy ``OFFSET_TOL``.

    Accuracy: the refusal guards the verdict on (H), not :math:`\tilde w`. :math:`\tilde w = Z_S^+(\log c - \log
    \alpha)` inherits the errors of :math:`\log \alpha_i`, about :math:`a/s_i` for :math:`a = 10 k \varepsilon\,
    \mathrm{cond}(Z_S)^2` and :math:`s_i = \alpha_i/\sum_j \alpha_j`, so it is off by up to about
    :math:`\|Z_S^+\| \max_i a/s_i` (first order). Accepted data can have a large estimate (x = (1, -h), (1, h),
    y = (1, 1), :math:`\tilde w = (\log 2, 0)`: about 6e-12 at h = 0.1, 6 at h = 1e-5; refused for
    :math:`h \le 5\times 10^{-8}`); how much of it the actual error reaches depends on the BLAS kernels numpy runs
    (see ``attnsvm.codepaths``).

    Examples
    --------
    >>> import numpy as np
    >>> from attnsvm import linear
    >>> X, y = np.array([[2.0, 0.0], [0.0, 1.0]]), np.array([1.0, -1.0])  # alpha = (1/4, 1)
    >>> linear.offset(X, y).round(12).tolist()  # 2 w_1 = log 4, -w_2 = log 1
    [0.69314718056, 0.0]
    >>> X3 = np.array([[1.0, 0.0], [1.0, 1.0], [1.0, -1.0]])  # dependent: (H) holds for alpha = (1/3, 1/3, 1/3)
    >>> bool(np.allclose(linear.offset(X3, np.ones(3)), [np.log(3), 0.0], rtol=0, atol=1e-12))  # m_i = log 3
    True
    """
    X, y = _data(X, y)
    c = positive_float(c, "c")
    given, solution = solution, _solution(X, y, solution)
    Z = _signed(X, y)
    batch, d = Z.shape[:-2], Z.shape[-1]
    out = np.empty(batch + (d,))
    for b in np.ndindex(batch):
        e, where = _exponent(_norm(Z[b]).max()), f" (problem {b})" if b else ""
        if not np.array_equal(np.ldexp(np.ldexp(Z[b], -e), e), Z[b]):
            e = 0  # scaling would round subnormal entries: decide on the data as they are
        decided = _decided_support(np.ldexp(Z[b], -e), solution.support[b], np.ldexp(solution.alpha[b], 2 * e),
                                   np.ldexp(solution.w[b], e))
        if decided is None:
            near = np.flatnonzero(np.abs(Z[b] @ solution.w[b] - 1) <= NEAR_TOL)
            raise ValueError(
                f"offset cannot decide the support vectors of X, y{where}: the points {near.tolist()} lie within "
                f"{NEAR_TOL:.0e} of the margin, float64 cannot tell which of them are on it, and no face of them "
                "certifies the SVM in exact arithmetic; (H) and w_tilde jump with that choice. Move those points "
                "off the margin or onto it exactly (e.g. exact binary fractions)")
        S = np.flatnonzero(decided)
        rank = _exact_rank(Z[b][S])
        if rank is None:
            raise ValueError(
                f"offset cannot decide the rank of the {len(S)} support vectors of X, y{where}: float64 shows them "
                f"nearly dependent, and deciding their rank in exact arithmetic is done for at most EXACT_MAX = "
                f"{EXACT_MAX} of them. Pass data with fewer support vectors, or ones farther from linear dependence")
        log_alpha, pinv, cond, converged = _multipliers_of_h(Z[b][S], rank)
        if log_alpha is None:
            raise ValueError(
                f"offset cannot compute the multipliers of (H) for X, y{where}, float64 cannot tell: the support "
                f"vectors {S.tolist()} have rank {rank} in exact arithmetic, but in float64 they cannot be told from "
                f"vectors of smaller rank (condition number {cond:.1e} over their {rank} largest singular values, "
                f"not below 1 / (k eps) = {1 / (len(S) * np.finfo(float).eps):.1e}); treating them as dependent "
                "would give a wrong w_tilde. Pass X with support vectors farther from linear dependence (e.g. "
                "rescale the direction in which they nearly coincide), or exactly dependent ones (e.g. exact binary "
                "fractions)")
        share = np.exp(log_alpha - _logsumexp(log_alpha))  # alpha_i / sum_j alpha_j
        accuracy = 10 * len(S) * np.finfo(float).eps * cond**2  # first order, for relative errors eps in Z_S
        small = share <= accuracy
        if small.any():
            raise ValueError(
                f"hypothesis (H) fails for X, y{where}, or float64 cannot tell: minimizing F drives the multipliers "
                f"of the support vectors {S[small].tolist()} to alpha_i / sum_j alpha_j = "
                f"{', '.join(f'{v:.1e}' for v in share[small])}, not above {accuracy:.1e}, the accuracy of the "
                f"multipliers on these data (the support vectors have condition number {cond:.1e}). (H) needs "
                "alpha_i > 0 on every support vector (without it w(t) - w_hat log t need not stay bounded): pass X, y "
                "that satisfy it with multipliers float64 resolves, e.g. well-conditioned, linearly independent "
                "support vectors with positive multipliers")
        if not converged:
            raise SolverError(f"offset: Newton's method on F did not converge for X, y{where}")
        w_b, radius = solution.w[b], _norm(Z[b][S]).max()  # in units where ||w_hat|| = 1 and max ||z_i|| = 1:
        unit = np.exp(log_alpha + np.log(radius) - np.log(_norm(w_b))) @ (Z[b][S] / radius)  # no overflow
        mismatch = _norm(unit - w_b / _norm(w_b))
        if not mismatch <= OFFSET_TOL:
            raise (SolverError if given is None else ValueError)(
                f"offset: the multipliers of (H) on the support vectors {S.tolist()}{where} give sum_i alpha_i y_i x_i "
                f"{mismatch:.1e} (relative) away from solution.w, more than OFFSET_TOL = {OFFSET_TOL:.0e}: "
                "solution.support misses a support vector or has one too many, or solution.w is not accurate "
                "enough; pass solution=None (the exact solver)")
        out[b] = pinv @ (np.log(c) - log_alpha)
    return out


def residual(X: ArrayLike, y: ArrayLike, w: ArrayLike, t: ArrayLike, *, solution: SVM | None = None) -> np.ndarray:
    r"""The residual :math:`\rho(t) = w(t) - \hat w \log t`.

    Parameters
    ----------
    X : ArrayLike
        The points, shape (..., n, d).
    y : ArrayLike
        Their labels, -1 or +1, shape (..., n).
    w : ArrayLike
        Iterates (records, ..., d) at the steps t, or one w (..., d) at a scalar t.
    t : ArrayLike
        The steps (records,), each :math:`t \ge 1`, or one step.
    solution : SVM or None, default=None
        The SVM of X, y if already solved, checked as in ``offset`` (KKT conditions to the relative accuracy
        GAP_TOL["hard"] = 1e-6, so a solution.w off by less, e.g. 1e-7 relative, is accepted and its error passes
        into :math:`\rho`).

    Returns
    -------
    ndarray
        :math:`\rho(t)`, the shape of w.

    Raises
    ------
    ValueError
        If t is not one step :math:`t \ge 1` or one per record of w, or ``solution`` is not the SVM of X, y.

    Examples
    --------
    >>> import numpy as np
    >>> from attnsvm import linear
    >>> X, y = np.array([[1.0, 0.0]]), np.array([1.0])  # w_hat = (1, 0)
    >>> linear.residual(X, y, [[1.0, 2.0], [3.0, 2.0]], [1, 10]).round(4).tolist()
    [[1.0, 2.0], [0.6974, 2.0]]
    """
    X, y = _data(X, y)
    solution = _solution(X, y, solution)
    w = _vector(w, "w", X.shape[-1])
    t = as_tensor(t, "t").detach().numpy()
    if t.ndim > 1 or (t.ndim == 1 and (w.ndim < 2 or t.shape[0] != w.shape[0])) or (t < 1).any():
        raise ValueError(f"t must be one step t >= 1, or one step t >= 1 per record of w (then w has shape "
                         f"(records, ..., d)); w has shape {w.shape}, got t = {t!r}")
    logs = np.log(t).reshape(t.shape + (1,) * (w.ndim - t.ndim))
    return w - logs * solution.w
