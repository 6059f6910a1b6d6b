"""Initial parameters for gradient descent and the regularization path."""

from __future__ import annotations

import numpy as np
import torch
from numpy.typing import ArrayLike

from .._checks import cpu_device as _device
from .._checks import as_tensor, positive_int, require_shape, which_problems
from ..data import Problem, _seed
from ..model import _checked_problem, _memory_budget, _option

__all__ = ["initial_parameters", "initial_vector", "uniform_init", "PARAMS"]

PARAMS = ("W", "KQ")  # W trained directly, or its factors W = K Q^T


def uniform_init(shape: tuple[int, ...], seed: int, device: torch.device | str | None = None) -> torch.Tensor:
    r"""Entries uniform in :math:`[-1/\sqrt{d}, 1/\sqrt{d}]` (torch.nn.Linear's default), d = shape[-2].

    Parameters
    ----------
    shape : tuple of int
        (..., d, m) with :math:`d \ge 1`.
    seed : int
        An integer in :math:`[0, 2^{63})`.
    device : str or None, default=None
        None or "cpu" (attnsvm computes on the CPU).

    Returns
    -------
    Tensor
        The draw, of the given shape.

    Raises
    ------
    ValueError
        If ``shape`` has :math:`d < 1` or ``seed`` is out of range.

    Examples
    --------
    >>> from attnsvm import train
    >>> K = train.uniform_init((4, 2), seed=0)
    >>> K.shape, K.dtype, bool((K.abs() <= 0.5).all())
    (torch.Size([4, 2]), torch.float64, True)
    """
    shape, seed, device = _shape(shape), _seed(seed), _device(device)
    gen = torch.Generator().manual_seed(seed)
    bound = 1.0 / np.sqrt(shape[-2])
    return ((torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1) * bound).to(device)


def _sizes(value, name: str, meaning: str) -> tuple:
    """`value` checked to be a tuple (or list) of integer sizes >= 0."""
    if not isinstance(value, (tuple, list, torch.Size)) or not all(
            isinstance(size, (int, np.integer)) and not isinstance(size, bool) for size in value):
        raise TypeError(f"{name} must be a tuple of integer sizes {meaning}, got {value!r}")
    if any(size < 0 for size in value):
        raise ValueError(f"{name} must hold sizes >= 0 {meaning}, got {tuple(value)}")
    return tuple(int(size) for size in value)


def _shape(shape, name: str = "shape") -> tuple:
    """`shape` checked to be a tuple (..., d, m) of sizes >= 0 with d >= 1, within the memory budget."""
    shape = _sizes(shape, name, "(..., d, m)")
    if len(shape) < 2 or shape[-2] < 1:
        raise ValueError(f"{name} must be a tuple (..., d, m) with d >= 1, got {shape}")
    _memory_budget(float(np.prod(shape, dtype=float)), name)
    return shape


def initial_parameters(problem: Problem, param: str, init: str | ArrayLike | tuple[ArrayLike, ArrayLike] | None,
                       m: int, seed: int) -> tuple[torch.Tensor, ...]:
    """The initial parameters, (W,) or (K, Q), as ``train.gd`` starts from them.

    They are detached: training records data, not a graph.

    Parameters
    ----------
    problem : Problem
        The problems (a batch).
    param : {'W', 'KQ'}
        Which parameters.
    init : str, ArrayLike, tuple or None
        None (zeros for W, "uniform" for (K, Q)), "zeros", "uniform", an initial W (..., d, d) or a pair
        (K0, Q0), not both zero for any problem (a saddle point, like "zeros" for (K, Q)).
    m : int
        The width of K and Q for "uniform".
    seed : int
        The seed of "uniform".

    Returns
    -------
    tuple of Tensor
        (W,) of shape (..., d, d), or (K, Q), each of shape (..., d, m).

    Raises
    ------
    ValueError
        If ``init`` has the wrong shape, or is a zero pair (K0, Q0) or "zeros" for (K, Q).

    Examples
    --------
    >>> from attnsvm import data, train
    >>> problems = data.random_problem(n=2, T=3, d=2, seed=0, batch=5)
    >>> (W,) = train.initial_parameters(problems, "W", None, m=2, seed=0)
    >>> W.shape, bool((W == 0).all())
    (torch.Size([5, 2, 2]), True)
    >>> K, Q = train.initial_parameters(problems, "KQ", "uniform", m=3, seed=0)
    >>> K.shape, Q.shape
    (torch.Size([5, 2, 3]), torch.Size([5, 2, 3]))
    """
    problem = _checked_problem(problem)
    param, m, seed = _option(param, "param", PARAMS), positive_int(m, "m"), _seed(seed)
    batch, d, device = problem.batch_shape, problem.d, problem.X.device
    if init is None:
        init = "zeros" if param == "W" else "uniform"
    if isinstance(init, str):
        _option(init, "init", ("zeros", "uniform"))
        if param == "W":
            zeros = torch.zeros(batch + (d, d), dtype=torch.float64, device=device)
            return (zeros if init == "zeros" else uniform_init(batch + (d, d), seed, device),)
        if init == "zeros":
            raise ValueError('init="zeros" is a saddle point of the (K, Q) parameterization (zero gradient): '
                             'use init="uniform" or pass (K0, Q0)')
        _memory_budget(2.0 * np.prod(batch + (d, m), dtype=float), "m")
        return uniform_init(batch + (d, m), seed, device), uniform_init(batch + (d, m), seed + 1, device)
    pair = isinstance(init, (tuple, list)) and len(init) == 2 and all(np.ndim(part) >= 2 for part in init)
    if param == "W":
        if pair:
            raise ValueError('init for param="W" must be one initial W (..., d, d), got a pair (K0, Q0): pass '
                             'param="KQ" to train the factors')
        W0 = as_tensor(init, "init", device=device)
        require_shape(W0, "init", batch + (d, d), "an initial W for every problem")
        return (W0.detach(),)
    if not pair:
        raise ValueError('init for param="KQ" must be "uniform" or a pair (K0, Q0) of (..., d, m) arrays')
    K0, Q0 = (as_tensor(value, name, device=device) for value, name in zip(init, ("init[0] (K0)", "init[1] (Q0)")))
    width = K0.shape[-1] if K0.ndim >= 2 else m
    require_shape(K0, "init[0] (K0)", batch + (d, width), "the initial key matrix K, (..., d, m)")
    require_shape(Q0, "init[1] (Q0)", tuple(K0.shape), "the initial query matrix Q, the same shape as K0")
    _refuse_zero_pair(K0, Q0)
    return K0.detach(), Q0.detach()


def _refuse_zero_pair(K: torch.Tensor, Q: torch.Tensor) -> None:
    """A ValueError where an explicit start (K0, Q0) has K0 = Q0 = 0 (for some problem of a batch): like
    init="zeros", a saddle point of the (K, Q) parameterization, where every step is zero. A start with only one
    factor zero is accepted: the zero factor's gradient (G Q0 or G^T K0) is in general not zero."""
    stuck = (K == 0).all(-1).all(-1) & (Q == 0).all(-1).all(-1)  # (...): batch shape
    if stuck.any():
        raise ValueError(f"init=(K0, Q0) has K0 = Q0 = 0{which_problems(stuck)}: like init=\"zeros\", a saddle point of the (K, Q) "
                         f"parameterization (zero gradient), so no step would move it: use init=\"uniform\" or "
                         f"pass a nonzero (K0, Q0)")


def initial_vector(value: ArrayLike, name: str, batch: tuple[int, ...], d: int,
                   device: torch.device | str | None) -> torch.Tensor:
    """An initial vector (d,) shared by all problems, or one per problem (..., d).

    Parameters
    ----------
    value : ArrayLike
        The vector, (d,) or (..., d).
    name : str
        The argument's name in errors.
    batch : tuple of int
        The problems' batch shape.
    d : int
        The dimension.
    device : str or None
        None or "cpu".

    Returns
    -------
    Tensor
        The vector, shape (..., d) (detached, a copy).

    Raises
    ------
    ValueError
        If ``value`` does not have shape (d,) or (..., d), or is not finite.

    Examples
    --------
    >>> from attnsvm import train
    >>> train.initial_vector([1.0, 0.0], "init", (3,), 2, None).shape
    torch.Size([3, 2])
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be the argument's name (a string), got {type(name).__name__}")
    batch, d, device = _sizes(batch, "batch", "(the problems' batch shape)"), positive_int(d, "d"), _device(device)
    _memory_budget(float(np.prod(batch + (d,), dtype=float)), "batch and d")
    vector = as_tensor(value, name, device=device)
    if tuple(vector.shape) not in ((d,), batch + (d,)):
        raise ValueError(f"{name} must have shape ({d},) or {batch + (d,)} (one vector per problem), "
                         f"got {tuple(vector.shape)}")
    return vector.detach().expand(batch + (d,)).clone()
