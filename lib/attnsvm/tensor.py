"""The tensor-trick view of softmax attention (paper C) and the Lipschitz constant of its loss gradient.

Sizes follow the book: T tokens per sequence (paper C's n), dimension d. Paper C's objects keep its names:
attention weights X (d, d) (X = Q K^T, the book's W^T) with x = vec(X) in R^{d^2}, inputs A1 (queries),
A2 (keys), A3 (values), each (T, d).

- vec/mat are ROW-major (vec(X) stacks the rows of X), and then (A1 kron A2) vec(X) = vec(A1 X A2^T).
- The row block A_{j0} (T, d^2) of A1 kron A2 gives the logits of query j0: A_{j0} x = row j0 of A1 X A2^T.
- u(x) = exp(A_{j0} x), alpha(x) = <u(x), 1>, f(x) = u(x) / alpha(x) (the softmax row), h(y) = A3 y_{i0}.
  (These are paper C's u, alpha, f: not the book's token values u, selection alpha or model output f.)
- The loss of one entry (l0, j0, i0) is a function of s = <f(x), h> and a target b, chosen by ``loss``:
  "paper" g(b s) as written in paper C (g the sigmoid; it INCREASES with the margin b s, so minimizing it is
  wrong), "sigmoid" g(-b s) = 1 - g(b s) (the corrected sigmoid loss), "logistic" log(1 + exp(-b s)) (the book's
  loss) and "squared" (s - b)^2 (paper C's l2 variant, paper D's formulation).
- attention="linear" replaces the softmax row f(x) by the unnormalized row A_{j0} x (linear attention).
- Curvature: ``hessian`` is the closed-form Hessian A_{j0}^T H_a A_{j0}; ``lipschitz_bound`` a Lipschitz constant of
  the gradient valid on all of R^{d^2} (an upper bound); ``empirical_lipschitz`` (random pairs and points) and
  ``max_hessian_norm`` (multi-start ascent over the R-ball) give lower bounds on the constant over the ball;
  ``gap_study`` (E7.3) and ``attention_study`` (E7.4) run them over the chapter's grids of T and R.
  (The chapter writes the attention entry <f(x), h> as psi; the code calls it s.)

Indices are 0-based in code (j0 = 0 is the math's j_0 = 1). Book translation (chapter 7): the book's sequence
i is C's l0 (C's m is the book's n), A2 = X_i (keys), row j0 of A1 is the query z_i, A3 = X_i and y_{i0} = v
(so h = X_i v), b = Y_i, and C's X is the book's W^T, so x = vec(W^T).

Everything is float64 torch and broadcasts over leading batch dimensions: A_{j0} (..., T, D), x (..., D),
h (..., T), b (...), with D = d^2.

Examples
--------
>>> import torch
>>> from attnsvm import tensor
>>> Aj, h, b = tensor.random_instance(T=5, d=3, R=4.0, seed=0)
>>> x = tensor.sample_ball(Aj, 4.0, 1, seed=0)[0]  # a point of the ball ||A_j0 x|| <= 4
>>> H = tensor.hessian(Aj, x, h, b, loss="logistic")
>>> bool(torch.linalg.matrix_norm(H, ord=2) <= tensor.lipschitz_bound(Aj, h, b, loss="logistic"))
True
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import numpy as np
import torch
from numpy.typing import ArrayLike

from ._checks import memory as _memory, number as _positive, option as _option, seed as _checked_seed
from ._checks import as_tensor, boolean, budget, choice, finite_result, on_cpu, positive_float, positive_int

__all__ = ["Ascent", "Comparison", "Estimate", "Instance", "Study", "alpha", "attention_row", "attention_study",
           "descend", "empirical_lipschitz", "f", "gap_study", "gradient", "h", "hessian", "hessian_norm",
           "into_ball", "kron", "kron_logits", "lipschitz_bound", "log10_bound", "loss", "mat", "max_hessian_norm",
           "paper_gradient", "random_instance", "ratios", "row_block", "sample_ball", "u", "vec", "LOSSES",
           "ATTENTIONS", "MAX_STEPS", "MAX_RECORDS"]

LOSSES = ("paper", "sigmoid", "logistic", "squared")  # the losses of one entry (the ``loss`` argument)
ATTENTIONS = ("softmax", "linear")
_G1 = 0.25  # sup |g'| of the sigmoid g
_G2 = 1.0 / (6.0 * math.sqrt(3.0))  # sup |g''| of the sigmoid g
MAX_STEPS = 10**6  # optimizer steps or power iterations (each a batched autograd pass) one call may run
MAX_RECORDS = 10**7  # losses `descend` keeps in memory


# ------------------------------------------------------------------ argument checks (private)

def _matrix(value, name: str) -> torch.Tensor:
    tensor = as_tensor(value, name)
    if tensor.ndim < 2:
        raise ValueError(f"{name} must be a matrix (..., rows, columns), got shape {tuple(tensor.shape)}")
    return tensor


def _block(value, name: str) -> torch.Tensor:
    """A row block A_{j0} (..., T, D) with T >= 1 tokens and D >= 1 columns."""
    tensor = _matrix(value, name)
    if 0 in tensor.shape:
        raise ValueError(f"{name} must be a row block (..., T, d^2) with T >= 1 and d >= 1 and no empty batch "
                         f"dimension, got shape {tuple(tensor.shape)}")
    return tensor


def _batch(*named) -> tuple:
    """The broadcast batch shape of (name, batch shape) pairs, or a ValueError naming them."""
    try:
        return tuple(torch.broadcast_shapes(*(shape for _, shape in named)))
    except RuntimeError as err:
        shapes = ", ".join(f"{name} {tuple(shape)}" for name, shape in named)
        raise ValueError(f"the batch shapes do not broadcast ({shapes}): pass one batch shape, or 1 where it "
                         f"is shared") from err


def _finite(value, what: str, blame: str):
    """`checks.finite_result` blaming the arguments in `blame` (never hand back NaN or inf)."""
    return finite_result(value, what, f"{blame} (scale it down)")


def _size(tensor: torch.Tensor) -> int:
    return int(np.prod(tensor.shape, dtype=float))


# ------------------------------------------------------------------ vec, mat, Kronecker

def vec(X: ArrayLike) -> torch.Tensor:
    """Row-major vectorization (paper C): (..., p, q) to (..., pq); row i of X is entries iq to iq + q - 1.

    Parameters
    ----------
    X : ArrayLike
        Matrices, shape (..., p, q).

    Returns
    -------
    Tensor
        The vectors, shape (..., pq).

    Raises
    ------
    ValueError
        If X is not a matrix.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import tensor
    >>> X = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64)
    >>> tensor.vec(X).tolist()
    [1.0, 2.0, 3.0, 4.0]
    """
    X = _matrix(X, "X")
    return X.reshape(X.shape[:-2] + (-1,))


def mat(x: ArrayLike, rows: int | None = None) -> torch.Tensor:
    """The inverse of ``vec``: (..., pq) to (..., p, q).

    Parameters
    ----------
    x : ArrayLike
        Vectors, shape (..., pq).
    rows : int or None, default=None
        p (None: square, p = q).

    Returns
    -------
    Tensor
        The matrices, shape (..., p, q).

    Raises
    ------
    ValueError
        If x is empty, not a square number of entries (rows=None), or rows does not divide its length.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import tensor
    >>> x = torch.arange(6, dtype=torch.float64)
    >>> tensor.mat(x, rows=2).shape
    torch.Size([2, 3])
    >>> bool((tensor.vec(tensor.mat(x, rows=2)) == x).all())
    True
    """
    x = as_tensor(x, "x")
    if x.ndim < 1 or x.shape[-1] < 1:
        raise ValueError(f"x must be a vector (..., p q) with p q >= 1 entries, got shape {tuple(x.shape)}")
    size = x.shape[-1]
    if rows is None:
        rows = math.isqrt(size)
        if rows * rows != size:
            raise ValueError(f"x has {size} entries, not a square number: pass rows= for a non-square matrix")
    rows = positive_int(rows, "rows")
    if size % rows:
        raise ValueError(f"x has {size} entries, which {rows} rows cannot hold: rows must divide x.shape[-1]")
    return x.reshape(x.shape[:-1] + (rows, size // rows))


def kron(A1: ArrayLike, A2: ArrayLike) -> torch.Tensor:
    r"""Batched Kronecker product: entry :math:`(i_1 n_2 + i_2, j_1 d_2 + j_2)` is :math:`A_1[i_1, j_1]\,
    A_2[i_2, j_2]` (0-based).

    Parameters
    ----------
    A1 : ArrayLike
        Matrices, shape (..., :math:`n_1`, :math:`d_1`).
    A2 : ArrayLike
        Matrices, shape (..., :math:`n_2`, :math:`d_2`).

    Returns
    -------
    Tensor
        :math:`A_1 \otimes A_2`, shape (..., :math:`n_1 n_2`, :math:`d_1 d_2`).

    Raises
    ------
    ValueError
        If A1 or A2 is not a matrix, or their batch shapes do not broadcast.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import tensor
    >>> A1, A2 = torch.eye(2, dtype=torch.float64), torch.ones(3, 2, dtype=torch.float64)
    >>> K = tensor.kron(A1, A2)
    >>> K.shape, bool(torch.equal(K, torch.kron(A1, A2)))
    (torch.Size([6, 4]), True)
    """
    A1, A2 = _matrix(A1, "A1"), _matrix(A2, "A2")
    (n1, d1), (n2, d2) = A1.shape[-2:], A2.shape[-2:]
    batch = _batch(("A1", A1.shape[:-2]), ("A2", A2.shape[:-2]))
    _memory(np.prod(batch, dtype=float) * n1 * n2 * d1 * d2, "A1 and A2 (their Kronecker product)")
    K = torch.einsum("...ij,...kl->...ikjl", A1, A2)
    return _finite(K.reshape(K.shape[:-4] + (n1 * n2, d1 * d2)), "A1 kron A2", "A1 or A2 is too large")


def kron_logits(A1: ArrayLike, A2: ArrayLike, X: ArrayLike) -> torch.Tensor:
    r""":math:`(A_1 \otimes A_2)\,\mathrm{vec}(X)`: with row-major vec this is :math:`\mathrm{vec}(A_1 X A_2^\top)`, all
    logits at once.

    Parameters
    ----------
    A1 : ArrayLike
        Matrices, shape (..., :math:`n_1`, :math:`d_1`).
    A2 : ArrayLike
        Matrices, shape (..., :math:`n_2`, :math:`d_2`).
    X : ArrayLike
        Matrices, shape (..., :math:`d_1`, :math:`d_2`).

    Returns
    -------
    Tensor
        The logits, shape (..., :math:`n_1 n_2`).

    Raises
    ------
    ValueError
        If the shapes do not fit.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import tensor
    >>> A1, A2, X = (torch.randn(3, 2, dtype=torch.float64) for _ in range(3))
    >>> X = X[:2]
    >>> logits = tensor.kron_logits(A1, A2, X)
    >>> logits.shape, bool(torch.allclose(logits, tensor.vec(A1 @ X @ A2.T)))
    (torch.Size([9]), True)
    """
    A1, A2, X = _matrix(A1, "A1"), _matrix(A2, "A2"), _matrix(X, "X")
    if X.shape[-2:] != (A1.shape[-1], A2.shape[-1]):
        raise ValueError(f"X must have shape (..., {A1.shape[-1]}, {A2.shape[-1]}) (columns of A1 by columns of "
                         f"A2), got {tuple(X.shape)}")
    _batch(("A1", A1.shape[:-2]), ("A2", A2.shape[:-2]), ("X", X.shape[:-2]))
    return _finite((kron(A1, A2) @ vec(X)[..., None])[..., 0], "(A1 kron A2) vec(X)", "A1, A2 or X is too large")


def row_block(A1: ArrayLike, A2: ArrayLike, j0: int) -> torch.Tensor:
    r"""The row block :math:`A_{j_0}`: rows :math:`j_0 n_2` to :math:`j_0 n_2 + n_2 - 1` of :math:`A_1 \otimes A_2`,
    that is :math:`A_1[j_0] \otimes A_2`.

    Parameters
    ----------
    A1 : ArrayLike
        Matrices, shape (..., :math:`n_1`, :math:`d_1`).
    A2 : ArrayLike
        Matrices, shape (..., :math:`n_2`, :math:`d_2`).
    j0 : int
        A row of A1, in :math:`[0, n_1)`.

    Returns
    -------
    Tensor
        :math:`A_{j_0}`, shape (..., :math:`n_2`, :math:`d_1 d_2`).

    Raises
    ------
    ValueError
        If A1 has no row or j0 is out of range.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import tensor
    >>> A1, A2 = torch.randn(3, 2, dtype=torch.float64), torch.randn(3, 2, dtype=torch.float64)
    >>> Aj = tensor.row_block(A1, A2, 1)
    >>> Aj.shape, bool(torch.equal(Aj, tensor.kron(A1, A2)[3:6]))
    (torch.Size([3, 4]), True)
    """
    A1, A2 = _matrix(A1, "A1"), _matrix(A2, "A2")
    if A1.shape[-2] < 1:
        raise ValueError(f"A1 must have at least one row (a query) to take a row block of, got shape {tuple(A1.shape)}")
    if isinstance(j0, bool) or not isinstance(j0, (int, np.integer)) or not 0 <= j0 < A1.shape[-2]:
        raise ValueError(f"j0 must be a query index in [0, {A1.shape[-2] - 1}] (a row of A1), got {j0!r}")
    return kron(A1[..., j0:j0 + 1, :], A2)


# ------------------------------------------------------------------ paper C's functions of x

def _block_and_point(Aj, x):
    Aj, x = _block(Aj, "Aj"), as_tensor(x, "x")
    if x.ndim < 1 or x.shape[-1] != Aj.shape[-1]:
        raise ValueError(f"x must have shape (..., {Aj.shape[-1]}) (x = vec(X) has as many entries as Aj, the "
                         f"block A_j0, has columns), got {tuple(x.shape)}")
    _batch(("Aj", Aj.shape[:-2]), ("x", x.shape[:-1]))
    return Aj, x


def _logits(Aj, x) -> torch.Tensor:
    return (Aj @ x[..., None])[..., 0]


def _finite_logits(Aj, x) -> torch.Tensor:
    """The logits A_{j0} x of checked arguments, refused (FloatingPointError) where they overflow."""
    return _finite(_logits(Aj, x), "the logits A_j0 x", "Aj or x is too large")


def u(Aj: ArrayLike, x: ArrayLike) -> torch.Tensor:
    r""":math:`u(x) = \exp(A_{j_0} x)` (paper C, Definition 3.1).

    Parameters
    ----------
    Aj : ArrayLike
        The row block :math:`A_{j_0}`, shape (..., T, :math:`d^2`).
    x : ArrayLike
        Points, shape (..., :math:`d^2`).

    Returns
    -------
    Tensor
        u(x), shape (..., T).

    Raises
    ------
    ValueError
        If the shapes do not fit (the message names the argument).

    Examples
    --------
    >>> from attnsvm import tensor
    >>> Aj, h, b = tensor.random_instance(T=3, d=2, R=1.0, seed=0)
    >>> x = tensor.sample_ball(Aj, 1.0, 1, seed=0)[0]
    >>> tensor.u(Aj, x).shape, bool((tensor.u(Aj, x) > 0).all())
    (torch.Size([3]), True)
    """
    return finite_result(torch.exp(_finite_logits(*_block_and_point(Aj, x))), "u(x) = exp(A_j0 x)",
                         "a logit A_j0 x exceeds 709: scale Aj or x down (f, the softmax, has no such limit)")


def alpha(Aj: ArrayLike, x: ArrayLike) -> torch.Tensor:
    r""":math:`\alpha(x) = \langle u(x), \mathbf{1}_T\rangle` (Definition 3.2).

    Parameters
    ----------
    Aj : ArrayLike
        The row block :math:`A_{j_0}`, shape (..., T, :math:`d^2`).
    x : ArrayLike
        Points, shape (..., :math:`d^2`).

    Returns
    -------
    Tensor
        :math:`\alpha(x)`, shape (...).

    Raises
    ------
    ValueError
        If the shapes do not fit (the message names the argument).

    Examples
    --------
    >>> from attnsvm import tensor
    >>> Aj, h, b = tensor.random_instance(T=3, d=2, R=1.0, seed=0)
    >>> x = tensor.sample_ball(Aj, 1.0, 1, seed=0)[0]
    >>> bool(tensor.alpha(Aj, x) == tensor.u(Aj, x).sum())
    True
    """
    return u(Aj, x).sum(-1)


def f(Aj: ArrayLike, x: ArrayLike) -> torch.Tensor:
    r""":math:`f(x) = \alpha(x)^{-1} u(x)`, the softmax of the logits :math:`A_{j_0} x` (Definition 3.3).

    Parameters
    ----------
    Aj : ArrayLike
        The row block :math:`A_{j_0}`, shape (..., T, :math:`d^2`).
    x : ArrayLike
        Points, shape (..., :math:`d^2`).

    Returns
    -------
    Tensor
        f(x), shape (..., T).

    Raises
    ------
    ValueError
        If the shapes do not fit (the message names the argument).

    Examples
    --------
    >>> from attnsvm import tensor
    >>> Aj, h, b = tensor.random_instance(T=3, d=2, R=1.0, seed=0)
    >>> x = tensor.sample_ball(Aj, 1.0, 1, seed=0)[0]
    >>> round(float(tensor.f(Aj, x).sum()), 12)
    1.0
    """
    return torch.softmax(_finite_logits(*_block_and_point(Aj, x)), dim=-1)


def h(A3: ArrayLike, Y: ArrayLike, i0: int) -> torch.Tensor:
    """:math:`h(y) = A_3 y_{i_0}` with :math:`y_{i_0}` column :math:`i_0` of the value matrix Y (Definition 3.4).

    Parameters
    ----------
    A3 : ArrayLike
        The matrix :math:`A_3`, shape (..., T, p).
    Y : ArrayLike
        The value matrix, shape (..., p, q).
    i0 : int
        A column index of Y.

    Returns
    -------
    Tensor
        h, shape (..., T).

    Raises
    ------
    ValueError
        If Y does not have as many rows as A3 has columns, or i0 is out of range.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import tensor
    >>> A3 = torch.ones(4, 2, dtype=torch.float64)
    >>> Y = torch.tensor([[1.0, 0.0], [2.0, 1.0]], dtype=torch.float64)
    >>> tensor.h(A3, Y, 0).tolist()
    [3.0, 3.0, 3.0, 3.0]
    """
    A3, Y = _matrix(A3, "A3"), _matrix(Y, "Y")
    if Y.shape[-2] != A3.shape[-1]:
        raise ValueError(f"Y must have {A3.shape[-1]} rows (the columns of A3), got shape {tuple(Y.shape)}")
    if isinstance(i0, bool) or not isinstance(i0, (int, np.integer)) or not 0 <= i0 < Y.shape[-1]:
        raise ValueError(f"i0 must be a column index of Y in [0, {Y.shape[-1] - 1}], got {i0!r}")
    _batch(("A3", A3.shape[:-2]), ("Y", Y.shape[:-2]))
    return _finite((A3 @ Y[..., :, i0:i0 + 1])[..., 0], "h = A3 y_i0", "A3 or Y is too large")


def attention_row(Aj: ArrayLike, x: ArrayLike, attention: str = "softmax") -> torch.Tensor:
    """The attention row: f(x) (softmax) or the unnormalized logits :math:`A_{j_0} x` (linear attention).

    Parameters
    ----------
    Aj : ArrayLike
        The row block :math:`A_{j_0}`, shape (..., T, :math:`d^2`).
    x : ArrayLike
        Points, shape (..., :math:`d^2`).
    attention : {'softmax', 'linear'}, default='softmax'
        The attention.

    Returns
    -------
    Tensor
        The row, shape (..., T).

    Raises
    ------
    ValueError
        If the shapes do not fit or attention is not supported.

    Examples
    --------
    >>> from attnsvm import tensor
    >>> Aj, h, b = tensor.random_instance(T=3, d=2, R=1.0, seed=0)
    >>> x = tensor.sample_ball(Aj, 1.0, 1, seed=0)[0]
    >>> import torch
    >>> bool(torch.equal(tensor.attention_row(Aj, x), tensor.f(Aj, x)))
    True
    >>> tensor.attention_row(Aj, x, "linear").shape
    torch.Size([3])
    """
    _option(attention, "attention", ATTENTIONS)
    return f(Aj, x) if attention == "softmax" else _finite_logits(*_block_and_point(Aj, x))


def _arguments(Aj, x, hv, b):
    Aj, x = _block_and_point(Aj, x)
    hv, b = _values_and_target(Aj, hv, b)
    _batch(("Aj", Aj.shape[:-2]), ("x", x.shape[:-1]), ("h", hv.shape[:-1]), ("b", b.shape))
    return Aj, x, hv, b


def _values_and_target(Aj, hv, b, prefix: str = ""):
    """h (..., T) and b (...) checked against A_j0 (..., T, D); `prefix` names their container ("instance.")."""
    hv, b = as_tensor(hv, prefix + "h"), as_tensor(b, prefix + "b")
    if hv.ndim < 1 or hv.shape[-1] != Aj.shape[-2]:
        raise ValueError(f"{prefix}h must have shape (..., {Aj.shape[-2]}) (one value per token: {prefix}Aj has "
                         f"{Aj.shape[-2]} rows), got {tuple(hv.shape)}")
    _batch((prefix + "Aj", Aj.shape[:-2]), (prefix + "h", hv.shape[:-1]), (prefix + "b", b.shape))
    return hv, b


def _entries(*shapes) -> float:
    """The number of entries of an array whose shape is the broadcast of `shapes` (batch) times the last one."""
    *batch, tail = shapes
    return float(np.prod(torch.broadcast_shapes(*batch), dtype=float) * np.prod(tail, dtype=float))


def _outer(s, b, loss: str):
    """L, dL/ds and d^2L/ds^2 for the loss `loss` of s = <row, h> and target b."""
    if loss == "squared":
        return (s - b) ** 2, 2 * (s - b), torch.full_like(s, 2.0)
    m = b * s
    g1 = torch.sigmoid(m) * torch.sigmoid(-m)  # g'(b s)
    if loss == "logistic":
        return torch.logaddexp(torch.zeros_like(m), -m), -b * torch.sigmoid(-m), b ** 2 * g1
    slope, curvature = b * g1, b ** 2 * g1 * (1 - 2 * torch.sigmoid(m))  # b g'(b s), b^2 g''(b s)
    if loss == "paper":
        return torch.sigmoid(m), slope, curvature
    return torch.sigmoid(-m), -slope, -curvature


def loss(Aj: ArrayLike, x: ArrayLike, h: ArrayLike, b: ArrayLike, *, loss: str = "logistic",
         attention: str = "softmax") -> torch.Tensor:
    r"""The loss of one entry :math:`(l_0, j_0, i_0)`, with :math:`s = \langle \mathrm{row}(x), h\rangle`.

    Parameters
    ----------
    Aj : ArrayLike
        The row block :math:`A_{j_0}`, shape (..., T, :math:`d^2`).
    x : ArrayLike
        Points, shape (..., :math:`d^2`).
    h : ArrayLike
        The values, shape (..., T).
    b : ArrayLike
        The target, shape (...).
    loss : {'paper', 'sigmoid', 'logistic', 'squared'}, default='logistic'
        "paper" g(bs) (as written in paper C), "sigmoid" g(-bs), "logistic" :math:`\log(1 + e^{-bs})` or
        "squared" :math:`(s - b)^2` (``LOSSES``).
    attention : {'softmax', 'linear'}, default='softmax'
        The attention.

    Returns
    -------
    Tensor
        The loss, shape (...).

    Raises
    ------
    ValueError
        If the shapes do not fit or loss is not one of ``LOSSES``.

    Examples
    --------
    >>> from attnsvm import tensor
    >>> Aj, h, b = tensor.random_instance(T=3, d=2, R=1.0, seed=0)
    >>> x = tensor.sample_ball(Aj, 1.0, 1, seed=0)[0]
    >>> value = tensor.loss(Aj, x, h, b, loss="logistic")
    >>> value.shape, bool(value > 0)
    (torch.Size([]), True)
    """
    return _entry_loss(Aj, x, h, b, loss, attention)


def _entry_loss(Aj, x, h, b, loss: str, attention: str) -> torch.Tensor:
    """``loss(Aj, x, h, b, loss=loss, attention=attention)`` (for the functions whose argument ``loss`` hides it)."""
    _option(loss, "loss", LOSSES)
    Aj, x, hv, b = _arguments(Aj, x, h, b)
    s = (attention_row(Aj, x, attention) * hv).sum(-1)
    return _finite(_outer(s, b, loss)[0], "the loss", "Aj, x, h or b is too large")


def gradient(Aj: ArrayLike, x: ArrayLike, h: ArrayLike, b: ArrayLike, *, loss: str = "logistic",
             attention: str = "softmax") -> torch.Tensor:
    r"""The closed-form gradient :math:`\partial L/\partial x` by the chain rule.

    :math:`\frac{\partial L}{\partial s} A_{j_0}^\top (f \odot (h - \langle f, h\rangle))` for softmax (the bracket
    in pairwise form, :math:`f_t \sum_\tau f_\tau (h_t - h_\tau)`), :math:`\frac{\partial L}{\partial s}
    A_{j_0}^\top h` for linear attention.

    Parameters
    ----------
    Aj : ArrayLike
        The row block :math:`A_{j_0}`, shape (..., T, :math:`d^2`).
    x : ArrayLike
        Points, shape (..., :math:`d^2`).
    h : ArrayLike
        The values, shape (..., T).
    b : ArrayLike
        The target, shape (...).
    loss : str, default='logistic'
        A name of ``LOSSES``.
    attention : {'softmax', 'linear'}, default='softmax'
        The attention.

    Returns
    -------
    Tensor
        The gradient, shape (..., :math:`d^2`).

    Raises
    ------
    ValueError
        If the shapes do not fit (the message names the argument).

    Examples
    --------
    >>> from attnsvm import tensor
    >>> Aj, h, b = tensor.random_instance(T=3, d=2, R=1.0, seed=0)
    >>> x = tensor.sample_ball(Aj, 1.0, 1, seed=0)[0]
    >>> tensor.gradient(Aj, x, h, b, loss="squared").shape
    torch.Size([4])
    """
    _option(loss, "loss", LOSSES)
    _option(attention, "attention", ATTENTIONS)
    Aj, x, hv, b = _arguments(Aj, x, h, b)
    _memory(_entries(Aj.shape[:-2], x.shape[:-1], hv.shape[:-1], b.shape, (Aj.shape[-2], Aj.shape[-2] + Aj.shape[-1])),
            "Aj, x, h and b (the pairwise terms of the gradient)")
    row = attention_row(Aj, x, attention)
    s = (row * hv).sum(-1)
    if attention == "softmax":
        inner = row * (row[..., None, :] * (hv[..., :, None] - hv[..., None, :])).sum(-1)
    else:
        inner = hv.expand(row.shape)
    slope = _outer(s, b, loss)[1]
    return _finite(slope[..., None] * (inner[..., None, :] @ Aj)[..., 0, :], "the gradient dL/dx",
                   "Aj, x, h or b is too large")


def _logit_hessian(logits, hv, b, loss: str, attention: str) -> torch.Tensor:
    """The Hessian of the loss in the logits a = A_{j0} x, (..., T, T)."""
    row = torch.softmax(logits, dim=-1) if attention == "softmax" else logits
    s = (row * hv).sum(-1)
    _, slope, curvature = _outer(s, b, loss)
    if attention == "linear":
        hb = hv.expand(row.shape)
        return curvature[..., None, None] * hb[..., :, None] * hb[..., None, :]
    w = row * (row[..., None, :] * (hv[..., :, None] - hv[..., None, :])).sum(-1)  # f o (h - s), pairwise
    outer = w[..., :, None] * row[..., None, :]
    return (curvature[..., None, None] * w[..., :, None] * w[..., None, :]
            + slope[..., None, None] * (torch.diag_embed(w) - outer - outer.mT))


def hessian(Aj: ArrayLike, x: ArrayLike, h: ArrayLike, b: ArrayLike, *, loss: str = "logistic",
            attention: str = "softmax") -> torch.Tensor:
    r"""The closed-form Hessian :math:`\partial^2 L/\partial x^2 = A_{j_0}^\top H_a A_{j_0}`, with :math:`H_a` the
    Hessian in the logits.

    :math:`H_a = L'' w w^\top + L' (\mathrm{diag}(w) - w f^\top - f w^\top)`, :math:`w = f \odot (h - \langle f,
    h\rangle)` (softmax), or :math:`L'' h h^\top` (linear attention), where :math:`L', L''` are the derivatives of
    the loss with respect to :math:`s = \langle \mathrm{row}, h\rangle`.

    Parameters
    ----------
    Aj : ArrayLike
        The row block :math:`A_{j_0}`, shape (..., T, :math:`d^2`).
    x : ArrayLike
        Points, shape (..., :math:`d^2`).
    h : ArrayLike
        The values, shape (..., T).
    b : ArrayLike
        The target, shape (...).
    loss : str, default='logistic'
        A name of ``LOSSES``.
    attention : {'softmax', 'linear'}, default='softmax'
        The attention.

    Returns
    -------
    Tensor
        The Hessian, shape (..., :math:`d^2`, :math:`d^2`).

    Raises
    ------
    ValueError
        If the shapes do not fit (the message names the argument).

    Examples
    --------
    >>> from attnsvm import tensor
    >>> Aj, h, b = tensor.random_instance(T=3, d=2, R=1.0, seed=0)
    >>> x = tensor.sample_ball(Aj, 1.0, 1, seed=0)[0]
    >>> H = tensor.hessian(Aj, x, h, b)
    >>> import torch
    >>> H.shape, bool(torch.allclose(H, H.T))
    (torch.Size([4, 4]), True)
    """
    _option(loss, "loss", LOSSES)
    _option(attention, "attention", ATTENTIONS)
    Aj, x, hv, b = _arguments(Aj, x, h, b)
    T, D = Aj.shape[-2:]
    _memory(_entries(Aj.shape[:-2], x.shape[:-1], hv.shape[:-1], b.shape, (D * D + 2 * T * T + T * D,)),
            "Aj, x, h and b (the Hessian is (..., d^2, d^2))")
    return _finite(Aj.mT @ _logit_hessian(_finite_logits(Aj, x), hv, b, loss, attention) @ Aj,
                   "the Hessian d^2L/dx^2", "Aj, x, h or b is too large")


def paper_gradient(Aj: ArrayLike, x: ArrayLike, h: ArrayLike, b: ArrayLike) -> torch.Tensor:
    r"""Paper C's Lemma 3.11 as written: :math:`\partial L/\partial x_i = g(s)(1 - g(s))\, b\, (\langle f \odot
    A_{j_0,*,i}, h\rangle - s\langle f, A_{j_0,*,i}\rangle)`, :math:`s = \langle f, h\rangle`.

    It is the gradient of g(bs) only for b in {-1, 0, 1} (the chain rule gives g'(bs), not g'(s)).

    Parameters
    ----------
    Aj : ArrayLike
        The row block :math:`A_{j_0}`, shape (..., T, :math:`d^2`).
    x : ArrayLike
        Points, shape (..., :math:`d^2`).
    h : ArrayLike
        The values, shape (..., T).
    b : ArrayLike
        The target, shape (...).

    Returns
    -------
    Tensor
        The expression, shape (..., :math:`d^2`).

    Raises
    ------
    ValueError
        If the shapes do not fit (the message names the argument).

    Examples
    --------
    >>> from attnsvm import tensor
    >>> Aj, h, b = tensor.random_instance(T=3, d=2, R=1.0, seed=0)
    >>> x = tensor.sample_ball(Aj, 1.0, 1, seed=0)[0]
    >>> import torch
    >>> bool(torch.allclose(tensor.paper_gradient(Aj, x, h, b), tensor.gradient(Aj, x, h, b, loss="paper")))
    True
    """
    Aj, x, hv, b = _arguments(Aj, x, h, b)
    fx = f(Aj, x)
    s = (fx * hv).sum(-1)
    first = ((fx * hv)[..., None, :] @ Aj)[..., 0, :]  # <f o A_{*,i}, h> for every column i
    second = (fx[..., None, :] @ Aj)[..., 0, :]  # <f, A_{*,i}>
    scale = torch.sigmoid(s) * (1 - torch.sigmoid(s)) * b
    return _finite(scale[..., None] * (first - s[..., None] * second), "paper C's gradient",
                   "Aj, x, h or b is too large")


# ------------------------------------------------------------------ Lipschitz bounds

def log10_bound(T: ArrayLike, R: ArrayLike) -> float | np.ndarray:
    r""":math:`\log_{10}` of :math:`M = 3T^3R^7 e^{13R^2}`, paper C's Lemma 3.13 (M overflows float64 from R = 7.4 on).

    T is the sentence length (paper C writes :math:`n^3`). The lemma assumes :math:`R \ge 4`,
    :math:`\|A_{j_0}\| \le R` and :math:`\|A_{j_0} x\| \le R`.

    Parameters
    ----------
    T : ArrayLike
        The sentence length(s), positive integers.
    R : ArrayLike
        The radius (radii), :math:`R \ge 4`.

    Returns
    -------
    float or ndarray
        A float, or an array of the broadcast shape of T and R.

    Raises
    ------
    ValueError
        If an R is below 4, a T is not a positive integer, or their shapes do not broadcast.

    Examples
    --------
    >>> from attnsvm import tensor
    >>> round(tensor.log10_bound(5, 4.0), 4)
    97.1217
    """
    n_arr, R_arr = _real_array(T, "T"), _real_array(R, "R")
    if not np.all(np.isfinite(R_arr)) or np.any(R_arr < 4):
        raise ValueError(f"R must be >= 4 (a hypothesis of Lemma 3.13), got {R!r}")
    if not np.all(np.isfinite(n_arr)) or np.any(n_arr < 1) or np.any(n_arr != np.round(n_arr)):
        raise ValueError(f"T must be a positive integer (the sentence length, paper C's n), got {T!r}")
    try:
        np.broadcast_shapes(n_arr.shape, R_arr.shape)
    except ValueError as err:
        raise ValueError(f"T {n_arr.shape} and R {R_arr.shape} must broadcast against each other") from err
    with np.errstate(over="ignore"):
        value = np.log10(3) + 3 * np.log10(n_arr) + 7 * np.log10(R_arr) + 13 * R_arr ** 2 / np.log(10)
    finite_result(value, "log10 M", "R is too large (13 R^2 overflows float64 from R = 1e154 on)")
    return float(value) if value.ndim == 0 else value


def _real_array(value, name: str) -> np.ndarray:
    """`value` as a float numpy array, refusing strings, bools, None and other non-numbers (TypeError)."""
    if torch.is_tensor(value):
        value = value.detach().cpu().numpy()
    if isinstance(value, int) and not isinstance(value, bool):  # beyond int64 numpy would make an object array
        value = float(value) if abs(value) < 1e308 else float("inf")
    array = np.asarray(value)
    if array.dtype.kind not in "iuf":
        raise TypeError(f"{name} must be a number or an array of numbers, got {value!r}")
    return array.astype(float)


def lipschitz_bound(Aj: ArrayLike, h: ArrayLike, b: ArrayLike, *, loss: str = "logistic",
                    attention: str = "softmax") -> torch.Tensor:
    r"""A Lipschitz constant of :math:`x \mapsto \partial L/\partial x` valid on all of :math:`\mathbb{R}^{d^2}` (the
    book's derivation, chapter 7).

    Softmax, with :math:`\rho = \max h - \min h` and :math:`A = \|A_{j_0}\|_2`: :math:`|\ell''| b^2 A^2 \rho^2/4 +
    |\ell'|\,|b| A^2 \frac{5}{4}\rho`, with :math:`\sup|\ell'|, \sup|\ell''|` = 1, 1/4 (logistic) or 1/4,
    :math:`1/(6\sqrt 3)` (paper, sigmoid); squared: :math:`A^2(\rho^2/2 + \frac{5}{2}\rho(\max|h| + |b|))`. Linear
    attention (exact): :math:`\sup|\ell''|\, b^2 \|A_{j_0}^\top h\|^2`, with 2 for squared.

    Parameters
    ----------
    Aj : ArrayLike
        The row block :math:`A_{j_0}`, shape (..., T, :math:`d^2`).
    h : ArrayLike
        The values, shape (..., T).
    b : ArrayLike
        The target, shape (...).
    loss : str, default='logistic'
        A name of ``LOSSES``.
    attention : {'softmax', 'linear'}, default='softmax'
        The attention.

    Returns
    -------
    Tensor
        The constant, shape (...).

    Raises
    ------
    ValueError
        If the shapes do not fit (the message names the argument).

    Examples
    --------
    >>> from attnsvm import tensor
    >>> instance = tensor.random_instance(T=3, d=2, R=4.0, seed=0, batch=2)
    >>> bound = tensor.lipschitz_bound(*instance, loss="logistic")
    >>> bound.shape, bool((bound > 0).all())
    (torch.Size([2]), True)
    """
    _option(loss, "loss", LOSSES)
    _option(attention, "attention", ATTENTIONS)
    Aj = _block(Aj, "Aj")
    hv, b = _values_and_target(Aj, h, b)
    return _finite(_lipschitz_bound(Aj, hv, b, loss, attention), "the Lipschitz bound", "Aj, h or b is too large")


def _lipschitz_bound(Aj, hv, b, loss: str, attention: str) -> torch.Tensor:
    second = {"logistic": 0.25, "paper": _G2, "sigmoid": _G2, "squared": 2.0}[loss]
    if attention == "linear":
        ATh = (hv[..., None, :] @ Aj)[..., 0, :].norm(dim=-1)
        return second * (b ** 2 if loss != "squared" else 1.0) * ATh ** 2
    A2 = torch.linalg.matrix_norm(Aj, ord=2) ** 2
    rho = hv.max(-1).values - hv.min(-1).values
    if loss == "squared":
        return A2 * (rho ** 2 / 2 + 2.5 * rho * (hv.abs().max(-1).values + b.abs()))
    first = 1.0 if loss == "logistic" else _G1
    return A2 * (second * b ** 2 * rho ** 2 / 4 + first * b.abs() * 1.25 * rho)


# ------------------------------------------------------------------ instances and points of the R-ball

class Instance(NamedTuple):
    """One loss entry.

    Parameters
    ----------
    Aj : Tensor
        The row block :math:`A_{j_0}`, shape (..., T, :math:`d^2`).
    h : Tensor
        The values h, shape (..., T).
    b : Tensor
        The target b, shape (...).

    Examples
    --------
    >>> import torch
    >>> from attnsvm import tensor
    >>> instance = tensor.Instance(torch.eye(2, 4, dtype=torch.float64), torch.tensor([1.0, -1.0]),
    ...                            torch.tensor(1.0))
    >>> instance.Aj.shape, instance.h.shape, instance.b.shape
    (torch.Size([2, 4]), torch.Size([2]), torch.Size([]))
    """

    Aj: torch.Tensor
    h: torch.Tensor
    b: torch.Tensor


def random_instance(T: int, d: int, R: float, *, seed: int, batch: int | None = None,
                    h_norm: float | None = None) -> Instance:
    r"""A random loss entry: Gaussian :math:`A_1, A_2` (T, d), the block :math:`A_{j_0}` (:math:`j_0 = 0`) scaled to
    :math:`\|A_{j_0}\|_2 = R` (the largest norm Lemma 3.13 allows), Gaussian h scaled to :math:`\|h\|_2` = h_norm
    and :math:`b = \pm 1` with probability 1/2.

    Parameters
    ----------
    T : int
        The sentence length.
    d : int
        The dimension.
    R : float
        The radius.
    seed : int
        The seed.
    batch : int or None, default=None
        The number of instances (a leading dimension; None: one).
    h_norm : float or None, default=None
        :math:`\|h\|_2` (None: R).

    Returns
    -------
    Instance
        The instances.

    Raises
    ------
    ValueError
        If a size, R or the seed is out of range.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import tensor
    >>> Aj, h, b = tensor.random_instance(T=3, d=2, R=4.0, seed=0, batch=5)
    >>> Aj.shape, h.shape, b.shape
    (torch.Size([5, 3, 4]), torch.Size([5, 3]), torch.Size([5]))
    >>> round(float(torch.linalg.matrix_norm(Aj[0], ord=2)), 4)
    4.0
    """
    T, d = positive_int(T, "T"), positive_int(d, "d")
    R = _positive(R, "R")
    h_norm = R if h_norm is None else _positive(h_norm, "h_norm")
    shape = () if batch is None else (positive_int(batch, "batch"),)
    _memory(3 * np.prod(shape, dtype=float) * T * d * d, "T, d and batch (A_j0 is (batch, T, d^2))")
    gen = torch.Generator().manual_seed(_seed(seed))
    A1 = torch.randn(shape + (T, d), generator=gen, dtype=torch.float64)
    A2 = torch.randn(shape + (T, d), generator=gen, dtype=torch.float64)
    Aj = row_block(A1, A2, 0)
    Aj = Aj * (R / torch.linalg.matrix_norm(Aj, ord=2))[..., None, None]
    hv = torch.randn(shape + (T,), generator=gen, dtype=torch.float64)
    hv = hv * (h_norm / hv.norm(dim=-1, keepdim=True))
    b = torch.randint(0, 2, shape, generator=gen).to(torch.float64) * 2 - 1
    for part, name in ((Aj, "A_j0"), (hv, "h")):
        _finite(part, f"the instance's {name}", "R or h_norm is too large or too small")
    return Instance(Aj, hv, b)


def _ball_radius(Aj, R, name: str = "Aj") -> float:
    """R checked to be > 0 and at least ||A_{j0}||_2 (Lemma 3.13), with A_{j0} (called `name`) nonzero."""
    R = _positive(R, "R")
    norms = torch.linalg.matrix_norm(Aj.detach(), ord=2)
    if not (norms > 0).all():
        raise ValueError(f"{name} is zero (in at least one batch entry): no x moves the logits, so the R-ball is "
                         f"all of R^(d^2); pass a nonzero A_j0")
    if norms.max() > R * (1 + 1e-12):
        raise ValueError(f"||A_j0||_2 exceeds R: Lemma 3.13 assumes ||A_j0|| <= R (rescale {name} or raise R)")
    return R


def _row_space_direction(Aj: torch.Tensor, shape: tuple, gen: torch.Generator) -> torch.Tensor:
    w = torch.randn(shape + Aj.shape[:-1], generator=gen, dtype=torch.float64)
    direction = (w[..., None, :] @ Aj)[..., 0, :]  # A_{j0}^T w: moves the logits, nothing else
    return direction / direction.norm(dim=-1, keepdim=True)


def sample_ball(Aj: ArrayLike, R: float, count: int, *, seed: int) -> torch.Tensor:
    r"""Random points x of the R-ball :math:`\{x : \|A_{j_0} x\|_2 \le R\}` in the row space of :math:`A_{j_0}` (the
    other directions change no logit), with :math:`\|A_{j_0} x\|` uniform on [0, R].

    Parameters
    ----------
    Aj : ArrayLike
        The row block :math:`A_{j_0}`, shape (..., T, :math:`d^2`).
    R : float
        The radius.
    count : int
        The number of points.
    seed : int
        The seed.

    Returns
    -------
    Tensor
        The points, shape (count, ..., :math:`d^2`).

    Raises
    ------
    ValueError
        If :math:`A_{j_0}` is zero, or R or count is out of range.

    Examples
    --------
    >>> from attnsvm import tensor
    >>> Aj, h, b = tensor.random_instance(T=3, d=2, R=4.0, seed=0)
    >>> x = tensor.sample_ball(Aj, 4.0, 10, seed=1)
    >>> x.shape, bool(((x @ Aj.T).norm(dim=-1) <= 4.0).all())
    (torch.Size([10, 4]), True)
    """
    Aj = _block(Aj, "Aj")
    R, count = _ball_radius(Aj, R), positive_int(count, "count")
    _memory(3.0 * count * Aj[..., 0, :].numel(), "count (count points of the ball per instance)")
    gen = torch.Generator().manual_seed(_seed(seed))
    x = _row_space_direction(Aj, (count,), gen)
    radius = R * torch.rand((count,) + Aj.shape[:-2], generator=gen, dtype=torch.float64)
    return _finite(x * (radius / _logits(Aj, x).norm(dim=-1))[..., None], "the points of the ball",
                   "R / ||A_j0|| is too large (Aj is too small for R)")


def into_ball(Aj: ArrayLike, x: ArrayLike, R: float) -> torch.Tensor:
    r"""x scaled towards 0 just enough that :math:`\|A_{j_0} x\| \le R` (the ball is convex and contains 0).

    Parameters
    ----------
    Aj : ArrayLike
        The row block :math:`A_{j_0}`, shape (..., T, :math:`d^2`).
    x : ArrayLike
        Points, shape (..., :math:`d^2`).
    R : float
        The radius.

    Returns
    -------
    Tensor
        The scaled points, shape (..., :math:`d^2`).

    Raises
    ------
    ValueError
        If the shapes do not fit or R is not positive.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import tensor
    >>> Aj = torch.eye(2, 4, dtype=torch.float64)
    >>> x = torch.tensor([3.0, 4.0, 7.0, 0.0], dtype=torch.float64)
    >>> [round(value, 4) for value in tensor.into_ball(Aj, x, 1.0).tolist()]
    [0.6, 0.8, 1.4, 0.0]
    """
    Aj, x = _block_and_point(Aj, x)
    R = _positive(R, "R")
    norm = _finite(_finite_logits(Aj, x).norm(dim=-1), "||A_j0 x||", "Aj or x is too large")
    return x * torch.clamp(R / norm.clamp_min(1e-300), max=1.0)[..., None]


def _callable(function, name: str = "function") -> Callable:
    if not callable(function):
        raise TypeError(f"{name} must be a callable F(x) on torch tensors, got {type(function).__name__}")
    return function


def ratios(function: Callable, x1: ArrayLike, x2: ArrayLike) -> torch.Tensor:
    r"""Lipschitz ratios :math:`\|F(x_1) - F(x_2)\|/\|x_1 - x_2\|` over the last dimension (F vector-valued).

    Parameters
    ----------
    function : Callable
        F, batched: it maps (..., D) to (..., E).
    x1 : ArrayLike
        Points, shape (..., D).
    x2 : ArrayLike
        Points of the same shape, distinct from x1.

    Returns
    -------
    Tensor
        The ratios, shape (...).

    Raises
    ------
    TypeError
        If function is not callable or does not return a tensor.
    ValueError
        If the shapes do not fit, or x1 and x2 coincide at some point.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import tensor
    >>> x1, x2 = torch.zeros(3, 2, dtype=torch.float64), torch.ones(3, 2, dtype=torch.float64)
    >>> [round(value, 4) for value in tensor.ratios(lambda x: 3 * x, x1, x2).tolist()]
    [3.0, 3.0, 3.0]
    """
    _callable(function)
    x1, x2 = as_tensor(x1, "x1"), as_tensor(x2, "x2")
    if x1.ndim < 1 or x1.shape[-1] < 1:
        raise ValueError(f"x1 must be points (..., D) with D >= 1, got shape {tuple(x1.shape)}")
    if x2.shape != x1.shape:
        raise ValueError(f"x2 must have the shape of x1, {tuple(x1.shape)} (one pair per point), got {tuple(x2.shape)}")
    distance = _finite((x1 - x2).norm(dim=-1), "||x1 - x2||", "x1 or x2 is too large")
    if not (distance > 0).all():
        raise ValueError("x1 and x2 coincide at some point: the ratio divides by ||x1 - x2||, pass distinct points")
    F1, F2 = (_function_value(function, x, name) for x, name in ((x1, "x1"), (x2, "x2")))
    if F1.shape[:x1.ndim - 1] != x1.shape[:-1] or F2.shape != F1.shape:
        raise ValueError(f"function must map points (..., D) to values (..., ...) with the same leading shape "
                         f"{tuple(x1.shape[:-1])}, got {tuple(F1.shape)} and {tuple(F2.shape)}")
    difference = F1 - F2
    return _finite(difference.reshape(difference.shape[:x1.ndim - 1] + (-1,)).norm(dim=-1) / distance,
                   "the Lipschitz ratios", "function's values are too large")


def _function_value(function: Callable, x: torch.Tensor, name: str) -> torch.Tensor:
    """function(x) as a finite float64 tensor, named "function(x1)" in errors."""
    value = function(x)
    if isinstance(value, (str, bytes)) or value is None:
        raise TypeError(f"function must return a tensor, got {type(value).__name__} from function({name})")
    return as_tensor(value, f"function({name})")


def hessian_norm(function: Callable, x: ArrayLike, *, iterations: int = 30, seed: int = 0) -> torch.Tensor:
    r"""A lower bound on :math:`\|\nabla^2 F(x)\|_2` for a scalar F.

    Power iteration with Hessian-vector products by double backward (torch.autograd); the result is
    :math:`\|Hv\|` for a unit v, which never exceeds :math:`\|H\|_2` and converges to it.

    Parameters
    ----------
    function : Callable
        F, batched: it maps (..., D) to (...) by differentiable torch operations.
    x : ArrayLike
        Points, shape (..., D).
    iterations : int, default=30
        Power iterations.
    seed : int, default=0
        The seed of the start vector.

    Returns
    -------
    Tensor
        The bound, shape (...).

    Raises
    ------
    TypeError
        If function is not callable, or does not return a real tensor computed from x.
    ValueError
        If x is not points (..., D) with :math:`D \ge 1`.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import tensor
    >>> F = lambda x: (x[..., 0] ** 2 + 3 * x[..., 1] ** 2)  # Hessian diag(2, 6)
    >>> round(float(tensor.hessian_norm(F, torch.zeros(2, dtype=torch.float64))), 4)
    6.0
    """
    _callable(function)
    iterations = positive_int(iterations, "iterations")
    budget(iterations, "iterations", MAX_STEPS, "power iterations (each a double backward pass)")
    gen = torch.Generator().manual_seed(_seed(seed))
    x = as_tensor(x, "x").detach().requires_grad_(True)
    if x.ndim < 1 or x.shape[-1] < 1:
        raise ValueError(f"x must be points (..., D) with D >= 1, got shape {tuple(x.shape)}")
    with torch.enable_grad():
        value = function(x)
        if not (torch.is_tensor(value) and value.requires_grad and value.is_floating_point()):
            raise TypeError("function must return a real torch tensor computed from x by differentiable torch "
                            f"operations, got {type(value).__name__}")
        _finite(value.detach(), "function(x)", "x is outside function's range")
        grad = torch.autograd.grad(value.sum(), x, create_graph=True)[0]
        v = torch.randn(x.shape, generator=gen, dtype=torch.float64)
        v = v / v.norm(dim=-1, keepdim=True)
        norm = torch.zeros(x.shape[:-1], dtype=torch.float64)
        for _ in range(iterations if grad.requires_grad else 0):  # a gradient constant in x: Hessian 0
            Hv = torch.autograd.grad((grad * v).sum(), x, retain_graph=True, allow_unused=True)[0]
            Hv = torch.zeros_like(x) if Hv is None else Hv
            norm = Hv.norm(dim=-1)
            v = Hv / norm.clamp_min(1e-300)[..., None]
    return _finite(norm.detach(), "the Hessian norm", "function's Hessian at x is too large")


class Estimate(NamedTuple):
    r"""Empirical Lipschitz constants of the gradient (lower bounds of the true one), one per instance: what
    ``empirical_lipschitz`` returns.

    Parameters
    ----------
    pairs : Tensor
        :math:`\max \|\nabla L(x) - \nabla L(x')\|/\|x - x'\|` over sampled pairs of the R-ball.
    power : Tensor
        The largest spectral norm of the Hessian over sampled points (power iteration).

    Examples
    --------
    >>> from attnsvm import tensor
    >>> tensor.Estimate._fields
    ('pairs', 'power')
    """

    pairs: torch.Tensor  # max ||grad(x) - grad(x')|| / ||x - x'|| over sampled pairs of the R-ball
    power: torch.Tensor  # max over sampled points of the Hessian's spectral norm (power iteration)


def empirical_lipschitz(instance: Instance, R: float, *, loss: str = "logistic", attention: str = "softmax",
                        points: int = 64, iterations: int = 30, seed: int = 0, close: float = 1e-4) -> Estimate:
    r"""Two lower bounds on the Lipschitz constant of :math:`x \mapsto \partial L/\partial x` over the R-ball
    :math:`\{\|A_{j_0} x\| \le R\}`, per instance.

    pairs: ``points`` far pairs (independent random points) and ``points`` close pairs (a step of relative size
    ``close`` in a random direction of the row space); power: ``hessian_norm`` at the same ``points`` points. Every
    pair lies in the convex ball, so each ratio is at most the constant; so is each Hessian norm.

    Parameters
    ----------
    instance : Instance
        The loss entry.
    R : float
        The radius.
    loss : str, default='logistic'
        A name of ``LOSSES``.
    attention : {'softmax', 'linear'}, default='softmax'
        The attention.
    points : int, default=64
        Sampled points (and pairs of each kind).
    iterations : int, default=30
        Power iterations.
    seed : int, default=0
        The seed.
    close : float, default=0.0001
        The relative step of the close pairs, in (0, 1].

    Returns
    -------
    Estimate
        The two bounds.

    Raises
    ------
    ValueError
        If close is not in (0, 1] or lost in round-off, :math:`A_{j_0}` is zero, or an argument is out of range.

    Examples
    --------
    >>> from attnsvm import tensor
    >>> instance = tensor.random_instance(T=3, d=2, R=4.0, seed=0, batch=2)
    >>> estimate = tensor.empirical_lipschitz(instance, 4.0, loss="logistic", points=8, iterations=5)
    >>> estimate.pairs.shape, bool((estimate.pairs <= tensor.lipschitz_bound(*instance)).all())
    (torch.Size([2]), True)
    """
    _option(loss, "loss", LOSSES)
    _option(attention, "attention", ATTENTIONS)
    Aj, hv, b = _instance(instance)
    R, close = _ball_radius(Aj, R, "instance.Aj"), _positive(close, "close")
    if close > 1:
        raise ValueError(f"close must be a relative step size in (0, 1] (the close pairs' distance over R / ||A_j0||), "
                         f"got {close!r}")
    points, seed = positive_int(points, "points"), _seed(seed)
    iterations = positive_int(iterations, "iterations")
    _memory(16.0 * points * _entries(Aj.shape[:-2], hv.shape[:-1], b.shape, (Aj.shape[-2] * sum(Aj.shape[-2:]),)),
            "points (the sampled points of every instance, with their autograd graphs)")
    with _blaming("instance or R"):
        x = sample_ball(Aj, R, 2 * points, seed=seed)
        x, far = x[:points], x[points:]
        gen = torch.Generator().manual_seed(int(seed) + 1)
        step = close * R / torch.linalg.matrix_norm(Aj, ord=2)[..., None]
        near = into_ball(Aj, x + step * _row_space_direction(Aj, (points,), gen), R)
        if not ((near - x).norm(dim=-1) > 0).all():
            raise ValueError(f"close={close!r} gives close pairs lost in round-off (x + step == x): pass a larger "
                             f"close")

        def grad(z):
            return gradient(Aj, z, hv, b, loss=loss, attention=attention)

        pairs = torch.maximum(ratios(grad, x, far), ratios(grad, x, near)).max(0).values
        power = hessian_norm(lambda z: _entry_loss(Aj, z, hv, b, loss, attention), x,
                             iterations=iterations, seed=seed + 2).max(0).values
    return Estimate(pairs, power)


def _instance(instance) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """An `Instance` (or a triple (Aj, h, b)) checked: A_{j0} (..., T, D), h (..., T), b (...), named instance.*;
    detached (the searches below are not differentiated with respect to the instance)."""
    if not (isinstance(instance, (tuple, list)) and len(instance) == 3):
        raise TypeError(f"instance must be a tensor.Instance (Aj, h, b), e.g. tensor.random_instance(T, d, R, "
                        f"seed=0), got {type(instance).__name__}")
    Aj = _block(instance[0], "instance.Aj")
    hv, b = _values_and_target(Aj, instance[1], instance[2], prefix="instance.")
    if torch.broadcast_shapes(Aj.shape[:-2], hv.shape[:-1], b.shape) != Aj.shape[:-2]:
        raise ValueError(f"instance.h {tuple(hv.shape)} and instance.b {tuple(b.shape)} must not add batch dimensions "
                         f"to instance.Aj's {tuple(Aj.shape[:-2])}: one instance per A_j0")
    return Aj.detach(), hv.detach(), b.detach()


class _blaming:
    """A context in which an overflow (FloatingPointError) is re-raised naming the caller's arguments `names`."""

    def __init__(self, names: str):
        self.names = names

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback):
        if kind is FloatingPointError and self.names not in str(error):
            raise FloatingPointError(f"{error} [the call's {self.names} lead to values beyond float64]") from error
        return False


class Ascent(NamedTuple):
    """The largest Hessian norm found by ``max_hessian_norm`` and a point of the ball where it is attained.

    Parameters
    ----------
    value : Tensor
        The largest norm found, a lower bound on the Lipschitz constant over the ball, per instance, shape (...).
    point : Tensor
        Where it is attained, shape (..., :math:`d^2`).

    Examples
    --------
    >>> from attnsvm import tensor
    >>> tensor.Ascent._fields
    ('value', 'point')
    """

    value: torch.Tensor  # (...)
    point: torch.Tensor  # (..., d^2)


def max_hessian_norm(instance: Instance, R: float, *, loss: str = "logistic", attention: str = "softmax",
                     starts: int = 32, steps: int = 200, lr: float = 0.05, seed: int = 0,
                     origin: bool = True) -> Ascent:
    r"""Multi-start projected gradient ascent of :math:`\|\nabla^2 L(x)\|_2` over the R-ball
    :math:`\{\|A_{j_0} x\| \le R\}`, per instance.

    The loss depends on x only through the logits :math:`a = A_{j_0} x`, which fill the ball :math:`\|a\| \le R` of
    the column space of :math:`A_{j_0}`: with the SVD :math:`A_{j_0} = USV^\top` the search runs over c,
    :math:`a = Uc`, :math:`\|c\| \le R`, and :math:`\|\nabla^2 L(x)\|` is the largest :math:`|\text{eigenvalue}|`
    of :math:`M(c) = S U^\top H_a U S` (:math:`H_a` the Hessian in the logits). Each start (c = 0 unless ``origin``
    is False, and ``starts`` random points of the ball, each with a random unit vector e) takes ``steps`` Adam
    steps (learning rate ``lr`` R) on the Rayleigh quotient :math:`(e^\top M(c) e)^2/|e|^4`, jointly in c and e,
    and c is scaled back into the ball after each step. The result is the largest :math:`\|M(c)\|` (exact, by
    eigvalsh) over every point visited (each start and the point after each of its steps): a lower bound on
    :math:`\sup_{\mathrm{ball}} \|\nabla^2 L\|`, which is the Lipschitz constant of the gradient over the (convex)
    ball. A local search may miss the supremum. With the other arguments fixed, the first k steps are those of any
    longer run, so the result never decreases as ``steps`` grows.

    Parameters
    ----------
    instance : Instance
        The loss entry.
    R : float
        The radius.
    loss : str, default='logistic'
        A name of ``LOSSES``.
    attention : {'softmax', 'linear'}, default='softmax'
        The attention.
    starts : int, default=32
        Random starts.
    steps : int, default=200
        Adam steps per start (0: the best of the starts themselves).
    lr : float, default=0.05
        The learning rate, in units of R.
    seed : int, default=0
        The seed.
    origin : bool, default=True
        Also start at c = 0; False leaves it out (a maximizer for linear attention with the logistic loss), so
        that a check of the ascent must climb.

    Returns
    -------
    Ascent
        The largest norm found and the point :math:`x = V S^+ c`, in the row space of :math:`A_{j_0}`.

    Raises
    ------
    ValueError
        If :math:`A_{j_0}` is zero or :math:`\|A_{j_0}\|_2 > R`, or an argument is out of range.
    FloatingPointError
        If the ascent diverges (lower lr).

    Examples
    --------
    >>> from attnsvm import tensor
    >>> instance = tensor.random_instance(T=3, d=2, R=4.0, seed=0, batch=2)
    >>> found = tensor.max_hessian_norm(instance, 4.0, loss="logistic", starts=4, steps=20)
    >>> found.value.shape, found.point.shape
    (torch.Size([2]), torch.Size([2, 4]))
    >>> bool((found.value <= tensor.lipschitz_bound(*instance)).all())
    True
    """
    _option(loss, "loss", LOSSES)
    _option(attention, "attention", ATTENTIONS)
    Aj, hv, b = _instance(instance)
    R = _ball_radius(Aj, R, "instance.Aj")
    starts, steps = positive_int(starts, "starts"), positive_int(steps, "steps", minimum=0)
    budget(steps, "steps", MAX_STEPS, "Adam steps")
    lr, seed, origin = _positive(lr, "lr"), _seed(seed), boolean(origin, "origin")
    T, k = Aj.shape[-2], min(Aj.shape[-2:])
    _memory(16.0 * (starts + 1) * _entries(Aj.shape[:-2], hv.shape[:-1], b.shape, (T * (T + k),)),
            "starts (the ascent keeps (starts + 1) Hessians per instance, with their autograd graphs)")
    U, S, Vh = torch.linalg.svd(Aj, full_matrices=False)  # (..., T, k), (..., k), (..., k, D)
    keep = (S > S[..., :1] * 1e-12).to(torch.float64)  # the directions that move the logits
    S = S * keep
    SU = S[..., :, None] * U.mT  # S U^T, (..., k, T)
    gen = torch.Generator().manual_seed(int(seed))
    c = torch.randn((starts,) + S.shape, generator=gen, dtype=torch.float64) * keep
    radius = R * torch.rand((starts,) + S.shape[:-1], generator=gen, dtype=torch.float64)
    c = c * (radius / c.norm(dim=-1))[..., None]
    c = torch.cat([torch.zeros_like(c[:1]), c]) if origin else c  # (starts + origin, ..., k)
    e = torch.randn(c.shape, generator=gen, dtype=torch.float64) * keep

    def M(z):
        return SU @ _logit_hessian((U @ (z * keep)[..., None])[..., 0], hv, b, loss, attention) @ SU.mT

    def project(z):
        return z * torch.clamp(R / (z * keep).norm(dim=-1).clamp_min(1e-300), max=1.0)[..., None]

    c, e = project(c).requires_grad_(True), e.requires_grad_(True)
    best = torch.full(c.shape[:-1], -1.0, dtype=torch.float64)
    best_c = c.detach().clone()
    optimizer = torch.optim.Adam([c, e], lr=lr * R, maximize=True)
    with torch.enable_grad():
        for step in range(steps + 1):
            if not torch.isfinite(c).all():
                raise FloatingPointError(f"the ascent diverged (a point of the ball became NaN or infinite): lower "
                                         f"lr or R (each Adam step moves about lr R; got lr={lr!r}, R={R!r}), or "
                                         f"scale the instance down (the squared Hessians it climbs overflow float64)")
            Mc = _finite(M(c), "the Hessians in the ball", "instance or R is too large")
            norm = torch.linalg.eigvalsh(Mc.detach()).abs().max(-1).values  # ||M(c)||, exact
            better = norm > best
            best = torch.where(better, norm, best)
            best_c = torch.where(better[..., None], c.detach(), best_c)
            if step == steps:
                break
            quotient = (e[..., None, :] @ Mc @ e[..., :, None])[..., 0, 0] / (e * e).sum(-1)
            optimizer.zero_grad()
            (quotient ** 2).sum().backward()
            optimizer.step()
            with torch.no_grad():
                c.copy_(project(c))
    index = best.argmax(0)
    c_best = best_c.gather(0, index[None, ..., None].expand((1,) + best_c.shape[1:]))[0] * keep
    point = (Vh.mT @ (c_best / torch.where(keep > 0, S, torch.ones_like(S)))[..., None])[..., 0]
    return Ascent(_finite(best.max(0).values, "the Hessian norms", "instance or R is too large"), point)


def descend(instance: Instance, x0: ArrayLike, *, lr: float, steps: int, loss: str = "logistic",
            attention: str = "softmax") -> tuple[torch.Tensor, torch.Tensor]:
    r"""Plain gradient descent :math:`x \leftarrow x - \eta\, \partial L/\partial x` on one loss entry.

    With :math:`\eta \le 1/` (a Lipschitz constant of the gradient) every step decreases the loss.

    Parameters
    ----------
    instance : Instance
        The loss entry.
    x0 : ArrayLike
        The start, shape (..., :math:`d^2`).
    lr : float
        The step size :math:`\eta`.
    steps : int
        The number of steps.
    loss : str, default='logistic'
        A name of ``LOSSES``.
    attention : {'softmax', 'linear'}, default='softmax'
        The attention.

    Returns
    -------
    tuple of Tensor
        The losses (steps + 1, ...) and the final point.

    Raises
    ------
    ValueError
        If x0 does not fit the instance.
    FloatingPointError
        If the iterates diverge (lower lr).

    Examples
    --------
    >>> import torch
    >>> from attnsvm import tensor
    >>> instance = tensor.random_instance(T=3, d=2, R=4.0, seed=0)
    >>> lr = 1 / tensor.lipschitz_bound(*instance).item()
    >>> losses, x = tensor.descend(instance, torch.zeros(4, dtype=torch.float64), lr=lr, steps=20)
    >>> losses.shape, bool((losses.diff() <= 0).all())
    (torch.Size([21]), True)
    """
    _option(loss, "loss", LOSSES)
    _option(attention, "attention", ATTENTIONS)
    lr, steps = _positive(lr, "lr"), positive_int(steps, "steps", minimum=0)
    budget(steps, "steps", MAX_RECORDS, "steps (one loss kept per step)")
    Aj, hv, b = _instance(instance)
    x = as_tensor(x0, "x0").detach()
    if x.ndim < 1 or x.shape[-1] != Aj.shape[-1]:
        raise ValueError(f"x0 must have shape (..., {Aj.shape[-1]}) (a point x = vec(X) per instance), got "
                         f"{tuple(x.shape)}")
    _batch(("instance", Aj.shape[:-2]), ("x0", x.shape[:-1]))
    with _blaming("instance or x0"):
        losses = [_entry_loss(Aj, x, hv, b, loss, attention)]
    for k in range(steps):
        try:
            x = x - lr * gradient(Aj, x, hv, b, loss=loss, attention=attention)
            if not torch.isfinite(x).all():
                raise FloatingPointError("x overflowed float64")
            losses.append(_entry_loss(Aj, x, hv, b, loss, attention))
        except FloatingPointError as err:
            raise FloatingPointError(f"descend diverged at step {k + 1} ({err}): lower lr (got {lr!r}), or scale the "
                                     f"instance (its Aj) or x0 down") from err
    return torch.stack(losses), x


# ------------------------------------------------------------------ the chapter's studies (E7.3, E7.4)

def _values(values, name: str, convert: Callable) -> list:
    if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{name} must be a list of numbers, got {values!r}")
    if torch.is_tensor(values) or isinstance(values, np.ndarray):
        values = on_cpu(values, name).tolist() if values.ndim == 1 else [values]  # 0-d, 2-d: not a list, refused
    values = [convert(value, name) for value in values]
    if not values:
        raise ValueError(f"{name} must not be empty")
    budget(len(values), name, 10**4, "grid values")
    return values


def _radius(value, name: str) -> float:
    """A radius R > 0 of a study: R also seeds its instances (seed=int(R)), which must fit torch's generator."""
    R = _positive(value, name)
    if R >= 2**62:
        raise ValueError(f"{name} must hold radii below 2**62 (each R also seeds its instances, seed=int(R)), got "
                         f"{value!r}")
    return R


def _study_budget(T: int, d: int, cells: int, batch: int, points: int, starts: int, work: int, names: str) -> None:
    """Refuse a study whose largest cell needs more than MAX_BYTES, or whose grid would run for hours."""
    per_point = T * (T + d * d)
    _memory(16.0 * batch * max(points, starts + 1) * per_point + 3.0 * batch * T * d * d, names)
    budget(float(cells) * batch * work * per_point, names, 1e10, "floating-point operations (about)")


class _cell:
    """A context re-raising an overflow in a study's cell (T, R) with the cell and the arguments to change."""

    def __init__(self, where: str, names: str):
        self.where, self.names = where, names

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback):
        if kind is FloatingPointError:
            raise FloatingPointError(f"{error} [at {self.where}: use smaller {self.names}]") from error
        return False


class Study(NamedTuple):
    r"""Bounds on the Lipschitz constant of the gradient over the R-ball, per sentence length T, radius R and instance,
    and paper C's constant: what ``gap_study`` returns.

    The tensors have shape (len(sizes), len(radii), batch).

    Parameters
    ----------
    sampled : Tensor
        The larger of ``empirical_lipschitz``'s pairs and power: a lower bound.
    found : Tensor
        ``max_hessian_norm``: a lower bound.
    ours : Tensor
        ``lipschitz_bound``: an upper bound, valid on all of :math:`\mathbb{R}^{d^2}`.
    log10_M : ndarray
        :math:`\log_{10}` of Lemma 3.13's M (``log10_bound``), shape (len(sizes), len(radii)).

    Examples
    --------
    >>> from attnsvm import tensor
    >>> tensor.Study._fields
    ('sampled', 'found', 'ours', 'log10_M')
    """

    sampled: torch.Tensor  # max of `empirical_lipschitz`'s pairs and power: a lower bound
    found: torch.Tensor  # `max_hessian_norm`: a lower bound
    ours: torch.Tensor  # `lipschitz_bound`: an upper bound, valid on all of R^{d^2}
    log10_M: np.ndarray  # (len(sizes), len(radii)): log10 of Lemma 3.13's M (`log10_bound`)


def gap_study(sizes: ArrayLike, radii: ArrayLike, *, d: int = 3, batch: int = 20, loss: str = "paper",
              points: int = 64, iterations: int = 20, starts: int = 16, steps: int = 60) -> Study:
    r"""Chapter 7's E7.3: the Lipschitz constant of the gradient over the R-ball, bracketed, for each T in ``sizes`` and
    R in ``radii``.

    ``batch`` instances ``random_instance(T, d, R, seed=T)``, bracketed by random sampling (``empirical_lipschitz``,
    ``points`` points, ``iterations`` power steps) and ascent (``max_hessian_norm``, ``starts`` starts of ``steps``
    steps), both with seed int(R), and by ``lipschitz_bound``.

    Parameters
    ----------
    sizes : ArrayLike
        The sentence lengths T.
    radii : ArrayLike
        The radii, each :math:`R \ge 4`.
    d : int, default=3
        The dimension.
    batch : int, default=20
        Instances per cell.
    loss : str, default='paper'
        A name of ``LOSSES``.
    points : int, default=64
        As in ``empirical_lipschitz``.
    iterations : int, default=20
        As in ``empirical_lipschitz``.
    starts : int, default=16
        As in ``max_hessian_norm``.
    steps : int, default=60
        As in ``max_hessian_norm``.

    Returns
    -------
    Study
        The bounds.

    Raises
    ------
    ValueError
        If sizes or radii is empty, an R is below 4, or an argument is out of range.

    Examples
    --------
    >>> from attnsvm import tensor
    >>> study = tensor.gap_study([2, 3], [4.0], d=2, batch=2, points=4, iterations=2, starts=1, steps=2)
    >>> study.ours.shape, study.log10_M.shape
    (torch.Size([2, 1, 2]), (2, 1))
    >>> bool((study.sampled <= study.ours).all() and (study.found <= study.ours).all())
    True
    """
    sizes = _values(sizes, "sizes", positive_int)
    radii = _values(radii, "radii", _radius)
    if min(radii) < 4:
        raise ValueError(f"radii: R must be >= 4 for every R in radii (a hypothesis of Lemma 3.13), got "
                         f"{min(radii)!r}")
    d, batch, points = positive_int(d, "d"), positive_int(batch, "batch"), positive_int(points, "points")
    iterations, starts = positive_int(iterations, "iterations"), positive_int(starts, "starts")
    steps = positive_int(steps, "steps", minimum=0)
    _option(loss, "loss", LOSSES)
    _study_budget(max(sizes), d, len(sizes) * len(radii), batch, points, starts,
                  points * (iterations + 4) + (starts + 1) * (steps + 2),
                  "sizes, radii, d, batch, points, iterations, starts and steps")
    with _cell("the grid", "radii"):
        log10_M = np.array([[log10_bound(T, R) for R in radii] for T in sizes])
    sampled, found, ours = [], [], []
    for T in sizes:
        for R in radii:
            with _cell(f"T={T}, R={R}", "radii"):
                instance = random_instance(T, d, R, seed=T, batch=batch)
                estimate = empirical_lipschitz(instance, R, loss=loss, points=points, iterations=iterations,
                                               seed=int(R))
                sampled.append(torch.maximum(estimate.pairs, estimate.power))
                found.append(max_hessian_norm(instance, R, loss=loss, starts=starts, steps=steps,
                                              seed=int(R)).value)
                ours.append(lipschitz_bound(*instance, loss=loss))
    shape = (len(sizes), len(radii), -1)
    return Study(*(torch.stack(t).reshape(shape) for t in (sampled, found, ours)), log10_M)


class Comparison(NamedTuple):
    """Softmax against linear attention on the same instances: what ``attention_study`` returns.

    Each field has shape (len(radii), batch).

    Parameters
    ----------
    found : Tensor
        Softmax: ``max_hessian_norm``, a lower bound.
    ours : Tensor
        Softmax: ``lipschitz_bound``, an upper bound.
    linear : Tensor
        Linear attention: ``lipschitz_bound(attention="linear")``, exact on the ball.
    linear_found : Tensor
        Linear attention: the softmax ascent's ``max_hessian_norm`` without the start x = 0.
    linear_start : Tensor
        The same ascent's random starts alone (steps=0): what the ascent had to improve.

    Examples
    --------
    >>> from attnsvm import tensor
    >>> tensor.Comparison._fields
    ('found', 'ours', 'linear', 'linear_found', 'linear_start')
    """

    found: torch.Tensor  # softmax: `max_hessian_norm`, a lower bound
    ours: torch.Tensor  # softmax: `lipschitz_bound`, an upper bound
    linear: torch.Tensor  # linear attention: `lipschitz_bound(attention="linear")`, exact on the ball
    linear_found: torch.Tensor  # linear attention: the softmax ascent's `max_hessian_norm` without the start x = 0
    linear_start: torch.Tensor  # the same ascent's random starts alone (steps=0): what the ascent had to improve


def attention_study(radii: ArrayLike, loss: str, *, T: int = 5, d: int = 3, batch: int = 50,
                    h_norm: float | None = None, starts: int = 16, steps: int = 60) -> Comparison:
    r"""Chapter 7's E7.4: softmax against linear attention, the Lipschitz constant of the gradient over the R-ball for
    each R.

    For each R in ``radii``, ``batch`` instances ``random_instance(T, d, R, seed=int(R), h_norm=h_norm)``, the
    constant for softmax attention (ascent with seed int(R), and the book's bound) and linear attention (exact,
    and, as a check of the ascent, the same ascent on linear attention without the start x = 0, which is a
    maximizer there for the logistic loss, with the value at its random starts alone).

    Parameters
    ----------
    radii : ArrayLike
        The radii, each :math:`R \ge 4`.
    loss : str
        A name of ``LOSSES``.
    T : int, default=5
        The sentence length.
    d : int, default=3
        The dimension.
    batch : int, default=50
        Instances per radius.
    h_norm : float or None, default=None
        :math:`\|h\|` (None: R).
    starts : int, default=16
        Random starts of the ascent.
    steps : int, default=60
        Steps of the ascent.

    Returns
    -------
    Comparison
        The bounds, each of shape (len(radii), batch).

    Raises
    ------
    ValueError
        If radii is empty, an R is below 4, or an argument is out of range.

    Examples
    --------
    >>> from attnsvm import tensor
    >>> result = tensor.attention_study([1.0, 2.0], "logistic", T=3, d=2, batch=2, starts=1, steps=2)
    >>> result.found.shape, bool((result.found <= result.ours).all())
    (torch.Size([2, 2]), True)
    """
    radii = _values(radii, "radii", _radius)
    _option(loss, "loss", LOSSES)
    T, d, batch = positive_int(T, "T"), positive_int(d, "d"), positive_int(batch, "batch")
    starts, steps = positive_int(starts, "starts"), positive_int(steps, "steps", minimum=0)
    h_norm = None if h_norm is None else _positive(h_norm, "h_norm")
    _study_budget(T, d, len(radii), batch, 1, starts, 2 * (starts + 1) * (steps + 2) + 16,
                  "radii, T, d, batch, starts and steps")
    columns = []
    for R in radii:
        with _cell(f"R={R}", "radii or h_norm"):
            instance = random_instance(T, d, R, seed=int(R), batch=batch, h_norm=h_norm)
            columns.append((
                max_hessian_norm(instance, R, loss=loss, starts=starts, steps=steps, seed=int(R)).value,
                lipschitz_bound(*instance, loss=loss),
                lipschitz_bound(*instance, loss=loss, attention="linear"),
                *(max_hessian_norm(instance, R, loss=loss, starts=starts, steps=n, attention="linear", seed=int(R),
                                   origin=False).value for n in (steps, 0))))
    return Comparison(*(torch.stack(column) for column in zip(*columns)))


def _seed(value, name: str = "seed") -> int:
    """A seed torch's generator takes with room for the derived seed + 1, seed + 2."""
    return _checked_seed(value, name, below=2**62)
