"""train.gradient_flow: the flow's trajectory with error control and its conserved quantities (bad input:
test_bad_input_flow.py)."""

import pytest
import torch

from attnsvm import data, train


def test_diagonal_flow_keeps_the_closed_form_invariant_and_the_balanced_lock():
    problems = data.random_problem(5, 2, 6, seed=[0, 1])
    ones = torch.ones(6, dtype=torch.float64)
    flow = train.gradient_flow(problems, param="diagonal_KQ", init=(0.1 * ones, 0 * ones), record_at=[1.0, 3.0])
    assert float(flow.drift.max()) < 1e-9 and bool((flow.loss[-1] < flow.loss[0]).all())
    locked = train.gradient_flow(problems, param="diagonal_KQ", init=(0.1 * ones, 0.1 * ones), record_at=[2.0])
    assert torch.equal(locked.K, locked.Q) and float(torch.diagonal(locked.W, dim1=-2, dim2=-1).min()) >= 0


def test_separate_normalization_is_not_the_flow_but_the_integrator_is():
    problems = data.random_problem(4, 3, 3, seed=[0, 1])
    gen = torch.Generator().manual_seed(0)
    K0, Q0 = (0.3 * torch.randn(2, 3, 3, generator=gen, dtype=torch.float64) for _ in range(2))
    flow = train.gradient_flow(problems, param="KQ", init=(K0, Q0), record_at=[2.0])
    C = lambda K, Q: K.mT @ K - Q.mT @ Q  # noqa: E731
    exact = (C(flow.K[-1], flow.Q[-1]) - C(K0, Q0)).norm(dim=(-2, -1))
    assert torch.allclose(flow.drift[-1], exact) and float(exact.max()) < 1e-8
    run = train.gd(problems, param="KQ", steps=300, lr=0.05, init=(K0, Q0), record_every=300)
    assert float((C(run.K[-1], run.Q[-1]) - C(K0, Q0)).norm(dim=(-2, -1)).min()) > 1e-3


def test_W_flow_matches_small_plain_steps():
    problem = data.random_problem(3, 3, 2, seed=0)
    flow = train.gradient_flow(problem, param="W", init=None, record_at=[0.5], rtol=1e-12)
    W, length = torch.zeros(2, 2, dtype=torch.float64), 0.0
    while True:  # tiny normalized Euler steps in the same time s
        G = train.loss_gradient(problem, W)
        ds = 1e-4
        step = ds * (1 + W.norm()) * G / G.norm()
        if length + ds > 0.5:
            break
        W, length = W - step, length + ds
    assert torch.allclose(W, flow.W[-1], atol=1e-3)


def test_a_finite_minimizer_ends_the_time_s_with_a_clear_error():
    # two copies of a sequence with opposite labels: the loss has its minimum log 2 at finite W, reached at s ~ 0.36
    p = data.random_problem(1, 3, 2, seed=0)
    q = data.Problem(torch.cat([p.X, p.X]), torch.cat([p.Y, -p.Y]), torch.cat([p.Z, p.Z]), p.v)
    flow = train.gradient_flow(q, param="W", init=None, record_at=[0.36])
    assert float(train.loss_gradient(q, flow.W[-1]).norm()) < 1e-2 * float(train.loss_gradient(q, flow.W[0]).norm())
    with pytest.raises(RuntimeError, match="finite minimizer"):
        train.gradient_flow(q, param="W", init=None, record_at=[1.0], max_steps=500)
