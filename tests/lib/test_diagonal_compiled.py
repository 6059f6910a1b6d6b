"""The compiled diagonal gradient descent (`train._diagonal_loop`) takes the torch loop's steps, for every option of
`train.diagonal_gd`, exactly under saturation, each problem's run independent of its batch."""

import numpy as np
import pytest
import torch

from attnsvm import data, train


def _both(problem, **options):
    return [train.diagonal_gd(problem, engine=engine, **options) for engine in ("compiled", "torch")]


def _assert_same_run(compiled, reference, tol=1e-12):
    np.testing.assert_array_equal(compiled.steps, reference.steps)
    for name in ("W", "K", "Q", "probs", "loss"):
        got, want = getattr(compiled, name), getattr(reference, name)
        if want is None:
            assert got is None, name
            continue
        assert got.shape == want.shape and got.dtype == torch.float64, name
        torch.testing.assert_close(got, want, rtol=tol, atol=tol * float(want.abs().max()), msg=name)


def _starts(d, batch=()):
    ones = torch.ones(batch + (d,), dtype=torch.float64)
    return {"w": dict(factorized=False), "w0": dict(factorized=False, init=0.05 * ones),
            "unlocked": dict(factorized=True, init=(0.1 * ones, 0 * ones)),
            "balanced": dict(factorized=True, init=(0.1 * ones, 0.1 * ones))}


@pytest.mark.parametrize("loss", ["logistic", "exponential", "linear"])
@pytest.mark.parametrize("normalized", [True, False])
@pytest.mark.parametrize("start", ["w", "w0", "unlocked", "balanced"])
def test_engines_take_the_same_steps(loss, normalized, start):
    """Every step of 40, the first included: the same iterates, attention and loss to round-off. (Longer normalized
    runs on (k, q) amplify round-off: the torch loop itself, from k0 changed in its last digit, parts by a percent
    within a few hundred steps; Chapter 11 prints its margin ratios for that reason with their spread.)"""
    problem = data.random_problem(5, 3, 8, seed=3, batch=6)
    _assert_same_run(*_both(problem, steps=40, lr=0.1, loss=loss, normalized=normalized, record_every=1,
                            **_starts(8, (6,))[start]))


def test_engines_agree_over_thousands_of_steps_on_w():
    """Chapter 11's run on w (5000 normalized steps of 0.1 on five problems): the logit gaps reach hundreds and
    the probabilities off the selected tokens underflow, and the engines still agree to round-off."""
    problem = data.random_problem(5, 2, 12, seed=[0, 1, 2, 3, 4])
    compiled, reference = _both(problem, factorized=False, steps=5000, lr=0.1, record_every=1000)
    assert (reference.probs[-1].amax(-1) == 1).any()  # saturated in float64
    _assert_same_run(compiled, reference, tol=1e-10)


@pytest.mark.parametrize("factorized", [False, True])
def test_engines_agree_where_softmax_saturates(factorized):
    """Starts 3000 times larger on every other problem: there every probability off the top token underflows to 0,
    the gradient by autograd through softmax would be 0, and both engines follow the exact one."""
    problem = data.random_problem(4, 5, 6, seed=7, batch=6)
    start = torch.randn(6, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    start = start * torch.tensor([1.0, 3000.0] * 3)[:, None]
    init = (start, start.abs()) if factorized else start
    compiled, reference = _both(problem, factorized=factorized, steps=30, lr=0.1, init=init, record_every=1)
    second = reference.probs[0].sort(-1).values[..., -2]
    assert (second[1::2] == 0).any() and (second[::2] > 1e-290).all()
    moves = (compiled.W[1:] - compiled.W[:-1]).abs().sum((-2, -1))
    assert (moves[:, 1::2] > 0).all()  # the saturated problems move
    _assert_same_run(compiled, reference)


@pytest.mark.parametrize("normalized", [True, False])
def test_a_problem_with_zero_gradient_does_not_move_beside_ones_that_do(normalized):
    problem = data.random_problem(4, 5, 6, seed=9, batch=3)
    X = problem.X.clone()
    X[1] = X[1, :, :1]  # equal tokens within each sequence: the gradient is exactly 0
    problem = data.Problem(X, problem.Y, problem.Z, problem.v)
    init = 0.1 * torch.ones(3, 6, dtype=torch.float64)
    compiled, reference = _both(problem, factorized=False, init=init, steps=20, lr=0.1, normalized=normalized,
                                record_every=20)
    assert torch.equal(compiled.W[-1, 1], compiled.W[0, 1]) and not torch.equal(compiled.W[-1, 0], compiled.W[0, 0])
    _assert_same_run(compiled, reference)


def test_a_balanced_start_stays_balanced_exactly():
    problem = data.random_problem(5, 2, 12, seed=1, batch=3)
    run = train.diagonal_gd(problem, steps=300, lr=0.05, **_starts(12, (3,))["balanced"])
    assert torch.equal(run.K, run.Q)


@pytest.mark.parametrize("size", [1, 5, 70])
def test_a_problems_run_does_not_depend_on_the_rest_of_the_batch(size):
    problem = data.random_problem(4, 3, 6, seed=8, batch=70)
    for start in ("w0", "unlocked"):
        options = _starts(6, (70,))[start]
        init = options.pop("init")
        alone_init = tuple(p[:size] for p in init) if isinstance(init, tuple) else init[:size]
        alone = train.diagonal_gd(problem[:size], steps=30, lr=0.1, init=alone_init, engine="compiled", **options)
        together = train.diagonal_gd(problem, steps=30, lr=0.1, init=init, engine="compiled", **options)
        for name in ("W", "K", "Q", "probs", "loss"):
            if getattr(together, name) is not None:
                assert torch.equal(getattr(alone, name), getattr(together, name)[:, :size]), name


def test_auto_engine_is_the_compiled_loop_and_batch_shapes_are_kept():
    flat = data.random_problem(3, 4, 5, seed=1, batch=6)
    problem = data.Problem(*(getattr(flat, name).reshape((2, 3) + getattr(flat, name).shape[1:]) for name in "XYZv"))
    auto, compiled, reference = (train.diagonal_gd(problem, factorized=False, steps=20, lr=0.1, record_every=5,
                                                   engine=e) for e in ("auto", "compiled", "torch"))
    assert torch.equal(auto.W, compiled.W) and compiled.W.shape == (5, 2, 3, 5, 5)
    _assert_same_run(compiled, reference)
    single = [train.diagonal_gd(flat[0], factorized=False, steps=20, lr=0.1, engine=e) for e in ("compiled", "torch")]
    _assert_same_run(*single)
