"""theory.cone_constants / cone_sides: the cone lemma of Chapter 4's local theorem, checked where it can fail."""

import math

import numpy as np
import pytest
import torch

import attnsvm
from attnsvm import data, theory, train


@pytest.fixture(scope="module")
def example():
    """Chapter 4's seed-0 problem and its locally-optimal, non-optimal selection."""
    attnsvm.setup(seed=0)
    problem = data.random_problem(6, 8, 10, seed=0)
    opt = theory.optimal_tokens(problem)
    swaps = theory.neighbour_selections(opt, 8)
    alpha = swaps[int(np.flatnonzero(theory.locally_optimal(problem.repeat(len(swaps)), swaps))[0])]
    return problem, alpha, theory.cone_constants(problem, alpha)


def cone_points(W_hat, zeta, radius, count, seed):
    """Points of norm `radius` with correlation uniform in [1 - zeta, 1] with the unit W_hat."""
    rng = np.random.default_rng(seed)
    E = rng.standard_normal((count,) + W_hat.shape)
    E -= np.einsum("kab,ab->k", E, W_hat)[:, None, None] * W_hat
    E /= np.linalg.norm(E, axis=(1, 2))[:, None, None]
    angle = np.arccos(1 - zeta * rng.uniform(size=count))[:, None, None]
    return radius * (np.cos(angle) * W_hat + np.sin(angle) * E)


def test_constants_match_their_definitions(example):
    problem, alpha, cone = example
    W_mm = cone.W_mm
    assert math.isclose(cone.m, 1 / np.linalg.norm(W_mm), rel_tol=1e-12)
    mu = theory.margins(problem, W_mm, alpha)
    support = theory.support_tokens(problem, W_mm, alpha)
    off = np.arange(8)[None, :] != np.asarray(alpha)[:, None]
    assert cone.n_support == support.sum() and cone.n_other == (off & ~support).sum()
    assert math.isclose(cone.delta, (mu[off & ~support] - 1).min(), rel_tol=1e-12)
    gamma = theory.token_scores(problem).numpy()
    chosen = gamma[np.arange(6), np.asarray(alpha)][:, None]
    assert cone.gap == pytest.approx((chosen - gamma)[support].min(), rel=1e-12) and cone.gap > 0
    assert cone.zeta_max == pytest.approx((cone.m * min(1, cone.delta) / (4 * cone.A_max)) ** 2, rel=1e-12)
    assert cone.m <= cone.A_max and cone.c_min < cone.c_max


def test_sides_equal_the_exact_gradient_where_it_does_not_underflow(example):
    problem, alpha, cone = example
    W_hat = cone.W_mm / np.linalg.norm(cone.W_mm)
    W = np.stack([30 * W_hat + 0.5 * np.random.default_rng(1).standard_normal((10, 10)),
                  3 * W_hat + np.random.default_rng(2).standard_normal((10, 10))])
    along, own, corr, shift, support, gradient = theory.cone_sides(problem, W, alpha)
    G = -train.loss_gradient(problem, torch.as_tensor(W)).numpy()
    norms = np.linalg.norm(W, axis=(1, 2))
    np.testing.assert_allclose(along * np.exp(-shift), np.einsum("kab,ab->k", G, W_hat), rtol=1e-10)
    np.testing.assert_allclose(own * np.exp(-shift), np.einsum("kab,kab->k", G, W) / norms, rtol=1e-10)
    np.testing.assert_allclose(corr, np.einsum("kab,ab->k", W, W_hat) / norms, rtol=1e-12)
    np.testing.assert_allclose(gradient * np.exp(-shift), np.linalg.norm(G, axis=(1, 2)), rtol=1e-10)
    # P: the support pairs' terms of the gradient, each projected on W_hat (margin m there), recomputed by hand
    mu = theory.margins(problem, W, alpha)
    gamma = theory.token_scores(problem).numpy()
    s = np.exp(-mu) / np.exp(-mu).sum(-1, keepdims=True)
    gbar = (s * gamma).sum(-1)
    slope = 1 / (1 + np.exp(gbar))  # |l'| of the logistic loss l(x) = log(1 + e^-x)
    chosen = s[:, np.arange(6), np.asarray(alpha)]
    c = slope[..., None] * chosen[..., None] * (gbar[..., None] - gamma) / 6
    on = theory.support_tokens(problem, cone.W_mm, alpha)
    P = (c * np.exp(-mu) * on).sum((1, 2)) * cone.m
    np.testing.assert_allclose(support * np.exp(-shift), P, rtol=1e-10)


@pytest.mark.parametrize("share", [0.5, 1.0])
def test_the_lemma_holds_at_its_radius(example, share):
    """eps = share * zeta_max, the theorem's size: larger eps hold far inside the radius (1 + 2 eps is loose there),
    so they would test nothing; at this eps the same points fail at radius 1000 (the next test)."""
    problem, alpha, cone = example
    eps = share * cone.zeta_max
    W_hat = cone.W_mm / np.linalg.norm(cone.W_mm)
    zeta = 2 * cone.zeta_max
    radius = cone.radius(eps, zeta)
    W = cone_points(W_hat, zeta, radius * np.exp(np.random.default_rng(3).uniform(0, 1, (200, 1, 1))), 200, 4)
    sides = theory.cone_sides(problem, W, alpha)
    assert (sides.along > 0).all() and (sides.own <= (1 + 2 * eps) * sides.along).all()
    # parts 1 and 3: <-grad L, W_hat> >= 7/8 P >= (7/8) c_min m e^{-||W|| m}, and ||grad L|| <= 9/8 (A_max / m) P
    assert (sides.along >= 7 / 8 * sides.support).all()
    norms = np.linalg.norm(W, axis=(1, 2))
    assert (np.log(sides.support) - sides.shift >= np.log(cone.c_min * cone.m) - norms * cone.m).all()
    assert (sides.gradient <= 9 / 8 * cone.A_max / cone.m * sides.support).all()


def test_the_lemma_fails_well_inside_its_radius(example):
    """The radius matters: at R = 1000 the theorem's eps = zeta_max / 2 is violated somewhere in the cone."""
    problem, alpha, cone = example
    W_hat = cone.W_mm / np.linalg.norm(cone.W_mm)
    eps = cone.zeta_max / 2
    W = cone_points(W_hat, 2 * cone.zeta_max, 1000.0, 300, 5)
    sides = theory.cone_sides(problem, W, alpha)
    assert 1000 < cone.radius(eps, 2 * cone.zeta_max) and (sides.own > (1 + 2 * eps) * sides.along).any()


def test_start_radius_takes_the_larger_of_its_two_conditions(example):
    _, _, cone = example
    zeta = cone.zeta_max
    lemma = cone.radius(zeta / 2, 2 * zeta) / (1 - zeta)
    assert cone.start_radius(zeta, 0.1, normalized=False) == pytest.approx(lemma, rel=1e-12)
    huge = 1e6 * lemma * cone.slope() * zeta
    assert cone.start_radius(zeta, huge, normalized=True) == pytest.approx(huge / (cone.slope() * zeta) / (1 - zeta))
    assert cone.start_radius(zeta, 1e30, normalized=False) == pytest.approx(
        math.sqrt(1e30 * cone.loss_drop / zeta) / (1 - zeta))


def test_normalized_gd_from_the_cone_keeps_it_on_a_small_example():
    """One sequence, three tokens (zeta_max is not tiny): normalized runs from the theorem's radius, on the edge of
    its cone (corr = 1 - zeta) in 20 directions, stay at corr >= 1 - 2 zeta for 2500 steps (long enough to turn the
    direction out of that cone: 2500 eta / radius exceeds the angle between the two cones), and <W, W_hat> rises by
    at least q eta at every step (the proof's bound). Plain steps from that radius do not move: the gradient
    underflows."""
    attnsvm.setup(seed=0)
    problem = data.Problem([[[1.0, 0.0], [0.0, 1.0], [-1.0, 0.5]]], [1.0], [[1.0, 0.0]], [1.0, 0.2])
    opt = theory.optimal_tokens(problem)
    cone = theory.cone_constants(problem, opt)
    zeta, eta, steps = cone.zeta_max, 0.1, 2500
    radius = cone.start_radius(zeta, eta, normalized=True)
    assert steps * eta / radius > np.arccos(1 - 2 * zeta) - np.arccos(1 - zeta)  # the runs could leave
    W_hat = cone.W_mm / np.linalg.norm(cone.W_mm)
    rng = np.random.default_rng(6)
    E = rng.standard_normal((20, 2, 2))
    E -= np.einsum("kab,ab->k", E, W_hat)[:, None, None] * W_hat
    E /= np.linalg.norm(E, axis=(1, 2))[:, None, None]
    angle = np.arccos(1 - zeta)
    W0 = radius * (np.cos(angle) * W_hat + np.sin(angle) * E)
    run = train.gd(problem.repeat(20), steps=steps, lr=eta, init=W0)
    corr = theory.correlation(run.W, cone.W_mm)
    inner = np.einsum("kbij,ij->kb", run.W.numpy(), W_hat)
    assert np.allclose(corr[0], 1 - zeta, atol=1e-12, rtol=0) and (corr >= 1 - 2 * zeta).all()
    assert (np.diff(inner, axis=0) >= cone.slope() * eta * (1 - 1e-9)).all()
    plain = train.gd(problem.repeat(20), steps=10, lr=1 / train.lipschitz_W(problem).item(), init=W0,
                     normalized=False)
    assert (plain.W[-1].numpy() == W0).all()
