"""Bad input for attnsvm.linear: every public function returns a valid result (finite, of the right shape) or
raises TypeError, ValueError (InfeasibleSVM is one) or FloatingPointError whose message names an argument the
caller changed; never a NaN, an infinity or a deep error."""

import functools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import bad_input
from attnsvm import linear
from bad_input import options

COVERED = {"linear.separable", "linear.svm", "linear.margins", "linear.normalized_margin", "linear.log_loss",
           "linear.gradient", "linear.hessian", "linear.weights", "linear.smoothness", "linear.gd",
           "linear.offset", "linear.residual"}
ERRORS = (TypeError, ValueError, FloatingPointError)
check = functools.partial(bad_input.check, errors=ERRORS)
X, Y = linear.separable(5, 2, seed=0)
W = np.array([0.5, -0.25])
BAD_X = [X * 1e300, X * 1e-300, np.full((5, 2), np.nan), np.ones((5, 3)), np.ones(5), "X", None, np.zeros((5, 2)),
         np.zeros((0, 2)), torch.ones(5, 2, dtype=torch.complex128), torch.empty(5, 2, device="meta"),
         np.stack([X, X])]
BAD_Y = [np.zeros(5), np.ones(4), 2 * Y, -Y, np.full(5, np.nan), "y", None, Y.astype(bool), np.stack([Y, Y])]
BAD_W = [W * 1e300, np.full(2, np.inf), np.ones(3), "w", None, np.zeros(2), np.ones((4, 2)), 1.0]
LOSSES = ["logistic", "linear", "exp", None, 3]


def finite(value):
    assert np.all(np.isfinite(np.asarray(value, dtype=float)))


@settings(max_examples=60)
@given(st.fixed_dictionaries({"X": options(X, BAD_X), "y": options(Y, BAD_Y), "w": options(W, BAD_W),
                              "loss": options("exponential", LOSSES)}))
def test_loss_functions_property(arguments):
    for function in (linear.log_loss, linear.gradient, linear.hessian, linear.weights):
        check(function, arguments, {"X": X, "y": Y, "w": W, "loss": "exponential"}, finite)
    plain = {k: v for k, v in arguments.items() if k != "loss"}
    for function in (linear.margins, linear.normalized_margin):
        check(function, plain, {"X": X, "y": Y, "w": W}, finite)


@settings(max_examples=60)
@given(st.fixed_dictionaries({
    "X": options(X, BAD_X), "y": options(Y, BAD_Y),
    "lr": options(0.5, [0.0, -1.0, np.nan, np.inf, 1e300, "0.5", None, True, 1e-300]),
    "steps": options(5, [0, -1, 2.5, "5", None, 10**9]),
    "loss": options("exponential", LOSSES),
    "normalized": options(False, [True, 1, "yes", None]),
    "schedule": options("constant", ["sqrt", "log", None, 1]),
    "init": options(None, [W, W * 1e300, np.ones(3), np.full(2, np.nan), "w", np.ones((3, 2))]),
    "record_every": options(1, [0, 2, -1, 1.5, None]),
    "record_at": options(None, [[0, 5], [5, 0], [0, 6], [-1, 2], [0.5], [], "x", [[0, 1]]])}))
def test_gd_property(arguments):
    valid = {"X": X, "y": Y, "lr": 0.5, "steps": 5, "loss": "exponential", "normalized": False,
             "schedule": "constant", "init": None, "record_every": 1, "record_at": None}

    def accept(run):
        finite(run.w)
        finite(run.log_loss)
        assert run.w.shape[-1] == np.shape(arguments["X"])[-1] and len(run.steps) == len(run.w)
    check(linear.gd, arguments, valid, accept)


@settings(max_examples=40)
@given(st.fixed_dictionaries({"X": options(X, BAD_X), "y": options(Y, BAD_Y),
                              "solver": options("nnls", ["clarabel", "scs", None, 1])}))
def test_svm_property(arguments):
    def accept(sol):
        finite(sol.w)
        finite(sol.alpha)
        assert (sol.alpha >= 0).all() and sol.support.any(-1).all()
    check(linear.svm, arguments, {"X": X, "y": Y, "solver": "nnls"}, accept)


@settings(max_examples=40)
@given(st.fixed_dictionaries({"X": options(X, BAD_X), "y": options(Y, BAD_Y),
                              "c": options(1.0, [0.0, -1.0, np.nan, "1", None, 1e-300, 1e300]),
                              "solution": options(None, ["sol", linear.svm(X[:4], Y[:4]), 3])}))
def test_offset_property(arguments):
    check(linear.offset, arguments, {"X": X, "y": Y, "c": 1.0, "solution": None}, finite)


@settings(max_examples=40)
@given(st.fixed_dictionaries({"X": options(X, BAD_X), "y": options(Y, BAD_Y),
                              "w": options(np.ones((2, 2)), BAD_W + [np.ones((3, 2)), W]),
                              "t": options([1, 10], [[0, 10], [1], [1, 2, 3], "t", None, [np.nan, 1], 5]),
                              "solution": options(None, ["sol", 3])}))
def test_residual_property(arguments):
    check(linear.residual, arguments, {"X": X, "y": Y, "w": np.ones((2, 2)), "t": [1, 10], "solution": None},
          finite)


@settings(max_examples=40)
@given(st.fixed_dictionaries({"X": options(X, BAD_X), "y": options(Y, BAD_Y),
                              "w0": options(None, BAD_W), "loss": options("exponential", LOSSES)}))
def test_smoothness_property(arguments):
    check(linear.smoothness, arguments, {"X": X, "y": Y, "w0": None, "loss": "exponential"}, finite)


@settings(max_examples=40)
@given(st.fixed_dictionaries({"n": options(5, [0, -1, 2.5, "5", None, 10**12]),
                              "d": options(2, [0, -1, 2.5, None]),
                              "seed": options(0, [-1, 1.5, "0", None, 2**70]),
                              "gap": options(0.5, [0.0, -1.0, np.nan, "0.5", None, 1e200])}))
def test_separable_property(arguments):
    def accept(result):
        X_, y_ = result
        finite(X_)
        assert linear.normalized_margin(X_, y_, linear.svm(X_, y_).w) > 0
    check(linear.separable, arguments, {"n": 5, "d": 2, "seed": 0, "gap": 0.5}, accept)


def test_messages_name_the_argument_and_the_fix():
    with pytest.raises(ValueError, match="y must hold labels -1 or \\+1"):
        linear.svm(X, np.zeros(5))
    with pytest.raises(ValueError, match=r"w must have shape \(\.\.\., 2\)"):
        linear.margins(X, Y, np.ones(3))
    with pytest.raises(ValueError, match="loss='exp' is not supported"):
        linear.log_loss(X, Y, W, loss="exp")
    with pytest.raises(ValueError, match="record_at must be increasing integers"):
        linear.gd(X, Y, lr=0.1, steps=3, record_at=[2, 1])
    with pytest.raises(FloatingPointError, match="lower lr"):  # far on the wrong side: e^1000 overflows
        linear.gd(X, Y, lr=1.0, steps=3, init=-1000 * linear.svm(X, Y).w)
    with pytest.raises(ValueError, match=r"t must be one step t >= 1"):
        linear.residual(X, Y, W, 0)
    with pytest.raises(ValueError, match=r"t must be one step t >= 1, or one step t >= 1 per record of w"):
        linear.residual(X, Y, W, [1, 10])  # w of shape (d,) with d = 2 steps: its coordinates are not records
    with pytest.raises(ValueError, match=r"init must have shape \(d,\) or \(\.\.\., d\) broadcastable"):
        linear.gd(X, Y, lr=0.5, steps=5, init=np.ones((3, 2)))
    with pytest.raises(ValueError, match="gap=1e\\+200 is too large"):
        linear.separable(5, 2, seed=0, gap=1e200)  # the squared norms overflow: X would be all zeros
    with pytest.raises(ValueError, match="not linearly separable"):
        linear.svm([[1.0], [1.0]], [1.0, -1.0])
    with pytest.raises(ValueError, match=r"hypothesis \(H\) fails for X, y, or float64 cannot tell.*pass X, y that"):
        linear.offset([[1.0, 0.0], [1.0, 1e-6]], [1.0, 1.0])  # nearly degenerate: (H) fails, multipliers unresolved
