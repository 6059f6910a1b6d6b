"""The compiled next-token gradient descent (`causal._ntp_loop`) takes the torch loop's steps of `causal.ntp_gd`,
normalized and plain, from the same exact gradient, also where softmax is 0 or 1 in float64.

Tolerances. A step is computed from the same formulas in another order (the compiled loop sums in its own order
and takes each set's log-sum-exp from its own largest logit): the two engines differ by a few ulps per operation.
On a move of W relative to its own size (W(k+1) - W(k) against lr) that is below 1e-13 on these problems, so
1e-12 is the tolerance for one step; a short run (up to 200 steps) compounds it little, and is held to 1e-12 of
its largest entry too. Where logits reach thousands (saturated runs), a logit's own round-off is 1e-16 of it,
about 1e-13 absolute, and shifts each exponential weight e^{h - top} by as much relative: 1e-11 there."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnsvm import causal
from attnsvm.causal import _ntp_loop

F64 = torch.float64
SIX = causal.ntp_problem([[1, 2, 3, 0], [1, 2, 3, 0], [1, 2, 4, 0], [1, 3, 4, 0], [2, 3, 5, 0], [3, 4, 5, 0]],
                         [1, 1, 2, 1, 2, 3], d=8, seed=0, K=6)
ACYCLIC = causal.ntp_problem([[1, 2, 0], [3, 1, 0], [2, 4, 1]], [1, 3, 2], d=6, seed=2)


def _random_problem(seed: int, n: int = 6, T: int = 4, K: int = 5, d: int = 8) -> causal.NTPProblem:
    """Random ids (repeats allowed: labels on several positions, sequences of one token) and a label drawn from
    each sequence."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, K, (n, T), generator=gen)
    labels = ids[torch.arange(n), torch.randint(0, T, (n,), generator=gen)]
    return causal.ntp_problem(ids, labels, d=d, seed=seed, K=K)


def _both(problem, **options):
    return [causal.ntp_gd(problem, engine=engine, **options) for engine in ("compiled", "torch")]


def _assert_same_run(compiled, reference, tol=1e-12):
    np.testing.assert_array_equal(compiled.steps, reference.steps)
    for name in ("W", "probs", "loss"):
        got, want = getattr(compiled, name), getattr(reference, name)
        assert got.shape == want.shape and got.dtype == F64, name
        torch.testing.assert_close(got, want, rtol=tol, atol=tol * float(want.abs().max()), msg=name)
    assert compiled.K is compiled.Q is compiled.p is compiled.v is None


def _assert_same_moves(problem, Ws, lr, normalized, tol=1e-12):
    """From each W of Ws, one step of each engine: the new iterates agree to `tol` of the torch move, up to the
    round-off of the sum W + move itself (an ulp of W's entries, which can be more than tol of the move)."""
    eps = torch.finfo(F64).eps
    for W in Ws:
        new = [causal.ntp_gd(problem, steps=1, lr=lr, normalized=normalized, init=W, engine=engine).W[1]
               for engine in ("compiled", "torch")]
        error, move = (new[0] - new[1]).abs(), (new[1] - W).abs()
        bound = tol * float(move.max()) + 2 * eps * torch.maximum(W.abs(), new[1].abs())
        assert (error <= bound).all(), float((error / bound).max())


@pytest.mark.parametrize("normalized", [True, False])
@pytest.mark.parametrize("seed", range(4))
def test_engines_take_the_same_steps_on_random_problems(seed, normalized):
    problem = _random_problem(seed, n=3 + seed, T=2 + seed)
    lr = 0.05 if normalized else 1.0
    compiled, reference = _both(problem, steps=200, lr=lr, normalized=normalized, init="uniform", seed=seed)
    assert float((reference.W[-1] - reference.W[0]).norm()) > 0.5 * (lr if normalized else 1.0)  # it moved
    _assert_same_run(compiled, reference)
    _assert_same_moves(problem, reference.W[::50], lr, normalized)


@pytest.mark.parametrize("normalized", [True, False])
def test_engines_take_the_same_steps_on_the_six_sequences(normalized):
    """Chapter 10's example (its run: 20,000 normalized steps of 0.01 from 0): the first 1500 steps recorded every
    100, then single steps from the iterates of a long run. Near step 1950 its normalized run starts to amplify
    any change of W by about 1.3 a step (towards the period-two swing of the split): there a change of one ulp
    of W0 (1e-16) grows in the torch loop alone to 1e-5 of W by step 2000, and so does the difference of the
    two engines; each single step still agrees to round-off."""
    lr = 0.01 if normalized else 0.5
    compiled, reference = _both(SIX, steps=1500, lr=lr, normalized=normalized, record_every=100)
    _assert_same_run(compiled, reference)
    far = causal.ntp_gd(SIX, steps=20_000, lr=lr, normalized=normalized, record_every=5000, engine="compiled")
    _assert_same_moves(SIX, far.W, lr, normalized)


@pytest.mark.parametrize("normalized", [True, False])
def test_engines_agree_where_softmax_is_zero_or_one_in_float64(normalized):
    """From 1000 W_svm every label holds all of its sequence's attention in float64 and autograd's gradient is 0;
    the exact gradient is e^{-1000}-small, and both engines step along it: normalized by lr, plain by its tiny
    true size (W moves below W's round-off, so the plain moves are compared as the gradients they are)."""
    W0 = 1000 * torch.as_tensor(causal.graph_svm(ACYCLIC))
    W = W0.clone().requires_grad_(True)
    causal.ntp_loss(ACYCLIC, W).backward()
    assert W.grad.abs().max() == 0 and bool((causal.ntp_attention(ACYCLIC, W0).amax(-1) == 1).all())
    compiled, reference = _both(ACYCLIC, steps=50, lr=0.1, normalized=normalized, init=W0)
    _assert_same_run(compiled, reference)
    if normalized:
        steps = (compiled.W[1:] - compiled.W[:-1]).flatten(1).norm(dim=1)
        assert torch.allclose(steps, torch.full_like(steps, 0.1), rtol=1e-10)  # it moves: steps of lr
        _assert_same_moves(ACYCLIC, compiled.W, 0.1, True, tol=1e-11)
    else:
        lr = 2.0 ** 1000  # a move of order one: the plain step, exactly, in both engines
        _assert_same_moves(ACYCLIC, compiled.W[:1], lr, False, tol=1e-11)


def test_engines_agree_far_into_saturation_on_random_problems():
    """Initial logits of thousands: off the largest, every probability underflows, and the labels' weights are
    e^{-thousands}: each set's log-sum-exp from its own largest logit keeps them."""
    for seed in range(3):
        problem = _random_problem(seed + 10)
        W0 = 3000 * torch.randn(8, 8, generator=torch.Generator().manual_seed(seed), dtype=F64)
        compiled, reference = _both(problem, steps=40, lr=0.5, init=W0, record_every=10)
        assert (reference.probs[0] == 0).any() and (reference.probs[0] == 1).any()
        _assert_same_run(compiled, reference, tol=1e-11)
        _assert_same_moves(problem, reference.W, 0.5, True, tol=1e-11)


def test_records_and_the_last_step():
    compiled, reference = _both(SIX, steps=53, lr=0.02, record_every=7, init="uniform", seed=3)
    assert compiled.steps.tolist() == list(range(0, 53, 7)) + [53]
    _assert_same_run(compiled, reference)
    zero = causal.ntp_gd(SIX, steps=0, lr=0.02)
    assert zero.steps.tolist() == [0] and (zero.W == 0).all()
    assert torch.allclose(zero.probs[0], torch.full((6, 4), 0.25, dtype=F64), rtol=1e-15, atol=0)


@pytest.mark.parametrize("normalized", [True, False])
def test_a_zero_gradient_does_not_move(normalized):
    """Every position of every sequence holds its label: the loss is 0 and its gradient exactly 0 (log scale
    -inf); W stays, as in the torch loop."""
    problem = causal.NTPProblem([[1, 1], [0, 0]], [1, 0], torch.eye(2, dtype=F64))
    W0 = torch.tensor([[0.5, -1.0], [2.0, 0.25]], dtype=F64)
    compiled, reference = _both(problem, steps=3, lr=0.1, normalized=normalized, init=W0)
    assert (compiled.W == W0).all() and (compiled.loss == 0).all()
    _assert_same_run(compiled, reference)


def test_a_problems_run_does_not_depend_on_the_rest_of_the_batch():
    """The loop runs problems of one shape side by side, one per vector lane, in blocks of BLOCK: each lane's
    arithmetic is its own (also that of a lane whose gradient is 0)."""
    problems = [_random_problem(seed) for seed in range(70)]
    problems[3] = causal.NTPProblem([[1, 1, 1, 1]] * 6, [1] * 6, problems[3].embeddings)  # gradient 0
    W0 = 0.3 * torch.randn(70, 8, 8, generator=torch.Generator().manual_seed(0), dtype=F64)
    record = [0, 1, 2, 7, 30]
    for normalized in (True, False):
        together = _ntp_loop.gd(problems, W0, 0.1, normalized, record)
        assert (together[3] == -1).all() and torch.equal(together[0][-1, 3], W0[3])
        for part in (slice(0, 1), slice(0, 5), slice(3, 4), slice(4, 6), slice(64, 65), slice(61, 70)):
            alone = _ntp_loop.gd(problems[part], W0[part], 0.1, normalized, record)
            assert all(torch.equal(got, want[:, part]) for got, want in zip(alone[:3], together[:3]))


def test_a_diverging_lane_leaves_the_others_alone():
    """d = 1: the normalized step always pushes w the same way, so steps of lr = 1e308 overflow w at step 2;
    the lane beside it (its gradient 0) keeps its w and records."""
    E = torch.tensor([[1.0], [0.5]], dtype=F64)
    moving, still = causal.NTPProblem([[1, 0]], [1], E), causal.NTPProblem([[1, 1]], [1], E)
    W0 = torch.tensor([[[0.0]], [[0.25]]], dtype=F64)
    W, probs, loss, diverged = _ntp_loop.gd([moving, still], W0, 1e308, True, [0, 1, 5, 20])
    assert diverged.tolist() == [2, -1] and (W[:, 1] == 0.25).all()
    alone = _ntp_loop.gd([still], W0[1:], 1e308, True, [0, 1, 5, 20])
    assert torch.equal(alone[0][:, 0], W[:, 1]) and torch.equal(alone[1][:, 0], probs[:, 1])


def test_auto_engine_is_the_compiled_one():
    auto, compiled = (causal.ntp_gd(SIX, steps=20, lr=0.05, engine=e) for e in ("auto", "compiled"))
    assert all(torch.equal(getattr(auto, f), getattr(compiled, f)) for f in ("W", "probs", "loss"))


@pytest.mark.parametrize("engine", ["compiled", "torch"])
def test_both_engines_report_divergence(engine):
    """The case above through ntp_gd: a FloatingPointError naming the step and lr, not NaN."""
    problem = causal.NTPProblem([[1, 0]], [1], torch.tensor([[1.0], [0.5]], dtype=F64))
    with pytest.raises(FloatingPointError, match=r"ntp_gd diverged at step 2 .*lower lr \(got 1e\+308\)"):
        causal.ntp_gd(problem, steps=5, lr=1e308, engine=engine)


@pytest.mark.parametrize("engine, error", [("numba", ValueError), ("", ValueError), (None, TypeError),
                                           (["torch"], TypeError)])
def test_unknown_engine_is_rejected(engine, error):
    with pytest.raises(error, match="engine"):
        causal.ntp_gd(SIX, steps=2, lr=0.1, engine=engine)
