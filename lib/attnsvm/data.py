"""Problem instances: tokens X, labels Y, queries Z and a linear head v, optionally batched.

Shapes (a leading batch shape `...` of independent problems is allowed everywhere):
X (..., n, T, d) tokens, Y (..., n) labels in {-1, +1}, Z (..., n, d) query tokens, v (..., d) head.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import torch

from .checks import as_tensor, positive_int, require_shape


class Sequences:
    """The shape of n sequences X (..., n, T, d) of T tokens in R^d, with batch dimensions in front."""

    X: torch.Tensor

    @property
    def batch_shape(self) -> tuple:
        return tuple(self.X.shape[:-3])

    @property
    def n(self) -> int:
        return self.X.shape[-3]

    @property
    def T(self) -> int:
        return self.X.shape[-2]

    @property
    def d(self) -> int:
        return self.X.shape[-1]


@dataclass(frozen=True, init=False)
class Problem(Sequences):
    """A (batch of) classification problem(s) for one softmax-attention layer with a linear head."""

    X: torch.Tensor
    Y: torch.Tensor
    Z: torch.Tensor | None
    v: torch.Tensor

    def __init__(self, X, Y, Z, v, *, device=None):
        X = as_tensor(X, "X", device=device)
        if X.ndim < 3:
            raise ValueError(f"X must have shape (..., n, T, d) (n sequences of T tokens in R^d), got {tuple(X.shape)}")
        *batch, n, T, d = X.shape
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

    def __getitem__(self, index) -> "Problem":
        """Select problems along the batch dimensions, e.g. `problem[3]` or `problem[:10]`."""
        if not self.batch_shape:
            raise IndexError("this Problem has no batch dimension to index")
        return Problem(self.X[index], self.Y[index], None if self.Z is None else self.Z[index], self.v[index])

    def repeat(self, copies: int) -> "Problem":
        """`copies` copies of this (unbatched) problem as a batch (copies,), e.g. to train from several inits."""
        if self.batch_shape:
            raise ValueError("repeat applies to a single problem: index the batch first, e.g. problem[0]")
        copies = positive_int(copies, "copies")
        return Problem(*(None if part is None else part.expand((copies,) + part.shape)
                         for part in (self.X, self.Y, self.Z, self.v)))

    def to(self, device) -> "Problem":
        """The same problem with its tensors on `device` (e.g. "cuda")."""
        return Problem(self.X, self.Y, self.Z, self.v, device=device)

    def __repr__(self) -> str:
        batch = f"batch={self.batch_shape}, " if self.batch_shape else ""
        return f"Problem({batch}n={self.n}, T={self.T}, d={self.d})"


def unit_rows(tensor: torch.Tensor) -> torch.Tensor:
    """Normalize the last dimension to unit Euclidean norm."""
    return tensor / tensor.norm(dim=-1, keepdim=True)


def random_problem(n: int, T: int, d: int, *, seed, batch: int | None = None, device=None) -> Problem:
    """The papers' random instance: unit-norm Gaussian tokens and queries, a unit head v, labels +-1 w.p. 1/2.

    With `batch=B` it returns B independent problems (leading dimension B) drawn from one seeded generator.
    With a list of seeds, problem b is `random_problem(n, T, d, seed=seed[b])`: each one can be drawn alone.
    """
    n, T, d = (positive_int(value, name) for value, name in ((n, "n"), (T, "T"), (d, "d")))
    if isinstance(seed, numbers.Integral):
        shape = () if batch is None else (positive_int(batch, "batch"),)
        return Problem(*_draw(n, T, d, int(seed), shape), device=device)
    try:
        seeds = [int(s) for s in seed]
    except (TypeError, ValueError):
        raise ValueError(f"seed must be an integer or a list of integers, got {seed!r}") from None
    if batch is not None or not seeds:
        raise ValueError("with a list of seeds, random_problem draws one problem per seed: pass a non-empty "
                         "list and no batch")
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
    """Paper A's two-dimensional picture (its `visualization2` recipe): d = 2, labels +1.

    Token 1 of sequence i sits at (1, +-0.5) (alternating sign), every other token at (-1, 0) plus
    `spread` times Gaussian noise; queries z_i are random unit vectors. The head is v = (1, 0) (paper A
    draws it at random), so that token 1 is the optimal token of every sequence.
    """
    n, T = positive_int(n, "n"), positive_int(T, "T", minimum=2)
    gen = torch.Generator().manual_seed(int(seed))
    X = spread * torch.randn(n, T, 2, generator=gen, dtype=torch.float64)
    X[:, 0] = torch.tensor([[1.0, 0.5 * (-1) ** i] for i in range(n)], dtype=torch.float64)
    X[:, 1:] += torch.tensor([-1.0, 0.0], dtype=torch.float64)
    Z = unit_rows(torch.randn(n, 2, generator=gen, dtype=torch.float64))
    return Problem(X, torch.ones(n, dtype=torch.float64), Z, torch.tensor([1.0, 0.0], dtype=torch.float64))


def random_selection(problem: Problem, *, seed: int) -> torch.Tensor:
    """One uniformly random token index per sequence, shape (..., n): a selection alpha that need not be optimal."""
    gen = torch.Generator().manual_seed(int(seed))
    return torch.randint(0, problem.T, problem.batch_shape + (problem.n,), generator=gen).to(problem.X.device)


def opposite_clusters_problem(*, seed: int = 1, spread: float = 0.3) -> Problem:
    """Paper A's W-versus-(K, Q) picture (its `visualization1` recipe): n = 2, T = 3, d = 2, labels +1.

    The tokens of sequence 1 scatter around (-1, 0) and those of sequence 2 around (+1, 0) (`spread` times
    Gaussian noise); queries z_i and the head v are random unit vectors.
    """
    gen = torch.Generator().manual_seed(int(seed))
    X = spread * torch.randn(2, 3, 2, generator=gen, dtype=torch.float64)
    X += torch.tensor([[[-1.0, 0.0]], [[1.0, 0.0]]], dtype=torch.float64)
    Z = unit_rows(torch.randn(2, 2, generator=gen, dtype=torch.float64))
    v = unit_rows(torch.randn(2, generator=gen, dtype=torch.float64))
    return Problem(X, torch.ones(2, dtype=torch.float64), Z, v)


# Paper B's examples: tokens in R^3 whose first two coordinates enter the logits through the key-query
# matrix PROMPT_KEY = diag(1, 1, 0) and whose third coordinate is the token score (the head is v = e_3).
PROMPT_KEY = torch.diag(torch.tensor([1.0, 1.0, 0.0], dtype=torch.float64))


def _prompt_problem(positions, scores) -> Problem:
    """A prompt-model problem (labels +1, head e_3) from 2-D positions (..., n, T, 2) and scores (..., n, T)."""
    X = torch.cat([torch.as_tensor(positions, dtype=torch.float64),
                   torch.as_tensor(scores, dtype=torch.float64)[..., None]], -1)
    return Problem(X, torch.ones(X.shape[:-2], dtype=torch.float64), None,
                   torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64))


def single_input_problem(*, global_case: bool) -> Problem:
    """Paper B's single-input example: keys (-0.1, 1), (1, 0), (0, 0) with scores 1, 0.9 and 0.9 (global case:
    every direction leads to the optimal first token) or 0 (local case: the second token is locally optimal)."""
    return _prompt_problem([[[-0.1, 1.0], [1.0, 0.0], [0.0, 0.0]]], [[1.0, 0.9, 0.9 if global_case else 0.0]])


def multi_input_problem(*, seed: int = 0, spread: float = 0.2) -> Problem:
    """Paper B's multi-input example: n = 3 sequences of T = 7 tokens. Token 1 (score 1) sits near (1, 0),
    tokens 2-4 near (-1, 1) and tokens 5-7 near (-0.5, -0.5) (score 0.5), plus `spread` times Gaussian noise."""
    gen = torch.Generator().manual_seed(int(seed))
    centres = torch.tensor([[1.0, 0.0]] + [[-1.0, 1.0]] * 3 + [[-0.5, -0.5]] * 3, dtype=torch.float64)
    positions = centres + spread * torch.randn(3, 7, 2, generator=gen, dtype=torch.float64)
    return _prompt_problem(positions, torch.tensor([1.0] + [0.5] * 6).expand(3, 7))


def loss_example_problem(C: float) -> Problem:
    """Paper B's example of the effect of the loss: sequence 1 has keys (0, 0) and (1, 1) with scores 0 and C,
    sequence 2 has keys (0, 0) and (1, -1) with scores 0 and 1; the second token is optimal in both."""
    return _prompt_problem([[[0.0, 0.0], [1.0, 1.0]], [[0.0, 0.0], [1.0, -1.0]]], [[0.0, float(C)], [0.0, 1.0]])


def orthonormal_problem(T: int, *, seed: int, batch: int | None = None) -> Problem:
    """Single sequences (n = 1) of T orthonormal tokens in R^T (the U factor of the SVD of a Gaussian matrix, as
    in paper A's lambda-head code), label +1, and `random_problem`'s unit query and head (Chapter 5, E5.2)."""
    T = positive_int(T, "T", minimum=2)
    gen = torch.Generator().manual_seed(int(seed))
    shape = ((batch,) if batch else ()) + (1, T, T)
    X = torch.linalg.svd(torch.randn(shape, generator=gen, dtype=torch.float64)).U
    base = random_problem(1, T, T, seed=seed, batch=batch)
    return Problem(X, torch.ones(shape[:-2], dtype=torch.float64), base.Z, base.v)


def joint_training_problem(*, tight: bool) -> Problem:
    """Paper B's joint-training example: inputs with tokens (0, 0), (1, 1); (0, 0), (1, -1); (0, 0), third, labels
    (1, -1, 1), the head v trained (the problem's v is zero). third = (0.5, 1) (tight: every input is a support
    vector of the head's SVM) or (0.5, 1.5) (not tight: the third input is not)."""
    third = [0.5, 1.0] if tight else [0.5, 1.5]
    X = torch.tensor([[[0.0, 0.0], [1.0, 1.0]], [[0.0, 0.0], [1.0, -1.0]], [[0.0, 0.0], third]], dtype=torch.float64)
    return Problem(X, torch.tensor([1.0, -1.0, 1.0], dtype=torch.float64), None, torch.zeros(2, dtype=torch.float64))


def equal_scores_problem(n: int, T: int, d: int, *, seed: int, batch: int | None = None,
                         delta: float = 0.0) -> Problem:
    """Random problems satisfying Assumption B.2: all non-optimal tokens of a sequence have equal scores.

    `random_problem`'s tokens with head v = e_1 (the score of a token is Y_i times its first coordinate); the
    first coordinate of every non-optimal token is set to the sequence's lowest score, plus `delta` times a
    uniform draw (delta > 0: scores within delta of each other, the relaxed theorem's setting).
    """
    problem = random_problem(n, T, d, seed=seed, batch=batch)
    X, Y = problem.X.clone(), problem.Y[..., None]
    scores = Y * X[..., 0]
    others = scores < scores.max(-1, keepdim=True).values
    gen = torch.Generator().manual_seed(int(seed) + 1)
    low = scores.min(-1, keepdim=True).values + delta * torch.rand(scores.shape, generator=gen, dtype=torch.float64)
    X[..., 0] = torch.where(others, Y * low, X[..., 0])
    return Problem(X, problem.Y, problem.Z, torch.eye(d, dtype=torch.float64)[0])
