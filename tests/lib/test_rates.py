"""Polyak steps and the exact rate quantities (train.polyak, train.optimal_loss, train.log_loss_gap,
train.log_attention_gap, train.fit_line): against high-precision arithmetic (mpmath), against autograd and a
straightforward loop of the Polyak rule, and the inequalities of the rates chapter."""

import mpmath
import numpy as np
import pytest
import torch

from attnsvm import data, model, svm, theory, train

mpmath.mp.dps = 60
LOSS_MP = {"logistic": lambda x: mpmath.log(1 + mpmath.exp(-x)), "exponential": lambda x: mpmath.exp(-x),
           "linear": lambda x: -x}


def _mp_quantities(problem, W, loss):
    """log(L - L*) and log(1 - s_{i,opt_i}) in 60-digit arithmetic."""
    X, Z, Y, v = (np.asarray(a, dtype=float) for a in (problem.X, problem.Z, problem.Y, problem.v))
    W = np.asarray(W, dtype=float)
    gaps, attention = [], []
    for i in range(problem.n):
        a = [mpmath.mpf(float(x @ W @ Z[i])) for x in X[i]]
        top = max(a)
        e = [mpmath.exp(ai - top) for ai in a]
        s = [ei / sum(e) for ei in e]
        gamma = [Y[i] * mpmath.mpf(float(x @ v)) for x in X[i]]
        best = max(gamma)
        o = gamma.index(best)
        f = sum(si * gi for si, gi in zip(s, gamma))
        gaps.append(LOSS_MP[loss](f) - LOSS_MP[loss](best))
        attention.append(mpmath.log(sum(s[t] for t in range(problem.T) if t != o)))
    return float(mpmath.log(sum(gaps) / problem.n)), np.array([float(x) for x in attention])


@pytest.mark.parametrize("loss", ["logistic", "exponential", "linear"])
@pytest.mark.parametrize("scale", [0.0, 0.3, 1.0, 5.0, 40.0, 300.0, 3000.0])
def test_log_gaps_match_high_precision(loss, scale):
    problem = data.random_problem(3, 4, 5, seed=1)
    W = scale * svm.att_svm(problem.X, problem.Z, theory.optimal_tokens(problem))
    gap_mp, attention_mp = _mp_quantities(problem, W, loss)
    gap = float(train.log_loss_gap(problem, W, loss=loss))
    attention = train.log_attention_gap(problem, W).numpy()
    assert abs(gap - gap_mp) <= 1e-12 * max(1.0, abs(gap_mp))
    np.testing.assert_allclose(attention, attention_mp, rtol=1e-12, atol=1e-12)


def test_log_gaps_agree_with_the_plain_formulas_where_those_are_accurate():
    problems = data.random_problem(4, 5, 6, seed=2, batch=7)
    W = torch.as_tensor(np.random.default_rng(0).standard_normal((7, 6, 6)))
    plain = model.loss(problems, W) - train.optimal_loss(problems)
    torch.testing.assert_close(train.log_loss_gap(problems, W), torch.log(plain), rtol=1e-9, atol=1e-12)
    alpha = torch.zeros(7, 4, dtype=torch.long)
    s = model.attention(problems, W)[..., 0]
    torch.testing.assert_close(train.log_attention_gap(problems, W, alpha), torch.log1p(-s), rtol=1e-10,
                               atol=1e-12)


def test_optimal_loss_is_the_loss_of_one_hot_attention_on_the_optimal_tokens():
    problem = data.random_problem(3, 4, 5, seed=3)
    W = svm.att_svm(problem.X, problem.Z, theory.optimal_tokens(problem))
    L_star = train.optimal_loss(problem)
    assert (model.loss(problem, torch.as_tensor(W)) > L_star).all()
    assert abs(float(model.loss(problem, torch.as_tensor(60 * W)) - L_star)) < 1e-15
    gamma = theory.token_scores(problem).amax(-1)
    assert torch.isclose(L_star, torch.log1p(torch.exp(-gamma)).mean())


def _straightforward_polyak(problem, W, steps):
    """The Polyak rule written out: L and L* as numbers, the gradient by autograd on model.loss."""
    L_star = train.optimal_loss(problem)
    path = [W.clone()]
    for _ in range(steps):
        W_ = W.clone().requires_grad_(True)
        L = model.loss(problem, W_)
        (G,) = torch.autograd.grad(L, W_)
        gap, squared = float(L.detach() - L_star), float((G * G).sum())
        if gap > 0 and squared > 0:
            W = W - gap / squared * G
        path.append(W.detach().clone())
    return torch.stack(path)


@pytest.mark.parametrize(("gradient", "engine"), [("exact", "compiled"), ("exact", "torch"), ("autograd", "auto")])
def test_polyak_matches_a_straightforward_loop_while_the_gap_is_large(gradient, engine):
    problem = data.equal_scores_problem(4, 3, 5, seed=0)
    run = train.polyak(problem, steps=8, gradient=gradient, engine=engine)
    reference = _straightforward_polyak(problem, torch.zeros(5, 5, dtype=torch.float64), 8)
    assert float(train.log_loss_gap(problem, run.W[-1])) > -25  # still far from float64's limits
    torch.testing.assert_close(run.W, reference, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("engine", ["compiled", "torch"])
def test_polyak_first_step_against_autograd_from_a_random_start(engine):
    problem = data.random_problem(3, 4, 4, seed=5)
    W0 = torch.as_tensor(np.random.default_rng(1).standard_normal((4, 4)))
    run = train.polyak(problem, steps=1, init=W0, engine=engine)
    torch.testing.assert_close(run.W, _straightforward_polyak(problem, W0, 1), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("engine", ["compiled", "torch"])
def test_polyak_is_batched_and_keeps_going_where_the_plain_rule_stalls(engine):
    problems = data.equal_scores_problem(4, 3, 5, seed=0, batch=2)
    both = train.polyak(problems, steps=60, record_every=20, engine=engine)
    one = train.polyak(problems[1], steps=60, record_every=20, engine=engine)
    torch.testing.assert_close(both.W[:, 1], one.W, rtol=1e-12, atol=1e-12)
    gaps = train.log_loss_gap(problems[1], one.W)
    assert (torch.diff(gaps) < -5).all() and gaps[-1] < -45  # below eps * L*: the plain rule is stuck there
    plain = train.polyak(problems[1], steps=60, record_every=20, gradient="autograd")
    assert train.log_loss_gap(problems[1], plain.W[-1]) > -42


@pytest.mark.parametrize("engine", ["compiled", "torch"])
def test_polyak_passes_below_the_smallest_float64(engine):
    problem = data.equal_scores_problem(4, 3, 5, seed=0)
    run = train.polyak(problem, steps=900, record_every=300, engine=engine)
    gaps = train.log_loss_gap(problem, run.W)
    assert gaps[-1] < -760 and (torch.diff(gaps) < -200).all()


def test_the_rates_chapter_inequalities_on_random_matrices():
    """Four inequalities of the rates chapter: c0 (1 - sigma) <= L - L* <= C0 (1 - sigma) and
    1 - sigma >= exp(-||W|| / M) / 2, for the logistic loss."""
    problem = data.random_problem(4, 4, 6, seed=6)
    opt = theory.optimal_tokens(problem)
    M = np.linalg.norm(svm.att_svm(problem.X, problem.Z, opt))
    gamma = theory.token_scores(problem).numpy()
    best, low, lead = gamma.max(1), gamma.min(1), gamma.max(1) - np.sort(gamma, 1)[:, -2]
    slope = lambda x: 1 / (1 + np.exp(x))  # noqa: E731 (|l'| of the logistic loss)
    c0, C0 = (slope(best) * lead).min() / 4, (slope(low) * (best - low)).max()
    rng = np.random.default_rng(2)
    U = rng.standard_normal((200, 6, 6))
    W = torch.as_tensor(np.logspace(-1, 3, 200)[:, None, None] * U / np.linalg.norm(U, axis=(1, 2))[:, None, None])
    log_g, log_s = train.log_loss_gap(problem, W).numpy(), train.log_attention_gap(problem, W).amax(-1).numpy()
    assert np.all(np.log(c0) + log_s <= log_g + 1e-9) and np.all(log_g <= np.log(C0) + log_s + 1e-9)
    assert np.all(log_s >= np.log(0.5) - np.linalg.norm(W.numpy(), axis=(1, 2)) / M - 1e-9)


def test_fit_line_matches_polyfit_and_recovers_laws():
    rng = np.random.default_rng(0)
    x, y = rng.uniform(1, 10, 30), rng.uniform(1, 10, 30)
    fit = train.fit_line(x, y, y_scale="linear")
    np.testing.assert_allclose([fit.slope, fit.intercept], np.polyfit(x, y, 1), rtol=1e-12)
    assert abs(fit.r2 - np.corrcoef(x, y)[0, 1] ** 2) < 1e-12
    k = np.arange(1.0, 100.0)
    law = train.fit_line(k, 3 * np.log(k) + 1, x_scale="log", y_scale="linear")
    assert abs(law.slope - 3) < 1e-12 and abs(law.intercept - 1) < 1e-12 and law.r2 == pytest.approx(1)
    assert train.fit_line(k, np.full(99, 2.0)).r2 == 1.0  # a constant is an exact line


def test_polyak_refuses_a_problem_whose_optimal_tokens_are_not_separable():
    """There L* is a lower bound the loss does not approach: the Polyak rule used to jump to ||W|| ~ 1e7 and
    freeze with the loss above its start, silently. Now it raises InfeasibleSVM naming the problem and the fix."""
    problem = data.random_problem(n=8, T=3, d=1, seed=0)
    assert not svm.feasible(problem, theory.optimal_tokens(problem))
    for gradient, engine in (("exact", "compiled"), ("exact", "torch"), ("autograd", "auto")):
        with pytest.raises(svm.InfeasibleSVM, match=r"^the problem's optimal tokens are not separable \(.*"
                                                    r"Polyak steps.*need L\* to be the infimum; increase d .*"
                                                    r"or use train\.gd$"):
            train.polyak(problem, steps=5, gradient=gradient, engine=engine)
    problems = data.random_problem(n=4, T=3, d=2, seed=1, batch=6)
    assert svm.feasible(problems, theory.optimal_tokens(problems)).tolist() == [True] * 3 + [False] + [True] * 2
    with pytest.raises(svm.InfeasibleSVM, match=r"not separable for problem 3 \(") as error:
        train.polyak(problems, steps=5)
    assert error.value.instances == (3,)
    run = train.polyak(problems[0], steps=5)  # a separable instance still runs
    assert train.log_loss_gap(problems[0], run.W[-1]) < train.log_loss_gap(problems[0], run.W[0])


@pytest.mark.parametrize(("x_exp", "y_exp"), [(x_exp, y_exp) for x_exp in (-300, -200, -100, 0, 100, 200, 300)
                                               for y_exp in (-200, 0, 200) if abs(y_exp - x_exp) <= 300])
def test_fit_line_is_exact_at_any_float64_scale(x_exp, y_exp):
    """x = 1e-200 k used to give slope inf and R^2 nan, x = 1e200 k a silent slope 0 and R^2 0: the sums
    under- or overflowed. Scaled inputs must give the scaled slope and intercept, and R^2 = 1 on exact lines."""
    k = np.arange(1.0, 8.0)
    x, y = 10.0**x_exp * k, 10.0**y_exp * (2.0 * k - 3.0)
    fit = train.fit_line(x, y, y_scale="linear")
    assert fit.slope == pytest.approx(2.0 * 10.0 ** (y_exp - x_exp), rel=1e-12)
    assert fit.intercept == pytest.approx(-3.0 * 10.0**y_exp, rel=1e-12)
    assert fit.r2 == pytest.approx(1.0, abs=1e-12)
    power = train.fit_line(x, 10.0**y_exp * k**-1.5, x_scale="log")  # log y = -1.5 log x + const
    assert power.slope == pytest.approx(-1.5, rel=1e-12) and power.r2 == pytest.approx(1.0, abs=1e-12)
    noisy = y + 10.0**y_exp * np.array([0.1, -0.2, 0.0, 0.3, -0.1, 0.2, -0.3])
    reference = train.fit_line(k, noisy / 10.0**y_exp, y_scale="linear")  # the same fit at scale 1
    scaled = train.fit_line(x, noisy, y_scale="linear")
    assert scaled.slope == pytest.approx(reference.slope * 10.0 ** (y_exp - x_exp), rel=1e-12)
    assert scaled.r2 == pytest.approx(reference.r2, abs=1e-12) and scaled.r2 < 0.999


def test_fit_line_refuses_a_slope_beyond_float64():
    k = np.arange(1.0, 5.0)
    with pytest.raises(FloatingPointError, match="rescale x or y"):
        train.fit_line(1e-200 * k, 1e200 * k, y_scale="linear")
