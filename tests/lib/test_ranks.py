"""Paper A's rank experiment (``attnsvm.experiments.svm_rank``): the spectra of both Att-SVM solutions at a grid
point, serial or in worker processes (tests/lib/test_parallel.py adds a Dask cluster)."""

import numpy as np
import pytest
import torch

from attnsvm import svm, theory
from attnsvm.experiments import svm_rank as ranks


def test_spectra_are_the_singular_values_of_both_solutions():
    result = ranks.spectra(3, 4, 5, count=6)
    problems, alpha, draws = theory.sample_feasible(3, 4, 5, count=6, seed=3405)  # seed 1000 n + 100 T + d
    assert result.draws == draws and result.values.shape == (2, 6, 5)
    for k, norm in enumerate(("fro", "nuc")):
        W = svm.att_svm(problems.X, problems.Z, alpha, norm)
        np.testing.assert_allclose(result.values[k], np.linalg.svd(W, compute_uv=False), rtol=0, atol=1e-12)
    assert (np.diff(result.values, axis=-1) <= 0).all()  # largest first
    assert ((result.values[0] > 1e-7).sum(-1) <= 3).all()  # the Frobenius rank is at most min(n, d)


def test_a_point_without_feasible_problems_has_no_spectra():
    result = ranks.spectra(5, 5, 1, count=10, max_draws=50)  # in one dimension, 5 sequences are never separable
    assert result.values.shape == (2, 0, 1) and result.draws == 50


def test_a_rare_point_is_filled_from_further_chunks():
    problems, alpha, draws = ranks.feasible_problems(10, 5, 2, count=6, max_draws=3000, chunk=100)
    assert len(alpha) == 6 and draws > 100  # feasibility is about 2% here, so one chunk of 100 is not enough
    assert svm.feasible(problems.X, problems.Z, alpha).all()
    assert torch.equal(alpha, theory.optimal_tokens(problems))
    expected, taken = [], 0  # chunk j is sample_feasible with seed 1000 n + 100 T + d + 10**6 j
    for j in range(draws // 100 + 1):
        batch, a, used = theory.sample_feasible(10, 5, 2, count=6 - len(expected), max_draws=100,
                                                seed=10502 + 10**6 * j)
        expected += list(batch.X)
        taken += used
        if len(expected) == 6:
            break
    assert taken == draws and torch.equal(problems.X, torch.stack(expected))
    result = ranks.spectra(10, 5, 2, count=6, max_draws=3000, chunk=100)
    assert result.draws == draws and result.values.shape == (2, 6, 2)


def test_max_draws_caps_the_chunks():
    problems, alpha, draws = ranks.feasible_problems(15, 5, 2, count=100, max_draws=250, chunk=100)
    assert draws == 250 and type(draws) is int and len(alpha) < 100  # feasibility is about 0.1% at (15, 5, 2)


def test_workers_give_the_same_grid():
    points = [(3, 4, 2), (3, 4, 5), (4, 3, 6)]
    serial = ranks.grid(points, count=5, max_draws=200)
    parallel = ranks.grid(points, count=5, max_draws=200, workers=2)
    assert list(parallel) == points
    for point in points:
        assert np.array_equal(serial[point].values, parallel[point].values)
        assert serial[point].draws == parallel[point].draws


@pytest.mark.parametrize("points, workers, match", [
    ([], 1, "points must"), ([(3, 4)], 1, "points must"), ([3, 4, 5], 1, "points must"),
    ([(3, 4, 5)], 0, "workers must"), ([(3, 4, 5)], "two", "workers must"), ([(3, 4, 5)], -1, "workers must"),
    ([(0, 4, 5)], 1, "n must")])
def test_bad_arguments_are_named(points, workers, match):
    with pytest.raises(ValueError, match=match):
        ranks.grid(points, workers=workers)
