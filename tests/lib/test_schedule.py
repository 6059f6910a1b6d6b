"""train.gd(schedule="sqrt"): step k at lr / sqrt(k + 1), on both engines, against a hand-written loop."""

import numpy as np
import pytest
import torch

import attnsvm
from attnsvm import data, train


def hand_loop(problem, steps, lr, normalized):
    """Gradient descent with steps lr / sqrt(k + 1), written out with train.loss_gradient."""
    W = torch.zeros(problem.d, problem.d, dtype=torch.float64)
    for k in range(steps):
        G = train.loss_gradient(problem, W)
        W = W - lr / np.sqrt(k + 1) * (G / G.norm() if normalized else G)
    return W


@pytest.mark.parametrize("engine", ["compiled", "torch"])
@pytest.mark.parametrize("normalized", [True, False])
def test_sqrt_schedule_matches_a_hand_loop(engine, normalized):
    attnsvm.setup(seed=0)
    problem = data.random_problem(3, 4, 5, seed=2)
    run = train.gd(problem, steps=60, lr=0.3, normalized=normalized, schedule="sqrt", engine=engine)
    expected = hand_loop(problem, 60, 0.3, normalized)
    np.testing.assert_allclose(run.W[-1].numpy(), expected.numpy(), rtol=1e-10, atol=1e-12)
    constant = train.gd(problem, steps=60, lr=0.3, normalized=normalized, engine=engine)
    assert not np.allclose(constant.W[-1].numpy(), expected.numpy(), rtol=1e-3)  # the schedule is not ignored


def test_a_batch_steps_as_its_problems_do_one_at_a_time():
    attnsvm.setup(seed=0)
    batch = data.random_problem(3, 4, 5, seed=3, batch=4)
    together = train.gd(batch, steps=40, lr=0.2, schedule="sqrt").W[-1].numpy()
    alone = np.stack([train.gd(batch[b], steps=40, lr=0.2, schedule="sqrt").W[-1].numpy() for b in range(4)])
    np.testing.assert_allclose(together, alone, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("schedule", ["linear", "Sqrt", None, 1])
def test_a_bad_schedule_is_refused(schedule):
    problem = data.random_problem(2, 3, 2, seed=0)
    with pytest.raises((ValueError, TypeError), match="schedule"):
        train.gd(problem, steps=2, lr=0.1, schedule=schedule)
