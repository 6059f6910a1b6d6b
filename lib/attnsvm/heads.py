"""Prediction heads h: R^d -> R applied to the attention output a_i = X_i^T s_i, so that f(X_i) = h(a_i).

The linear head h(a) = v^T a is the theory's main case (it is the problem's `v` when no head is given).
Nonlinear heads make attention mix several tokens (Chapter 5). Each head (a ``Head``: ``Linear``, ``ReLU``,
``Lambda``) gives its value and its gradient with respect to a, batched over (..., n, d).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from numpy.typing import ArrayLike

from ._checks import as_tensor, finite_result, positive_int
from .data import _batch, _memory, _nonnegative, _seed

__all__ = ["Head", "Lambda", "Linear", "ReLU", "lambda_optimum", "lambda_threshold", "random_relu"]


class Head:
    r"""A prediction head :math:`h: \mathbb{R}^d \to \mathbb{R}`, evaluated with its gradient at attention outputs a
    (..., n, d).

    The base of ``Linear``, ``ReLU`` and ``Lambda`` (build one of those; ``model.outputs``, ``model.loss`` and the
    training functions take any of them as ``head``). Subclasses implement ``_value`` and ``_gradient`` (or
    ``_value_and_gradient``) on a checked ``a``; the public methods check ``a`` (a tensor (..., n, d) of this
    head's d) and that the results are finite.

    Examples
    --------
    >>> from attnsvm import heads
    >>> head = heads.random_relu(2, seed=0)
    >>> isinstance(head, heads.Head), head.d, head.batch_shape
    (True, 2, ())
    """

    d: int  # the dimension of the attention outputs a
    batch_shape: tuple  # the head's batch shape, broadcast against that of a without its (n, d)

    def value(self, a: ArrayLike) -> torch.Tensor:
        """:math:`h(a_i)` for each attention output :math:`a_i`.

        Parameters
        ----------
        a : ArrayLike
            The attention outputs, shape (..., n, d).

        Returns
        -------
        Tensor
            The values, shape (..., n).

        Raises
        ------
        ValueError
            If a does not have shape (..., n, d) with the head's d and a batch shape that broadcasts with the head's,
            or is not finite.
        FloatingPointError
            If the value overflows float64.

        Examples
        --------
        >>> import torch
        >>> from attnsvm import heads
        >>> a = torch.tensor([[1.0, 2.0], [-1.0, 0.5]], dtype=torch.float64)
        >>> heads.Linear([1.0, -1.0]).value(a).tolist()
        [-1.0, -1.5]
        """
        a = self._points(a)
        return self._finite(a, self._value(a))[0]

    def gradient(self, a: ArrayLike) -> torch.Tensor:
        """The gradient of h at each attention output :math:`a_i`.

        Parameters
        ----------
        a : ArrayLike
            The attention outputs, shape (..., n, d).

        Returns
        -------
        Tensor
            The gradients, shape (..., n, d).

        Raises
        ------
        ValueError
            If a does not have shape (..., n, d) with the head's d and a batch shape that broadcasts with the head's,
            or is not finite.
        FloatingPointError
            If the gradient overflows float64.

        Examples
        --------
        >>> import torch
        >>> from attnsvm import heads
        >>> a = torch.tensor([[1.0, 2.0], [-1.0, 0.5]], dtype=torch.float64)
        >>> heads.ReLU(torch.eye(2, dtype=torch.float64)).gradient(a).tolist()
        [[1.0, 1.0], [0.0, 1.0]]
        """
        a = self._points(a)
        return self._finite(a, self._gradient(a), a)[0]  # a too: a gradient may not depend on it

    def value_and_gradient(self, a: ArrayLike) -> tuple[torch.Tensor, torch.Tensor]:
        """``value(a)`` and ``gradient(a)`` together (one check of a; they may share work).

        Parameters
        ----------
        a : ArrayLike
            The attention outputs, shape (..., n, d).

        Returns
        -------
        tuple of Tensor
            The values (..., n) and the gradients (..., n, d).

        Raises
        ------
        ValueError
            If a does not have shape (..., n, d) with the head's d and a batch shape that broadcasts with the head's,
            or is not finite.
        FloatingPointError
            If a result overflows float64.

        Examples
        --------
        >>> import torch
        >>> from attnsvm import heads
        >>> a = torch.tensor([[1.0, 2.0], [-1.0, 0.5]], dtype=torch.float64)
        >>> h, grad = heads.Lambda([1.0, 0.0], 0.5).value_and_gradient(a)
        >>> h.tolist(), grad.tolist()
        ([-1.5, -1.625], [[0.0, -2.0], [2.0, -0.5]])
        """
        a = self._points(a)  # gradient descent calls this at every step: one check of a and one of the results
        return self._finite(a, *self._value_and_gradient(a))

    def _value_and_gradient(self, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self._value(a), self._gradient(a)

    def _points(self, a: ArrayLike) -> torch.Tensor:
        """`a` as a float64 CPU tensor (..., n, d); its finiteness is checked only if a result is not finite."""
        if not (torch.is_tensor(a) and a.dtype == torch.float64 and a.device.type == "cpu"):
            a = as_tensor(a, "a")
        if a.ndim < 2 or a.shape[-1] != self.d:
            raise ValueError(f"a must have shape (..., n, {self.d}) (one attention output in R^d per sequence), "
                             f"got {tuple(a.shape)}")
        if _broadcast(a.shape[:-2], self.batch_shape) is None:
            raise ValueError(f"a has the batch shape {tuple(a.shape[:-2])}, which does not broadcast with the head's "
                             f"{tuple(self.batch_shape)}: pass one attention output per problem")
        return a

    @staticmethod
    def _finite(a: torch.Tensor, *results: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """`results`, or an error: a ValueError if `a` holds NaN or inf, else a FloatingPointError (overflow)."""
        if math.isfinite(float(sum(result.detach().sum() for result in results))) or all(  # the sum: a fast path
                bool(torch.isfinite(result).all()) for result in results):
            return results
        as_tensor(a, "a")
        raise FloatingPointError("the head's value or gradient at a is not finite (overflow in float64): a or the "
                                 "head's parameters are too large, scale them down")


def _broadcast(first: tuple, second: tuple) -> tuple | None:
    """The broadcast of two shapes, or None if they do not broadcast (torch.broadcast_shapes, 10 times faster)."""
    shape = []
    for p, q in zip(reversed((1,) * (len(second) - len(first)) + tuple(first)),
                    reversed((1,) * (len(first) - len(second)) + tuple(second))):
        if p != q and 1 not in (p, q):
            return None
        shape.append(q if p == 1 else p)
    return tuple(reversed(shape))


def _parameter(value: ArrayLike, name: str, ndim: int, shape: str) -> torch.Tensor:
    """A head parameter as a float64 tensor with at least `ndim` dimensions, none of them empty."""
    tensor = as_tensor(value, name)
    if tensor.ndim < ndim or 0 in tensor.shape:
        raise ValueError(f"{name} must have shape {shape}, got {tuple(tensor.shape)}")
    return tensor


@dataclass(frozen=True)
class Linear(Head):
    r"""The head :math:`h(a) = v^\top a`, the theory's head.

    Parameters
    ----------
    v : Tensor
        (d,), or one per problem (..., d).

    Raises
    ------
    ValueError
        If v is empty or not finite.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import heads
    >>> head = heads.Linear([1.0, -1.0])
    >>> head.d, head.value(torch.tensor([[3.0, 1.0]], dtype=torch.float64)).tolist()
    (2, [2.0])
    """

    v: torch.Tensor  # (..., d)

    def __post_init__(self) -> None:
        object.__setattr__(self, "v", _parameter(self.v, "v", 1, "(..., d)"))

    @property
    def d(self) -> int:
        """The dimension of the attention outputs a."""
        return self.v.shape[-1]

    @property
    def batch_shape(self) -> tuple[int, ...]:
        """The head's batch shape (one head per problem of a batch, or ())."""
        return tuple(self.v.shape[:-1])

    def _value(self, a: torch.Tensor) -> torch.Tensor:
        return (a * self.v[..., None, :]).sum(-1)

    def _gradient(self, a: torch.Tensor) -> torch.Tensor:
        return self.v[..., None, :].expand(torch.broadcast_shapes(self.v[..., None, :].shape, a.shape))


@dataclass(frozen=True)
class ReLU(Head):
    r"""The head :math:`h(a) = \mathbf{1}^\top \mathrm{ReLU}(V^\top a)`: a one-hidden-layer ReLU network with fixed
    weights V.

    Paper A's ``relu`` head has V Gaussian scaled to :math:`\|V\|_F = 1` (``random_relu``).

    Parameters
    ----------
    V : Tensor
        The weights, shape (..., d, k).

    Raises
    ------
    ValueError
        If V has fewer than two dimensions, is empty or is not finite.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import heads
    >>> head = heads.ReLU(torch.eye(2, dtype=torch.float64))
    >>> head.value(torch.tensor([[1.0, 2.0], [-1.0, 0.5]], dtype=torch.float64)).tolist()
    [3.0, 0.5]
    """

    V: torch.Tensor

    def __post_init__(self) -> None:
        object.__setattr__(self, "V", _parameter(self.V, "V", 2, "(..., d, k)"))

    @property
    def d(self) -> int:
        """The dimension of the attention outputs a."""
        return self.V.shape[-2]

    @property
    def batch_shape(self) -> tuple[int, ...]:
        """The head's batch shape (one head per problem of a batch, or ())."""
        return tuple(self.V.shape[:-2])

    def _value(self, a: torch.Tensor) -> torch.Tensor:
        return torch.relu(a @ self.V).sum(-1)

    def _gradient(self, a: torch.Tensor) -> torch.Tensor:
        return self._value_and_gradient(a)[1]

    def _value_and_gradient(self, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = a @ self.V  # (..., n, k)
        return torch.relu(hidden).sum(-1), (hidden > 0).to(a.dtype) @ self.V.transpose(-2, -1)


@dataclass(frozen=True)
class Lambda(Head):
    r"""The head :math:`h(a) = v^\top a - \lambda \|a\|^2` (paper A's `lambda` head): the penalty rewards averaging
    several tokens.

    Parameters
    ----------
    v : Tensor
        The linear part, (d,) or one per problem (..., d).
    lam : float or Tensor
        :math:`\lambda`, a number :math:`\ge 0`, or a tensor of them, one per problem, broadcast against the batch
        shape of a without its (n, d) (e.g. shape (L, 1) for L values of lam, each on the same batch of problems).

    Raises
    ------
    ValueError
        If lam is negative or not finite, or does not broadcast with v's batch shape.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import heads
    >>> head = heads.Lambda([1.0, 0.0], 0.5)
    >>> head.value(torch.tensor([[1.0, 2.0]], dtype=torch.float64)).tolist()  # 1 - 0.5 * 5
    [-1.5]
    >>> heads.Lambda([1.0, 0.0], [0.0, 0.5, 1.0]).batch_shape  # three values of lam
    (3,)
    """

    v: torch.Tensor
    lam: float | torch.Tensor

    def __post_init__(self) -> None:
        object.__setattr__(self, "v", _parameter(self.v, "v", 1, "(..., d)"))
        if isinstance(self.lam, (torch.Tensor, np.ndarray, list, tuple)) and np.ndim(self.lam):
            lam = as_tensor(self.lam, "lam")
            if not (lam >= 0).all():
                raise ValueError(f"lam must hold finite numbers >= 0, got {lam}")
        else:
            lam = _nonnegative(self.lam.detach() if torch.is_tensor(self.lam) else self.lam, "lam")
        object.__setattr__(self, "lam", lam)
        if self.batch_shape is None:
            raise ValueError(f"lam of shape {tuple(lam.shape)} does not broadcast with v's batch shape "
                             f"{tuple(self.v.shape[:-1])}: pass one lam, or one per problem")

    @property
    def d(self) -> int:
        """The dimension of the attention outputs a."""
        return self.v.shape[-1]

    @property
    def batch_shape(self) -> tuple[int, ...]:
        """The head's batch shape, that of v broadcast with that of lam."""
        return _broadcast(self.v.shape[:-1], self.lam.shape if isinstance(self.lam, torch.Tensor) else ())

    def _lam(self, extra: int) -> float | torch.Tensor:
        return self.lam[(...,) + (None,) * extra] if isinstance(self.lam, torch.Tensor) else self.lam

    def _value(self, a: torch.Tensor) -> torch.Tensor:
        return (a * self.v[..., None, :]).sum(-1) - self._lam(1) * (a * a).sum(-1)

    def _gradient(self, a: torch.Tensor) -> torch.Tensor:
        return self.v[..., None, :] - 2 * self._lam(2) * a


def _as_head(head: object, d: int | None = None, name: str = "head") -> Head | None:
    """`head` if it is None (the problem's linear head) or a head of this module (for problems in R^d when `d` is
    given), else a TypeError/ValueError naming `name` that says how to build one (e.g. for head='relu')."""
    if head is None:
        return None
    if not isinstance(head, Head):
        raise TypeError(f"{name} must be None (the problem's linear head v) or a head of attnsvm.heads, e.g. "
                        f"heads.random_relu(d, seed=0), heads.Linear(v) or heads.Lambda(v, lam); got {head!r} "
                        f"({type(head).__name__})")
    if d is not None and head.d != d:
        raise ValueError(f"{name} acts on R^{head.d} but the tokens are in R^{d}: build the head for d={d}")
    return head


def random_relu(d: int, *, seed: int, batch: int | None = None) -> ReLU:
    """Paper A's ReLU head: V Gaussian (d, d), scaled to unit Frobenius norm, one per problem of the batch.

    Parameters
    ----------
    d : int
        The dimension.
    seed : int
        The seed.
    batch : int or None, default=None
        The number of problems (None: one head).

    Returns
    -------
    ReLU
        The head.

    Raises
    ------
    ValueError
        If d or batch is not a positive integer, or the heads would take more than 2 GiB.

    Examples
    --------
    >>> from attnsvm import heads
    >>> head = heads.random_relu(3, seed=0)
    >>> tuple(head.V.shape), round(float(head.V.norm()), 4)
    ((3, 3), 1.0)
    >>> heads.random_relu(3, seed=0, batch=4).batch_shape
    (4,)
    """
    d, seed, shape = positive_int(d, "d"), _seed(seed), _batch(batch)
    _memory(np.prod(shape) * d * d, "batch and d")
    gen = torch.Generator().manual_seed(seed)
    V = torch.randn(shape + (d, d), generator=gen, dtype=torch.float64)
    return ReLU(V / V.norm(dim=(-2, -1), keepdim=True))


def _values(values: ArrayLike) -> torch.Tensor:
    """Token values u (..., T), T >= 1."""
    u = as_tensor(values, "values")
    if u.ndim < 1 or u.shape[-1] < 1:
        raise ValueError(f"values must have shape (..., T) with T >= 1 token values, got {tuple(u.shape)}")
    return u


def _water_filling(u: torch.Tensor, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(top, kept): u sorted in decreasing order and the number kept, (..., 1).

    The k largest values are kept while their excess sum_{j<k} (u_(j) - u_(k)) = sum_{m<k} m (u_(m) - u_(m+1))
    stays below 2 lam: a sum of non-negative terms, accurate however small lam is (the threshold test
    u_(k) > theta_k itself rounds wrong once lam is below the spacing of the floats near u)."""
    top = u.sort(-1, descending=True).values
    m = torch.arange(1, u.shape[-1], dtype=u.dtype)
    excess = torch.nn.functional.pad((m * (top[..., :-1] - top[..., 1:])).cumsum(-1), (1, 0))
    return top, (excess < 2 * lam).sum(-1, keepdim=True)  # excess_1 = 0: at least one kept


def lambda_threshold(values: ArrayLike, lam: float) -> torch.Tensor:
    r"""The water level :math:`\theta` of the lambda-head's optimum on orthonormal tokens: the number with
    :math:`\sum_t \max(u_t - \theta, 0) = 2\lambda` (Chapter 5).

    The kept tokens are those with :math:`u_t > \theta`.

    Parameters
    ----------
    values : ArrayLike
        The token values u, shape (..., T).
    lam : float
        :math:`\lambda > 0`.

    Returns
    -------
    Tensor
        :math:`\theta`, shape (...).

    Raises
    ------
    ValueError
        If values does not have shape (..., T) with T >= 1, or lam is not positive.

    Examples
    --------
    >>> from attnsvm import heads
    >>> float(heads.lambda_threshold([1.0, 0.5, 0.2], 0.5))  # (1 - 0.25) + (0.5 - 0.25) = 2 * 0.5
    0.25
    """
    u, lam = _values(values), _nonnegative(lam, "lam", positive=True)
    top, kept = _water_filling(u, lam)
    theta = (top.cumsum(-1).gather(-1, kept - 1) - 2 * lam) / kept.to(u.dtype)
    return finite_result(theta[..., 0], "theta", "values or lam overflow float64: scale them down")


def lambda_optimum(values: ArrayLike, lam: float) -> torch.Tensor:
    r"""The attention that maximizes the lambda-head on orthonormal tokens: :math:`\arg\max` over the simplex of
    :math:`\sum_t s_t u_t - \lambda \|s\|^2`.

    That is :math:`s_t = \max(u_t - \theta, 0)/(2\lambda)` with :math:`\theta` = ``lambda_threshold`` ("water
    filling"; Chapter 5); :math:`\lambda = 0` gives the top token (a linear head). The kept tokens get
    :math:`s_t = (d_t - \bar d)/(2\lambda) + 1/k` with :math:`d_t = u_t - \max u`, exact differences: the weights sum
    to 1 to round-off for every :math:`\lambda` (:math:`u_t - \theta` would lose all digits once :math:`\lambda` is
    tiny).

    Parameters
    ----------
    values : ArrayLike
        The token values u, shape (..., T).
    lam : float
        :math:`\lambda \ge 0`.

    Returns
    -------
    Tensor
        The attention s, shape (..., T).

    Raises
    ------
    ValueError
        If values does not have shape (..., T) with T >= 1, or lam is negative.

    Examples
    --------
    >>> from attnsvm import heads
    >>> heads.lambda_optimum([1.0, 0.5, 0.2], 0.5).tolist()
    [0.75, 0.25, 0.0]
    >>> heads.lambda_optimum([1.0, 0.5, 0.2], 0.0).tolist()
    [1.0, 0.0, 0.0]
    """
    u, lam = _values(values), _nonnegative(lam, "lam")
    if lam == 0:
        return torch.nn.functional.one_hot(u.argmax(-1), u.shape[-1]).to(u.dtype)
    top, kept = _water_filling(u, lam)
    d = u - top[..., :1]
    chosen = u >= top.gather(-1, kept - 1)  # ties are kept together, so this is the kept set
    mean = (d * chosen).sum(-1, keepdim=True) / kept.to(u.dtype)
    s = torch.where(chosen, (d - mean) / lam / 2 + 1 / kept.to(u.dtype), 0.0).clamp(min=0)
    return finite_result(s, "the optimal attention", "values overflow float64: scale them down")
