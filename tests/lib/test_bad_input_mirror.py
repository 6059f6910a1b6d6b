"""Bad input for mirror descent and sign descent (train.mirror_descent, train.sign_descent, train.dual_norm): every
call returns a valid result (finite, of the right shape) or raises TypeError/ValueError/FloatingPointError naming
an argument the caller passed."""

import functools

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsvm import data, train
import bad_input
from bad_input import names, options

COVERED = {"train.mirror_descent", "train.sign_descent", "train.dual_norm"}
ERRORS = (TypeError, ValueError, FloatingPointError)
check = functools.partial(bad_input.check, errors=ERRORS)
PROBLEM = data.random_problem(n=2, T=3, d=2, seed=0)
W0 = torch.ones(2, 2, dtype=torch.float64)
ODD = [None, "x", True, [], {"a": 1}, object(), np.nan, np.inf, -1.0, 0, 1e308]


def _trajectory(arguments):
    def accept(run):
        assert torch.isfinite(run.W).all() and torch.isfinite(run.loss).all()
        assert run.W.shape[-2:] == (2, 2)
    return accept


VALID = {"steps": 5, "lr": 0.1, "param": "W", "init": None, "record_every": 1, "loss": "logistic",
         "engine": "auto"}
COMMON = {"steps": options(VALID["steps"], [0, -1, 2.5, "5", None, 10**9]),
          "lr": options(VALID["lr"], [0.0, -0.1, np.nan, "0.1", None, 1e300]),
          "param": options(VALID["param"], ["KQ", "w", None, 1]),
          "init": options(None, ["zeros", "uniform", W0, np.full((2, 2), np.nan), np.ones((3, 3)), "x", 1.0]),
          "record_every": options(VALID["record_every"], [0, 2, -1, 1.5, None]),
          "loss": options(VALID["loss"], ["exp", "correlation", "x", None]),
          "engine": options(VALID["engine"], ["compiled", "torch", "numba", None, 1])}
P, Q = 3.0, 2.0


@settings(max_examples=40, deadline=None)
@given(st.fixed_dictionaries({**COMMON, "p": options(P, ODD + [1.0, 1.0001, 50.0, np.float32(2.5)]),
                              "rule": options(None, ["official", "x", 1]),
                              "eps": options(None, ODD + [train.OFFICIAL_EPS, [0.0, 1.0]])}))
def test_mirror_descent_property(arguments):
    check(lambda **a: train.mirror_descent(PROBLEM, **a), arguments,
           {**VALID, "p": P, "rule": None, "eps": None},
           _trajectory(arguments))


@settings(max_examples=40, deadline=None)
@given(st.fixed_dictionaries(COMMON))
def test_sign_descent_property(arguments):
    check(lambda **a: train.sign_descent(PROBLEM, **a), arguments, VALID, _trajectory(arguments))


@settings(max_examples=40, deadline=None)
@given(st.fixed_dictionaries({"G": options(W0, [np.ones((2, 2)) * 1e-300, torch.zeros(2, 2, dtype=torch.float64),
                                                np.full((2, 2), np.nan), "x", None, np.ones(3)]),
                              "q": options(Q, [1.0, np.inf, 1.5, 0.5, -1.0, np.nan, "2", None, True])}))
def test_dual_norm_property(arguments):
    def accept(result):
        assert result.shape == (1, 1) and torch.isfinite(result).all() and (result >= 0).all()
    check(train.dual_norm, arguments, {"G": W0, "q": Q}, accept)
