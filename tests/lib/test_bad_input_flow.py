"""Bad input to train.gradient_flow: each bad argument gets a ValueError naming it (or a RuntimeError past
max_steps), never a hang."""

import numpy as np
import pytest

from attnsvm import data, train

COVERED = {"train.gradient_flow"}


@pytest.mark.parametrize("kwargs, match", [
    (dict(param="X", init=None, record_at=[1.0]), "param"),
    (dict(param="W", init=None, record_at=[]), "record_at"),
    (dict(param="W", init=None, record_at=[2.0, 1.0]), "record_at"),
    (dict(param="W", init=None, record_at=[np.nan]), "record_at"),
    (dict(param="W", init=None, record_at=[1e4]), "record_at"),
    (dict(param="W", init=None, record_at=[1.0], rtol=0.5), "rtol"),
    (dict(param="W", init=None, record_at=[1.0], rtol=-1.0), "rtol"),
    (dict(param="W", init=None, record_at=[1.0], max_steps=0), "max_steps"),
    (dict(param="diagonal", init=None, record_at=[1.0], m=3), "m="),
    (dict(param="diagonal_KQ", init=None, record_at=[1.0]), "init"),
    (dict(param="KQ", init="zeros", record_at=[1.0]), "saddle"),
])
def test_bad_input(kwargs, match):
    problem = data.random_problem(3, 3, 2, seed=0)
    with pytest.raises(ValueError, match=match):
        train.gradient_flow(problem, **kwargs)


@pytest.mark.parametrize("engine, error, match", [
    ("numba", ValueError, "engine='numba' is not supported: choose one of"),
    (None, TypeError, "engine must be one of 'auto', 'compiled'")])
def test_unknown_engine(engine, error, match):
    with pytest.raises(error, match=match):
        train.gradient_flow(data.random_problem(3, 3, 2, seed=0), param="W", init=None, record_at=[1.0], engine=engine)


@pytest.mark.parametrize("engine", ["compiled", "torch"])
def test_max_steps_is_enforced(engine):
    problem = data.random_problem(3, 3, 2, seed=0)
    with pytest.raises(RuntimeError, match=r"max_steps=3 steps for a problem \(it had reached s = 0\.06798\)"):
        train.gradient_flow(problem, param="W", init=None, record_at=[5.0], max_steps=3, engine=engine)
