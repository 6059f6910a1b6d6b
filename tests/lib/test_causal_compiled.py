"""The compiled causal gradient descent (`causal._causal_loop`, in the space of the logits) takes the torch loop's
steps, for every option of `causal.gd`, exactly under saturation and where the terms of the gradient cancel, each
problem's run independent of its batch."""

import numpy as np
import pytest
import torch

from attnsvm import causal
from attnsvm.causal import _causal_loop


def _both(problem, **options):
    return [causal.gd(problem, engine=engine, **options) for engine in ("compiled", "torch")]


def _assert_same_run(compiled, reference, tol=1e-12):
    np.testing.assert_array_equal(compiled.steps, reference.steps)
    for name in ("W", "probs", "loss"):
        got, want = getattr(compiled, name), getattr(reference, name)
        assert got.shape == want.shape and got.dtype == torch.float64, name
        torch.testing.assert_close(got, want, rtol=tol, atol=tol * float(want.abs().max()), msg=name)


@pytest.mark.parametrize("causal_", [True, False])
@pytest.mark.parametrize("loss", ["logistic", "exponential", "linear"])
@pytest.mark.parametrize("normalized", [True, False])
def test_engines_take_the_same_steps(causal_, loss, normalized):
    """Every step of 30, the first included, from a uniform start, causal or sequence-to-sequence."""
    problem = causal.random_problem(3, 4, 5, seed=1, batch=3, causal=causal_)
    _assert_same_run(*_both(problem, steps=30, lr=0.1, normalized=normalized, loss=loss, init="uniform",
                            record_every=1))


def test_engines_agree_with_fewer_queries_than_tokens_and_any_batch_shape():
    """Next-token problems (K = T - 1 queries, the tied heads) in a (2, 2) batch, and a single problem."""
    problems, _ = causal.next_token_problems(4, 6, 7, seeds=range(4))
    problems = causal.SequenceProblem(problems.X.reshape(2, 2, 4, 6, 7), problems.V.reshape(2, 2, 4, 5, 7))
    _assert_same_run(*_both(problems, steps=40, lr=0.2, init="uniform", record_every=8))
    _assert_same_run(*_both(problems[1, 0], steps=40, lr=0.2, normalized=False, record_every=8))


def test_engines_agree_on_chapter_6s_runs():
    """Chapter 6's default setting (five languages, n = 10, T = 5, d = 100, 1000 normalized steps): the logit gaps
    grow to tens, preference cycles keep part of the loss, and the runs agree to round-off."""
    problems, _ = causal.next_token_problems(10, 5, 100, seeds=range(5))
    compiled, reference = _both(problems, steps=1000, lr=0.1, record_every=250, init="uniform")
    _assert_same_run(compiled, reference, tol=1e-11)


def test_engines_agree_where_softmax_saturates():
    """W0 2000 times larger on every other problem: there every probability off the top token underflows to 0 (the
    gradient by autograd through softmax is 0), and both engines follow the exact gradient."""
    problem = causal.random_problem(3, 5, 6, seed=2, batch=4)
    W0 = torch.randn(4, 6, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    W0 = W0 * torch.tensor([1.0, 2000.0] * 2)[:, None, None]
    compiled, reference = _both(problem, steps=20, lr=0.1, init=W0, record_every=1)
    second = reference.probs[0, 1::2, :, 1:].sort(-1).values[..., -2]  # queries k >= 1: two candidates or more
    assert (second == 0).any()
    moves = (compiled.W[1:] - compiled.W[:-1]).norm(dim=(-2, -1))  # each W to round-off eps ||W||, ||W|| ~ 1e4
    torch.testing.assert_close(moves, torch.full_like(moves, 0.1), rtol=0, atol=64 * 2.2e-16 * float(W0.abs().max()))
    _assert_same_run(compiled, reference)


@pytest.mark.parametrize("normalized", [True, False])
def test_a_problem_with_zero_gradient_does_not_move_beside_ones_that_do(normalized):
    """Problem 1's tokens are equal within each sequence: every query's candidates have the same score, its
    gradient is exactly 0, and its lane keeps W0 while the lanes beside it train, as in the torch loop."""
    problem = causal.random_problem(3, 4, 5, seed=9, batch=3)
    X = problem.X.clone()
    X[1] = X[1, :, :1]
    problem = causal.SequenceProblem(X, problem.V)
    W0 = torch.randn(3, 5, 5, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    compiled, reference = _both(problem, steps=10, lr=0.1, init=W0, normalized=normalized, record_every=10)
    assert torch.equal(compiled.W[-1, 1], W0[1]) and not torch.equal(compiled.W[-1, 0], W0[0])
    _assert_same_run(compiled, reference)


def test_a_gradient_whose_terms_cancel_is_taken_from_its_terms():
    """Each sequence twice, the copy's heads negated up to 1e-5, the linear loss: the copies' logit gradients
    nearly cancel, ||G||^2 / (sum of the sizes of its terms)^2 is ~1e-12, below GUARD, and the loop takes the
    norm from G's terms (`_direct_norm`), as the torch loop does: the runs agree to its digits (~1e-11)."""
    base = causal.random_problem(2, 4, 5, seed=3, batch=2)
    problem = causal.SequenceProblem(torch.cat([base.X, base.X], 1), torch.cat([base.V, -base.V * (1 - 1e-5)], 1))
    W0 = torch.randn(2, 5, 5, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    G, _, D, _ = causal._model._Plan(problem, problem.batch_shape).gradient(W0, "linear")
    ratio = (G ** 2).sum((-2, -1)) / D.abs().sum((-3, -2, -1)) ** 2  # the tokens have unit norm
    assert (ratio < 1e-10).all() and _causal_loop.GUARD > 1e-10
    _assert_same_run(*_both(problem, steps=20, lr=0.1, init=W0, loss="linear", record_every=1), tol=1e-10)


def test_direct_norm_is_the_norm_of_G():
    """`_direct_norm` (||A^T R^T||_F through the QR factorization of the queries) against G formed in full."""
    problem = causal.random_problem(3, 4, 6, seed=5, batch=1)
    gen = torch.Generator().manual_seed(3)
    seq, pos = np.repeat(np.arange(3), 3), np.tile(np.arange(1, 4), 3)
    counts = (pos + 1).astype(np.int64)
    D = torch.randn(9, 4, generator=gen, dtype=torch.float64) * (torch.arange(4) <= torch.as_tensor(pos)[:, None])
    Q = problem.X[0, seq, pos]  # (9, d)
    G = torch.einsum("jt,jtd,je->de", D, problem.X[0, seq], Q)
    R = torch.from_numpy(np.linalg.qr(Q.mT.numpy(), mode="r"))
    lanes = lambda a: np.ascontiguousarray(np.repeat(a.numpy()[..., None], 4, -1))  # noqa: E731
    norm = _causal_loop._direct_norm(2, lanes(problem.X[0]), lanes(R), lanes(D), seq, counts, np.empty((9, 6)),
                                     np.empty((6, R.shape[0])))
    assert abs(norm - float(G.norm())) <= 1e-14 * float(G.norm())


@pytest.mark.parametrize("size", [1, 5, 70])
def test_a_problems_run_does_not_depend_on_the_rest_of_the_batch(size):
    problem = causal.random_problem(3, 4, 5, seed=8, batch=70)
    W0 = torch.randn(70, 5, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    alone = causal.gd(problem[:size], steps=30, lr=0.1, init=W0[:size], engine="compiled")
    together = causal.gd(problem, steps=30, lr=0.1, init=W0, engine="compiled")
    for name in ("W", "probs", "loss"):
        assert torch.equal(getattr(alone, name), getattr(together, name)[:, :size]), name


def test_auto_engine_is_the_compiled_one_up_to_max_tokens():
    problem = causal.random_problem(3, 4, 5, seed=1, batch=2)
    auto, compiled = (causal.gd(problem, steps=20, lr=0.1, engine=e) for e in ("auto", "compiled"))
    assert torch.equal(auto.W, compiled.W)
    many = causal.random_problem(_causal_loop.MAX_TOKENS // 2 + 1, 2, 3, seed=1)  # n T above MAX_TOKENS
    auto, torch_loop = (causal.gd(many, steps=3, lr=0.1, engine=e) for e in ("auto", "torch"))
    assert torch.equal(auto.W, torch_loop.W)
