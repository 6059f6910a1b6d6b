"""Paper A's multi-token experiment (E5.1): a fixed ReLU head, only W trained, and the official run filter.

Every candidate run comes from one integer seed (its problem, its head and its initial W), so that any run can
be reproduced alone. The official filter accepts few candidates at large d (about 2 in 100 at d = 10), so the
first accepted seeds of each d are found once by ``search`` (``make e51-seeds`` writes ``e51_seeds.json``);
Chapter 5 trains exactly those runs and checks that each one passes the filter, and the tests re-run the search
on a prefix of the seeds. The search hands its chunks of candidates to joblib, so it runs in this process, in
worker processes or on a Dask cluster without a change here.

The runs normalize each gradient step as paper A's code does, by ||G||_F + EPS (machine epsilon): once the
gradient norm falls to about 1e-16, the steps shrink and training all but stops. The figure's numbers depend on
it (Chapter 5 compares exact normalized steps, eps = 0): ``norms``, ``moved`` and ``token_fates`` compare the two.

Also here: ``token_pairs``, the token pairs of one run and the span S_fin of the finite part (Chapter 5's lemma),
and ``lambda_sweep``, the book's own lambda-head experiment (E5.2).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from joblib import Parallel, delayed
from numpy.typing import ArrayLike

from .. import data, heads, svm, theory, train
from .._checks import as_tensor, budget, finite_result, on_cpu, positive_int
from .._session import _task_numerics
from ..data import _memory, _nonnegative, _seed, _seeds, _workers
from ..train._initial import uniform_init

__all__ = ["LambdaRuns", "Runs", "TokenFates", "TokenPairs", "errors", "lambda_sweep", "largest_masked", "moved",
           "norms", "passes_filter", "search", "select", "stored_seeds", "token_fates", "token_pairs", "train_runs",
           "EPS", "SEEDS_FILE", "MAX_CANDIDATES", "MAX_PAIRS", "MAX_STEPS"]

N, T = 3, 4  # sequences and tokens per sequence
STEPS, LR, RECORD_EVERY = 2000, 0.1, 100
EPS = float(np.finfo(np.float64).eps)  # paper A's code normalizes the gradient by its norm + EPS
MASKED, RELEVANT = 1e-6, 1e-3  # s <= MASKED: masked; s >= RELEVANT: selected; in between: ambiguous
HEAD_SEEDS, INIT_SEEDS = 1_000_000, 2_000_000  # offsets: the head and the initial W get their own streams
SEEDS_FILE = Path(__file__).with_name("e51_seeds.json")
MAX_CANDIDATES = 10**6  # ``search`` gives up after this many candidates (d = 10 needs about 57 per accepted seed)
MAX_PAIRS = 10**6  # token_pairs refuses more token triples (i, t, tau) than this
MAX_STEPS = 10**8  # lambda_sweep refuses more gradient steps than this


@dataclass(frozen=True)
class Runs:
    """Trained candidate runs (``train_runs``).

    Parameters
    ----------
    seeds : ndarray
        The seeds, shape (batch,).
    problem : Problem
        The batched problem.
    head : ReLU
        The batched ReLU head.
    trajectory : Trajectory
        The run, W recorded every 100 steps.
    svms : dict
        A cache of each run's general and one-token SVMs (None where infeasible), filled as they are needed; by
        default empty.

    Examples
    --------
    >>> from attnsvm.experiments import relu_head
    >>> runs = relu_head.train_runs(4, [2, 3])
    >>> runs.seeds.tolist(), runs.problem.batch_shape, tuple(runs.trajectory.W.shape)
    ([2, 3], (2,), (21, 2, 4, 4))
    """

    seeds: np.ndarray
    problem: data.Problem
    head: heads.ReLU
    trajectory: train.Trajectory
    # run index -> its (general, one-token) SVMs, or None if one is infeasible; filled as they are solved
    svms: dict[int, tuple | None] = field(default_factory=dict, repr=False, compare=False)


def _as_runs(value, name: str = "runs") -> Runs:
    """``value`` if it is a ``Runs``, else a TypeError naming it."""
    if not isinstance(value, Runs):
        raise TypeError(f"{name} must be the Runs of relu_head.train_runs(d, seeds), got {type(value).__name__}")
    return value


def _run_memory(count: int, d: int, name: str) -> None:
    """Refuse ``count`` runs in R^d whose trajectories would not fit in memory."""
    _memory(count * ((STEPS // RECORD_EVERY + 1) * (d * d + 2 * N * T) + 3 * d * d + N * T * d), name)


def _draw(d: int, seeds: np.ndarray) -> tuple[data.Problem, heads.ReLU, torch.Tensor]:
    """The candidate runs of ``seeds``, batched: problems, ReLU heads and initial W."""
    problem = data.random_problem(N, T, d, seed=seeds)
    head = heads.ReLU(torch.stack([heads.random_relu(d, seed=HEAD_SEEDS + int(s)).V for s in seeds]))
    W0 = torch.stack([uniform_init((d, d), seed=INIT_SEEDS + int(s)) for s in seeds])
    return problem, head, W0


def _train(seeds: np.ndarray, problem: data.Problem, head: heads.ReLU, W0: torch.Tensor, eps: float = EPS) -> Runs:
    trajectory = train.gd(problem, steps=STEPS, lr=LR, init=W0, record_every=RECORD_EVERY, head=head, eps=eps)
    return Runs(seeds, problem, head, trajectory)


def train_runs(d: int, seeds: ArrayLike, *, eps: float = EPS) -> Runs:
    r"""Normalized GD (lr 0.1, 2000 steps, logistic loss, W recorded every 100 steps) for each seed's run in
    :math:`\mathbb{R}^d` (n = 3 sequences of T = 4 tokens, a random ReLU head).

    Each step is :math:`-\eta\, G/(\|G\|_F + \varepsilon)` as in paper A's code. A run is the same alone and in a
    batch.

    Parameters
    ----------
    d : int
        The dimension.
    seeds : ArrayLike
        The seeds of the runs.
    eps : float, default=2.220446049250313e-16
        :math:`\varepsilon`; 0 gives exact normalized steps :math:`-\eta\, G/\|G\|_F`.

    Returns
    -------
    Runs
        The runs.

    Raises
    ------
    ValueError
        If an argument is out of range (the message names it).

    Examples
    --------
    >>> from attnsvm.experiments import relu_head
    >>> runs = relu_head.train_runs(4, relu_head.stored_seeds(4)[:2])
    >>> tuple(runs.trajectory.probs.shape)  # (records, runs, n, T)
    (21, 2, 3, 4)
    >>> relu_head.passes_filter(runs).tolist()
    [True, True]
    """
    d, eps = positive_int(d, "d"), _nonnegative(eps, "eps")
    seeds = np.asarray(_seeds(seeds, "seeds"), dtype=np.int64)
    _run_memory(len(seeds), d, "seeds (their number) and d")
    return _train(seeds, *_draw(d, seeds), eps=eps)


def select(runs: Runs, keep: ArrayLike) -> Runs:
    """The runs where ``keep`` is true.

    Parameters
    ----------
    runs : Runs
        The runs.
    keep : ArrayLike
        Bool (batch,), e.g. ``passes_filter(runs)``.

    Returns
    -------
    Runs
        The runs kept.

    Raises
    ------
    ValueError
        If keep is not a bool array of one entry per run.

    Examples
    --------
    >>> from attnsvm.experiments import relu_head
    >>> runs = relu_head.train_runs(4, [1, 2, 3])
    >>> relu_head.select(runs, relu_head.passes_filter(runs)).seeds.tolist()
    [2, 3]
    """
    runs = _as_runs(runs)
    try:
        keep = torch.as_tensor(keep.detach().cpu().numpy() if torch.is_tensor(keep) else np.asarray(keep))
    except (TypeError, ValueError, RuntimeError):
        keep = None
    if keep is None or keep.dtype != torch.bool or keep.shape != (len(runs.seeds),):
        raise ValueError(f"keep must be a bool array of shape ({len(runs.seeds)},), one entry per run (e.g. "
                         f"passes_filter(runs)), got {keep!r}")
    t = runs.trajectory
    trajectory = train.Trajectory(t.steps, t.probs[:, keep], t.loss[:, keep], W=t.W[:, keep])
    problem = data.Problem(*(getattr(runs.problem, name)[keep] for name in "XYZv"))
    return Runs(runs.seeds[keep.numpy()], problem, heads.ReLU(runs.head.V[keep]), trajectory)


def _solutions(runs: Runs, b: int):
    """(GeneralSVM, one-token W) of run b, or None if an SVM is infeasible (solved once per run)."""
    if b not in runs.svms:
        X, Z, s = runs.problem.X[b], runs.problem.Z[b], runs.trajectory.probs[-1, b]
        try:
            runs.svms[b] = svm.general_svm(X, Z, s, threshold=RELEVANT), svm.att_svm(X, Z, s.argmax(-1))
        except svm.InfeasibleSVM:
            runs.svms[b] = None
    return runs.svms[b]


def passes_filter(runs: Runs) -> np.ndarray:
    r"""The official filter: labels not all +1, no final probability in (1e-6, 1e-3], at least one :math:`\le 10^{-6}`
    (a token masked), and every SVM (general and one-token) feasible.

    Parameters
    ----------
    runs : Runs
        The runs.

    Returns
    -------
    ndarray
        A boolean array, shape (batch,).

    Raises
    ------
    TypeError
        If runs is not the ``Runs`` of ``train_runs``.

    Examples
    --------
    >>> from attnsvm.experiments import relu_head
    >>> relu_head.passes_filter(relu_head.train_runs(4, [1, 2, 3])).tolist()
    [False, True, True]
    """
    s = _as_runs(runs).trajectory.probs[-1].flatten(1)
    ok = ~(runs.problem.Y == 1).all(-1) & ~((s > MASKED) & (s <= RELEVANT)).any(-1) & (s <= MASKED).any(-1)
    ok = ok.numpy()
    for b in np.flatnonzero(ok):
        ok[b] = _solutions(runs, b) is not None
    return ok


def largest_masked(runs: Runs) -> np.ndarray:
    """Each run's largest final probability below the selection threshold 1e-3: how completely the masked tokens are
    suppressed.

    Parameters
    ----------
    runs : Runs
        The runs.

    Returns
    -------
    ndarray
        The probabilities, shape (batch,).

    Raises
    ------
    TypeError
        If runs is not the ``Runs`` of ``train_runs``.

    Examples
    --------
    >>> from attnsvm.experiments import relu_head
    >>> largest = relu_head.largest_masked(relu_head.train_runs(4, relu_head.stored_seeds(4)[:2]))
    >>> largest.shape, bool((largest <= 1e-6).all())  # accepted runs mask their tokens below 1e-6
    ((2,), True)
    """
    s = _as_runs(runs).trajectory.probs[-1].flatten(1)
    return s.masked_fill(s > RELEVANT, 0).amax(-1).numpy()


def _accepted(d: int, first: int, chunk: int) -> list[int]:
    """One task of ``search``: the accepted seeds among first, ..., first + chunk - 1, under ``setup()``'s
    numerics in whatever process runs it. As in paper A's loop, a candidate whose labels are all +1 is skipped
    before training (the filter would reject it)."""
    with _task_numerics():
        seeds = np.arange(first, first + chunk)
        problem, head, W0 = _draw(d, seeds)
        mixed = ~(problem.Y == 1).all(-1)
        if not mixed.any():
            return []
        problem = data.Problem(*(getattr(problem, name)[mixed] for name in "XYZv"))
        runs = _train(seeds[mixed.numpy()], problem, heads.ReLU(head.V[mixed]), W0[mixed])
        return [int(s) for s in runs.seeds[passes_filter(runs)]]


def search(d: int, count: int, *, start: int = 1, chunk: int = 500, workers: int | None = None,
           max_candidates: int = MAX_CANDIDATES) -> tuple[list[int], int]:
    """The first ``count`` accepted seeds from ``start`` on, in order, and the number of candidates tried.

    Candidates are trained in chunks of ``chunk`` seeds, each chunk a joblib task, taken in order as the workers
    free up; no chunk is started once the seeds are found. A run does not depend on the others in its chunk, and
    each task sets ``setup()``'s numerics itself, so the answer does not depend on ``chunk``, ``workers`` or the
    backend.

    Parameters
    ----------
    d : int
        The dimension.
    count : int
        How many seeds.
    start : int, default=1
        The first candidate seed.
    chunk : int, default=500
        Seeds per task.
    workers : int or None, default=None
        1 trains the chunks in this process, k > 1 in k worker processes (joblib's default backend, loky, whose
        processes stay up for the next call, or the backend of an enclosing ``joblib.parallel_config``); None
        leaves the choice to joblib: this process, unless the call is inside
        ``joblib.parallel_config(n_jobs=..., backend=...)`` (a Dask cluster: ``backend="dask"``).
    max_candidates : int, default=1000000
        The most candidates tried.

    Returns
    -------
    tuple
        (the seeds, the number of candidates tried up to the last accepted seed).

    Raises
    ------
    ValueError
        If ``max_candidates`` candidates do not hold ``count`` accepted seeds.

    Examples
    --------
    >>> from attnsvm.experiments import relu_head
    >>> seeds, tried = relu_head.search(4, 2, chunk=8)
    >>> seeds == relu_head.stored_seeds(4)[:2], tried == seeds[-1]
    (True, True)
    """
    d, count = positive_int(d, "d"), positive_int(count, "count")
    chunk = positive_int(chunk, "chunk")
    start, max_candidates = _seed(start, "start"), positive_int(max_candidates, "max_candidates")
    if count > max_candidates:  # refused now: the search would try every candidate before giving up
        raise ValueError(f"count={count} accepted seeds cannot be found among max_candidates={max_candidates} "
                         f"candidates: lower count or raise max_candidates")
    _run_memory(chunk, d, "chunk and d")
    end = start + max_candidates
    n_jobs = None if workers is None else min(_workers(workers), -(-max_candidates // chunk))
    accepted: list[int] = []

    def chunks() -> Iterator:  # joblib takes the next chunk when a worker frees up: none once the seeds are found
        for first in range(start, end, chunk):
            if len(accepted) >= count:
                return
            yield delayed(_accepted)(d, first, min(chunk, end - first))

    for seeds in Parallel(n_jobs=n_jobs, return_as="generator", pre_dispatch="n_jobs", batch_size=1)(chunks()):
        if len(accepted) < count:  # chunks started before the count was reached finish, and are not needed
            accepted += seeds
    if len(accepted) < count:
        raise ValueError(f"search found {len(accepted)} of count={count} accepted seeds among max_candidates="
                         f"{max_candidates} candidates from start={start}: raise max_candidates or lower count")
    accepted = accepted[:count]
    return accepted, accepted[-1] - start + 1


def stored_seeds(d: int) -> list[int]:
    """The accepted seeds of dimension d found by ``search`` and stored in e51_seeds.json (``make e51-seeds``), 500 of
    each.

    Parameters
    ----------
    d : int
        4, 6, 8 or 10.

    Returns
    -------
    list of int
        The seeds.

    Raises
    ------
    ValueError
        If no seeds are stored for d.

    Examples
    --------
    >>> from attnsvm.experiments import relu_head
    >>> seeds = relu_head.stored_seeds(4)
    >>> len(seeds), seeds[:3]
    (500, [2, 3, 8])
    """
    d = positive_int(d, "d")
    stored = json.loads(SEEDS_FILE.read_text())
    if str(d) not in stored["seeds"]:
        raise ValueError(f"no stored seeds for d={d}; stored: d in {sorted(map(int, stored['seeds']))} "
                         f"(run `make e51-seeds` to search others)")
    return stored["seeds"][str(d)]


def errors(runs: Runs) -> dict[str, np.ndarray]:
    r""":math:`1 - \mathrm{corr}(W(k), \cdot)` for the three predicted directions.

    "SVMeq" (:math:`W_{fin} + C\, W_{mm}`, C fitted to W(2000)), "W_mm" (the directional part alone) and "1token"
    (the Att-SVM of :math:`\arg\max_t s_{it}`).

    Parameters
    ----------
    runs : Runs
        Runs that all pass the filter (``passes_filter``).

    Returns
    -------
    dict
        {name: errors (records, batch)}.

    Raises
    ------
    ~attnsvm.svm.InfeasibleSVM
        If a run does not pass the filter.

    Examples
    --------
    >>> from attnsvm.experiments import relu_head
    >>> errors = relu_head.errors(relu_head.train_runs(4, relu_head.stored_seeds(4)[:2]))
    >>> sorted(errors), errors["SVMeq"].shape
    (['1token', 'SVMeq', 'W_mm'], (21, 2))
    >>> bool((errors["SVMeq"][-1] < errors["SVMeq"][0]).all())  # W(k) turns towards the SVM equivalence
    True
    """
    W = _as_runs(runs).trajectory.W
    targets = {"SVMeq": [], "W_mm": [], "1token": []}
    for b in range(len(runs.seeds)):
        solutions = _solutions(runs, b)
        if solutions is None:
            raise svm.InfeasibleSVM(f"run with seed {runs.seeds[b]} has an infeasible SVM: filter the runs "
                                    f"with passes_filter first", [b])
        general, one_token = solutions
        targets["SVMeq"].append(general.combined(W[-1, b].numpy()))
        targets["W_mm"].append(general.W_mm)
        targets["1token"].append(one_token)
    return {name: 1 - theory.correlation(W, torch.as_tensor(np.stack(Ws))) for name, Ws in targets.items()}


def norms(runs: Runs) -> torch.Tensor:
    r""":math:`\|W(k)\|_F` of every run at every recorded step.

    Parameters
    ----------
    runs : Runs
        The runs.

    Returns
    -------
    Tensor
        The norms, shape (records, batch).

    Raises
    ------
    TypeError
        If runs is not the ``Runs`` of ``train_runs``.

    Examples
    --------
    >>> from attnsvm.experiments import relu_head
    >>> norms = relu_head.norms(relu_head.train_runs(4, [2, 3]))
    >>> tuple(norms.shape), bool((norms[-1] > norms[0]).all())  # ||W|| grows: W turns into a direction
    ((21, 2), True)
    """
    return _as_runs(runs).trajectory.W.norm(dim=(-2, -1))


def moved(runs: Runs, back: int = 1) -> torch.Tensor:
    r"""How far W moved over the last ``back`` records, :math:`\|W(K) - W(K - 100\,\mathrm{back})\|_F` per run.

    Parameters
    ----------
    runs : Runs
        The runs.
    back : int, default=1
        The number of records, below the number recorded.

    Returns
    -------
    Tensor
        The distances, shape (batch,).

    Raises
    ------
    ValueError
        If back is not below the number of records.

    Examples
    --------
    >>> from attnsvm.experiments import relu_head
    >>> runs = relu_head.train_runs(4, [2, 3])
    >>> tuple(relu_head.moved(runs).shape), tuple(relu_head.moved(runs, back=5).shape)
    ((2,), (2,))
    """
    W = _as_runs(runs).trajectory.W
    back = positive_int(back, "back")
    if back >= len(W):
        raise ValueError(f"back must be below the number of records ({len(W)}), got {back}")
    return (W[-1] - W[-1 - back]).norm(dim=(-2, -1))


@dataclass(frozen=True)
class TokenPairs:
    r"""The token pairs :math:`(i, t, \tau)` of one run with its selected sets :math:`O_i`, and their matrices
    :math:`A[i, t, \tau] = (x_{it} - x_{i\tau}) z_i^\top`, so that :math:`(x_{it} - x_{i\tau})^\top W z_i =
    \langle A, W\rangle_F` (Chapter 5's lemma).

    Parameters
    ----------
    inside : list of tuple
        The pairs with :math:`t \ne \tau`, both in :math:`O_i`: the equations of the finite part.
    apart : list of tuple
        The pairs with t in :math:`O_i`, :math:`\tau` not: the margins of the directional part.
    A : dict
        The matrix of each pair.
    basis : ndarray
        Orthonormal rows (dim :math:`S_{fin}`, :math:`d^2`) spanning :math:`S_{fin}` = span{A[pair] : pair
        inside}.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import data
    >>> from attnsvm.experiments import relu_head
    >>> problem = data.random_problem(2, 3, 3, seed=0)
    >>> relevant = torch.tensor([[True, True, False], [True, False, False]])
    >>> pairs = relu_head.token_pairs(problem.X, problem.Z, relevant)
    >>> pairs.inside, len(pairs.apart), pairs.basis.shape
    ([(0, 0, 1), (0, 1, 0)], 4, (1, 9))
    """

    inside: list[tuple[int, int, int]]  # t != tau, both in O_i: the equations of the finite part
    apart: list[tuple[int, int, int]]  # t in O_i, tau not: the margins of the directional part
    A: dict[tuple[int, int, int], np.ndarray]
    basis: np.ndarray  # orthonormal rows (dim S_fin, d * d) spanning S_fin = span{A[pair] : pair inside}

    def project(self, W: ArrayLike) -> np.ndarray:
        r""":math:`\Pi W`: the orthogonal projection of W onto :math:`S_{fin}` (Frobenius inner product).

        Parameters
        ----------
        W : ArrayLike
            A matrix, shape (d, d).

        Returns
        -------
        ndarray
            :math:`\Pi W`, shape (d, d).

        Raises
        ------
        ValueError
            If W does not have shape (d, d).

        Examples
        --------
        >>> import numpy as np, torch
        >>> from attnsvm import data
        >>> from attnsvm.experiments import relu_head
        >>> problem = data.random_problem(2, 3, 3, seed=0)
        >>> pairs = relu_head.token_pairs(problem.X, problem.Z, torch.ones(2, 3, dtype=torch.bool))
        >>> W = np.eye(3)
        >>> bool(np.allclose(pairs.project(pairs.project(W)), pairs.project(W)))  # a projection
        True
        """
        W = as_tensor(W, "W").detach().numpy()
        d = round(self.basis.shape[1] ** 0.5)
        if W.shape != (d, d):
            raise ValueError(f"W must have shape ({d}, {d}) (a matrix of the tokens' dimension), got {W.shape}")
        return finite_result((self.basis.T @ (self.basis @ W.ravel())).reshape(W.shape), "the projection of W",
                             "W is too large for float64: scale it down")


def token_pairs(X: ArrayLike, Z: ArrayLike, relevant: ArrayLike) -> TokenPairs:
    """The ``TokenPairs`` of tokens, queries and selected sets.

    Parameters
    ----------
    X : ArrayLike
        The tokens, shape (n, T, d).
    Z : ArrayLike
        The queries, shape (n, d).
    relevant : ArrayLike
        The selected sets, bool (n, T), e.g. ``svm.general_svm(...).relevant``.

    Returns
    -------
    TokenPairs
        The pairs, their matrices and a basis of :math:`S_{fin}`.

    Raises
    ------
    ValueError
        If the shapes do not fit.
    TypeError
        If relevant is not a boolean mask.

    Examples
    --------
    >>> import torch
    >>> from attnsvm import data
    >>> from attnsvm.experiments import relu_head
    >>> problem = data.random_problem(2, 3, 3, seed=0)
    >>> pairs = relu_head.token_pairs(problem.X, problem.Z, torch.ones(2, 3, dtype=torch.bool))
    >>> len(pairs.inside), len(pairs.apart), pairs.basis.shape  # every token selected: S_fin has dimension 4
    (12, 0, (4, 9))
    """
    X, Z = as_tensor(X, "X").detach().numpy(), as_tensor(Z, "Z").detach().numpy()
    on_cpu(relevant, "relevant")
    try:
        O = relevant.detach().numpy() if torch.is_tensor(relevant) else np.asarray(relevant)
    except (TypeError, ValueError):
        O = np.asarray(None)
    if X.ndim != 3 or 0 in X.shape or Z.shape != (X.shape[0], X.shape[2]) or O.shape != X.shape[:2]:
        raise ValueError(f"need X (n, T, d) with n, T, d >= 1, Z (n, d) and relevant (n, T); got X {X.shape}, Z "
                         f"{Z.shape}, relevant {O.shape}")
    if O.dtype != bool:
        raise TypeError(f"relevant must be a boolean mask (n, T) of the selected tokens, got dtype {O.dtype}")
    n, T, d = X.shape
    budget(n * T * T, "X", MAX_PAIRS, "token pairs (n T^2)")
    _memory(n * T * T * d * d, "X")
    triples = [(i, t, tau) for i in range(n) for t in range(T) for tau in range(T) if O[i, t] and t != tau]
    inside = [(i, t, tau) for i, t, tau in triples if O[i, tau]]
    apart = [(i, t, tau) for i, t, tau in triples if not O[i, tau]]
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is reported just below
        A = {(i, t, tau): np.outer(X[i, t] - X[i, tau], Z[i]) for i, t, tau in triples}
    for matrix in A.values():
        finite_result(matrix, "a token-pair matrix (x_it - x_itau) z_i^T", "X and Z are too large for float64: "
                                                                           "scale them down")
    spanning = np.array([A[pair].ravel() for pair in inside]).reshape(-1, X.shape[2] ** 2)
    rank = np.linalg.matrix_rank(spanning) if len(inside) else 0
    basis = np.linalg.svd(spanning, full_matrices=False)[2][:rank] if rank else spanning[:0]
    return TokenPairs(inside, apart, A, basis)


@dataclass(frozen=True)
class TokenFates:
    r"""What exact normalized steps do to the tokens of the same runs trained with paper A's step (``token_fates``).

    Parameters
    ----------
    leaving : Tensor
        Kept by paper A's step at step 2000 (:math:`s \ge 10^{-3}`), below :math:`10^{-3}` with exact steps,
        shape (batch, n, T).
    falling : Tensor
        Leaving, and the exact run's probability fell at each of its last ten records, shape (batch, n, T).
    revived : ndarray
        A token of the exact run, once below 1e-14 at a record, above 1e-10 at a later one, shape (batch,).
    in_transit : ndarray
        A leaving token still above 1e-6 (ambiguous) at step 2000 of the exact run, shape (batch,).
    kept_weight : Tensor
        The weights paper A's step gives the leaving tokens at step 2000 (1-d).

    Examples
    --------
    >>> from attnsvm.experiments import relu_head
    >>> seeds = relu_head.stored_seeds(4)[:2]
    >>> fates = relu_head.token_fates(relu_head.train_runs(4, seeds), relu_head.train_runs(4, seeds, eps=0))
    >>> tuple(fates.leaving.shape), fates.left.tolist()
    ((2, 3, 4), [False, True])
    """

    leaving: torch.Tensor  # kept by paper A's step at step 2000 (s >= 1e-3), below 1e-3 with exact steps
    falling: torch.Tensor  # leaving, and the exact run's probability fell at each of its last ten records
    revived: np.ndarray  # a token of the exact run, once below 1e-14 at a record, above 1e-10 at a later one
    in_transit: np.ndarray  # a leaving token still above 1e-6 (ambiguous) at step 2000 of the exact run
    kept_weight: torch.Tensor  # the weights paper A's step gives the leaving tokens at step 2000

    @property
    def left(self) -> np.ndarray:
        """Runs, (batch,), in which some token kept by paper A's step is leaving O_i.

        Examples
        --------
        >>> from attnsvm.experiments import relu_head
        >>> seeds = relu_head.stored_seeds(4)[:2]
        >>> relu_head.token_fates(relu_head.train_runs(4, seeds), relu_head.train_runs(4, seeds, eps=0)).left
        array([False,  True])
        """
        return self.leaving.flatten(1).any(1).numpy()


def token_fates(paper: Runs, exact: Runs) -> TokenFates:
    """Follow each token (i, t) through the records of the same runs trained with paper A's step and with exact
    normalized steps.

    Parameters
    ----------
    paper : Runs
        The runs with paper A's step.
    exact : Runs
        The same runs with exact normalized steps (e.g. ``train_runs(d, seeds, eps=0)``).

    Returns
    -------
    TokenFates
        What happens to the tokens.

    Raises
    ------
    ValueError
        If paper and exact are not the same runs.

    Examples
    --------
    >>> from attnsvm.experiments import relu_head
    >>> seeds = relu_head.stored_seeds(4)[:2]
    >>> fates = relu_head.token_fates(relu_head.train_runs(4, seeds), relu_head.train_runs(4, seeds, eps=0))
    >>> int(fates.leaving.sum()), fates.revived.tolist(), fates.kept_weight.shape
    (1, [False, False], torch.Size([1]))
    """
    paper, exact = _as_runs(paper, "paper"), _as_runs(exact, "exact")
    if not np.array_equal(paper.seeds, exact.seeds) or paper.trajectory.probs.shape != exact.trajectory.probs.shape:
        raise ValueError("paper and exact must be the same runs (the same seeds, in the same order, the same "
                         "records)")
    s_paper, s_exact = paper.trajectory.probs, exact.trajectory.probs  # (records, batch, n, T)
    leaving = (s_paper[-1] >= RELEVANT) & (s_exact[-1] < RELEVANT)
    falling = leaving & (s_exact[-10:].diff(dim=0) < 0).all(0)
    lowest = torch.cummin(s_exact, dim=0).values  # the lowest value so far, token by token
    revived = ((lowest[:-1] < 1e-14) & (s_exact[1:] > 1e-10)).any(0).flatten(1).any(1).numpy()
    in_transit = (leaving & (s_exact[-1] > MASKED)).flatten(1).any(1).numpy()
    return TokenFates(leaving, falling, revived, in_transit, s_paper[-1][leaving])


@dataclass(frozen=True)
class LambdaRuns:
    r"""E5.2: gradient descent's final attention with the lambda-head on single sequences of orthonormal tokens, against
    the water-filling optimum (``lambda_sweep``).

    Parameters
    ----------
    s : Tensor
        Gradient descent's attention at step 2000, shape (batch, 1, T).
    optimum : Tensor
        ``heads.lambda_optimum`` of the token values, shape (batch, 1, T).
    u : Tensor
        The token values :math:`v^\top x_t`, shape (batch, 1, T).
    theta : Tensor
        The optimum's threshold (the largest value when :math:`\lambda = 0`), shape (batch, 1).

    Examples
    --------
    >>> from attnsvm.experiments import relu_head
    >>> runs = relu_head.lambda_sweep([0.5], batch=4, steps=100)[0.5]
    >>> tuple(runs.s.shape), tuple(runs.theta.shape)
    ((4, 1, 6), (4, 1))
    """

    s: torch.Tensor  # GD's attention at step 2000
    optimum: torch.Tensor  # heads.lambda_optimum of the token values
    u: torch.Tensor  # the token values v^T x_t
    theta: torch.Tensor  # the optimum's threshold (the largest value when lam = 0)

    @property
    def selected(self) -> torch.Tensor:
        """The tokens gradient descent keeps, s >= 1e-3 (the selection threshold of E5.1).

        Examples
        --------
        >>> from attnsvm.experiments import relu_head
        >>> runs = relu_head.lambda_sweep([0.5], batch=4, steps=500)[0.5]
        >>> runs.selected.sum(-1).flatten().tolist(), runs.predicted.sum(-1).flatten().tolist()  # still on its way
        ([3, 4, 2, 3], [2, 3, 2, 3])
        """
        return self.s >= RELEVANT

    @property
    def predicted(self) -> torch.Tensor:
        """The tokens the optimum keeps, s* > 0.

        Examples
        --------
        >>> from attnsvm.experiments import relu_head
        >>> runs = relu_head.lambda_sweep([0.0], batch=4, steps=100)[0.0]
        >>> runs.predicted.sum(-1).flatten().tolist()  # lam = 0: the largest token value alone
        [1, 1, 1, 1]
        """
        return self.optimum > 0


def lambda_sweep(lams: ArrayLike, *, batch: int = 200, seed: int = 0, T: int = 6,
                 steps: int = 2000) -> dict[float, LambdaRuns]:
    r"""E5.2 for each :math:`\lambda \ge 0` of ``lams``: normalized GD (lr 0.1, logistic loss, ``steps`` steps) with
    the head :math:`v^\top a - \lambda\|a\|^2` (:math:`\lambda = 0`: the linear head).

    It runs on the same ``batch`` sequences of T orthonormal tokens (``data.orthonormal_problem(T, seed=seed)``),
    all values of :math:`\lambda` trained together in one batch.

    Parameters
    ----------
    lams : ArrayLike
        Distinct values :math:`\lambda \ge 0`.
    batch : int, default=200
        The number of sequences.
    seed : int, default=0
        The seed of the sequences.
    T : int, default=6
        Tokens per sequence.
    steps : int, default=2000
        Steps of gradient descent.

    Returns
    -------
    dict
        {lam: LambdaRuns}.

    Raises
    ------
    ValueError
        If lams is not a non-empty list of distinct numbers :math:`\ge 0`.
    FloatingPointError
        If training overflows (use smaller values of :math:`\lambda`).

    Examples
    --------
    >>> from attnsvm.experiments import relu_head
    >>> sweep = relu_head.lambda_sweep([0.0, 0.5], batch=4, steps=100)
    >>> list(sweep), tuple(sweep[0.5].s.shape)
    ([0.0, 0.5], (4, 1, 6))
    """
    items = on_cpu(lams, "lams").tolist() if isinstance(lams, (np.ndarray, torch.Tensor)) else lams
    if not isinstance(items, (list, tuple, range)):
        raise ValueError(f"lams must be a non-empty list of distinct numbers >= 0, got {lams!r}")
    lams = [_nonnegative(lam, f"lams[{k}]") for k, lam in enumerate(items)]
    if not lams or len(set(lams)) != len(lams):
        raise ValueError(f"lams must be a non-empty list of distinct numbers >= 0, got {lams}")
    batch, steps, T = positive_int(batch, "batch"), positive_int(steps, "steps"), positive_int(T, "T", minimum=2)
    budget(steps, "steps", MAX_STEPS, "gradient steps")
    _memory(len(lams) * batch * (T * T + 4 * T), "lams (their number), batch and T")
    one = data.orthonormal_problem(T, seed=seed, batch=batch)
    problem = data.Problem(*(part.expand((len(lams),) + part.shape) for part in (one.X, one.Y, one.Z, one.v)))
    head = heads.Lambda(problem.v, torch.tensor(lams, dtype=torch.float64)[:, None])
    try:
        run = train.gd(problem, steps=steps, lr=LR, head=head, record_every=steps)
    except FloatingPointError as err:
        raise FloatingPointError(f"training overflowed float64 with lams={lams}: use smaller values of lam "
                                 f"({err})") from err
    u = (one.X @ one.v[:, None, :, None])[..., 0]  # (batch, 1, T)
    sweep = {}
    for k, lam in enumerate(lams):
        theta = heads.lambda_threshold(u, lam) if lam > 0 else u.amax(-1)
        sweep[lam] = LambdaRuns(run.probs[-1, k], heads.lambda_optimum(u, lam), u, theta)
    return sweep
