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


# ------------------------------------------------------------------ the compiled integrator (engine "compiled")

def _flows(problem, **options):
    return [train.gradient_flow(problem, engine=engine, **options) for engine in ("compiled", "torch")]


def _assert_same_flow(compiled, reference, tol):
    """The same steps, and records within `tol` of each other (relative to their largest entry); the drift, a
    difference of the records' Gram matrices, within tol ||C||."""
    assert torch.equal(compiled.steps, reference.steps) and torch.equal(compiled.rejected, reference.rejected)
    for name in ("W", "K", "Q", "probs", "loss", "drift"):
        got, want = getattr(compiled, name), getattr(reference, name)
        if want is None:
            assert got is None, name
            continue
        assert got.shape == want.shape, name
        size = float(reference.K.abs().max()) ** 2 if name == "drift" else float(want.abs().max())
        torch.testing.assert_close(got, want, rtol=0 if name == "drift" else tol, atol=tol * size, msg=name)


FLOW_STARTS = {"W": "uniform", "KQ": "uniform", "diagonal": None, "diagonal_KQ": "pair"}


@pytest.mark.parametrize("param", ["W", "KQ", "diagonal", "diagonal_KQ"])
@pytest.mark.parametrize("loss", ["logistic", "exponential", "linear"])
def test_engines_integrate_the_same_flow(param, loss):
    """The same accepted and rejected steps, and the records to round-off amplified by the stages (1e-11): the
    compiled velocity sums the gradient in another order, the Dormand-Prince loop is the torch loop's. (Over
    thousands of steps the step sequences can part: an error estimate is a difference of stages, known to ~1e-8
    of itself at rtol 1e-10, and a step whose estimate lies that close to 1 is accepted by one engine and rejected
    by the other, as by the torch loop from a velocity changed in its last digit.)"""
    problems = data.random_problem(4, 3, 5, seed=[2, 3, 4])
    ones = torch.ones(3, 5, dtype=torch.float64)
    init = (0.3 * ones, 0.1 * ones) if FLOW_STARTS[param] == "pair" else FLOW_STARTS[param]
    _assert_same_flow(*_flows(problems, param=param, init=init, loss=loss, record_at=[0.25, 0.5, 1.0], rtol=1e-8),
                      tol=1e-11)


def test_engines_integrate_the_same_flow_of_narrow_factors():
    """K and Q of width m = 2 < d (a random start): W = K Q^T has rank 2, and both engines follow its flow."""
    problems = data.random_problem(4, 3, 5, seed=[5, 6])
    _assert_same_flow(*_flows(problems, param="KQ", init="uniform", m=2, seed=3, record_at=[0.5, 1.0], rtol=1e-8),
                      tol=1e-11)


def test_engines_agree_on_chapter_11s_flows_to_their_tolerance():
    """The flows of Chapter 11's first figure (s up to 8): records within 1e-8 relative of each other at rtol 1e-10,
    far inside the difference to a rerun at rtol / 100 that the chapter prints."""
    problems = data.random_problem(5, 2, 12, seed=[0, 1, 2, 3, 4])
    compiled, reference = _flows(problems, param="diagonal", init=None, loss="exponential", record_at=[2.0, 8.0])
    assert torch.equal(compiled.steps, reference.steps)
    torch.testing.assert_close(compiled.W, reference.W, rtol=1e-8, atol=1e-8 * float(reference.W.abs().max()))
    torch.testing.assert_close(compiled.probs, reference.probs, rtol=1e-8, atol=1e-12)


def test_a_flow_under_saturation_is_exact():
    """A start 10^5 times larger on every other problem: there every probability off the top token underflows,
    and both engines still follow the exact normalized gradient."""
    problems = data.random_problem(4, 5, 6, seed=7, batch=4)
    W0 = train.uniform_init((4, 6, 6), 0) * torch.tensor([1.0, 1e5] * 2)[:, None, None]
    compiled, reference = _flows(problems, param="W", init=W0, record_at=[0.01, 0.02], rtol=1e-8)
    second = reference.probs[0].sort(-1).values[..., -2]
    assert (second[1::2] == 0).any() and (compiled.W[-1, 1::2] != W0[1::2]).any((-2, -1)).all()
    _assert_same_flow(compiled, reference, tol=1e-11)


@pytest.mark.parametrize("size", [1, 5, 70])
def test_a_problems_flow_does_not_depend_on_the_rest_of_the_batch(size):
    problems = data.random_problem(3, 3, 4, seed=8, batch=70)
    K0, Q0 = train.uniform_init((70, 4, 4), 0), train.uniform_init((70, 4, 4), 1)
    alone = train.gradient_flow(problems[:size], param="KQ", init=(K0[:size], Q0[:size]), record_at=[0.5, 1.0])
    together = train.gradient_flow(problems, param="KQ", init=(K0, Q0), record_at=[0.5, 1.0])
    for name in ("W", "K", "Q", "probs", "loss", "drift", "steps", "rejected"):
        assert torch.equal(getattr(alone, name), getattr(together, name)[..., :size] if name in ("steps", "rejected")
                           else getattr(together, name)[:, :size]), name


@pytest.mark.parametrize("engine", ["compiled", "torch"])
def test_both_engines_report_a_step_below_the_floor(engine):
    """Tokens 1e150 times larger: the logits overflow at once, every step is rejected and shrinks to nothing."""
    p = data.random_problem(3, 3, 2, seed=0)
    huge = data.Problem(p.X * 1e150, p.Y, p.Z * 1e150, p.v)
    with pytest.raises(FloatingPointError, match="the gradient flow is not finite"):
        train.gradient_flow(huge, param="W", init="uniform", record_at=[1.0], engine=engine)
