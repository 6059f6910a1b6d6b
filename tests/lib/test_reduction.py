"""The reduction of the central theorem (attnsvm.theory: limiting_weights, surrogate, leak, weight_ratios,
reduction_constants) against direct computations: the gradient identity, the weights' limits, the constants of
the selected region and the bounds of the page's lemma on the weights."""

import math

import numpy as np
import pytest
import torch

from attnsvm import data, model, svm, theory, train

LOSSES = list(model.LOSSES)


def problems():
    return [data.equal_scores_problem(3, 4, 6, seed=1), theory.sample_feasible(3, 4, 6, count=1, seed=3)[0][0],
            data.planar_problem(seed=3)]


def constraint_matrices(problem):
    o = theory.optimal_tokens(problem)
    return svm.constraint_matrix(problem, o).reshape(-1, problem.d, problem.d), o


@pytest.mark.parametrize("loss", LOSSES)
def test_limiting_weights_are_the_slope_times_the_gap(loss):
    for problem in problems():
        gamma = theory.token_scores(problem).numpy()
        o = theory.optimal_tokens(problem).numpy()
        top = gamma[np.arange(problem.n), o]
        slope = -model.LOSSES[loss].derivative(torch.as_tensor(top)).numpy()
        expected = slope[:, None] * (top[:, None] - gamma) / problem.n
        np.testing.assert_allclose(theory.limiting_weights(problem, loss), expected, rtol=1e-14, atol=0)


@pytest.mark.parametrize("loss", LOSSES)
def test_gradient_is_the_weighted_exponential_identity(loss):
    """-grad L = sum c*_it r_it e^{-mu_it} A_it, against the library's gradient at random W of several sizes."""
    rng = np.random.default_rng(0)
    for problem in problems():
        A, o = constraint_matrices(problem)
        off = theory.limiting_weights(problem, loss) > 0
        for size in [0.1, 1.0, 10.0]:
            W = rng.standard_normal((problem.d, problem.d)) * size
            G = -train.loss_gradient(problem, W, loss=loss).numpy()
            weights = (theory.limiting_weights(problem, loss) * theory.weight_ratios(problem, W, loss)
                       * np.exp(-theory.margins(problem, W, o)))[off]
            np.testing.assert_allclose(np.einsum("k,kde->de", weights, A), G, rtol=0,
                                       atol=1e-12 * np.abs(G).max())


def test_leak_and_surrogate_against_direct_sums():
    rng = np.random.default_rng(1)
    for problem in problems():
        o = theory.optimal_tokens(problem).numpy()
        W = rng.standard_normal((2, problem.d, problem.d))  # leading dimensions are kept
        s = model.attention(problem, W).numpy()
        np.testing.assert_allclose(theory.leak(problem, W), 1 - s[..., np.arange(problem.n), o], rtol=1e-12)
        mu = theory.margins(problem, W, o)
        c = theory.limiting_weights(problem)
        Phi = (c * np.exp(-mu)).sum((-2, -1))
        np.testing.assert_allclose(theory.surrogate(problem, W), Phi, rtol=1e-13)
        np.testing.assert_allclose(theory.surrogate(problem, W, log=True), np.log(Phi), rtol=1e-13)


def test_leak_and_surrogate_stay_accurate_when_saturated():
    """At W = 200 W_mm the leak (~e^{-200}) and Phi are far below what 1 - s or a plain sum could show."""
    problem = data.equal_scores_problem(2, 3, 4, seed=0)
    o = theory.optimal_tokens(problem)
    W = 200 * svm.att_svm(problem, o)
    mu = theory.margins(problem, W, o)
    off = theory.limiting_weights(problem) > 0
    expected = np.log(np.exp(-(mu - 200)).sum(-1, where=off)) - 200  # sum_{t != o} e^{-mu} (1 - eps ~ 1)
    np.testing.assert_allclose(np.log(theory.leak(problem, W)), expected, rtol=1e-12)
    log_phi = math.log((theory.limiting_weights(problem)[off] * np.exp(-(mu[off] - 200))).sum()) - 200
    assert abs(theory.surrogate(problem, W, log=True) - log_phi) < 1e-10


def test_tiny_weights_are_kept_off_the_optimal_token():
    """A sequence with optimal score 700 (exponential loss: c* ~ e^{-700}, near the float64 floor) keeps its
    terms in Phi, exactly as the log-domain sum of c* e^{-mu} says."""
    X = [[[700.0, 0.0], [0.0, 1.0], [-1.0, 0.0]], [[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]]
    problem = data.Problem(X, [1.0, 1.0], [[1.0, 0.0], [0.0, 1.0]], [1.0, 0.0])
    log_c = np.log([[700.0, 701.0], [1.0, 2.0]]) - np.array([[700.0], [1.0]]) - math.log(2)  # |l'| Delta / n
    weights = theory.limiting_weights(problem, "exponential")
    assert (weights[:, 1:] > 0).all() and (weights[:, 0] == 0).all()
    assert abs(theory.surrogate(problem, np.zeros((2, 2)), "exponential", log=True)
               - np.logaddexp.reduce(log_c.ravel())) < 1e-13
    W = np.diag([0.0, 800.0])  # e^{-mu} = e^{800} for sequence 2: a plain sum would overflow
    mu = theory.margins(problem, W, theory.optimal_tokens(problem))[:, 1:]
    expected = np.logaddexp.reduce((log_c - mu).ravel())
    assert abs(theory.surrogate(problem, W, "exponential", log=True) - expected) < 1e-12


def test_weight_ratios_tend_to_one_within_K_eps():
    """Lemma (b) of the page: |r_it - 1| <= K eps_i wherever eps <= eps_bar, along the Att-SVM direction."""
    for problem in problems():
        W_mm = svm.att_svm(problem, theory.optimal_tokens(problem))
        for loss in LOSSES:
            k = theory.reduction_constants(problem, loss)
            for scale in [1.0, 3.0, 10.0, 30.0]:
                eps = theory.leak(problem, scale * W_mm)
                if eps.max() > k.eps_bar:
                    continue
                dev = np.abs(theory.weight_ratios(problem, scale * W_mm, loss) - 1)
                assert (dev <= k.K * eps[:, None] * (1 + 1e-12)).all()


def test_constants_follow_their_definitions():
    problem = data.equal_scores_problem(3, 4, 6, seed=1)
    gamma = theory.token_scores(problem).numpy()
    for loss, lam in [("logistic", 1 / (1 + math.exp(-gamma.max()))), ("exponential", 1.0), ("linear", 0.0)]:
        k = theory.reduction_constants(problem, loss)
        gaps = k.gaps[k.gaps > 0]
        assert k.delta_min == gaps.min() and k.delta_max == gaps.max() and k.log_slope_lipschitz == lam
        slopes = -model.LOSSES[loss].derivative(torch.tensor([gamma.min(), gamma.max()])).numpy()
        assert math.isclose(k.slope_min, slopes.min(), rel_tol=1e-14)
        assert math.isclose(k.slope_max, slopes.max(), rel_tol=1e-14)
        K = 1 + gaps.max() / gaps.min() + lam * gaps.max() * math.exp(lam * gaps.max() / 4)
        assert math.isclose(k.K, K, rel_tol=1e-14) and math.isclose(k.eps_bar, 1 / (2 * K), rel_tol=1e-14)
        assert math.isclose(k.E_0, slopes.min() * gaps.min() / (2 * K * problem.n), rel_tol=1e-13)
        np.testing.assert_array_equal(k.weights, theory.limiting_weights(problem, loss))


def test_the_selected_region_bounds_the_leak():
    """Lemma (a) of the page: eps_i <= n E / (l'_I Delta_min) at random W, with E from train.log_loss_gap."""
    rng = np.random.default_rng(2)
    problem = theory.sample_feasible(3, 4, 6, count=1, seed=3)[0][0]
    k = theory.reduction_constants(problem)
    for size in [0.1, 1.0, 10.0, 100.0]:
        W = rng.standard_normal((problem.d, problem.d)) * size
        E = math.exp(train.log_loss_gap(problem, W).item())
        assert (theory.leak(problem, W) <= problem.n * E / (k.slope_min * k.delta_min) * (1 + 1e-12)).all()


def test_residual_offset_solves_its_equations_on_the_support():
    problem = data.equal_scores_problem(3, 4, 6, seed=1)
    o = theory.optimal_tokens(problem)
    H = theory.residual_offset(problem, 0.5, loss="exponential")
    off = theory.limiting_weights(problem) > 0
    on = H.support[off]
    _, lam = svm.att_svm(problem, o, return_multipliers=True)
    A = svm.constraint_matrix(problem, o).reshape(-1, 6, 6)[on]
    c = theory.limiting_weights(problem, loss="exponential")[off][on]
    np.testing.assert_allclose(np.einsum("de,kde->k", H.W_tilde, A), np.log(0.5 * c / lam[off][on]), atol=1e-10)
    assert H.rank == on.sum() and H.min_multiplier == pytest.approx(lam[off][on].min())
    # least norm: W_tilde lies in the span of the support matrices
    coefficients = np.linalg.lstsq(A.reshape(len(A), -1).T, H.W_tilde.ravel(), rcond=None)[0]
    np.testing.assert_allclose(np.einsum("k,kde->de", coefficients, A), H.W_tilde, atol=1e-10)
