"""Paper A's E5.1 runs (``attnsvm.experiments.relu_head``): each run reproducible from its seed alone, the official
filter, the stored accepted seeds re-found by the search (serial or in worker processes), and the three predicted
directions. tests/lib/test_parallel.py runs the search on a Dask cluster."""

import numpy as np
import pytest
import torch

import attnsvm
from attnsvm.experiments import relu_head as mt


@pytest.fixture(scope="module")
def candidates():
    return mt.train_runs(4, np.arange(1, 41))


def test_a_run_is_the_same_alone_and_in_a_batch(candidates):
    alone = mt.train_runs(4, [7])
    torch.testing.assert_close(alone.trajectory.W[:, 0], candidates.trajectory.W[:, 6], rtol=1e-12, atol=1e-12)
    assert alone.trajectory.W.shape == (mt.STEPS // mt.RECORD_EVERY + 1, 1, 4, 4)


def test_filter_accepts_exactly_the_official_conditions(candidates):
    ok = mt.passes_filter(candidates)
    s = candidates.trajectory.probs[-1].flatten(1)
    ambiguous = ((s > 1e-6) & (s <= 1e-3)).any(-1).numpy()
    masked = (s <= 1e-6).any(-1).numpy()
    all_positive = (candidates.problem.Y == 1).all(-1).numpy()
    assert not (ok & (ambiguous | ~masked | all_positive)).any()
    assert ((~ambiguous & masked & ~all_positive) == ok).all()  # every SVM is feasible on these candidates
    assert 0 < ok.sum() < len(ok)  # both outcomes occur, so the comparison above means something
    largest = mt.largest_masked(candidates)
    assert (largest[ok] <= 1e-6).all() and (largest[ok] > 0).all()
    assert (largest[ambiguous] > 1e-6).all() and (largest <= 1e-3).all()


@pytest.mark.parametrize("d, count, chunk, workers", [(4, 8, 32, 1), (4, 8, 8, 2), (10, 2, 128, 1)])
def test_search_refinds_the_stored_seeds(d, count, chunk, workers):
    seeds, tried = mt.search(d, count, chunk=chunk, workers=workers)
    assert seeds == mt.stored_seeds(d)[:count] and tried == seeds[-1]


def test_consecutive_searches_continue_each_other():
    """Two searches in worker processes (as ``make e51-seeds`` runs the four d): joblib keeps the processes for
    the second, and a search that stops early leaves nothing behind that changes the next one."""
    first, _ = mt.search(4, 4, chunk=8, workers=2)
    second, _ = mt.search(4, 4, start=first[-1] + 1, chunk=8, workers=2)
    assert first + second == mt.stored_seeds(4)[:8]


def test_a_search_leaves_the_callers_numerics_alone():
    """Each chunk sets float64, one thread and seed 0 for itself; in the caller's process it gives them back."""
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    dtype, threads = torch.get_default_dtype(), torch.get_num_threads()
    mt.search(4, 2, chunk=8, workers=1)
    assert torch.equal(torch.rand(3), expected)
    assert (torch.get_default_dtype(), torch.get_num_threads()) == (dtype, threads)


def test_select_keeps_the_chosen_runs(candidates):
    keep = mt.passes_filter(candidates)
    chosen = mt.select(candidates, keep)
    assert list(chosen.seeds) == list(candidates.seeds[keep])
    again = mt.train_runs(4, chosen.seeds)
    torch.testing.assert_close(chosen.trajectory.W, again.trajectory.W, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(chosen.head.V, again.head.V, rtol=0, atol=0)
    assert mt.passes_filter(chosen).all()
    with pytest.raises(ValueError, match="keep must"):
        mt.select(candidates, keep[:3])


def test_exact_normalized_steps_are_the_eps_0_runs():
    """Paper A's eps changes nothing while the gradient is large, and all but stops training once it falls to
    about 1e-16 (run 7 gets there after some 300 steps); exact normalized steps (eps = 0) go on."""
    exact, official = mt.train_runs(4, [7], eps=0), mt.train_runs(4, [7])
    torch.testing.assert_close(official.trajectory.W[:2], exact.trajectory.W[:2], rtol=1e-8, atol=1e-8)
    moves = [(r.trajectory.W[1:] - r.trajectory.W[:-1]).norm(dim=(-2, -1))[:, 0] for r in (exact, official)]
    assert (moves[0] > 7).all()  # 100 steps of length 0.1, nearly in a straight line
    assert (moves[1][5:] < 0.5).all() and moves[1][-1] < 0.01 * moves[0][-1]


def test_stored_seeds_cover_the_experiment():
    assert all(len(mt.stored_seeds(d)) == 500 for d in (4, 6, 8, 10))


def test_svmeq_is_closer_than_the_one_token_svm():
    runs = mt.train_runs(4, mt.stored_seeds(4)[:20])
    errors = mt.errors(runs)
    assert all(e.shape == (mt.STEPS // mt.RECORD_EVERY + 1, 20) for e in errors.values())
    final = {name: e[-1].mean() for name, e in errors.items()}
    assert final["SVMeq"] < final["1token"] and final["W_mm"] < final["1token"]
    assert (errors["SVMeq"] >= -1e-12).all() and (errors["SVMeq"][-1] < errors["SVMeq"][0]).mean() > 0.9


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="d must"):
        mt.train_runs(0, [1])
    with pytest.raises(ValueError, match="seeds must"):
        mt.train_runs(4, [])
    for workers in (0, -1, "two", 1.5):
        with pytest.raises((TypeError, ValueError), match="workers must"):
            mt.search(4, 1, workers=workers)
    with pytest.raises(ValueError, match="make e51-seeds"):
        mt.stored_seeds(5)


def test_errors_refuse_runs_with_an_infeasible_svm(candidates):
    ok = mt.passes_filter(candidates)
    s = candidates.trajectory.probs[-1].flatten(1)
    unmasked = np.flatnonzero((s >= 1e-3).all(-1).numpy())[:1]  # every token selected: no directional part
    assert len(unmasked) and not ok[unmasked].any()
    runs = mt.train_runs(4, candidates.seeds[unmasked])
    with pytest.raises(attnsvm.InfeasibleSVM, match="passes_filter"):
        mt.errors(runs)
