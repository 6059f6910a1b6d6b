"""Paper A's rank experiment (``attnsvm.experiments.svm_rank``): the spectra of both Att-SVM solutions at a grid
point, serial or in worker processes (tests/lib/test_parallel.py adds a Dask cluster)."""

import numpy as np
import pytest
import torch

from attnsvm import data, svm, theory
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


@pytest.mark.parametrize("n, T, d", [(15, 5, 2), (10, 5, 2), (5, 15, 2), (15, 5, 3), (5, 5, 3), (4, 3, 1), (6, 4, 4),
                                     (15, 5, 5), (5, 15, 5)])
def test_the_screen_gives_svm_feasibles_flags(n, T, d):
    """The compiled screen with its certificates (`_feasible`) says what ``svm.feasible`` says, problem for problem,
    on 600 random problems per point, rare feasibility (n = 15, d = 2: about 1 in 1000) and common alike."""
    problems = data.random_problem(n, T, d, seed=100 * n + d, batch=600)
    alpha = theory.optimal_tokens(problems)
    X, Z, a = problems.X.numpy(), problems.Z.numpy(), alpha.numpy()
    np.testing.assert_array_equal(ranks._feasible(X, Z, a), svm.feasible(X, Z, a))


def test_the_screen_decides_degenerate_and_rescaled_problems_as_svm_does():
    """Equal tokens (a constraint 0 >= 1), tokens 1e-6 apart (an SVM whose W has a norm near MAX_NORM = 1e6, where
    ``svm.feasible`` draws its line), and data of extreme scale (which ``svm`` rescales; the screen leaves them to
    it) get ``svm.feasible``'s flags."""
    problems = data.random_problem(3, 4, 2, seed=5, batch=60)
    X, Z = problems.X.numpy().copy(), problems.Z.numpy().copy()
    alpha = theory.optimal_tokens(problems).numpy()
    other = (alpha[:, 0] + 1) % 4
    b = np.arange(60)
    X[b[:10], 0, other[:10]] = X[b[:10], 0, alpha[:10, 0]]  # sequence 0: a token equal to the selected one
    gap = np.random.default_rng(0).normal(size=(40, 2)) * np.logspace(-8, -4, 40)[:, None]
    X[b[10:50], 0, other[10:50]] = X[b[10:50], 0, alpha[10:50, 0]] + gap  # tokens 1e-8 to 1e-4 apart
    X[50:] *= 2.0 ** 100  # rescaled by svm
    flags = ranks._feasible(X, Z, alpha)
    np.testing.assert_array_equal(flags, svm.feasible(X, Z, alpha))
    assert not flags[:10].any() and flags[10:50].any() and not flags[10:50].all()


@pytest.mark.parametrize("n, T, d, count, chunk", [(15, 5, 2, 3, 2000), (10, 5, 2, 6, 100), (15, 5, 3, 5, 700),
                                                    (5, 15, 5, 30, 2000)])
def test_feasible_problems_are_those_of_sample_feasible(monkeypatch, n, T, d, count, chunk):
    """The screened sampler draws and keeps exactly what ``theory.sample_feasible`` does, chunk after chunk."""
    screened = ranks.feasible_problems(n, T, d, count=count, max_draws=20_000, chunk=chunk)
    monkeypatch.setattr(ranks, "SCREEN_MAX_D", 0)  # every point through theory.sample_feasible
    plain = ranks.feasible_problems(n, T, d, count=count, max_draws=20_000, chunk=chunk)
    assert screened[2] == plain[2] and torch.equal(screened[1], plain[1])
    for name in "XYZv":
        assert torch.equal(getattr(screened[0], name), getattr(plain[0], name)), name
