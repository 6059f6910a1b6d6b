"""Problem instances: tokens X, labels Y, queries Z and a linear head v, optionally batched.

Shapes (a leading batch shape `...` of independent problems is allowed everywhere):
X (..., n, T, d) tokens, Y (..., n) labels in {-1, +1}, Z (..., n, d) query tokens, v (..., d) head.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from numpy.typing import ArrayLike

from . import _checks
from ._checks import cpu_device as _device, memory as _memory
from ._checks import as_tensor, boolean, finite_result, nonnegative_float, positive_float, positive_int, require_shape

__all__ = ["Problem", "Sequences", "equal_scores_problem", "joint_training_problem", "loss_example_problem",
           "multi_input_problem", "opposite_clusters_problem", "orthonormal_problem", "planar_problem",
           "random_problem", "random_selection", "single_input_problem", "unit_rows", "SEED_LISTS", "MAX_WORKERS",
           "PROMPT_KEY"]

SEED_LISTS = (list, tuple, range, np.ndarray, torch.Tensor)  # what a list of seeds may be
MAX_WORKERS = max(64, 4 * (os.cpu_count() or 1))  # a request for more worker processes is refused


class Sequences:
    r"""The shape of n sequences X (..., n, T, d) of T tokens in :math:`\mathbb{R}^d`, with batch dimensions in front.

    The base of ``Problem`` (and of ``causal.SequenceProblem``), which read their sizes from it.

    Examples
    --------
    >>> from attnsvm import data
    >>> problem = data.random_problem(3, 4, 2, seed=0, batch=5)
    >>> isinstance(problem, data.Sequences)
    True
    >>> problem.batch_shape, problem.n, problem.T, problem.d
    ((5,), 3, 4, 2)
    """

    X: torch.Tensor

    @property
    def batch_shape(self) -> tuple[int, ...]:
        """The leading dimensions of X before (n, T, d), () for one problem and (B,) for a batch of B."""
        return tuple(self.X.shape[:-3])

    @property
    def n(self) -> int:
        """The number of sequences."""
        return self.X.shape[-3]

    @property
    def T(self) -> int:
        """The number of tokens per sequence."""
        return self.X.shape[-2]

    @property
    def d(self) -> int:
        """The dimension of the tokens."""
        return self.X.shape[-1]


@dataclass(frozen=True, init=False)
class Problem(Sequences):
    r"""A (batch of) classification problem(s) for one softmax-attention layer with a linear head.

    :math:`n \ge 1` sequences of :math:`T \ge 1` tokens in :math:`\mathbb{R}^d`, :math:`d \ge 1`. T = 1 is allowed,
    since the model is defined there (Chapter 6 writes a causal query with a single candidate this way); what needs
    a token to select against the others (margins' SVMs, local optimality, the experiments) raises for T < 2. Each
    array is stored as a float64 CPU tensor.

    Parameters
    ----------
    X : ArrayLike
        The tokens, shape (..., n, T, d).
    Y : ArrayLike
        The labels in {-1, +1}, shape (..., n).
    Z : ArrayLike or None
        The query tokens, shape (..., n, d) (None for paper B's prompt model).
    v : ArrayLike
        The linear head, (d,) or (..., d).
    device : str or None, default=None
        None or "cpu".

    Raises
    ------
    ValueError
        If X does not have shape (..., n, T, d) with n, T, d >= 1, a label is not -1 or +1, or the shapes of
        Y, Z, v do not fit X.

    Examples
    --------
    >>> from attnsvm import data
    >>> problem = data.Problem([[[1.0, 0.0], [0.0, 1.0]]], [1.0], [[1.0, 0.0]], [1.0, 0.0])
    >>> problem, problem.X.dtype
    (Problem(n=1, T=2, d=2), torch.float64)
    >>> data.random_problem(3, 4, 2, seed=0, batch=5)[1:3]  # a batch indexes along its batch dimensions
    Problem(batch=(2,), n=3, T=4, d=2)
    """

    X: torch.Tensor
    Y: torch.Tensor
    Z: torch.Tensor | None
    v: torch.Tensor

    def __init__(self, X: ArrayLike, Y: ArrayLike, Z: ArrayLike | None, v: ArrayLike, *,
                 device: str | torch.device | None = None) -> None:
        device = _device(device)
        X = as_tensor(X, "X", device=device)
        if X.ndim < 3:
            raise ValueError(f"X must have shape (..., n, T, d) (n sequences of T tokens in R^d), got {tuple(X.shape)}")
        *batch, n, T, d = X.shape
        if min(n, T, d) < 1:
            raise ValueError(f"X must hold n >= 1 sequences of T >= 1 tokens in R^d, d >= 1, got shape (..., n, T, d) "
                             f"= {tuple(X.shape)}")
        batch = tuple(batch)
        Y = as_tensor(Y, "Y", device=device)
        require_shape(Y, "Y", batch + (n,), "one label per sequence")
        if not torch.all((Y == 1) | (Y == -1)):
            raise ValueError("Y must hold labels in {-1, +1}: map {0, 1} labels with Y = 2 * Y - 1")
        if Z is not None:  # None: paper B's prompt model, whose single query p is trained (train.gd_prompt)
            Z = as_tensor(Z, "Z", device=device)
            require_shape(Z, "Z", batch + (n, d), "one query token per sequence; for self-attention pass Z = X[..., 0, :]")
        v = as_tensor(v, "v", device=device)
        if tuple(v.shape) == (d,) and batch:
            v = v.expand(batch + (d,))
        require_shape(v, "v", batch + (d,), "the linear head, one per problem")
        for name, value in zip("XYZv", (X, Y, Z, v)):
            object.__setattr__(self, name, value)

    def __getitem__(self, index: int | slice | tuple | ArrayLike) -> "Problem":
        """Select problems along the batch dimensions, e.g. ``problem[3]`` or ``problem[:10]``."""
        if not self.batch_shape:
            raise IndexError("this Problem has no batch dimension to index")
        try:  # the index must address the batch dimensions only, never n, T or d
            if isinstance(index, (str, bytes)):
                raise TypeError("a string is not an index")
            torch.empty(self.batch_shape, dtype=torch.bool)[index]
        except (IndexError, TypeError, ValueError, RuntimeError) as err:
            raise IndexError(f"index {index!r} does not select problems of the batch shape {self.batch_shape}: "
                             f"index the batch dimensions only, e.g. problem[0] or problem[:2] ({err})") from None
        index = index if isinstance(index, tuple) else (index,)
        part = lambda tensor, trailing: tensor[index + (slice(None),) * trailing]  # noqa: E731
        return Problem(part(self.X, 3), part(self.Y, 1), None if self.Z is None else part(self.Z, 2), part(self.v, 1))

    def repeat(self, copies: int) -> "Problem":
        """Copies of this (unbatched) problem as a batch, e.g. to train from several inits.

        Parameters
        ----------
        copies : int
            The number of copies.

        Returns
        -------
        Problem
            The batch, of shape (copies,).

        Raises
        ------
        ValueError
            If the problem is already a batch, or copies is not a positive integer.

        Examples
        --------
        >>> from attnsvm import data
        >>> data.random_problem(3, 4, 2, seed=0).repeat(5)
        Problem(batch=(5,), n=3, T=4, d=2)
        """
        if self.batch_shape:
            raise ValueError("repeat applies to a single problem: index the batch first, e.g. problem[0]")
        copies = positive_int(copies, "copies")
        _memory(copies * self.X.numel(), "copies")  # construction checks every entry of the expanded copies
        return Problem(*(None if part is None else part.expand((copies,) + part.shape)
                         for part in (self.X, self.Y, self.Z, self.v)))

    def to(self, device: str | torch.device) -> "Problem":
        """The same problem with its tensors on ``device``.

        Parameters
        ----------
        device : str
            The device; attnsvm computes on the CPU, so only "cpu" is accepted.

        Returns
        -------
        Problem
            The problem on ``device``.

        Raises
        ------
        ValueError
            If device is not the CPU.

        Examples
        --------
        >>> from attnsvm import data
        >>> data.random_problem(3, 4, 2, seed=0).to("cpu").X.device
        device(type='cpu')
        """
        return Problem(self.X, self.Y, self.Z, self.v, device=device)

    def __repr__(self) -> str:
        batch = f"batch={self.batch_shape}, " if self.batch_shape else ""
        return f"Problem({batch}n={self.n}, T={self.T}, d={self.d})"


def _seed(value: object, name: str = "seed") -> int:
    """`checks.seed` below 2**63, what torch's generator takes: the library's one check of a seed."""
    return _checks.seed(value, name, below=2**63)


def _seeds(value: object, name: str = "seed") -> list[int]:
    """A non-empty 1-D list (or array) of seeds, each checked by `_seed` and named by its position."""
    items = value.tolist() if isinstance(value, (np.ndarray, torch.Tensor)) else value
    if not (isinstance(items, SEED_LISTS) and len(items)) or any(isinstance(item, SEED_LISTS) for item in items):
        raise ValueError(f"{name} must be a non-empty list of integer seeds, got {value!r}")
    return [_seed(item, f"{name}[{k}]") for k, item in enumerate(items)]


def _sizes(n: object, T: object, d: object) -> tuple[int, int, int]:
    """n >= 1 sequences of T >= 2 tokens (a selected token and another) in R^d, d >= 1."""
    n, T, d = positive_int(n, "n"), positive_int(T, "T"), positive_int(d, "d")
    if T < 2:
        raise ValueError(f"T must be an integer >= 2, got {T}: attention selects a token against the others (T >= 2 "
                         f"tokens per sequence; with T={T} there is no other token)")
    return n, T, d


def _batch(batch: object) -> tuple[int, ...]:
    """The batch shape of `batch`: () for None, (batch,) for an integer >= 1."""
    return () if batch is None else (positive_int(batch, "batch"),)


def _workers(value: object) -> int:
    """A number of worker processes, >= 1 and at most MAX_WORKERS."""
    workers = positive_int(value, "workers")
    _checks.budget(workers, "workers", MAX_WORKERS, "worker processes")
    return workers


def _real(value: object, name: str) -> float:
    """`value` as a finite float (any sign; not a bool), else a TypeError/ValueError naming it."""
    if isinstance(value, (bool, np.bool_)) or isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be a finite number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name} must be a finite number, got {value!r} ({type(value).__name__})") from err
    if not np.isfinite(number):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return number


def _nonnegative(value: object, name: str, *, positive: bool = False) -> float:
    """`checks.nonnegative_float` (or `positive_float`), refusing bools and strings (True and "0.5" are not
    numbers here)."""
    if isinstance(value, (bool, np.bool_, str, bytes)):
        raise TypeError(f"{name} must be a finite number {'>' if positive else '>='} 0, got {value!r}")
    return positive_float(value, name) if positive else nonnegative_float(value, name)


def _finite_noise(tokens: torch.Tensor) -> torch.Tensor:
    """`tokens`, checked to be finite after adding `spread` times Gaussian noise."""
    return finite_result(tokens, "the tokens", "spread is too large for float64: use spread <= 1e300")


def _as_problem(value: object, name: str = "problem") -> Problem:
    """`value` if it is a `Problem`, else a TypeError naming it."""
    if not isinstance(value, Problem):
        raise TypeError(f"{name} must be an attnsvm.data.Problem (e.g. data.random_problem(n, T, d, seed=0)), got "
                        f"{type(value).__name__}")
    return value


def unit_rows(tensor: ArrayLike) -> torch.Tensor:
    """Normalize the last dimension to unit Euclidean norm.

    Parameters
    ----------
    tensor : ArrayLike
        Non-zero rows.

    Returns
    -------
    Tensor
        The rows divided by their norms (float64).

    Raises
    ------
    ValueError
        If the last dimension is empty or a row is zero.

    Examples
    --------
    >>> from attnsvm import data
    >>> data.unit_rows([[3.0, 4.0], [0.0, 2.0]]).tolist()
    [[0.6, 0.8], [0.0, 1.0]]
    """
    tensor = as_tensor(tensor, "tensor")
    if tensor.ndim < 1 or tensor.shape[-1] < 1:
        raise ValueError(f"tensor must have at least one entry in its last dimension, got shape {tuple(tensor.shape)}")
    scale = tensor.abs().amax(-1, keepdim=True)
    if (scale == 0).any():
        raise ValueError("tensor has a row of zeros, which has no direction: unit_rows needs non-zero rows")
    if not ((scale >= 1e-150) & (scale <= 1e150)).all():  # the squares would over- or underflow: scale first
        tensor = tensor / scale
    return tensor / tensor.norm(dim=-1, keepdim=True)


def random_problem(n: int, T: int, d: int, *, seed: int | Sequence[int] | np.ndarray | torch.Tensor,
                   batch: int | None = None, device: str | torch.device | None = None) -> Problem:
    r"""The papers' random instance: unit-norm Gaussian tokens and queries, a unit head v, labels :math:`\pm 1` with
    probability 1/2.

    Parameters
    ----------
    n : int
        The number of sequences.
    T : int
        Tokens per sequence.
    d : int
        The dimension.
    seed : int or Sequence
        One seed, or a list of seeds: then problem b is ``random_problem(n, T, d, seed=seed[b])``, so each one can
        be drawn alone.
    batch : int or None, default=None
        B independent problems (leading dimension B) drawn from one seeded generator (None: one problem).
    device : str or None, default=None
        None or "cpu".

    Returns
    -------
    Problem
        The problems.

    Raises
    ------
    ValueError
        If a size or seed is out of range, or a list of seeds is passed with batch.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import data
    >>> data.random_problem(3, 4, 2, seed=0)
    Problem(n=3, T=4, d=2)
    >>> data.random_problem(3, 4, 2, seed=0, batch=5)
    Problem(batch=(5,), n=3, T=4, d=2)
    >>> pair = data.random_problem(3, 4, 2, seed=[7, 8])
    >>> torch.equal(pair[1].X, data.random_problem(3, 4, 2, seed=8).X)
    True
    """
    n, T, d = positive_int(n, "n"), positive_int(T, "T"), positive_int(d, "d")  # T = 1 as in Problem
    device = _device(device)
    if not isinstance(seed, SEED_LISTS):
        if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
            raise ValueError(f"seed must be an integer or a list of integers (each >= 0), got {seed!r} "
                             f"({type(seed).__name__})")
        shape = _batch(batch)
        _memory(np.prod(shape) * n * (T + 1) * d, "batch, n, T and d")
        return Problem(*_draw(n, T, d, _seed(seed), shape), device=device)
    seeds = _seeds(seed)
    if batch is not None:
        raise ValueError("with a list of seeds, random_problem draws one problem per seed: pass no batch")
    _memory(len(seeds) * n * (T + 1) * d, "seed (the number of seeds), n, T and d")
    return Problem(*(torch.stack(parts) for parts in zip(*(_draw(n, T, d, s, ()) for s in seeds))), device=device)


def _draw(n: int, T: int, d: int, seed: int, shape: tuple) -> tuple[torch.Tensor, ...]:
    """X, Y, Z, v of `random_problem`, a batch of `shape`, from one generator."""
    gen = torch.Generator().manual_seed(seed)
    X = unit_rows(torch.randn(shape + (n, T, d), generator=gen, dtype=torch.float64))
    Z = unit_rows(torch.randn(shape + (n, d), generator=gen, dtype=torch.float64))
    v = unit_rows(torch.randn(shape + (d,), generator=gen, dtype=torch.float64))
    Y = torch.randint(0, 2, shape + (n,), generator=gen).to(torch.float64) * 2 - 1
    return X, Y, Z, v


def planar_problem(*, seed: int, n: int = 2, T: int = 5, spread: float = 0.5) -> Problem:
    r"""Paper A's two-dimensional picture (its ``visualization2`` recipe): d = 2, labels +1.

    Token 1 of sequence i sits at (1, :math:`\pm` 0.5) (alternating sign), every other token at (-1, 0) plus
    ``spread`` times Gaussian noise; queries :math:`z_i` are random unit vectors. The head is v = (1, 0) (paper A
    draws it at random), so that token 1 is the optimal token of every sequence.

    Parameters
    ----------
    seed : int
        The seed.
    n : int, default=2
        The number of sequences.
    T : int, default=5
        Tokens per sequence, :math:`T \ge 2`.
    spread : float, default=0.5
        The scale of the noise.

    Returns
    -------
    Problem
        The problem.

    Raises
    ------
    ValueError
        If T < 2, or an argument is out of range.

    Examples
    --------
    >>> from attnsvm import data, theory
    >>> problem = data.planar_problem(seed=0)
    >>> problem, theory.optimal_tokens(problem).tolist()
    (Problem(n=2, T=5, d=2), [0, 0])
    """
    n, T = positive_int(n, "n"), positive_int(T, "T", minimum=2)
    seed, spread = _seed(seed), _nonnegative(spread, "spread")
    _memory(n * T * 2, "n and T")
    gen = torch.Generator().manual_seed(seed)
    X = spread * torch.randn(n, T, 2, generator=gen, dtype=torch.float64)
    X[:, 0] = torch.tensor([[1.0, 0.5 * (-1) ** i] for i in range(n)], dtype=torch.float64)
    X[:, 1:] += torch.tensor([-1.0, 0.0], dtype=torch.float64)
    _finite_noise(X)
    Z = unit_rows(torch.randn(n, 2, generator=gen, dtype=torch.float64))
    return Problem(X, torch.ones(n, dtype=torch.float64), Z, torch.tensor([1.0, 0.0], dtype=torch.float64))


def random_selection(problem: Problem, *, seed: int) -> torch.Tensor:
    r"""One uniformly random token index per sequence: a selection :math:`\alpha` that need not be optimal.

    Parameters
    ----------
    problem : Problem
        The problems (a batch).
    seed : int
        The seed.

    Returns
    -------
    Tensor
        The token indices, shape (..., n).

    Raises
    ------
    TypeError
        If problem is not a ``Problem``.

    Examples
    --------
    >>> from attnsvm import data
    >>> alpha = data.random_selection(data.random_problem(3, 4, 2, seed=0, batch=5), seed=1)
    >>> tuple(alpha.shape), alpha.dtype, bool(((alpha >= 0) & (alpha < 4)).all())
    ((5, 3), torch.int64, True)
    """
    problem, seed = _as_problem(problem), _seed(seed)
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, problem.T, problem.batch_shape + (problem.n,), generator=gen).to(problem.X.device)


def opposite_clusters_problem(*, seed: int = 1, spread: float = 0.3) -> Problem:
    """Paper A's W-versus-(K, Q) picture (its ``visualization1`` recipe): n = 2, T = 3, d = 2, labels +1.

    The tokens of sequence 1 scatter around (-1, 0) and those of sequence 2 around (+1, 0); queries :math:`z_i`
    and the head v are random unit vectors.

    Parameters
    ----------
    seed : int, default=1
        The seed.
    spread : float, default=0.3
        The scale of the Gaussian noise around the centres.

    Returns
    -------
    Problem
        The problem.

    Raises
    ------
    ValueError
        If spread is not a finite number.

    Examples
    --------
    >>> from attnsvm import data
    >>> problem = data.opposite_clusters_problem()
    >>> problem, problem.Y.tolist()
    (Problem(n=2, T=3, d=2), [1.0, 1.0])
    """
    seed, spread = _seed(seed), _nonnegative(spread, "spread")
    gen = torch.Generator().manual_seed(seed)
    X = spread * torch.randn(2, 3, 2, generator=gen, dtype=torch.float64)
    X += torch.tensor([[[-1.0, 0.0]], [[1.0, 0.0]]], dtype=torch.float64)
    _finite_noise(X)
    Z = unit_rows(torch.randn(2, 2, generator=gen, dtype=torch.float64))
    v = unit_rows(torch.randn(2, generator=gen, dtype=torch.float64))
    return Problem(X, torch.ones(2, dtype=torch.float64), Z, v)


# Paper B's examples: tokens in R^3 whose first two coordinates enter the logits through the key-query
# matrix PROMPT_KEY = diag(1, 1, 0) and whose third coordinate is the token score (the head is v = e_3).
PROMPT_KEY = torch.diag(torch.tensor([1.0, 1.0, 0.0], dtype=torch.float64))


def _prompt_problem(positions: ArrayLike, scores: ArrayLike) -> Problem:
    """A prompt-model problem (labels +1, head e_3) from 2-D positions (..., n, T, 2) and scores (..., n, T)."""
    X = torch.cat([torch.as_tensor(positions, dtype=torch.float64),
                   torch.as_tensor(scores, dtype=torch.float64)[..., None]], -1)
    return Problem(X, torch.ones(X.shape[:-2], dtype=torch.float64), None,
                   torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64))


def single_input_problem(*, global_case: bool) -> Problem:
    """Paper B's single-input example: keys (-0.1, 1), (1, 0), (0, 0) with scores 1, 0.9 and 0.9 or 0.

    A prompt-model problem (no queries Z; ``PROMPT_KEY`` is its key-query matrix).

    Parameters
    ----------
    global_case : bool
        Scores 1, 0.9, 0.9 (every direction leads to the optimal first token); False: 1, 0.9, 0 (the second token
        is locally optimal).

    Returns
    -------
    Problem
        The problem.

    Examples
    --------
    >>> from attnsvm import data, theory
    >>> problem = data.single_input_problem(global_case=False)
    >>> problem, problem.Z is None, theory.token_scores(problem).tolist()
    (Problem(n=1, T=3, d=3), True, [[1.0, 0.9, 0.0]])
    """
    global_case = boolean(global_case, "global_case")
    return _prompt_problem([[[-0.1, 1.0], [1.0, 0.0], [0.0, 0.0]]], [[1.0, 0.9, 0.9 if global_case else 0.0]])


def multi_input_problem(*, seed: int = 0, spread: float = 0.2) -> Problem:
    """Paper B's multi-input example: n = 3 sequences of T = 7 tokens.

    Token 1 (score 1) sits near (1, 0), tokens 2-4 near (-1, 1) and tokens 5-7 near (-0.5, -0.5) (score 0.5), plus
    ``spread`` times Gaussian noise.

    Parameters
    ----------
    seed : int, default=0
        The seed of the noise.
    spread : float, default=0.2
        The noise's scale.

    Returns
    -------
    Problem
        The problem.

    Raises
    ------
    ValueError
        If spread is not a finite number.

    Examples
    --------
    >>> from attnsvm import data, theory
    >>> problem = data.multi_input_problem()
    >>> problem, theory.optimal_tokens(problem).tolist()
    (Problem(n=3, T=7, d=3), [0, 0, 0])
    """
    seed, spread = _seed(seed), _nonnegative(spread, "spread")
    gen = torch.Generator().manual_seed(seed)
    centres = torch.tensor([[1.0, 0.0]] + [[-1.0, 1.0]] * 3 + [[-0.5, -0.5]] * 3, dtype=torch.float64)
    positions = _finite_noise(centres + spread * torch.randn(3, 7, 2, generator=gen, dtype=torch.float64))
    return _prompt_problem(positions, torch.tensor([1.0] + [0.5] * 6).expand(3, 7))


def loss_example_problem(C: float) -> Problem:
    """Paper B's example of the effect of the loss.

    Sequence 1 has keys (0, 0) and (1, 1) with scores 0 and C, sequence 2 has keys (0, 0) and (1, -1) with scores 0
    and 1; the second token is optimal in both (C > 0).

    Parameters
    ----------
    C : float
        The score of sequence 1's second token, C > 0.

    Returns
    -------
    Problem
        The problem.

    Raises
    ------
    ValueError
        If C is not a finite number > 0.

    Examples
    --------
    >>> from attnsvm import data, theory
    >>> problem = data.loss_example_problem(2.0)
    >>> problem, theory.token_scores(problem).tolist()
    (Problem(n=2, T=2, d=3), [[0.0, 2.0], [0.0, 1.0]])
    """
    C = _nonnegative(C, "C", positive=True)  # C <= 0 would make the first token optimal in sequence 1
    return _prompt_problem([[[0.0, 0.0], [1.0, 1.0]], [[0.0, 0.0], [1.0, -1.0]]], [[0.0, C], [0.0, 1.0]])


def orthonormal_problem(T: int, *, seed: int, batch: int | None = None) -> Problem:
    r"""Single sequences (n = 1) of T orthonormal tokens in :math:`\mathbb{R}^T`, label +1, and ``random_problem``'s
    unit query and head (Chapter 5, E5.2).

    The tokens are the U factor of the SVD of a Gaussian matrix, as in paper A's lambda-head code.

    Parameters
    ----------
    T : int
        The number of tokens (and the dimension).
    seed : int
        The seed.
    batch : int or None, default=None
        The number of problems (None: one problem).

    Returns
    -------
    Problem
        The problems.

    Raises
    ------
    ValueError
        If T < 2, or an argument is out of range.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import data
    >>> problem = data.orthonormal_problem(4, seed=0)
    >>> problem, torch.allclose(problem.X[0] @ problem.X[0].T, torch.eye(4, dtype=torch.float64))
    (Problem(n=1, T=4, d=4), True)
    """
    T, seed, shape = positive_int(T, "T", minimum=2), _seed(seed), _batch(batch)
    _memory(np.prod(shape) * 3 * T * T, "batch and T")  # the Gaussian matrices and their SVD
    gen = torch.Generator().manual_seed(seed)
    shape = shape + (1, T, T)
    X = torch.linalg.svd(torch.randn(shape, generator=gen, dtype=torch.float64)).U
    base = random_problem(1, T, T, seed=seed, batch=batch)
    return Problem(X, torch.ones(shape[:-2], dtype=torch.float64), base.Z, base.v)


def joint_training_problem(*, tight: bool) -> Problem:
    """Paper B's joint-training example, with the head v trained (the problem's v is zero).

    Inputs with tokens (0, 0), (1, 1); (0, 0), (1, -1); (0, 0), third, labels (1, -1, 1).

    Parameters
    ----------
    tight : bool
        third = (0.5, 1) (every input is a support vector of the head's SVM); False: (0.5, 1.5) (the third input
        is not).

    Returns
    -------
    Problem
        The problem.

    Examples
    --------
    >>> from attnsvm import data
    >>> problem = data.joint_training_problem(tight=True)
    >>> problem, problem.Y.tolist(), problem.v.tolist()
    (Problem(n=3, T=2, d=2), [1.0, -1.0, 1.0], [0.0, 0.0])
    """
    third = [0.5, 1.0] if boolean(tight, "tight") else [0.5, 1.5]
    X = torch.tensor([[[0.0, 0.0], [1.0, 1.0]], [[0.0, 0.0], [1.0, -1.0]], [[0.0, 0.0], third]], dtype=torch.float64)
    return Problem(X, torch.tensor([1.0, -1.0, 1.0], dtype=torch.float64), None, torch.zeros(2, dtype=torch.float64))


def equal_scores_problem(n: int, T: int, d: int, *, seed: int, batch: int | None = None,
                         delta: float = 0.0) -> Problem:
    r"""Random problems satisfying Assumption B.2: all non-optimal tokens of a sequence have equal scores.

    ``random_problem``'s tokens with head :math:`v = e_1` (the score of a token is :math:`Y_i` times its first
    coordinate); the first coordinate of every non-optimal token is set to the sequence's lowest score, plus
    ``delta`` times a uniform draw (delta > 0: scores within delta of each other, the relaxed theorem's setting).

    Parameters
    ----------
    n : int
        The number of sequences.
    T : int
        Tokens per sequence, :math:`T \ge 2`.
    d : int
        The dimension.
    seed : int
        The seed.
    batch : int or None, default=None
        The number of problems (None: one problem).
    delta : float, default=0.0
        The spread of the non-optimal scores, :math:`\ge 0`.

    Returns
    -------
    Problem
        The problems.

    Raises
    ------
    ValueError
        If T < 2, or an argument is out of range.

    Examples
    --------
    >>> from attnsvm import data, theory
    >>> problem = data.equal_scores_problem(3, 4, 2, seed=0)
    >>> [len(set(row)) for row in theory.token_scores(problem).tolist()]  # the optimal score and one other
    [2, 2, 2]
    """
    delta, seed = _nonnegative(delta, "delta"), _seed(seed)
    problem = random_problem(n, T, d, seed=seed, batch=batch)
    X, Y = problem.X.clone(), problem.Y[..., None]
    scores = Y * X[..., 0]
    others = scores < scores.max(-1, keepdim=True).values
    gen = torch.Generator().manual_seed(seed + 1)
    low = scores.min(-1, keepdim=True).values + delta * torch.rand(scores.shape, generator=gen, dtype=torch.float64)
    X[..., 0] = torch.where(others, Y * low, X[..., 0])
    return Problem(X, problem.Y, problem.Z, torch.eye(d, dtype=torch.float64)[0])
