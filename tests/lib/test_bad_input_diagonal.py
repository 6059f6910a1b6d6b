"""Bad input for the diagonal model (svm.diagonal_svm, svm.diagonal_features, train.diagonal_gd): every call
returns a valid result or raises TypeError/ValueError/FloatingPointError naming an argument the caller passed."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnsvm import data, svm, theory, train

COVERED = {"svm.diagonal_svm", "svm.diagonal_features", "train.diagonal_gd"}
PROBLEM = data.random_problem(3, 2, 5, seed=0)
ALPHA = theory.optimal_tokens(PROBLEM)
ONES = torch.ones(5, dtype=torch.float64)
ODD = [None, "x", True, 3.5, [], {"a": 1}, object(), np.nan, -1, 0]


@pytest.mark.parametrize("bad,pattern", [
    (dict(norm=3), r"norm=3 is not supported"), (dict(norm="nuc"), r"norm='nuc' is not supported"),
    (dict(norm=True), r"norm=True"), (dict(nonnegative="yes"), r"nonnegative"),
    (dict(alpha=[0, 5, 0]), r"alpha holds token indices"), (dict(alpha=[0.5, 0, 0]), r"alpha"),
    (dict(problem="p"), r"problem must be an attnsvm.data.Problem"),
])
def test_diagonal_svm_rejects(bad, pattern):
    arguments = dict(problem=PROBLEM, alpha=ALPHA)
    arguments.update(bad)
    with pytest.raises((TypeError, ValueError), match=pattern):
        svm.diagonal_svm(arguments.pop("problem"), arguments.pop("alpha"), **arguments)


def test_diagonal_features_rejects_a_non_problem():
    with pytest.raises(TypeError, match="problem must be"):
        svm.diagonal_features(np.ones((3, 2, 5)))


@pytest.mark.parametrize("bad,pattern", [
    (dict(factorized="no"), r"factorized"), (dict(steps=-1), r"steps"), (dict(lr=0.0), r"lr"),
    (dict(lr=np.inf), r"lr"), (dict(record_every=0), r"record_every"), (dict(loss="hinge"), r"loss"),
    (dict(normalized=None), r"normalized"), (dict(factorized=True, init=None), r"init=None"),
    (dict(factorized=True, init=ONES), r"init for factorized=True must be a pair"),
    (dict(factorized=True, init=(ONES, ONES[:3])), r"init\[1\] \(q0\)"),
    (dict(factorized=True, init=(0 * ONES, 0 * ONES)), r"init=\(k0, q0\) is zero in every coordinate"),
    (dict(factorized=False, init=(ONES, ONES)), r"init for factorized=False"),
    (dict(factorized=False, init=ONES * np.nan), r"init"),
    (dict(lr=1e308, steps=3), r"lr"), (dict(lr=1e308, steps=3, engine="torch"), r"lr"),
    (dict(engine="numba"), r"engine='numba' is not supported: choose one of 'auto', 'compiled', 'torch'"),
    (dict(engine=None), r"engine"),
])
def test_diagonal_gd_rejects(bad, pattern):
    arguments = dict(factorized=False, steps=2, lr=0.1)
    arguments.update(bad)
    with pytest.raises((TypeError, ValueError, FloatingPointError), match=pattern):
        train.diagonal_gd(PROBLEM, **arguments)


@settings(max_examples=30, deadline=None)
@given(st.fixed_dictionaries({"steps": st.sampled_from([0, 1, 3] + ODD), "lr": st.sampled_from([0.1, 1e3] + ODD),
                              "factorized": st.sampled_from([False, True] + ODD),
                              "init": st.sampled_from([None, ONES, (ONES, 0.5 * ONES)] + ODD),
                              "engine": st.sampled_from(["auto", "compiled", "torch"] + ODD)}))
def test_diagonal_gd_property(arguments):
    try:
        run = train.diagonal_gd(PROBLEM, **arguments)
    except (TypeError, ValueError, FloatingPointError) as error:
        assert any(name in str(error) for name in arguments), error
        return
    assert torch.isfinite(run.W).all() and run.W.shape[-2:] == (5, 5)
