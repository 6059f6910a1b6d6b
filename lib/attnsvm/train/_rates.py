"""Least-squares rates: a straight line fitted on the axes where a convergence law is straight.

An exponential rate y ~ C e^{-r k} is a line in (k, log y); a power law y ~ C k^{-p} a line in (log k, log y);
a logarithmic growth y ~ c log k a line in (log k, y). ``fit_line`` takes the data and the two axes' scales and
returns the slope, the intercept and the coefficient of determination of the fit on those axes.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from numpy.typing import ArrayLike

from .._checks import on_cpu, option

__all__ = ["Fit", "fit_line", "SCALES"]

SCALES = ("linear", "log")


class Fit(NamedTuple):
    r"""A least-squares line :math:`Y = \mathrm{slope}\, X + \mathrm{intercept}` on the transformed axes, and its
    :math:`R^2`.

    Parameters
    ----------
    slope : float
        The slope.
    intercept : float
        The intercept.
    r2 : float
        :math:`R^2` (1: an exact line).

    Examples
    --------
    >>> from attnsvm import train
    >>> train.Fit._fields
    ('slope', 'intercept', 'r2')
    """

    slope: float
    intercept: float
    r2: float


def _axis(values: ArrayLike, name: str, scale: str) -> np.ndarray:
    """`values` as a finite 1-d float array, its natural log for scale "log" (all entries must be > 0)."""
    if torch.is_tensor(values):  # e.g. losses recorded with their graph
        values = on_cpu(values, name).detach()
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name} must be a 1-d array of real numbers, got {type(values).__name__}") from err
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-d (one value per point), got shape {array.shape}")
    if not np.isfinite(array).all():
        raise ValueError(f"{name} contains NaN or infinite entries: pass finite values only")
    if scale == "log":
        if not (array > 0).all():
            raise ValueError(f'{name} must be > 0 for {name[0]}_scale="log" (its logarithm is fitted), got '
                             f"min {array.min()!r}")
        array = np.log(array)
    return array


def fit_line(x: ArrayLike, y: ArrayLike, *, x_scale: str = "linear", y_scale: str = "log") -> Fit:
    r"""Fit :math:`Y = \mathrm{slope}\, X + \mathrm{intercept}` by least squares, with X = x or log x and Y = y or log y
    (natural logs).

    Each axis is centred and divided by a power of two near its largest magnitude before the sums, so the fit
    holds at any float64 scale (:math:`x \sim 10^{-200}` or :math:`10^{200}`).

    Parameters
    ----------
    x : ArrayLike
        1-d, at least three points, not all equal.
    y : ArrayLike
        1-d, of the same length.
    x_scale : {'linear', 'log'}, default='linear'
        X = x or log x.
    y_scale : {'linear', 'log'}, default='log'
        Y = y or log y.

    Returns
    -------
    Fit
        The slope, the intercept and :math:`R^2`.

    Raises
    ------
    ValueError
        If x and y are not finite, 1-d and of the same length with at least three points, x is constant, or a
        log scale meets a value :math:`\le 0`.
    FloatingPointError
        If the slope or the intercept is beyond float64's range.

    Examples
    --------
    >>> import numpy as np
    >>> from attnsvm import train
    >>> k = np.arange(1.0, 50.0)
    >>> fit = train.fit_line(k, 3.0 * np.exp(-0.2 * k))  # exponential: a line in (k, log y)
    >>> round(fit.slope, 6), round(fit.r2, 6)
    (-0.2, 1.0)
    >>> round(train.fit_line(k, k**-2.0, x_scale="log").slope, 6)  # a power law
    -2.0
    """
    x_scale, y_scale = option(x_scale, "x_scale", SCALES), option(y_scale, "y_scale", SCALES)
    X, Y = _axis(x, "x", x_scale), _axis(y, "y", y_scale)
    if X.shape != Y.shape:
        raise ValueError(f"x and y must have the same length, got {X.size} and {Y.size}")
    if X.size < 3:
        raise ValueError(f"x and y must hold at least 3 points (a line through 2 says nothing), got {X.size}")
    if np.ptp(X) == 0:
        raise ValueError("x must not be constant (the slope would be undefined)")
    # Divide each axis by a power of two near its largest magnitude first (exact), so that neither the means nor
    # the products over- or underflow (x ~ 1e-200 or 1e200); then scale the slope and the intercept back.
    x_exp, y_exp = (int(np.frexp(np.abs(A).max())[1]) - 1 for A in (X, Y))  # 2^exp <= max |A| < 2^(exp+1)
    y_exp = y_exp if np.abs(Y).max() > 0 else 0
    Xs, Ys = np.ldexp(X, -x_exp), np.ldexp(Y, -y_exp)
    Xc, Yc = Xs - Xs.mean(), Ys - Ys.mean()
    spread = Xc @ Xc
    if spread == 0:  # x differs only in digits that the squares lose
        raise ValueError("x must not be constant to float64 precision (the slope would be undefined)")
    unit_slope = (Xc @ Yc) / spread
    with np.errstate(over="ignore"):
        slope = float(np.ldexp(unit_slope, y_exp - x_exp))
        intercept = float(np.ldexp(Ys.mean() - unit_slope * Xs.mean(), y_exp))
    if not (np.isfinite(slope) and np.isfinite(intercept)):
        raise FloatingPointError(f"the fitted slope ({slope!r}) or intercept ({intercept!r}) is outside float64's "
                                 f"range: rescale x or y")
    total = float(Yc @ Yc)
    residual = float(((Yc - unit_slope * Xc) ** 2).sum())
    r2 = 1.0 if total == 0 else 1.0 - residual / total
    return Fit(slope, intercept, r2)
