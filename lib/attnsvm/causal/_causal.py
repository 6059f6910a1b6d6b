"""Causal and sequence-to-sequence attention: every token is a query (paper A's extension, paper C's setting).

A `SequenceProblem` holds n sequences X_i of T tokens and one linear head v_ik per query position k. Query k of
sequence i is the token x_ik; it attends to the tokens t <= k of its prefix (causal) or to every token t (seq2seq):

    logit_ikt = x_it^T W x_ik,   s_ik = softmax over the candidates t,   f_ik = sum_t s_ikt gamma_ikt,
    gamma_ikt = v_ik^T x_it (the token score),   L(W) = mean over (i, k) of l(f_ik)      (labels +1).

Data: `synthetic_language` (a seeded first-order Markov language with explicit next-token probabilities) and
`next_token_problems` (sentences sampled from it, one problem per seed); `next_token_problem` makes any X a
next-token problem, with the head of query k the embedding of the true next token, v_ik = x_{i,k+1} (tied
embeddings), so a prefix token scores high when it equals or resembles the next token; `random_problem` is
the papers' random instance with every token a query. `candidates`, `scores` and `optimal_tokens` give the
tokens each query may attend to, their scores and the best one.

Model: `logits`, `attention`, `outputs`, `loss`. Each query is paper A's model with one sequence, its own head
and label +1, so the exact log-space gradient of `gradients.logit_gradient` applies query by query;
`weight_gradient` (and `loss_gradient`) combine all queries in log space, and `gd` runs gradient descent.

The causal Att-SVM (`att_svm`) separates, for every query, the selected token alpha_ik from each other candidate:

    min ||W||_F  s.t.  (x_{i alpha_ik} - x_it)^T W x_ik >= 1  for every (i, k) and candidate t != alpha_ik,

except the candidates t that are copies of the selected token (x_it = x_{i alpha_ik}): their logit equals the
selected token's for every W, so no W can separate them; they are left out (`separation_mask`). Its
soft-margin version adds slacks xi >= 0 to the constraints and C sum xi to the objective: one slack per
constraint (the default), or one per (sequence, token) shared by the queries of the sequence (slack="token",
paper C's Definition 4.1 as printed); `penalty_threshold` gives the C above which paper C's form
(objective="norm", ||W||_F + C sum xi) is the hard-margin SVM. On language data the hard margin is often
infeasible (`feasible`): one query token must prefer a to b in one prefix and b to a in another.
`preference_cycle` finds such a cycle, `conflicts` marks every constraint on one, `max_positive_margins` counts
the constraints one W can satisfy at best, and `margins` and `violations` measure a given W.

Conventions: indices start at 0 (query k = 0 is the first token); the optimal token is argmax_t gamma_ikt, ties
(exact copies of one token) broken towards the latest occurrence; `margins` and the multipliers are NaN/0 off
the separation constraints. All solvers work with the Gram matrix of the constraints, G = (D D^T) * (Z Z^T) for
rows kron(delta, z), so their cost does not grow with d^2.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import NamedTuple

import clarabel
import numpy as np
import torch
from scipy import sparse
from scipy.optimize import linprog

from ..train import _gradients as gradients
from .. import model
from ..svm import _attention as svm
from .._checks import MAX_BYTES, cpu_device as _device, memory as _memory, number as _positive
from .._checks import option as _option, seed as _checked_seed
from .._checks import (as_index, as_tensor, boolean, budget, choice, finite_result, positive_float, positive_int,
                     require_shape)

from ..data import Problem, Sequences, unit_rows
from ..train._initial import uniform_init
from ..model import LOSSES
from ..train._descent import Trajectory

__all__ = ["Language", "SequenceProblem", "WeightGradient", "att_svm", "attention", "candidates", "combine",
           "conflicts", "feasible", "gd", "logits", "loss", "loss_gradient", "margins", "max_positive_margins",
           "next_token_problem", "next_token_problems", "optimal_tokens", "outputs", "penalty_threshold",
           "preference_cycle", "random_problem", "scores", "selects_optimal", "separation_mask", "synthetic_language",
           "total_slack", "violations", "weight_gradient", "OBJECTIVES", "SLACKS", "POLISH_TOL", "GAP_TOL",
           "MAX_STEPS", "MAX_RECORDS", "MAX_GRAPH_STEPS", "SOLVER_FLOATS"]

OBJECTIVES = ("squared", "norm")  # (1/2)||W||_F^2 + C sum xi (default), or paper C's ||W||_F + C sum xi
SLACKS = ("constraint", "token")  # one slack per constraint (i, k, t) (default), or paper C's per (sequence i, token t)
POLISH_TOL = 1e-9  # accepted (relative) KKT residual of a polished soft-margin solution
GAP_TOL = {"hard": 1e-6, "soft": 1e-3}  # accepted relative duality gap of a hard or "squared" SVM solution
MAX_STEPS = 10**8  # gradient steps one `gd` call may run
MAX_RECORDS = 10**7  # iterates one `gd` call may record
MAX_GRAPH_STEPS = 10**8  # steps of the preference-graph searches (`preference_cycle`, `conflicts`)
# peak memory of each solver, in dense floats per m^2 for m constraints (measured: NNLS, Clarabel, HiGHS)
SOLVER_FLOATS = {"hard": 6, "squared": 10, "norm": 28, "token": 22, "threshold": 30}


# ------------------------------------------------------------------ argument checks (private)











def _problem(problem) -> "SequenceProblem":
    """`problem` if it is a SequenceProblem, else a TypeError naming it."""
    if not isinstance(problem, SequenceProblem):
        raise TypeError(f"problem must be a causal.SequenceProblem (e.g. causal.random_problem(n, T, d, seed=0) or "
                        f"causal.next_token_problem(X)), got {type(problem).__name__}")
    return problem


def _weights(problem: "SequenceProblem", W, name: str = "W") -> torch.Tensor:
    """`W` as the model checks it ((..., d, d), broadcasting against the problem's batch), with at least one W."""
    W = model._weights(problem, W, name)
    if 0 in W.shape[:-2]:
        raise ValueError(f"{name} has an empty batch dimension, shape {tuple(W.shape)}: pass at least one W")
    return W


def _no_grad_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A tensor as numpy, also one that requires grad (the solvers leave torch)."""
    return tensor.detach().cpu().numpy()


# ------------------------------------------------------------------ a synthetic language

@dataclass(frozen=True)
class Language:
    """A first-order Markov language over V tokens with unit-norm embeddings in R^d.

    embeddings (V, d); start (V,) the distribution of the first token; transition (V, V): row a is the
    distribution of the token that follows a.
    """

    embeddings: torch.Tensor
    start: torch.Tensor
    transition: torch.Tensor

    def __post_init__(self):
        embeddings = as_tensor(self.embeddings, "embeddings")
        if embeddings.ndim != 2 or 0 in embeddings.shape:
            raise ValueError(f"embeddings must have shape (V, d) with V, d >= 1 (one embedding per token), got "
                             f"{tuple(embeddings.shape)}")
        V = embeddings.shape[0]
        start, transition = as_tensor(self.start, "start"), as_tensor(self.transition, "transition")
        require_shape(start, "start", (V,), "the distribution of the first token")
        require_shape(transition, "transition", (V, V), "row a: the distribution of the token after a")
        for name, rows in (("start", start[None]), ("transition", transition)):
            if (rows < 0).any() or ((rows.sum(-1) - 1).abs() > 1e-9).any():
                raise ValueError(f"{name} must hold probabilities: entries >= 0 and every row summing to 1")
        for name, value in (("embeddings", embeddings), ("start", start), ("transition", transition)):
            object.__setattr__(self, name, value)

    @property
    def V(self) -> int:
        return self.embeddings.shape[0]

    @property
    def d(self) -> int:
        return self.embeddings.shape[1]

    def sample(self, n: int, T: int, *, seed: int):
        """n sequences of T tokens: (ids (n, T) int64, X (n, T, d) their embeddings).

        Sequence i is drawn from its own T uniform numbers (inverse CDF), so the first n sequences sampled with
        a seed are the same for every larger n."""
        n, T = positive_int(n, "n"), positive_int(T, "T")
        _memory(float(n) * T * (self.d + 3), "n and T (n sequences of T tokens in R^d)")
        u = torch.rand(n, T, generator=torch.Generator().manual_seed(_seed(seed)), dtype=torch.float64)
        ids = torch.empty(n, T, dtype=torch.int64)
        for t in range(T):
            cdf = (self.start.expand(n, -1) if t == 0 else self.transition[ids[:, t - 1]]).cumsum(1)
            # u scaled by the row's total (1 up to round-off) falls before the last positive-probability token
            ids[:, t] = torch.searchsorted(cdf, u[:, t, None] * cdf[:, -1:], right=True)[:, 0]
        return ids, self.embeddings[ids]


def synthetic_language(V: int, d: int, *, seed: int, successors: int = 3) -> Language:
    """A random language: a uniform first token, for every token `successors` possible next tokens (drawn
    without replacement) with Dirichlet(1) probabilities, and unit-norm Gaussian embeddings. The transitions
    are drawn first, so one seed gives the same language (the same token sequences) for every d."""
    V, d = positive_int(V, "V", minimum=2), positive_int(d, "d")
    successors = positive_int(successors, "successors")
    if successors > V:
        raise ValueError(f"successors must be at most V={V} (each token has that many possible next tokens), "
                         f"got {successors}")
    _memory(4.0 * V * (V + d), "V and d (the V x V transition matrix and V embeddings in R^d)")
    gen = torch.Generator().manual_seed(_seed(seed))
    nxt = torch.rand(V, V, generator=gen).argsort(dim=1)[:, :successors]  # a random subset per token
    weights = -torch.log(torch.rand(V, successors, generator=gen, dtype=torch.float64))  # Dirichlet(1)
    transition = torch.zeros(V, V, dtype=torch.float64).scatter_(1, nxt, weights / weights.sum(1, keepdim=True))
    embeddings = unit_rows(torch.randn(V, d, generator=gen, dtype=torch.float64))
    return Language(embeddings, torch.full((V,), 1.0 / V, dtype=torch.float64), transition)


def next_token_problems(n: int, T: int, d: int, *, V: int = 20, successors: int = 3, seeds=range(5)):
    """One next-token problem per seed s: n sequences of T tokens sampled from `synthetic_language(V, d,
    seed=s)` (with sampling seed s), as one batch. Returns (SequenceProblem (len(seeds), n, T, d), token ids
    (len(seeds), n, T))."""
    if (isinstance(seeds, (str, bytes, dict)) or not hasattr(seeds, "__iter__")
            or (isinstance(seeds, (np.ndarray, torch.Tensor)) and seeds.ndim != 1)):
        raise TypeError(f"seeds must be a list of integer seeds (one problem per seed), got {seeds!r}")
    seeds = list(itertools.islice(seeds.tolist() if hasattr(seeds, "tolist") else seeds, 10**6 + 1))
    budget(len(seeds), "seeds", 10**6, "problems")
    seeds = [_seed(s, f"seeds[{k}]") for k, s in enumerate(seeds)]
    if not seeds:
        raise ValueError("seeds must hold at least one seed (one problem per seed)")
    n, T, d = positive_int(n, "n"), positive_int(T, "T"), positive_int(d, "d")
    if T < 2:
        raise ValueError(f"T must be an integer >= 2 (a next token to predict), got {T}")
    _memory(3.0 * len(seeds) * n * T * d, "seeds, n, T and d (len(seeds) problems of n sequences of T tokens in R^d)")
    samples = [synthetic_language(V, d, seed=s, successors=successors).sample(n, T, seed=s) for s in seeds]
    ids, X = (torch.stack(part) for part in zip(*samples))
    return next_token_problem(X), ids


# ------------------------------------------------------------------ the problem

@dataclass(frozen=True, init=False)
class SequenceProblem(Sequences):
    """n sequences X (..., n, T, d) whose tokens k < K are queries, each with its own head V (..., n, K, d).

    causal=True: query k attends to the tokens t <= k (K <= T); causal=False (sequence-to-sequence): to all T.
    """

    X: torch.Tensor
    V: torch.Tensor
    causal: bool

    def __init__(self, X, V, *, causal: bool = True, device=None):
        device = _device(device)
        X = as_tensor(X, "X", device=device)
        if X.ndim < 3:
            raise ValueError(f"X must have shape (..., n, T, d) (n sequences of T tokens in R^d), got {tuple(X.shape)}")
        if 0 in X.shape:
            raise ValueError(f"X must hold n >= 1 sequences of T >= 1 tokens in R^d, d >= 1, and no empty batch "
                             f"dimension (the loss is a mean over the sequences), got shape {tuple(X.shape)}")
        V = as_tensor(V, "V", device=device)
        if V.ndim != X.ndim or V.shape[:-2] != X.shape[:-2] or V.shape[-1] != X.shape[-1]:
            raise ValueError(f"V must have shape {tuple(X.shape[:-2])} + (K, {X.shape[-1]}) (one head per query "
                             f"position k < K, for X of shape {tuple(X.shape)}), got {tuple(V.shape)}")
        if V.shape[-2] < 1 or V.shape[-2] > X.shape[-2]:
            raise ValueError(f"V must hold between 1 and T={X.shape[-2]} heads per sequence (queries are the first "
                             f"K tokens), got K={V.shape[-2]}")
        if not isinstance(causal, bool):
            raise TypeError(f"causal must be True (prefix attention) or False (sequence-to-sequence), got {causal!r}")
        for name, value in (("X", X), ("V", V), ("causal", causal)):
            object.__setattr__(self, name, value)
        with torch.no_grad():
            finite = torch.isfinite(_values(self)).all()
        if not finite:
            raise ValueError("X and V are too large: their token scores v_ik^T x_it overflow float64; scale them down")

    @property
    def K(self) -> int:
        """The number of query positions (the first K tokens are queries)."""
        return self.V.shape[-2]

    @property
    def P(self) -> int:
        """The number of query positions, the same as `K`: the book writes P, since K is its key matrix."""
        return self.V.shape[-2]

    @property
    def queries(self) -> torch.Tensor:
        """The query tokens x_ik, k < K: (..., n, K, d)."""
        return self.X[..., : self.K, :]

    def __getitem__(self, index) -> "SequenceProblem":
        """Select problems along the batch dimensions, e.g. `problem[3]` or `problem[:10]`."""
        if not self.batch_shape:
            raise IndexError("this SequenceProblem has no batch dimension to index")
        try:  # the index must address the batch dimensions only, never n, T or d
            if isinstance(index, (str, bytes)):
                raise TypeError("a string is not an index")
            index = torch.as_tensor(index) if isinstance(index, list) else index
            selected = torch.empty(self.batch_shape, dtype=torch.bool)[index]
        except (IndexError, TypeError, ValueError, RuntimeError) as err:
            raise IndexError(f"index {index!r} does not select problems of the batch shape {self.batch_shape}: "
                             f"index the batch dimensions only, e.g. problem[0] or problem[:2] ({err})") from None
        if selected.numel() == 0:
            raise IndexError(f"index {index!r} selects no problem of the batch shape {self.batch_shape}")
        index = index if isinstance(index, tuple) else (index,)
        rest = (slice(None),) * 3
        return SequenceProblem(self.X[index + rest], self.V[index + rest], causal=self.causal)

    def __repr__(self) -> str:
        batch = f"batch={self.batch_shape}, " if self.batch_shape else ""
        kind = "causal" if self.causal else "seq2seq"
        return f"SequenceProblem({batch}n={self.n}, T={self.T}, P={self.P}, d={self.d}, {kind})"


def next_token_problem(X) -> SequenceProblem:
    """Causal next-token prediction on X (..., n, T, d): query k < T - 1 predicts token k + 1, with the tied
    head v_ik = x_{i,k+1} (the embedding of the true next token)."""
    X = as_tensor(X, "X")
    if X.ndim < 3 or X.shape[-2] < 2:
        raise ValueError(f"X must have shape (..., n, T, d) with T >= 2 (a next token to predict), got "
                         f"{tuple(X.shape)}")
    return SequenceProblem(X, X[..., 1:, :], causal=True)


def random_problem(n: int, T: int, d: int, *, seed: int, batch: int | None = None,
                   causal: bool = True) -> SequenceProblem:
    """The papers' random instance with every token a query: unit-norm Gaussian tokens X (n, T, d) and heads
    V (n, T, d), one per query (K = T); with `batch=B`, B independent problems from one seeded generator."""
    n, T, d = (positive_int(value, name) for value, name in ((n, "n"), (T, "T"), (d, "d")))
    if T < 2:
        raise ValueError(f"T must be an integer >= 2 (attention selects a token against the others; with T={T} "
                         f"there is no other token), got {T}")
    shape = () if batch is None else (positive_int(batch, "batch"),)
    causal = boolean(causal, "causal")
    _memory(4.0 * np.prod(shape, dtype=float) * n * T * d, "n, T, d and batch (the tokens X and heads V)")
    gen = torch.Generator().manual_seed(_seed(seed))
    X = unit_rows(torch.randn(shape + (n, T, d), generator=gen, dtype=torch.float64))
    V = unit_rows(torch.randn(shape + (n, T, d), generator=gen, dtype=torch.float64))
    return SequenceProblem(X, V, causal=causal)


def candidates(problem: SequenceProblem) -> torch.Tensor:
    """Boolean (K, T): whether query k may attend to token t (t <= k if causal, every t otherwise)."""
    _problem(problem)
    k = torch.arange(problem.K, device=problem.X.device)[:, None]
    t = torch.arange(problem.T, device=problem.X.device)[None, :]
    return t <= k if problem.causal else torch.ones(problem.K, problem.T, dtype=torch.bool, device=problem.X.device)


def _values(problem: SequenceProblem) -> torch.Tensor:
    """gamma_ikt = v_ik^T x_it for all (k, t), shape (..., n, K, T) (0 where t is not a candidate)."""
    return torch.einsum("...ntd,...nkd->...nkt", problem.X, problem.V) * candidates(problem)


def scores(problem: SequenceProblem) -> torch.Tensor:
    """Token scores gamma_ikt = v_ik^T x_it, shape (..., n, K, T), -inf where t is not a candidate of query k."""
    _problem(problem)
    return _values(problem).masked_fill(~candidates(problem), -torch.inf)


def _copies(problem: SequenceProblem, alpha: torch.Tensor) -> torch.Tensor:
    """Boolean (..., n, K, T): token t is an exact copy of the selected token x_{i alpha_ik} (alpha itself too)."""
    chosen = torch.gather(problem.X, -2, alpha[..., None].expand(alpha.shape + (problem.d,)))  # (..., n, K, d)
    return (problem.X[..., None, :, :] == chosen[..., :, None, :]).all(-1)


def optimal_tokens(problem: SequenceProblem) -> torch.Tensor:
    """opt_ik = argmax_t gamma_ikt over the candidates, shape (..., n, K); among exact copies of the best token,
    the latest occurrence."""
    gamma = scores(problem)
    first = gamma.argmax(-1)
    latest = torch.arange(problem.T, device=problem.X.device).expand(gamma.shape)
    latest = latest.masked_fill(~(_copies(problem, first) & candidates(problem)), -1)
    return latest.amax(-1)


def _selection(problem: SequenceProblem, alpha) -> torch.Tensor:
    """alpha as a checked int64 tensor (..., n, K) of candidate tokens (default: the optimal tokens)."""
    _problem(problem)
    if alpha is None:
        return optimal_tokens(problem)
    if torch.is_tensor(alpha) and alpha.device.type != "cpu":
        raise ValueError(f"alpha is on the device {alpha.device.type!r}: attnsvm computes on the CPU, pass alpha.cpu()")
    shape = problem.batch_shape + (problem.n, problem.K)
    alpha = torch.as_tensor(as_index(alpha, "alpha", shape, problem.T), device=problem.X.device)
    if problem.causal and (alpha > torch.arange(problem.K, device=alpha.device)).any():
        raise ValueError("alpha selects a token after its query: causal query k can only select a token t <= k")
    return alpha


def separation_mask(problem: SequenceProblem, alpha=None) -> torch.Tensor:
    """Boolean (..., n, K, T): the (query, token) pairs of the Att-SVM constraints, i.e. the candidates t of query
    (i, k) other than alpha_ik and its exact copies (default alpha: the optimal tokens)."""
    alpha = _selection(problem, alpha)
    return candidates(problem) & ~_copies(problem, alpha)


# ------------------------------------------------------------------ the model and its loss

def _flat(tensor: torch.Tensor, batch: tuple, tail: tuple) -> torch.Tensor:
    """`tensor` broadcast to batch + tail and flattened to (B, *tail) (B = prod(batch), at least 1)."""
    return tensor.expand(batch + tail).reshape((-1,) + tail)


def _raw_logits(problem: SequenceProblem, W: torch.Tensor) -> torch.Tensor:
    """x_it^T W x_ik for all (k, t), shape (..., n, K, T), finite everywhere (candidates not applied)."""
    batch = torch.broadcast_shapes(W.shape[:-2], problem.batch_shape)
    n, T, K, d = problem.n, problem.T, problem.K, problem.d
    X = _flat(problem.X, batch, (n, T, d)).reshape(-1, n * T, d)
    XW = X @ W if W.ndim == 2 else torch.bmm(X, _flat(W, batch, (d, d)))  # rows x_it^T W
    Q = _flat(problem.queries, batch, (n, K, d)).reshape(-1, K, d)
    return torch.bmm(Q, XW.reshape(-1, T, d).transpose(1, 2)).reshape(batch + (n, K, T))


def logits(problem: SequenceProblem, W) -> torch.Tensor:
    """Attention logits x_it^T W x_ik, shape (..., n, K, T), -inf where t is not a candidate of query k."""
    return _checked_logits(problem, W).masked_fill(~candidates(problem), -torch.inf)


def _checked_logits(problem: SequenceProblem, W, name: str = "W") -> torch.Tensor:
    """`_raw_logits` of a checked problem and W (called `name` by the caller), refused where they overflow."""
    raw = _raw_logits(_problem(problem), _weights(problem, W, name))
    return finite_result(raw, "the attention logits x_it^T W x_ik",
                         f"{name} or the problem's tokens are too large (scale them down)")


def attention(problem: SequenceProblem, W) -> torch.Tensor:
    """Attention probabilities s_ikt (softmax over the candidates), shape (..., n, K, T), 0 off the candidates."""
    return torch.softmax(logits(problem, W), dim=-1)


def outputs(problem: SequenceProblem, W) -> torch.Tensor:
    """f_ik = sum_t s_ikt gamma_ikt = v_ik^T X_i^T s_ik, shape (..., n, K)."""
    return finite_result((attention(problem, W) * _values(problem)).sum(-1), "the attention outputs f_ik",
                         "the problem's token scores are too large (scale X or V down)")


def _loss_kind(kind) -> str:
    return _option(kind, "loss kind", tuple(LOSSES))


def loss(problem: SequenceProblem, W, kind: str = "logistic") -> torch.Tensor:
    """The risk (1/(n K)) sum_{i,k} l(f_ik) (labels +1), shape (...,)."""
    _loss_kind(kind)
    return finite_result(LOSSES[kind].value(outputs(problem, W)).mean((-2, -1)), "the loss",
                         f"the {kind} loss of the outputs overflows (scale W or the problem's tokens down)")


_risk = loss  # `gd` takes a `loss` argument (the loss's name), as `train.gd` does


class WeightGradient(NamedTuple):
    """dL/dW = exp(log_scale)[..., None, None] * direction, and dL/dlogits = exp(log_scale) * logit_direction."""

    direction: torch.Tensor  # (..., d, d)
    log_scale: torch.Tensor  # (...,)
    logit_direction: torch.Tensor  # (..., n, K, T), 0 off the candidates


class _Plan:
    """The pieces of the gradient that do not depend on W, for W of batch shape `batch` (built once by `gd`).

    Every query (i, k) with at least two candidates is a problem of paper A's model with one sequence of T
    tokens, the query's own head and label +1, in which the tokens that are not candidates have logit -inf
    (attention exactly 0; `gradients.logit_gradient` then gives them gradient exactly 0). Causal query 0 has a
    single candidate: its loss does not depend on W, and it is left out.
    """

    def __init__(self, problem: SequenceProblem, batch: tuple):
        self.problem, self.batch = problem, torch.broadcast_shapes(batch, problem.batch_shape)
        n, K, T, d = problem.n, problem.K, problem.T, problem.d
        self.first = 1 if problem.causal else 0  # the first query with two candidates or more
        shape = self.batch + (n, K - self.first)
        self.one = Problem(problem.X[..., :, None, None, :, :].expand(shape + (1, T, d)),
                           torch.ones(shape + (1,), dtype=torch.float64, device=problem.X.device),
                           problem.queries[..., self.first:, None, :].expand(shape + (1, d)),
                           problem.V[..., self.first:, :].expand(shape + (d,)))
        self.values = _values(problem)[..., self.first:, None, :]
        self.excluded = ~candidates(problem)[self.first:, None, :]

    def gradient(self, W: torch.Tensor, kind: str) -> "WeightGradient":
        problem, batch = self.problem, self.batch
        n, K, T, d = problem.n, problem.K, problem.T, problem.d
        if K == self.first or T < 2:
            return WeightGradient(torch.zeros(batch + (d, d), dtype=torch.float64, device=problem.X.device),
                                  torch.full(batch, -torch.inf, dtype=torch.float64),
                                  torch.zeros(batch + (n, K, T), dtype=torch.float64, device=problem.X.device))
        raw = _raw_logits(problem, W)[..., self.first:, None, :].masked_fill(self.excluded, -torch.inf)
        grad = gradients._logit_gradient(self.one, raw, kind, None, self.values)  # unchecked: per step
        top = grad.log_scale.amax((-2, -1))  # M: the largest log scale of a query, (...,)
        direction = torch.exp(grad.log_scale - top[..., None, None])[..., None] * grad.direction[..., 0, :]
        direction = torch.nn.functional.pad(direction, (0, 0, self.first, 0))  # (..., n, K, T), 0 for query 0
        X = _flat(problem.X, batch, (n, T, d)).reshape(-1, T, d)
        weighted = torch.bmm(direction.reshape(-1, K, T), X).reshape(-1, n * K, d)  # sum_t g_ikt x_it
        Q = _flat(problem.queries, batch, (n, K, d)).reshape(-1, n * K, d)
        G = torch.bmm(weighted.transpose(1, 2), Q).reshape(batch + (d, d))
        log_scale = top - np.log(n * K)  # the risk is a mean over the n K queries
        return WeightGradient(G, log_scale, direction)


def weight_gradient(problem: SequenceProblem, W, kind: str = "logistic") -> WeightGradient:
    """The exact gradient of `loss`, dL/dW = exp(log_scale) * direction, however far softmax saturates.

    Each query is paper A's model with one sequence, its own head and label +1, whose logit gradient
    `gradients.logit_gradient` computes exactly as exp(log_scale_q) * direction_q. The queries are combined in
    log space, sum_q exp(log_scale_q - M) direction_q with M the largest log scale, so that no query's
    contribution underflows before the sum: dL/dW = exp(M) / (n K) * sum_ikt g_ikt x_it x_ik^T.
    """
    _loss_kind(kind)
    W = _weights(_problem(problem), W)
    batch = torch.broadcast_shapes(W.shape[:-2], problem.batch_shape)
    _memory(16.0 * np.prod(batch, dtype=float) * problem.n * problem.K * (problem.T + problem.d),
            "problem and W (the gradient's terms of every query)")
    _checked_logits(problem, W)
    return _checked_gradient(_Plan(problem, W.shape[:-2]).gradient(W, kind), "W or the problem's tokens")


def _checked_gradient(grad: WeightGradient, blame: str) -> WeightGradient:
    """`grad` if its parts are finite (log_scale may be -inf: a gradient exactly 0), else a FloatingPointError."""
    for name in ("direction", "logit_direction"):
        finite_result(getattr(grad, name), f"the gradient's {name}", f"{blame} are too large (scale them down)")
    if (torch.isnan(grad.log_scale) | (grad.log_scale == torch.inf)).any():
        raise FloatingPointError(f"the gradient's log_scale is NaN or +inf: {blame} are too large (scale them down)")
    return grad


def loss_gradient(problem: SequenceProblem, W, kind: str = "logistic") -> torch.Tensor:
    """dL/dW (..., d, d); it underflows to 0 only where the true gradient is below the smallest float64."""
    grad = weight_gradient(problem, W, kind)
    return finite_result(torch.exp(grad.log_scale)[..., None, None] * grad.direction, "dL/dW",
                         "it exceeds float64 (use weight_gradient, which returns it as exp(log_scale) * direction)")


def _unit(G: torch.Tensor) -> torch.Tensor:
    """G / ||G||_F (scaled by its largest entry first, so that a tiny G's square cannot underflow); 0 for G = 0."""
    scale = G.abs().amax((-2, -1), keepdim=True)
    G = G / torch.where(scale > 0, scale, 1.0)
    norm = G.norm(dim=(-2, -1), keepdim=True)
    return G / torch.where(norm > 0, norm, 1.0)


def gd(problem: SequenceProblem, *, steps: int, lr: float, normalized: bool = True, init="uniform", seed: int = 0,
       record_every: int = 1, loss: str = "logistic") -> Trajectory:
    """Gradient descent on W for every problem of the batch: W(k+1) = W(k) - lr G / ||G||_F (normalized) or
    W(k) - lr G (plain, paper C's Definition 3.7), with G the exact `weight_gradient`.

    init: "uniform" (torch.nn.Linear's default, seeded by `seed`), "zeros", or an initial W (d, d) or (..., d, d).
    Records W, the attention probabilities (..., n, K, T) and the loss at steps 0, record_every, ..., `steps`.
    Refuses more than MAX_STEPS steps or MAX_RECORDS records; raises FloatingPointError if W overflows (lower lr).
    """
    _problem(problem)
    _option(loss, "loss", tuple(LOSSES))
    steps, lr = positive_int(steps, "steps", minimum=0), _positive(lr, "lr")
    record_every = positive_int(record_every, "record_every")
    normalized, seed = boolean(normalized, "normalized"), _seed(seed)
    budget(steps, "steps", MAX_STEPS, "gradient steps")
    budget(steps // record_every + 2, "steps / record_every", MAX_RECORDS, "recorded iterates")
    size = np.prod(problem.batch_shape, dtype=float)
    _memory(size * ((steps // record_every + 2) * (problem.d ** 2 + problem.n * problem.K * problem.T + 1)
                    + 16.0 * problem.n * problem.K * (problem.T + problem.d)),
            "steps / record_every (the recorded iterates W and attention probabilities)")
    shape = problem.batch_shape + (problem.d, problem.d)
    if isinstance(init, str):
        _option(init, "init", ("uniform", "zeros"))
        W = uniform_init(shape, seed) if init == "uniform" else torch.zeros(shape, dtype=torch.float64)
    else:
        W = as_tensor(init, "init", device=problem.X.device).detach()
        if tuple(W.shape) == shape[-2:]:
            W = W.expand(shape)
        require_shape(W, "init", shape, "an initial W for every problem")
    W = W.to(problem.X.device).clone()
    _checked_logits(problem, W, "init")
    recorded = sorted(set(range(0, steps + 1, record_every)) | {steps})
    plan, rows = _Plan(problem, problem.batch_shape), []
    for k in range(steps + 1):
        try:
            if not torch.isfinite(W).all():
                raise FloatingPointError("W overflowed float64")
            if k == recorded[len(rows)]:
                rows.append((W, attention(problem, W), _risk(problem, W, loss)))
            if k == steps:
                break
            try:  # a non-finite gradient makes W non-finite, which the next step reports
                grad = plan.gradient(W, loss)
            except ValueError as err:  # the arguments are checked: only overflowing logits get here
                raise FloatingPointError(str(err)) from err
        except FloatingPointError as err:
            raise FloatingPointError(f"gd diverged at step {k} ({err}): lower lr (got {lr!r})") from err
        step = _unit(grad.direction) if normalized else torch.exp(grad.log_scale)[..., None, None] * grad.direction
        W = W - lr * step
    W_rec, probs, risk = (torch.stack(column) for column in zip(*rows))
    return Trajectory(steps=np.array(recorded), probs=probs, loss=risk, W=W_rec)


# ------------------------------------------------------------------ the causal Att-SVM

def margins(problem: SequenceProblem, W, alpha=None) -> np.ndarray:
    """(x_{i alpha_ik} - x_it)^T W x_ik for the constraint pairs of `separation_mask`, NaN elsewhere:
    shape (..., n, K, T) (default alpha: the optimal tokens)."""
    alpha = _selection(problem, alpha)
    raw = _checked_logits(problem, W)
    gaps = raw.gather(-1, alpha[..., None].expand(raw.shape[:-1] + (1,))) - raw
    mask = separation_mask(problem, alpha).expand(gaps.shape)
    finite_result(gaps.detach()[mask], "the margins", "W or the problem's tokens are too large (scale them down)")
    return _no_grad_numpy(gaps.masked_fill(~mask, torch.nan))


@dataclass(frozen=True)
class _Constraints:
    """The separation constraints of one problem: rows kron(delta_c, z_c), c over `where` (n, K, T) in C order."""

    deltas: np.ndarray  # (m, d): x_{i alpha_ik} - x_it
    queries: np.ndarray  # (m, d): x_ik
    where: np.ndarray  # (n, K, T) bool

    def gram(self) -> np.ndarray:
        """G = A A^T for the rows A_c = kron(delta_c, z_c): (D D^T) * (Z Z^T)."""
        return (self.deltas @ self.deltas.T) * (self.queries @ self.queries.T)

    def combine(self, lam: np.ndarray) -> np.ndarray:
        """A^T lam as a (d, d) matrix: sum_c lam_c delta_c z_c^T."""
        return (self.deltas * lam[:, None]).T @ self.queries

    def margins(self, W: np.ndarray) -> np.ndarray:
        return np.einsum("cd,de,ce->c", self.deltas, W, self.queries)

    def scatter(self, values: np.ndarray) -> np.ndarray:
        out = np.zeros(self.where.shape)
        out[self.where] = values
        return out


def _constraints(problem: SequenceProblem, alpha: torch.Tensor):
    """One `_Constraints` per problem of the batch (flattened), and the batch shape."""
    where = separation_mask(problem, alpha).cpu().numpy()
    X, alpha_np = _no_grad_numpy(problem.X), alpha.cpu().numpy()
    n, K, T, d = problem.n, problem.K, problem.T, problem.d
    X = X.reshape(-1, n, T, d)
    where, alpha_np = where.reshape(-1, n, K, T), alpha_np.reshape(-1, n, K)
    out = []
    for Xb, mask, ab in zip(X, where, alpha_np):
        i, k, t = np.nonzero(mask)
        out.append(_Constraints(Xb[i, ab[i, k]] - Xb[i, t], Xb[i, k], mask))
    return out, problem.batch_shape


def _svm_selection(problem: SequenceProblem, alpha, solver: str) -> torch.Tensor:
    """alpha checked (`_selection`) for a problem whose Att-SVM can be solved here: T >= 2, tokens whose constraint
    Gram matrix (products of four token entries) fits float64, and a dense constraint system of at most MAX_BYTES
    (`solver`: a key of SOLVER_FLOATS, the solver's peak memory in floats per squared constraint count)."""
    alpha = _selection(problem, alpha)
    if problem.T < 2:
        raise ValueError("problem has T = 1 token per sequence: the Att-SVM separates each query's selected token "
                         "from its other candidates, and there are none; pass sequences of T >= 2 tokens")
    scale = float(problem.X.detach().abs().max())
    if scale > 0 and np.log10(4.0) + 4 * np.log10(scale) + 2 * np.log10(problem.d) > 290:
        raise ValueError(f"problem's tokens have entries up to {scale:.3g}: the Att-SVM's constraint Gram matrix holds "
                         f"products of four token entries, which overflow float64; rescale the tokens (the SVM of "
                         f"c X is the SVM of X divided by c^2)")
    m = int(separation_mask(problem, alpha).sum((-3, -2, -1)).max())
    label = f"problem (n={problem.n}, T={problem.T}, K={problem.K}: {m} separation constraints in one instance)"
    budget(SOLVER_FLOATS[solver] * 8.0 * m * m, label, MAX_BYTES,
           f"bytes for its dense constraint system (about {SOLVER_FLOATS[solver]} m^2 floats for m constraints; use "
           f"fewer or shorter sequences)")
    return alpha


def _check_solution(rows: _Constraints, W: np.ndarray, lam: np.ndarray, C, objective: str, slack: str,
                    where: str) -> None:
    """Raise svm.SolverError unless (W, lam) is optimal to GAP_TOL: the relative gap between the primal objective
    of W and the dual objective of lam (weak duality makes it >= 0; it is 0 exactly at the optimum). Paper C's
    form (objective="norm") is only checked to beat W = 0: its cone program's multipliers certify its W loosely
    (relative gaps up to 1e-2 at C = 1e4 on valid problems, with W accurate to 1e-5)."""
    if not (np.isfinite(W).all() and np.isfinite(lam).all()):
        raise svm.SolverError(f"the causal Att-SVM solver returned a non-finite solution{where}: the problem is "
                              f"badly scaled, rescale its tokens to entries near 1")
    if len(rows.deltas) == 0:
        return
    mu, combined = rows.margins(W), rows.combine(lam)
    if C is None:
        kind, primal, dual = "hard", 0.5 * (W ** 2).sum(), lam.sum() - 0.5 * (combined ** 2).sum()
    else:
        groups = _groups(rows, slack)
        xi = np.zeros(int(groups.max()) + 1)
        np.maximum.at(xi, groups, np.maximum(0.0, 1.0 - mu))
        if objective == "norm":
            if not np.linalg.norm(W) + C * xi.sum() <= C * len(xi) * (1 + 1e-9):
                raise svm.SolverError(f"the causal soft-margin Att-SVM solution{where} is worse than W = 0: the "
                                      f"problem is badly scaled; rescale its tokens to entries near 1 or choose "
                                      f"C={C:g} nearer 1")
            return
        kind, primal, dual = "soft", 0.5 * (W ** 2).sum() + C * xi.sum(), lam.sum() - 0.5 * (combined ** 2).sum()
    gap = abs(primal - dual) / max(abs(primal), 1e-300)
    if not gap <= GAP_TOL[kind]:
        scale = float(np.abs(rows.queries).max())
        hint = "" if C is None else f" or C={C:g} nearer 1"
        raise svm.SolverError(f"the causal {kind}-margin Att-SVM solution is not optimal to tolerance (relative "
                              f"duality gap {gap:.2g} > {GAP_TOL[kind]:g}){where}: the problem is badly scaled "
                              f"(query token entries up to {scale:.3g}); rescale its tokens to entries near 1 (the SVM "
                              f"of c X is the SVM of X divided by c^2){hint}")


def _clarabel_failure(status, what: str, C: float) -> svm.SolverError:
    return svm.SolverError(f"Clarabel stopped with status {status} on {what}: with C={C:g} far from 1, or the "
                           f"problem's tokens far from size 1, the program is badly scaled (choose C nearer 1 or "
                           f"rescale the tokens)")


def _factor(G: np.ndarray) -> np.ndarray:
    """B with B B^T = G (G symmetric positive semidefinite): the constraint rows in an m-dimensional space
    with the same inner products, so every SVM of the rows has the same multipliers and norms."""
    eigenvalues, vectors = np.linalg.eigh(G)
    return vectors * np.sqrt(np.clip(eigenvalues, 0.0, None))


def _hard(rows: _Constraints):
    """(W, multipliers) of the hard-margin SVM, or None when infeasible (`svm._least_distance` on B)."""
    if len(rows.deltas) == 0:
        return np.zeros((rows.deltas.shape[1],) * 2), np.zeros(0)
    solution = svm._least_distance(_factor(rows.gram()))
    if solution is None:
        return None
    lam = solution[1]
    W = rows.combine(lam)
    smallest = rows.margins(W).min()
    if smallest < 1 - svm.MARGIN_TOL:
        raise svm.SolverError(f"the causal hard-margin Att-SVM solution has margin {smallest:.3g} < 1")
    return (W / smallest, lam / smallest) if smallest < 1 else (W, lam)


def _box_qp(G: np.ndarray, C: float) -> np.ndarray:
    """argmin_lam (1/2) lam^T G lam - 1^T lam s.t. 0 <= lam <= C (the soft-margin dual), by Clarabel, then the
    active set polished: free multipliers solve G_FF lam_F = 1 - C G_FU 1 (margin exactly one)."""
    m = len(G)
    settings = clarabel.DefaultSettings()
    settings.verbose = False
    settings.tol_gap_abs = settings.tol_gap_rel = settings.tol_feas = 1e-10
    settings.max_iter = 500
    box = sparse.vstack([-sparse.identity(m), sparse.identity(m)]).tocsc()
    solver = clarabel.DefaultSolver(sparse.triu(sparse.csc_matrix(G)).tocsc(), -np.ones(m), box,
                                    np.concatenate([np.zeros(m), np.full(m, C)]), [clarabel.NonnegativeConeT(2 * m)],
                                    settings)
    solution = solver.solve()
    if str(solution.status) not in ("Solved", "AlmostSolved"):
        raise _clarabel_failure(solution.status, "the soft-margin dual", C)
    lam = np.clip(np.asarray(solution.x), 0.0, C)
    return _polish_box(G, C, lam)


def _polish_box(G: np.ndarray, C: float, lam: np.ndarray) -> np.ndarray:
    """Re-solve the soft-margin KKT system on the active set to machine precision (keep lam if that fails)."""
    low, high = lam <= 1e-7 * C, lam >= (1 - 1e-7) * C
    free = ~(low | high)
    polished = np.where(high, C, 0.0)
    if free.any():
        rhs = 1.0 - G[np.ix_(free, high)] @ polished[high]
        polished[free] = np.linalg.lstsq(G[np.ix_(free, free)], rhs, rcond=None)[0]
    margin = G @ polished
    tol = POLISH_TOL * max(1.0, np.abs(margin).max())
    ok = (polished[free].min(initial=0.0) >= 0 and polished[free].max(initial=0.0) <= C
          and np.abs(margin[free] - 1).max(initial=0.0) <= tol
          and (margin[low] >= 1 - tol).all() and (margin[high] <= 1 + tol).all())
    return polished if ok else lam


def _norm_objective(rows: _Constraints, C: float):
    """Paper C's form min ||W||_F + C sum xi. Returns (W, lam) with W = ||W||_F A^T lam and 0 <= lam <= C.

    Solved as a second-order cone program in the factor space B (B B^T = G, so ||W||_F = ||y||): variables
    (y, s, xi), min s + C 1^T xi s.t. B y + xi >= 1, xi >= 0, ||y|| <= s. Then polished: its KKT conditions,
    W / ||W|| = A^T lam with 0 <= lam <= C, are those of the "squared" form for C' = C ||W|| (with multipliers
    ||W|| lam), so W is the exact `_box_qp` solution for C' = C ||W||. A fixed-point iteration on ||W|| reaches
    it in one or two steps; if it has not converged after five, the cone program's solution is returned.
    """
    B = _factor(rows.gram())
    m = len(B)
    eye, zero_m, zero_1 = sparse.identity(m, format="csc"), sparse.csc_matrix((m, m)), sparse.csc_matrix((m, 1))
    # Clarabel's form: A x + slack = b with the slack in the cones; x = (y, s, xi)
    A = sparse.vstack([
        sparse.hstack([-sparse.csc_matrix(B), zero_1, -eye]),  # slack = B y + xi - 1 >= 0
        sparse.hstack([zero_m, zero_1, -eye]),  # slack = xi >= 0
        sparse.hstack([sparse.csc_matrix((1, m)), -sparse.identity(1), sparse.csc_matrix((1, m))]),  # (s, y) in
        sparse.hstack([-eye, zero_1, zero_m]),  # the second-order cone: ||y|| <= s
    ]).tocsc()
    b = np.concatenate([-np.ones(m), np.zeros(m), np.zeros(1 + m)])
    q = np.concatenate([np.zeros(m), [1.0], np.full(m, C)])
    settings = clarabel.DefaultSettings()
    settings.verbose = False
    settings.tol_gap_abs = settings.tol_gap_rel = settings.tol_feas = 1e-10
    settings.max_iter = 500
    solver = clarabel.DefaultSolver(sparse.csc_matrix((2 * m + 1, 2 * m + 1)), q, A, b,
                                    [clarabel.NonnegativeConeT(2 * m), clarabel.SecondOrderConeT(1 + m)], settings)
    solution = solver.solve()
    if str(solution.status) not in ("Solved", "AlmostSolved"):
        raise _clarabel_failure(solution.status, "paper C's soft-margin SVM", C)
    lam = np.clip(np.asarray(solution.z)[:m], 0.0, C)  # the multipliers of B y + xi >= 1
    norm = np.linalg.norm(np.asarray(solution.x)[:m])
    W = norm * rows.combine(lam)
    for _ in range(5 if norm > 0 else 0):
        lam_sq = _box_qp(rows.gram(), C * norm)
        W_sq = rows.combine(lam_sq)
        new = np.linalg.norm(W_sq)
        if new > 0 and abs(new - norm) <= 1e-12 * norm:
            return W_sq, np.clip(lam_sq / new, 0.0, C)
        norm = new
    return W, lam


def _groups(rows: _Constraints, slack: str) -> np.ndarray:
    """The slack of each constraint: its own (slack="constraint"), or that of its (sequence i, token t)."""
    i, _, t = np.nonzero(rows.where)
    if slack == "constraint":
        return np.arange(len(i))
    return np.unique(np.stack([i, t], axis=1), axis=0, return_inverse=True)[1].reshape(-1)


def _token_slack(rows: _Constraints, C: float, objective: str):
    """Paper C's Definition 4.1 as printed: one slack xi_g per (sequence i, token t), shared by every query k of
    sequence i, min (1/2)||W||_F^2 or ||W||_F + C sum_g xi_g s.t. margin_c >= 1 - xi_g(c), xi >= 0. Returns (W, lam)
    with W = A^T lam ("squared") or W = ||W||_F A^T lam ("norm"), lam >= 0 and sum_{c in g} lam_c <= C.

    Solved by Clarabel in the factor space B (B B^T = G): variables (y, s, xi) with margins B y (s and the
    second-order cone ||y|| <= s only for "norm"); W is rebuilt from the multipliers of the margin constraints.
    """
    B = _factor(rows.gram())
    m = len(B)
    groups = _groups(rows, "token")
    g = int(groups.max()) + 1
    P = sparse.csc_matrix((np.ones(m), (np.arange(m), groups)), shape=(m, g))
    norm = objective == "norm"
    s_col = [sparse.csc_matrix((m, 1))] if norm else []
    blocks = [sparse.hstack([-sparse.csc_matrix(B)] + s_col + [-P]),  # slack = B y + P xi - 1 >= 0
              sparse.hstack([sparse.csc_matrix((g, m + norm)), -sparse.identity(g)])]  # slack = xi >= 0
    b = [-np.ones(m), np.zeros(g)]
    cones = [clarabel.NonnegativeConeT(m + g)]
    if norm:
        blocks += [sparse.hstack([sparse.csc_matrix((1, m)), -sparse.identity(1), sparse.csc_matrix((1, g))]),
                   sparse.hstack([-sparse.identity(m), sparse.csc_matrix((m, 1 + g))])]  # (s, y) in the cone
        b.append(np.zeros(1 + m))
        cones.append(clarabel.SecondOrderConeT(1 + m))
        quadratic = sparse.csc_matrix((m + 1 + g,) * 2)
        q = np.concatenate([np.zeros(m), [1.0], np.full(g, C)])
    else:
        quadratic = sparse.block_diag([sparse.identity(m), sparse.csc_matrix((g, g))]).tocsc()
        q = np.concatenate([np.zeros(m), np.full(g, C)])
    settings = clarabel.DefaultSettings()
    settings.verbose = False
    settings.tol_gap_abs = settings.tol_gap_rel = settings.tol_feas = 1e-10
    settings.max_iter = 500
    solver = clarabel.DefaultSolver(quadratic, q, sparse.vstack(blocks).tocsc(), np.concatenate(b), cones, settings)
    solution = solver.solve()
    if str(solution.status) not in ("Solved", "AlmostSolved"):
        raise _clarabel_failure(solution.status, "the per-token soft-margin SVM", C)
    lam = np.clip(np.asarray(solution.z)[:m], 0.0, C)
    W = rows.combine(lam)
    if norm:
        W = np.linalg.norm(np.asarray(solution.x)[:m]) * W
    return W, lam


def att_svm(problem: SequenceProblem, alpha=None, *, C: float | None = None, objective: str = "squared",
            slack: str = "constraint", return_multipliers: bool = False):
    """The causal (or seq2seq) Att-SVM for the selection alpha (default: the optimal tokens), numpy (..., d, d).

    C=None: the hard-margin SVM, min ||W||_F s.t. every margin of `separation_mask` >= 1; raises
    svm.InfeasibleSVM (`.instances`: the infeasible batch indices) when no W exists.
    C > 0: the soft-margin SVM with slacks xi >= 0 on the margins, margin_c >= 1 - xi, with the objective
    (1/2)||W||_F^2 + C sum xi ("squared", solved exactly through its dual, a box-constrained QP) or paper C's
    ||W||_F + C sum xi ("norm", a second-order cone program). Both give the same family of solutions: the "norm"
    solution for C is the "squared" one for C ||W||_F. Both equal the hard-margin SVM, if it exists, for every C
    above `penalty_threshold` (the "squared" one at C ||W^mm||_F).
    slack: "constraint" (default), one slack per constraint (i, k, t), the textbook soft margin; or "token",
    paper C's Definition 4.1 as printed, one slack xi_it per (sequence i, token t) shared by all queries k of
    sequence i whose constraints involve token t (a cone program, accurate to about 1e-8).
    return_multipliers: also return lam (..., n, K, T), 0 off the constraints, with W = sum lam_c A_c
    ("squared" and hard) or W = ||W||_F sum lam_c A_c ("norm"); 0 <= lam <= C (slack="constraint"), or lam >= 0
    with sum of lam over the constraints of each (i, t) at most C (slack="token").
    Refused before any work (ValueError): T = 1, tokens whose constraint Gram matrix overflows float64, or a dense
    constraint system above MAX_BYTES. Raises svm.SolverError if the solution's relative duality gap exceeds
    GAP_TOL (a badly scaled problem or C).
    """
    _option(objective, "objective", OBJECTIVES)
    _option(slack, "slack", SLACKS)
    return_multipliers = boolean(return_multipliers, "return_multipliers")
    if C is not None:
        C = _positive(C, "C")
    elif objective != "squared":
        raise ValueError('objective="norm" is paper C\'s soft-margin form: pass C with it')
    elif slack != "constraint":
        raise ValueError('slack="token" is a soft-margin option: pass C with it')
    solver = "hard" if C is None else "token" if slack == "token" else objective
    alpha = _svm_selection(problem, alpha, solver)
    instances, batch = _constraints(problem, alpha)
    solutions = []
    for rows in instances:
        if C is None:
            solutions.append(_hard(rows))
        elif slack == "token":
            solutions.append(_token_slack(rows, C, objective) if len(rows.deltas) else
                             (np.zeros((problem.d,) * 2), np.zeros(0)))
        elif objective == "squared":
            lam = _box_qp(rows.gram(), C) if len(rows.deltas) else np.zeros(0)
            solutions.append((rows.combine(lam), lam))
        else:
            solutions.append(_norm_objective(rows, C) if len(rows.deltas) else
                             (np.zeros((problem.d,) * 2), np.zeros(0)))
    infeasible = [b for b, solution in enumerate(solutions) if solution is None]
    if infeasible:
        where = f" for batch instances {infeasible}" if batch else ""
        raise svm.InfeasibleSVM(
            f"the causal Att-SVM is infeasible{where}: no W separates every query's selected token from its other "
            f"candidates (typically the same query token must prefer a over b in one prefix and b over a in "
            f"another; `preference_cycle` finds such a conflict). Pass C for the soft-margin SVM. (Numerically, "
            f"infeasible also means that every separating W has ||W||_F > {svm.MAX_NORM:g}, as for tiny tokens: "
            f"rescale them to entries near 1.)", infeasible)
    for b, (rows, (w, l)) in enumerate(zip(instances, solutions)):
        _check_solution(rows, w, l, C, objective, slack, f" for batch instance {b}" if batch else "")
    W = np.stack([w for w, _ in solutions]).reshape(batch + (problem.d, problem.d))
    if not return_multipliers:
        return W
    lam = np.stack([rows.scatter(l) for rows, (_, l) in zip(instances, solutions)])
    return W, lam.reshape(batch + (problem.n, problem.K, problem.T))


def feasible(problem: SequenceProblem, alpha=None) -> np.ndarray:
    """Whether the hard-margin causal Att-SVM exists for alpha (default: the optimal tokens): bool (...,)."""
    instances, batch = _constraints(problem, _svm_selection(problem, alpha, "hard"))
    flags = [len(rows.deltas) == 0 or svm._least_distance(_factor(rows.gram())) is not None for rows in instances]
    return np.array(flags, dtype=bool).reshape(batch)


def penalty_threshold(problem: SequenceProblem, alpha=None, *, slack: str = "constraint") -> np.ndarray:
    """The exact-penalty threshold C* of paper C's soft-margin form (objective="norm"), shape (...,).

    With lam the multipliers of the hard-margin SVM (W^mm = sum_c lam_c A_c, lam >= 0, lam_c = 0 off the
    margin), C* = min over all such lam of max_c lam_c / ||W^mm||_F (slack="constraint"), or of
    max_(i,t) sum_{c of (i, t)} lam_c / ||W^mm||_F (slack="token"). The soft-margin solution is W^mm for every
    C > C*, W^mm is one solution at C = C*, and it is none for C < C*. The minimum over lam matters only when the
    constraints on the margin are linearly dependent (otherwise lam is unique); it is a linear program (HiGHS).
    Raises svm.InfeasibleSVM where the hard-margin SVM does not exist.
    """
    _option(slack, "slack", SLACKS)
    alpha = _svm_selection(problem, alpha, "threshold")
    W_mm, lam0 = att_svm(problem, alpha, return_multipliers=True)
    instances, batch = _constraints(problem, alpha)
    W_flat, lam_flat = W_mm.reshape((-1,) + W_mm.shape[-2:]), lam0.reshape((-1,) + lam0.shape[-3:])
    out = []
    for rows, W, lam in zip(instances, W_flat, lam_flat):
        m = len(rows.deltas)
        if m == 0:
            out.append(0.0)
            continue
        lam = lam[rows.where]
        G = rows.gram()
        values, vectors = np.linalg.eigh(G)
        keep = values > 1e-10 * max(values.max(), 1e-300)
        B = vectors[:, keep] * np.sqrt(values[keep])  # independent coordinates of the rows A_c
        margin = rows.margins(W)
        bounds = [(0.0, None if abs(margin[c] - 1) <= 1e-7 * max(1.0, margin[c]) else 0.0) for c in range(m)] \
            + [(None, None)]
        groups = _groups(rows, slack)
        g = int(groups.max()) + 1
        upper = np.hstack([np.zeros((g, m)), -np.ones((g, 1))])
        upper[groups, np.arange(m)] = 1.0  # sum of lam over a slack's constraints - t <= 0
        result = linprog(np.r_[np.zeros(m), 1.0], A_ub=upper, b_ub=np.zeros(g),
                         A_eq=np.hstack([B.T, np.zeros((B.shape[1], 1))]), b_eq=B.T @ lam, bounds=bounds,
                         method="highs")
        if result.status != 0:
            raise svm.SolverError(f"HiGHS stopped on the exact-penalty threshold: {result.message} (if the problem's "
                                  f"tokens are far from size 1, rescale them)")
        out.append(result.x[-1] / np.linalg.norm(W))
    return finite_result(np.array(out).reshape(batch), "the exact-penalty threshold",
                         "the problem is badly scaled (rescale its tokens to entries near 1)")


def violations(problem: SequenceProblem, W, alpha=None) -> np.ndarray:
    """The number of constraint pairs whose margin under W is below one (the slacks xi > 0), shape (...,)."""
    gaps = margins(problem, W, alpha)
    return (np.nan_to_num(gaps, nan=np.inf) < 1 - 1e-9).sum((-3, -2, -1))


def total_slack(problem: SequenceProblem, W, alpha=None) -> np.ndarray:
    """sum_c max(0, 1 - mu_c(W)) over the separation constraints c: the least total slack W needs with one slack
    per constraint, shape (...,). Paper C's objective of W (slack="constraint") is ||W||_F + C total_slack."""
    gaps = margins(problem, W, alpha)
    return finite_result(np.nansum(np.maximum(0.0, 1.0 - gaps), axis=(-3, -2, -1)), "the total slack",
                         "W or the problem's tokens are too large (scale them down)")


def combine(problem: SequenceProblem, lam, alpha=None) -> np.ndarray:
    """sum_c lam_c A_c with the constraint matrices A_c = (x_{i alpha_ik} - x_it) x_ik^T: numpy (..., d, d).

    lam: (..., n, K, T), e.g. the multipliers of `att_svm`; entries off the constraints (`separation_mask`) are
    ignored. Computed directly from the tokens (not from the solvers' constraint rows), so W^mm =
    combine(problem, lam) checks the multipliers of the hard-margin SVM independently.
    """
    alpha = _selection(problem, alpha)
    shape = problem.batch_shape + (problem.n, problem.K, problem.T)
    lam = as_tensor(lam, "lam", device=problem.X.device)
    require_shape(lam, "lam", shape, "one multiplier per (sequence, query, token)")
    _memory(2.0 * np.prod(shape, dtype=float) * problem.d, "problem (its constraint rows, (..., n, K, T, d))")
    lam = lam.masked_fill(~separation_mask(problem, alpha), 0.0)
    chosen = torch.gather(problem.X, -2, alpha[..., None].expand(alpha.shape + (problem.d,)))  # (..., n, K, d)
    deltas = chosen[..., :, None, :] - problem.X[..., None, :, :]  # (..., n, K, T, d)
    W = torch.einsum("...nkt,...nktd,...nke->...de", lam, deltas, problem.queries)
    return finite_result(_no_grad_numpy(W), "sum_c lam_c A_c", "lam or the problem's tokens are too large")


def selects_optimal(problem: SequenceProblem, alpha) -> torch.Tensor:
    """Boolean (..., n, K): whether alpha_ik is the optimal token of query (i, k) or an exact copy of it."""
    alpha = _selection(problem, alpha)
    return _copies(problem, optimal_tokens(problem)).gather(-1, alpha[..., None])[..., 0]


def _shortest_path(graph: dict, start, goal):
    """The shortest path [start, ..., goal] along the edges of `graph` {u: {v: ...}} (breadth first), or None."""
    parents, frontier = {start: None}, [start]
    while frontier and goal not in parents:
        following = []
        for u in frontier:
            for v in graph.get(u, {}):
                if v not in parents:
                    parents[v] = u
                    following.append(v)
        frontier = following
    if goal not in parents:
        return None
    path = [goal]
    while parents[path[-1]] is not None:
        path.append(parents[path[-1]])
    return path[::-1]


def _shortest_cycle(graph: dict):
    """The shortest directed cycle [p_0, ..., p_{L-1}] of `graph` {p: {q: ...}} (edges p -> q), or None: for
    every edge p -> q, the shortest path from q back to p closes a cycle through it."""
    best = None
    for p in graph:
        for q in graph[p]:
            back = _shortest_path(graph, q, p)  # [q, ..., p]
            if back is not None and (best is None or len(back) < len(best)):
                best = [p] + back[:-1]
    return best


def _preference_edges(problem: SequenceProblem, alpha: torch.Tensor):
    """The constraints of one problem as preference edges: a list of (i, k, t, a, p, q), where the query token
    a = x_ik must prefer p = x_{i alpha_ik} to q = x_it, with a, p, q numbered by distinct token."""
    _, ids = torch.unique(problem.X.reshape(-1, problem.d), dim=0, return_inverse=True)
    ids = ids.reshape(problem.n, problem.T).tolist()
    return [(i, k, t, ids[i][k], ids[i][int(alpha[i, k])], ids[i][t])
            for i, k, t in separation_mask(problem, alpha).nonzero().tolist()]


def _graphs(edges) -> dict:
    """{query token a: {preferred token p: {other token q: the first (i, k, t) asking for p over q}}}."""
    graphs = {}
    for i, k, t, a, p, q in edges:
        graphs.setdefault(a, {}).setdefault(p, {}).setdefault(q, (i, k, t))
    return graphs


def _graph_selection(problem: SequenceProblem, alpha) -> torch.Tensor:
    """alpha checked (`_selection`), for a problem whose constraints fit the graph searches' Python lists."""
    alpha = _selection(problem, alpha)
    budget(float(separation_mask(problem, alpha).sum()), "problem", 10**7,
           "separation constraints (one Python tuple each in the preference graphs; use fewer or shorter sequences)")
    return alpha


def _graph_budget(graphs) -> None:
    """Refuse preference graphs whose searches (a breadth-first search per edge) would run for hours."""
    work = 0.0
    for graph in graphs:
        edges = sum(len(targets) for targets in graph.values())
        work += edges * (edges + len(graph))
    budget(work, "problem", MAX_GRAPH_STEPS, "preference-graph search steps (use fewer or shorter sequences)")


def _reachable(graph: dict, start) -> set:
    """The nodes reachable from `start` along the edges of `graph` (start included)."""
    seen, stack = {start}, [start]
    while stack:
        for v in graph.get(stack.pop(), {}):
            if v not in seen:
                seen.add(v)
                stack.append(v)
    return seen


def preference_cycle(problem: SequenceProblem, alpha=None):
    """A short cycle of contradictory constraints of the hard-margin Att-SVM of one problem, or None.

    The constraint of pair (i, k, t) asks the query token a = x_ik to prefer the selected token p = x_{i alpha_ik}
    to q = x_it by a margin of one: (p - q)^T (W a) >= 1. W a depends only on the query token, so for each
    distinct query token the constraints form a directed preference graph p -> q over the distinct tokens, and
    any cycle p_0 -> p_1 -> ... -> p_0 is infeasible (the margins around it sum to zero, not to its length).
    When the distinct tokens are linearly independent (e.g. at most d random embeddings), the converse holds too:
    the hard-margin SVM is feasible exactly when no query token's preferences have a cycle (see `conflicts`).

    Returns the constraints along the shortest cycle found, as a list of (i, k, t) index triples (each: query k of
    sequence i prefers its selected token to token t), or None when every preference graph is acyclic.
    """
    alpha = _graph_selection(problem, alpha)
    if problem.batch_shape:
        raise ValueError("preference_cycle takes one problem: index the batch first, e.g. problem[0]")
    graphs = _graphs(_preference_edges(problem, alpha))
    _graph_budget(graphs.values())
    best = None
    for graph in graphs.values():
        cycle = _shortest_cycle(graph)
        if cycle is not None and (best is None or len(cycle) < len(best[1])):
            best = graph, cycle
    if best is None:
        return None
    graph, cycle = best
    return [graph[p][q] for p, q in zip(cycle, cycle[1:] + cycle[:1])]


def conflicts(problem: SequenceProblem, alpha=None) -> np.ndarray:
    """The constraints of the hard-margin Att-SVM that lie on a preference cycle: bool (..., n, K, T).

    An edge p -> q of query token a's preference graph (see `preference_cycle`) is in conflict when q leads back
    to p. No W gives every constraint of a cycle a positive margin: the margins around it sum to zero. When the
    distinct tokens are linearly independent, this is the whole obstruction: some W gives every other
    constraint a margin of at least one and the conflicting ones a margin of exactly zero (W x_a can be chosen
    for each query token a on its own, and p^T W x_a for each token p: order the strongly connected components
    of each graph). So the hard-margin SVM is then feasible exactly when no constraint is in conflict.
    """
    alpha = _graph_selection(problem, alpha)
    flat = SequenceProblem(problem.X.reshape((-1,) + problem.X.shape[-3:]),
                           problem.V.reshape((-1,) + problem.V.shape[-3:]), causal=problem.causal)
    alpha = alpha.reshape((-1,) + alpha.shape[-2:])
    out = np.zeros((len(alpha), problem.n, problem.K, problem.T), dtype=bool)
    for b in range(len(alpha)):
        edges = _preference_edges(flat[b], alpha[b])
        graphs, reach = _graphs(edges), {}
        _graph_budget(graphs.values())
        for i, k, t, a, p, q in edges:
            if (a, q) not in reach:
                reach[a, q] = _reachable(graphs[a], q)
            out[b, i, k, t] = p in reach[a, q]
    return out.reshape(problem.batch_shape + out.shape[1:])


def max_positive_margins(problem: SequenceProblem, alpha=None, *, return_W: bool = False):
    """The largest number of Att-SVM constraints that one W can give a positive margin: int (...,).

    Any W orders the tokens for each query token a by their logits p^T W x_a, and a constraint (prefer p to q)
    has a positive margin only if p comes before q. So the count is at most the sum, over the query tokens, of
    the most constraints that one order of the tokens satisfies: all the edges between different strongly
    connected components of a's preference graph, plus the best order inside each component (found exactly
    by dynamic programming over its subsets). When the distinct tokens are linearly independent, every family
    of orders is realized by some W (see `conflicts`), and the bound is attained.

    return_W: also return a witness W (numpy (..., d, d)) with p^T W x_a = -(the rank of p in a best order of
    a's tokens) for every distinct token p and query token a, by least squares (pseudo-inverses). When the
    distinct tokens are linearly independent these equations hold exactly and W attains the count; otherwise
    it may attain fewer.
    """
    return_W = boolean(return_W, "return_W")
    alpha = _graph_selection(problem, alpha)
    flat = SequenceProblem(problem.X.reshape((-1,) + problem.X.shape[-3:]),
                           problem.V.reshape((-1,) + problem.V.shape[-3:]), causal=problem.causal)
    alpha = alpha.reshape((-1,) + alpha.shape[-2:])
    counts, witnesses = [], []
    for b in range(len(alpha)):
        weights = {}  # query token -> {(p, q): number of constraints asking for p before q}
        for *_, a, p, q in _preference_edges(flat[b], alpha[b]):
            weights.setdefault(a, {}).setdefault((p, q), 0)
            weights[a][p, q] += 1
        _graph_budget(_as_graph(edges) for edges in weights.values())
        best = {a: _best_order(edges) for a, edges in weights.items()}
        counts.append(sum(count for count, _ in best.values()))
        if return_W:
            tokens = _no_grad_numpy(torch.unique(flat[b].X.reshape(-1, problem.d), dim=0))  # ids as in the edges
            queries = sorted(best)
            phi = np.zeros((len(tokens), len(queries)))  # phi[p, j] = p^T W x_(queries[j])
            for j, a in enumerate(queries):
                for rank, p in enumerate(best[a][1]):
                    phi[p, j] = -float(rank)
            A = tokens[queries]
            witnesses.append(np.linalg.pinv(tokens) @ phi @ np.linalg.pinv(A.T) if queries else
                             np.zeros((problem.d, problem.d)))
    counts = np.array(counts, dtype=np.int64).reshape(problem.batch_shape)
    if not return_W:
        return counts
    witness = np.stack(witnesses).reshape(problem.batch_shape + (problem.d, problem.d))
    return counts, finite_result(witness, "the witness W", "the problem's tokens are too small (rescale them)")


def _as_graph(edges: dict) -> dict:
    """{p: {q: True}} for the edges (p, q) of `edges`."""
    graph = {}
    for p, q in edges:
        graph.setdefault(p, {})[q] = True
    return graph


def _best_order(edges: dict):
    """(max over orders of the nodes of the total weight of the edges (p, q) with p before q, one best order)."""
    graph = _as_graph(edges)
    nodes = {x for edge in edges for x in edge}
    reach = {x: _reachable(graph, x) for x in nodes}
    component = {x: frozenset(y for y in reach[x] if x in reach[y]) for x in nodes}
    total = sum(w for (p, q), w in edges.items() if component[p] != component[q])  # always satisfiable
    inside = {}  # component -> its best internal order
    for members in set(component.values()):
        if len(members) == 1:
            inside[members] = list(members)
            continue
        if len(members) > 16:
            raise ValueError(f"problem has a preference conflict among {len(members)} tokens, too large for the exact "
                             f"count (at most 16): use fewer sequences or a larger vocabulary")
        names = sorted(members)
        index = {x: j for j, x in enumerate(names)}
        into = [[0] * len(index) for _ in index]  # into[v][u]: weight of the edge u -> v
        for (p, q), w in edges.items():
            if p in index and q in index:
                into[index[q]][index[p]] += w
        best = [0] + [-1] * ((1 << len(index)) - 1)  # best[S]: the nodes of S placed first, in the best order
        last = [-1] * (1 << len(index))  # the node placed last in a best order of S
        for S in range(1 << len(index)):
            for v in range(len(index)):
                if not S >> v & 1:
                    gained = sum(into[v][u] for u in range(len(index)) if S >> u & 1)
                    if best[S] + gained > best[S | 1 << v]:
                        best[S | 1 << v], last[S | 1 << v] = best[S] + gained, v
        total += best[-1]
        order, S = [], (1 << len(index)) - 1
        while S:
            order.append(names[last[S]])
            S &= ~(1 << last[S])
        inside[members] = order[::-1]
    # the components in a topological order of the condensation (an edge between components goes forward)
    placed, order = set(), []
    components = sorted(set(component.values()), key=lambda c: min(c))
    while len(placed) < len(components):
        for c in components:
            if c not in placed and all(component[p] in placed or component[p] == c
                                       for (p, q) in edges if component[q] == c):
                placed.add(c)
                order.extend(inside[c])
                break
    return total, order


def _seed(value, name: str = "seed") -> int:
    """A seed torch's generator takes."""
    return _checked_seed(value, name, below=2**63)
