"""The causal problems: a synthetic language, sequence problems whose tokens are queries, and what each query may
attend to (its candidates, their scores, the optimal token and the constraints that separate a selection)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Iterable

import numpy as np
import torch
from numpy.typing import ArrayLike

from .._checks import cpu_device as _device, memory as _memory
from .._checks import as_index, as_tensor, boolean, budget, positive_int, require_shape
from ..data import Sequences, _seed, unit_rows

__all__ = ["Language", "SequenceProblem", "candidates", "next_token_problem", "next_token_problems",
           "optimal_tokens", "random_problem", "scores", "separation_mask", "synthetic_language"]


def _problem(problem) -> SequenceProblem:
    """`problem` if it is a SequenceProblem, else a TypeError naming it."""
    if not isinstance(problem, SequenceProblem):
        raise TypeError(f"problem must be a causal.SequenceProblem (e.g. causal.random_problem(n, T, d, seed=0) or "
                        f"causal.next_token_problem(X)), got {type(problem).__name__}")
    return problem


def _no_grad_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A tensor as numpy, also one that requires grad (the solvers leave torch)."""
    return tensor.detach().cpu().numpy()


# ------------------------------------------------------------------ a synthetic language

@dataclass(frozen=True)
class Language:
    r"""A first-order Markov language over V tokens with unit-norm embeddings in :math:`\mathbb{R}^d`.

    Parameters
    ----------
    embeddings : Tensor
        The embeddings, shape (V, d).
    start : Tensor
        The distribution of the first token, shape (V,).
    transition : Tensor
        Row a is the distribution of the token that follows a, shape (V, V).

    Examples
    --------
    >>> import torch
    >>> from attnsvm import causal
    >>> embeddings = torch.eye(2, dtype=torch.float64)
    >>> flip = torch.tensor([[0.0, 1.0], [1.0, 0.0]], dtype=torch.float64)  # a, b, a, b, ...
    >>> language = causal.Language(embeddings, torch.tensor([1.0, 0.0], dtype=torch.float64), flip)
    >>> language.V, language.d
    (2, 2)
    >>> language.sample(1, 4, seed=0)[0].tolist()
    [[0, 1, 0, 1]]
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
        """The number of tokens of the vocabulary."""
        return self.embeddings.shape[0]

    @property
    def d(self) -> int:
        """The dimension of the embeddings."""
        return self.embeddings.shape[1]

    def sample(self, n: int, T: int, *, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """n sequences of T tokens.

        Sequence i is drawn from its own T uniform numbers (inverse CDF), so the first n sequences sampled with a seed
        are the same for every larger n.

        Parameters
        ----------
        n : int
            The number of sequences.
        T : int
            Tokens per sequence.
        seed : int
            The seed.

        Returns
        -------
        tuple of Tensor
            The ids (n, T) (int64) and X (n, T, d), their embeddings.

        Raises
        ------
        ValueError
            If n, T or seed is out of range.

        Examples
        --------
        >>> from attnsvm import causal
        >>> language = causal.synthetic_language(V=5, d=3, seed=0)
        >>> ids, X = language.sample(4, 6, seed=1)
        >>> tuple(ids.shape), tuple(X.shape)
        ((4, 6), (4, 6, 3))
        >>> bool((language.sample(2, 6, seed=1)[0] == ids[:2]).all())  # nested in n
        True
        """
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
    """A random language: a uniform first token, for every token ``successors`` possible next tokens (drawn without
    replacement) with Dirichlet(1) probabilities, and unit-norm Gaussian embeddings.

    The transitions are drawn first, so one seed gives the same language (the same token sequences) for every d.

    Parameters
    ----------
    V : int
        The size of the vocabulary.
    d : int
        The dimension of the embeddings.
    seed : int
        The seed.
    successors : int, default=3
        Possible next tokens of every token, at most V.

    Returns
    -------
    Language
        The language.

    Raises
    ------
    ValueError
        If a size or the seed is out of range (e.g. successors > V).

    Examples
    --------
    >>> from attnsvm import causal
    >>> language = causal.synthetic_language(V=20, d=8, seed=0, successors=3)
    >>> language.V, language.d, (language.transition > 0).sum(1).tolist()[:5]
    (20, 8, [3, 3, 3, 3, 3])
    """
    V, d = positive_int(V, "V", minimum=2), positive_int(d, "d")
    successors = positive_int(successors, "successors")
    if successors > V:
        raise ValueError(f"successors must be at most V={V} (each token has that many possible next tokens), "
                         f"got {successors}")
    _memory(4.0 * V * (V + d), "V and d (the V x V transition matrix and V embeddings in R^d)")
    gen = torch.Generator().manual_seed(_seed(seed))
    nxt = torch.rand(V, V, generator=gen, dtype=torch.float64).argsort(dim=1)[:, :successors]  # random subsets
    weights = -torch.log(torch.rand(V, successors, generator=gen, dtype=torch.float64))  # Dirichlet(1)
    transition = torch.zeros(V, V, dtype=torch.float64).scatter_(1, nxt, weights / weights.sum(1, keepdim=True))
    embeddings = unit_rows(torch.randn(V, d, generator=gen, dtype=torch.float64))
    return Language(embeddings, torch.full((V,), 1.0 / V, dtype=torch.float64), transition)


def next_token_problems(n: int, T: int, d: int, *, V: int = 20, successors: int = 3,
                        seeds: Iterable[int] = range(5)) -> tuple[SequenceProblem, torch.Tensor]:
    """One next-token problem per seed s, as one batch: n sequences of T tokens sampled from
    ``synthetic_language(V, d, seed=s)`` (with sampling seed s).

    Parameters
    ----------
    n : int
        The number of sequences.
    T : int
        Tokens per sequence.
    d : int
        The dimension.
    V : int, default=20
        The size of the vocabulary.
    successors : int, default=3
        Possible next tokens of every token.
    seeds : Iterable of int
        The seeds, by default ``range(0, 5)``.

    Returns
    -------
    tuple
        (SequenceProblem (len(seeds), n, T, d), token ids (len(seeds), n, T)).

    Raises
    ------
    ValueError
        If a size or seed is out of range.

    Examples
    --------
    >>> from attnsvm import causal
    >>> problems, ids = causal.next_token_problems(4, 5, 8, V=6, seeds=[0, 1])
    >>> problems
    SequenceProblem(batch=(2,), n=4, T=5, P=4, d=8, causal)
    >>> tuple(ids.shape)
    (2, 4, 5)
    """
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
    r"""n sequences X whose tokens k < K are queries, each with its own head.

    Index the batch dimensions with ``problem[b]``.

    Parameters
    ----------
    X : ArrayLike
        The tokens, shape (..., n, T, d).
    V : ArrayLike
        The heads :math:`v_{ik}`, shape (..., n, K, d).
    causal : bool, default=True
        Query k attends to the tokens :math:`t \le k` (:math:`K \le T`); False (sequence-to-sequence): to all T.
    device : str or None, default=None
        None or "cpu".

    Raises
    ------
    ValueError
        If the shapes do not fit (e.g. K > T for a causal problem) or the data are not finite.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import causal
    >>> X = torch.randn(2, 3, 4, dtype=torch.float64)  # 2 sequences of 3 tokens in R^4
    >>> problem = causal.SequenceProblem(X, X[:, 1:])  # queries 0 and 1, heads: the next tokens
    >>> problem
    SequenceProblem(n=2, T=3, P=2, d=4, causal)
    >>> problem.K, tuple(problem.queries.shape)
    (2, (2, 2, 4))
    """

    X: torch.Tensor
    V: torch.Tensor
    causal: bool

    def __init__(self, X: ArrayLike, V: ArrayLike, *, causal: bool = True, device: str | None = None) -> None:
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
        """The number of query positions, the same as ``K``: the book writes P, since K is its key matrix."""
        return self.V.shape[-2]

    @property
    def queries(self) -> torch.Tensor:
        """The query tokens x_ik, k < K, shape (..., n, K, d)."""
        return self.X[..., : self.K, :]

    def __getitem__(self, index) -> SequenceProblem:
        """Select problems along the batch dimensions, e.g. ``problem[3]`` or ``problem[:10]``."""
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


def next_token_problem(X: ArrayLike) -> SequenceProblem:
    r"""Causal next-token prediction on X: query k < T - 1 predicts token k + 1, with the tied head
    :math:`v_{ik} = x_{i,k+1}` (the embedding of the true next token).

    Parameters
    ----------
    X : ArrayLike
        The tokens, shape (..., n, T, d), :math:`T \ge 2`.

    Returns
    -------
    SequenceProblem
        The problem, with K = T - 1 queries.

    Raises
    ------
    ValueError
        If X does not have shape (..., n, T, d) with :math:`T \ge 2`.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import causal
    >>> problem = causal.next_token_problem(torch.randn(3, 5, 4, dtype=torch.float64))
    >>> problem.P, bool((problem.V == problem.X[:, 1:]).all())
    (4, True)
    """
    X = as_tensor(X, "X")
    if X.ndim < 3 or X.shape[-2] < 2:
        raise ValueError(f"X must have shape (..., n, T, d) with T >= 2 (a next token to predict), got "
                         f"{tuple(X.shape)}")
    return SequenceProblem(X, X[..., 1:, :], causal=True)


def random_problem(n: int, T: int, d: int, *, seed: int, batch: int | None = None,
                   causal: bool = True) -> SequenceProblem:
    r"""The papers' random instance with every token a query: unit-norm Gaussian tokens X (n, T, d) and heads
    V (n, T, d), one per query (K = T).

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
        B independent problems from one seeded generator (None: one problem).
    causal : bool, default=True
        Causal, or sequence-to-sequence.

    Returns
    -------
    SequenceProblem
        The problems.

    Raises
    ------
    ValueError
        If T < 2, or a size or the seed is out of range.

    Examples
    --------
    >>> from attnsvm import causal
    >>> causal.random_problem(n=3, T=5, d=8, seed=0, batch=4)
    SequenceProblem(batch=(4,), n=3, T=5, P=5, d=8, causal)
    """
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


# ------------------------------------------------------------------ what each query attends to

def candidates(problem: SequenceProblem) -> torch.Tensor:
    r"""Whether query k may attend to token t (:math:`t \le k` if causal, every t otherwise).

    Parameters
    ----------
    problem : SequenceProblem
        The problems (a batch).

    Returns
    -------
    Tensor
        A boolean mask, shape (K, T).

    Raises
    ------
    TypeError
        If problem is not a ``SequenceProblem``.

    Examples
    --------
    >>> from attnsvm import causal
    >>> causal.candidates(causal.random_problem(n=1, T=3, d=2, seed=0)).int().tolist()
    [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    """
    _problem(problem)
    k = torch.arange(problem.K, device=problem.X.device)[:, None]
    t = torch.arange(problem.T, device=problem.X.device)[None, :]
    return t <= k if problem.causal else torch.ones(problem.K, problem.T, dtype=torch.bool, device=problem.X.device)


def _values(problem: SequenceProblem) -> torch.Tensor:
    """gamma_ikt = v_ik^T x_it for all (k, t), shape (..., n, K, T) (0 where t is not a candidate)."""
    return torch.einsum("...ntd,...nkd->...nkt", problem.X, problem.V) * candidates(problem)


def scores(problem: SequenceProblem) -> torch.Tensor:
    r"""Token scores :math:`\gamma_{ikt} = v_{ik}^\top x_{it}`, :math:`-\infty` where t is not a candidate of query k.

    Parameters
    ----------
    problem : SequenceProblem
        The problems (a batch).

    Returns
    -------
    Tensor
        The scores, shape (..., n, K, T).

    Raises
    ------
    TypeError
        If problem is not a ``SequenceProblem``.

    Examples
    --------
    >>> from attnsvm import causal
    >>> gamma = causal.scores(causal.random_problem(n=2, T=3, d=4, seed=0))
    >>> tuple(gamma.shape), bool(gamma[:, 0, 1:].isneginf().all())  # query 0 sees token 0 only
    ((2, 3, 3), True)
    """
    _problem(problem)
    return _values(problem).masked_fill(~candidates(problem), -torch.inf)


def _copies(problem: SequenceProblem, alpha: torch.Tensor) -> torch.Tensor:
    """Boolean (..., n, K, T): token t is an exact copy of the selected token x_{i alpha_ik} (alpha itself too)."""
    chosen = torch.gather(problem.X, -2, alpha[..., None].expand(alpha.shape + (problem.d,)))  # (..., n, K, d)
    return (problem.X[..., None, :, :] == chosen[..., :, None, :]).all(-1)


def optimal_tokens(problem: SequenceProblem) -> torch.Tensor:
    r"""The optimal tokens :math:`\mathrm{opt}_{ik} = \arg\max_t \gamma_{ikt}` over the candidates; among exact copies
    of the best token, the latest occurrence.

    Parameters
    ----------
    problem : SequenceProblem
        The problems (a batch).

    Returns
    -------
    Tensor
        The token indices, shape (..., n, K).

    Raises
    ------
    TypeError
        If problem is not a ``SequenceProblem``.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import causal
    >>> a, b = torch.eye(2, dtype=torch.float64)
    >>> problem = causal.SequenceProblem(torch.stack([a, b, a])[None], torch.stack([a, a, a])[None])
    >>> causal.optimal_tokens(problem).tolist()  # every query wants a: its latest copy among the candidates
    [[0, 0, 2]]
    """
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


def separation_mask(problem: SequenceProblem, alpha: ArrayLike | None = None) -> torch.Tensor:
    r"""The (query, token) pairs of the Att-SVM constraints: the candidates t of query (i, k) other than
    :math:`\alpha_{ik}` and its exact copies.

    Parameters
    ----------
    problem : SequenceProblem
        The problems (a batch).
    alpha : ArrayLike or None, default=None
        The selection (None: the optimal tokens).

    Returns
    -------
    Tensor
        A boolean mask, shape (..., n, K, T).

    Raises
    ------
    ValueError
        If alpha does not fit the problem.

    Examples
    --------
    >>> from attnsvm import causal
    >>> problem = causal.random_problem(n=2, T=4, d=6, seed=0)
    >>> mask = causal.separation_mask(problem)
    >>> tuple(mask.shape), int(mask.sum())  # each query k separates its k other candidates
    ((2, 4, 4), 12)
    """
    alpha = _selection(problem, alpha)
    return candidates(problem) & ~_copies(problem, alpha)
