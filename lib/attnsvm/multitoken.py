"""Paper A's multi-token experiment (E5.1): a fixed ReLU head, only W trained, and the official run filter.

Every candidate run comes from one integer seed (its problem, its head and its initial W), so that any run can
be reproduced alone. The official filter accepts few candidates at large d (about 2 in 100 at d = 10), so the
first accepted seeds of each d are found once by `search` (`make e51-seeds` writes `e51_seeds.json`); Chapter 5
trains exactly those runs and checks that each one passes the filter, and the tests re-run the search on a
prefix of the seeds.

The runs normalize each gradient step as paper A's code does, by ||G||_F + EPS (machine epsilon): once the
gradient norm falls to about 1e-16, the steps shrink and training all but stops. The figure's numbers depend on
it (Chapter 5 compares exact normalized steps, eps = 0).
"""

from __future__ import annotations

import json
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from . import data, heads, session, svm, theory, train
from .checks import positive_int
from .initial import uniform_init

N, T = 3, 4  # sequences and tokens per sequence
STEPS, LR, RECORD_EVERY = 2000, 0.1, 100
EPS = float(np.finfo(np.float64).eps)  # paper A's code normalizes the gradient by its norm + EPS
MASKED, RELEVANT = 1e-6, 1e-3  # s <= MASKED: masked; s >= RELEVANT: selected; in between: ambiguous
HEAD_SEEDS, INIT_SEEDS = 1_000_000, 2_000_000  # offsets: the head and the initial W get their own streams
SEEDS_FILE = Path(__file__).with_name("e51_seeds.json")


@dataclass(frozen=True)
class Runs:
    """Trained candidate runs: seeds (batch,), the batched problem and ReLU head, the trajectory."""

    seeds: np.ndarray
    problem: data.Problem
    head: heads.ReLU
    trajectory: train.Trajectory
    svms: dict = field(default_factory=dict, repr=False, compare=False)  # run index -> its SVMs, once solved


def _draw(d: int, seeds: np.ndarray) -> tuple[data.Problem, heads.ReLU, torch.Tensor]:
    """The candidate runs of `seeds`, batched: problems, ReLU heads and initial W."""
    problem = data.random_problem(N, T, d, seed=seeds)
    head = heads.ReLU(torch.stack([heads.random_relu(d, seed=HEAD_SEEDS + int(s)).V for s in seeds]))
    W0 = torch.stack([uniform_init((d, d), seed=INIT_SEEDS + int(s)) for s in seeds])
    return problem, head, W0


def _train(seeds: np.ndarray, problem: data.Problem, head: heads.ReLU, W0: torch.Tensor, eps: float = EPS) -> Runs:
    trajectory = train.gd(problem, steps=STEPS, lr=LR, init=W0, record_every=RECORD_EVERY, head=head, eps=eps)
    return Runs(seeds, problem, head, trajectory)


def train_runs(d: int, seeds, *, eps: float = EPS) -> Runs:
    """Normalized GD (lr 0.1, 2000 steps, logistic loss, W recorded every 100 steps) for each seed's run, each
    step -lr G / (||G||_F + eps) as in paper A's code; eps = 0 gives exact normalized steps -lr G / ||G||_F."""
    d = positive_int(d, "d")
    seeds = np.asarray(seeds, dtype=np.int64)
    if seeds.ndim != 1 or len(seeds) == 0:
        raise ValueError(f"seeds must be a non-empty list of integers, got shape {seeds.shape}")
    return _train(seeds, *_draw(d, seeds), eps=eps)


def select(runs: Runs, keep) -> Runs:
    """The runs where `keep` (bool (batch,), e.g. `passes_filter(runs)`) is true."""
    keep = torch.as_tensor(np.asarray(keep, dtype=bool))
    if keep.shape != (len(runs.seeds),):
        raise ValueError(f"keep must be a bool array of shape ({len(runs.seeds)},), one entry per run")
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
    """The official filter, bool (batch,): labels not all +1, no final probability in (1e-6, 1e-3], at least
    one <= 1e-6 (a token masked), and every SVM (general and one-token) feasible."""
    s = runs.trajectory.probs[-1].flatten(1)
    ok = ~(runs.problem.Y == 1).all(-1) & ~((s > MASKED) & (s <= RELEVANT)).any(-1) & (s <= MASKED).any(-1)
    ok = ok.numpy()
    for b in np.flatnonzero(ok):
        ok[b] = _solutions(runs, b) is not None
    return ok


def largest_masked(runs: Runs) -> np.ndarray:
    """Each run's largest final probability below the selection threshold 1e-3, (batch,): how completely the
    masked tokens are suppressed."""
    s = runs.trajectory.probs[-1].flatten(1)
    return s.masked_fill(s > RELEVANT, 0).amax(-1).numpy()


def _accepted(d: int, first: int, chunk: int) -> list[int]:
    """The accepted seeds among first, ..., first + chunk - 1. As in paper A's loop, a candidate whose labels
    are all +1 is skipped before training (the filter would reject it)."""
    seeds = np.arange(first, first + chunk)
    problem, head, W0 = _draw(d, seeds)
    mixed = ~(problem.Y == 1).all(-1)
    if not mixed.any():
        return []
    problem = data.Problem(*(getattr(problem, name)[mixed] for name in "XYZv"))
    runs = _train(seeds[mixed.numpy()], problem, heads.ReLU(head.V[mixed]), W0[mixed])
    return [int(s) for s in runs.seeds[passes_filter(runs)]]


def search(d: int, count: int, *, start: int = 1, chunk: int = 500, workers: int = 1,
           pool: ProcessPoolExecutor | None = None) -> tuple[list[int], int]:
    """The first `count` accepted seeds from `start` on, in order, and the number of candidates tried.

    Candidates are trained in chunks of `chunk` seeds; with workers > 1, in separate processes, which always
    have the next chunks queued (a run does not depend on the others in its batch, so the answer does not
    depend on `chunk` or `workers`). pool: processes from `attnsvm.worker_pool(workers)` to use; by default
    the search starts its own when workers > 1.
    """
    d, count = positive_int(d, "d"), positive_int(count, "count")
    chunk, workers = positive_int(chunk, "chunk"), positive_int(workers, "workers")
    own = pool is None and workers > 1
    pool = session.worker_pool(workers) if own else pool
    accepted, first, queued = [], start, deque()
    try:
        while len(accepted) < count:
            if pool is None:
                accepted += _accepted(d, first, chunk)
                first += chunk
                continue
            while len(queued) < 2 * workers:  # chunks are taken in order, as the workers free up
                queued.append(pool.submit(_accepted, d, first, chunk))
                first += chunk
            accepted += queued.popleft().result()
    finally:
        for future in queued:  # beyond the count: those not yet started are dropped
            future.cancel()
        if own:
            pool.shutdown()
    accepted = accepted[:count]
    return accepted, accepted[-1] - start + 1


def stored_seeds(d: int) -> list[int]:
    """The accepted seeds of dimension d found by `search` and stored in e51_seeds.json."""
    stored = json.loads(SEEDS_FILE.read_text())
    if str(d) not in stored["seeds"]:
        raise ValueError(f"no stored seeds for d={d}; stored: d in {sorted(map(int, stored['seeds']))} "
                         f"(run `make e51-seeds` to search others)")
    return stored["seeds"][str(d)]


def errors(runs: Runs) -> dict[str, np.ndarray]:
    """1 - corr(W(k), .) for the three predicted directions, each (records, batch): "SVMeq" (W_fin + C W_mm, C
    fitted to W(2000)), "W_mm" (the directional part alone) and "1token" (the Att-SVM of argmax_t s_it)."""
    W = runs.trajectory.W
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
