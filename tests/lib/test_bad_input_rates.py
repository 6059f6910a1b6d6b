"""Bad input for the Polyak steps and the exact rate quantities (train.polyak, train.optimal_loss,
train.log_loss_gap, train.log_attention_gap, train.fit_line): every call returns a valid result or raises
TypeError/ValueError/FloatingPointError naming an argument the caller passed."""

import functools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsvm import data, train
import bad_input
from bad_input import names, options

COVERED = {"train.polyak", "train.optimal_loss", "train.log_loss_gap", "train.log_attention_gap",
           "train.fit_line"}
ERRORS = (TypeError, ValueError, FloatingPointError)
check = functools.partial(bad_input.check, errors=ERRORS)
PROBLEM = data.random_problem(n=2, T=3, d=2, seed=0)
W0 = torch.ones(2, 2, dtype=torch.float64)
ODD = [None, "x", True, [], {"a": 1}, object(), np.nan, np.inf, -1.0, 0, 1e308]
BAD_W = [np.full((2, 2), np.nan), np.ones((3, 3)), np.ones(2), "x", None, 1e300 * np.ones((2, 2)),
         np.ones((5, 2, 2)), torch.ones(2, 2, dtype=torch.complex128), torch.empty(2, 2, device="meta")]


VALID = {"steps": 5, "init": None, "record_every": 1, "loss": "logistic", "gradient": "exact", "seed": 0,
         "engine": "auto"}


@settings(max_examples=60, deadline=None)
@given(st.fixed_dictionaries({
    "steps": options(5, [0, -1, 2.5, "5", None, 10**9]),
    "init": options(None, ["zeros", "uniform", W0, 1e3 * W0, np.full((2, 2), np.nan), np.ones((3, 3)), "x", 1.0]),
    "record_every": options(1, [0, 2, -1, 1.5, None]),
    "loss": options("logistic", ["exponential", "linear", "exp", "x", None]),
    "gradient": options("exact", ["autograd", "x", None, 1]),
    "seed": options(0, [-1, 1.5, "0", None, 2**70]),
    "engine": options("auto", ["compiled", "torch", "numba", None, 1])}))
def test_polyak_property(arguments):
    def accept(run):
        assert torch.isfinite(run.W).all() and torch.isfinite(run.loss).all() and run.W.shape[-2:] == (2, 2)
    check(lambda **a: train.polyak(PROBLEM, **a), arguments, VALID, accept)


@pytest.mark.parametrize("engine", ["compiled", "torch"])
def test_polyak_overflow_blames_init_in_both_engines(engine):
    """From 1e3 W0 the iterates overflow: both loops say so, name init and how to avoid it, and return nothing."""
    with pytest.raises(FloatingPointError, match=r"^the recorded W is not finite \(overflow in float64\): .*init are "
                                                 r"too large\): start from a smaller init$"):
        train.polyak(PROBLEM, steps=5, init=1e3 * W0, engine=engine)


@settings(max_examples=40, deadline=None)
@given(st.fixed_dictionaries({"W": options(W0, BAD_W + [1e3 * W0, np.zeros((2, 2))]),
                              "loss": options("logistic", ["exponential", "linear", "x", None, 3])}))
def test_log_loss_gap_property(arguments):
    def accept(gap):
        assert gap.shape in ((), (5,)) and not torch.isnan(gap).any() and (gap < torch.inf).all()
    check(lambda **a: train.log_loss_gap(PROBLEM, **a), arguments, {"W": W0, "loss": "logistic"}, accept)


@settings(max_examples=40, deadline=None)
@given(st.fixed_dictionaries({"W": options(W0, BAD_W + [1e3 * W0]),
                              "alpha": options(None, [[0, 1], [0, 3], [0], [0.5, 1], "x", np.array([-1, 0]),
                                                      torch.tensor([1, 2])])}))
def test_log_attention_gap_property(arguments):
    def accept(gap):
        assert gap.shape[-1] == 2 and not torch.isnan(gap).any() and (gap <= 0).all()
    check(lambda **a: train.log_attention_gap(PROBLEM, **a), arguments, {"W": W0, "alpha": None}, accept)


def test_optimal_loss_bad_loss_and_problem():
    for loss in ["x", None, 3]:
        try:
            train.optimal_loss(PROBLEM, loss=loss)
        except (TypeError, ValueError) as error:
            assert "loss" in str(error)
        else:
            raise AssertionError(f"loss={loss!r} was accepted")
    for problem in [None, "x", W0]:
        try:
            train.optimal_loss(problem)
        except (TypeError, ValueError) as error:
            assert "problem" in str(error)
        else:
            raise AssertionError(f"problem={problem!r} was accepted")


X = np.arange(1.0, 6.0)


@settings(max_examples=60, deadline=None)
@given(st.fixed_dictionaries({
    "x": options(X, [np.ones(5), X[:2], X[:4], -X, np.array([1.0, np.nan, 3, 4, 5]), "x", None, np.ones((5, 1))]),
    "y": options(np.exp(-X), [X[:4], -X, np.zeros(5), np.array([np.inf, 1, 2, 3, 4.0]), "y", None, [[1.0]]]),
    "x_scale": options("linear", ["log", "loglog", None, 1]),
    "y_scale": options("log", ["linear", "ln", None, 2])}))
def test_fit_line_property(arguments):
    def accept(fit):
        assert np.isfinite([fit.slope, fit.intercept, fit.r2]).all() and fit.r2 <= 1 + 1e-12
    check(train.fit_line, arguments, {"x": X, "y": np.exp(-X), "x_scale": "linear", "y_scale": "log"}, accept)
