"""Bad input to the reduction's functions (attnsvm.theory): each gets a TypeError or ValueError naming the
argument at fault."""

import numpy as np
import pytest

from attnsvm import data, theory

COVERED = {"theory.residual_offset", "theory.leak", "theory.limiting_weights", "theory.reduction_constants", "theory.surrogate",
           "theory.weight_ratios"}


def tied():
    """One sequence whose two best tokens have the same score."""
    X = [[[1.0, 0.0], [1.0, 1.0], [-1.0, 0.0]]]
    return data.Problem(X, [1.0], [[1.0, 0.0]], [1.0, 0.0])


CALLS = {"limiting_weights": lambda problem, **kw: theory.limiting_weights(problem, **kw),
         "reduction_constants": lambda problem, **kw: theory.reduction_constants(problem, **kw),
         "leak": lambda problem, **kw: theory.leak(problem, kw.get("W", np.zeros((problem.d, problem.d)))),
         "surrogate": lambda problem, **kw: theory.surrogate(problem, kw.pop("W", np.zeros((problem.d, problem.d))),
                                                             **kw),
         "weight_ratios": lambda problem, **kw: theory.weight_ratios(
             problem, kw.pop("W", np.zeros((problem.d, problem.d))), **kw)}


@pytest.mark.parametrize("name", sorted(CALLS))
@pytest.mark.parametrize("problem, match", [
    (data.random_problem(2, 3, 3, seed=0, batch=2), "one problem"),
    (data.Problem(np.ones((2, 1, 2)), [1.0, -1.0], [[1.0, 0.0], [0.0, 1.0]], [1.0, 0.0]), "T >= 2"),
    (tied(), "not unique"),
])
def test_bad_problems_are_refused(name, problem, match):
    with pytest.raises(ValueError, match=match) as error:
        CALLS[name](problem)
    assert "problem" in str(error.value)


def test_a_problem_that_is_not_one_is_refused():
    with pytest.raises(TypeError, match="problem"):
        theory.leak("not a problem", np.zeros((2, 2)))


@pytest.mark.parametrize("name", ["limiting_weights", "reduction_constants", "surrogate", "weight_ratios"])
def test_unknown_losses_are_refused(name):
    problem = data.random_problem(2, 3, 3, seed=0)
    with pytest.raises((TypeError, ValueError), match="loss"):
        CALLS[name](problem, loss="hinge")


@pytest.mark.parametrize("name", ["leak", "surrogate", "weight_ratios"])
def test_W_of_the_wrong_shape_is_refused(name):
    problem = data.random_problem(2, 3, 3, seed=0)
    with pytest.raises(ValueError, match="W"):
        CALLS[name](problem, W=np.zeros((2, 2)))


def test_log_must_be_a_bool():
    problem = data.random_problem(2, 3, 3, seed=0)
    with pytest.raises(TypeError, match="log"):
        theory.surrogate(problem, np.zeros((3, 3)), log="yes")


def three_scores(top, low):
    """One sequence with the scores (top, 0, low)."""
    return data.Problem([[[top, 0.0], [0.0, 1.0], [low, 0.0]]], [1.0], [[1.0, 0.0]], [1.0, 0.0])


@pytest.mark.parametrize("name", ["limiting_weights", "reduction_constants", "surrogate"])
@pytest.mark.parametrize("problem, loss", [(three_scores(800.0, -1.0), "logistic"),
                                           (three_scores(800.0, -1.0), "exponential"),
                                           (three_scores(1.0, -3000.0), "exponential")])
def test_scores_where_the_slope_under_or_overflows_are_refused(name, problem, loss):
    """|l'| = 0 (or inf) on the score range would make c* zero off the optimal token and E_0 = 0 silently."""
    with pytest.raises(ValueError, match="problem .*under- or overflows.*scale the tokens"):
        CALLS[name](problem, loss=loss)


def test_a_K_that_overflows_is_refused():
    """Lambda ~ 1 and Delta_max = 2910: e^{Lambda Delta_max / 4} overflows float64."""
    with pytest.raises(ValueError, match="problem has a largest gap .* overflows float64.*scale the tokens"):
        theory.reduction_constants(three_scores(10.0, -2900.0), loss="logistic")


@pytest.mark.parametrize("top, low", [(700.0, 520.0), (700.0, 600.0)])
def test_a_selection_level_that_underflows_is_refused(top, low):
    """K about 7e78 and |l'| about 1e-304 on the score range: E_0 underflows, refused rather than returned as 0."""
    problem = data.Problem([[[top, 0.0], [0.0, 1.0], [low, 0.0]]], [1.0], [[1.0, 0.0]], [1.0, 0.0])
    with pytest.raises(ValueError, match="problem's selection level E_0"):
        theory.reduction_constants(problem)


def test_lambda_keeps_its_precision_far_below_zero():
    """Lambda = sigma(top) to full relative precision where 1 - sigma(-top) would round to 0 (top = -40)."""
    problem = data.Problem([[[-40.0, 0.0], [-60.0, 1.0], [-80.0, 0.0]]], [1.0], [[1.0, 0.0]], [1.0, 0.0])
    top = float(theory.token_scores(problem).max())
    assert abs(theory.reduction_constants(problem).log_slope_lipschitz / (np.exp(top) / (1 + np.exp(top))) - 1) < 1e-15


def test_scores_far_below_zero_do_not_overflow_lambda():
    """Lambda = sigma(top) for the logistic loss, at a top score of -800: computed, not a math range error."""
    problem = data.Problem([[[-800.0, 0.0], [-900.0, 1.0], [-1000.0, 0.0]]], [1.0], [[1.0, 0.0]], [1.0, 0.0])
    try:
        constants = theory.reduction_constants(problem)
    except ValueError as error:
        assert "problem" in str(error)
    else:
        assert 0 <= constants.log_slope_lipschitz < 1e-300  # sigma(-800) ~ 1e-348 rounds to 0


def test_residual_offset_refuses_dependent_support_matrices_and_zero_multipliers():
    dependent = data.Problem([[[1.0, 0.0], [0.0, 1.0], [0.0, -1.0], [0.0, 0.0]]], [1.0], [[1.0, 0.0]], [1.0, 0.1])
    with pytest.raises(ValueError, match=r"\(H_att\) fails for problem: its 3 support matrices A_it have rank 2"):
        theory.residual_offset(dependent, 0.5)
    zero = data.Problem([[[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]]], [1.0], [[1.0, 0.0]], [1.0, 0.5])
    with pytest.raises(ValueError, match=r"\(H_att\) fails for problem: 1 support token\(s\) have KKT multiplier 0"):
        theory.residual_offset(zero, 0.5)


@pytest.mark.parametrize("eta", [0.0, -1.0, float("nan"), float("inf")])
def test_residual_offset_refuses_a_bad_step(eta):
    with pytest.raises(ValueError, match="eta"):
        theory.residual_offset(data.equal_scores_problem(3, 4, 6, seed=1), eta)
