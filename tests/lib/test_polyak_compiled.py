"""The compiled Polyak loop (`_polyak_loop`, train.polyak(engine="compiled")) takes the torch loop's steps: one
step from every iterate of a torch run agrees with the torch run's next iterate to round-off (1e-10 of the step's
length; measured at most 6e-13), for every loss, from W = 0 and deep in saturation, where L - L* and the gradient
underflow in float64; whole runs, records and batches too."""

import numpy as np
import pytest
import torch

from attnsvm import data, model, svm, theory, train
from attnsvm.train import _polyak_loop
from attnsvm.train._cpu_loop import BLOCK

_LOOP = _polyak_loop.polyak
STEP_TOL = 1e-10  # of the step's length ||W(k+1) - W(k)||; the logits are known to eps |logit|, some 1e3 eps here


def _repeated(problem, k):
    """`problem` (one) repeated k times as a batch."""
    return data.Problem(*(part.expand((k,) + part.shape) for part in (problem.X, problem.Y, problem.Z, problem.v)))


def _saturated_start(problem):
    """1000 W_mm plus a generic perturbation: log(L - L*) near -1000, far below log of the smallest float64."""
    W_mm = torch.as_tensor(svm.att_svm(problem.X, problem.Z, theory.optimal_tokens(problem)))
    return 1000 * W_mm + 0.1 * torch.as_tensor(np.random.default_rng(0).standard_normal(W_mm.shape))


def _assert_same_steps(problem, loss, steps, init=None):
    """One compiled step from every iterate W(k) of a torch run lands on W(k+1) to round-off."""
    reference = train.polyak(problem, steps=steps, loss=loss, init=init, engine="torch")
    starts = _repeated(problem, steps)
    step = train.polyak(starts, steps=1, loss=loss, init=reference.W[:-1], engine="compiled")
    torch.testing.assert_close(step.W[0], reference.W[:-1], rtol=0, atol=0)
    moves = (reference.W[1:] - reference.W[:-1]).flatten(1).norm(dim=1)
    errors = (step.W[1] - reference.W[1:]).flatten(1).norm(dim=1)
    assert (moves > 0).all()
    assert (errors <= STEP_TOL * moves).all(), float((errors / moves).max())
    return reference


@pytest.mark.parametrize("loss", list(model.LOSSES))
def test_each_step_from_zero_agrees_with_the_torch_loop(loss):
    """Chapter 9's problem from W = 0: the first steps take the excess l(x - delta) - l(x) as it stands, the later
    ones its first order (log delta < -40); 300 steps reach log(L - L*) near -287."""
    reference = _assert_same_steps(data.equal_scores_problem(6, 4, 8, seed=0), loss, 300)
    gaps = train.log_loss_gap(data.equal_scores_problem(6, 4, 8, seed=0), reference.W, loss=loss)
    assert gaps[1] > -40 > gaps[-1] and gaps[-1] < -250


@pytest.mark.parametrize("loss", list(model.LOSSES))
def test_each_step_agrees_on_a_random_problem_and_deep_in_saturation(loss):
    problem = data.random_problem(5, 4, 6, seed=3)
    _assert_same_steps(problem, loss, 60, init="uniform")
    start = _saturated_start(problem)
    reference = _assert_same_steps(problem, loss, 40, init=start)
    gaps = train.log_loss_gap(problem, reference.W, loss=loss)
    assert gaps[0] < np.log(np.nextafter(0.0, 1.0)) and (torch.diff(gaps) < -0.5).all()  # L - L* is 0 in float64
    assert float(model.loss(problem, reference.W[-1], loss=loss) - train.optimal_loss(problem, loss)) == 0.0


@pytest.mark.parametrize("loss", list(model.LOSSES))
def test_whole_runs_and_their_records_agree(loss):
    problem = data.equal_scores_problem(6, 4, 8, seed=0)
    runs = [train.polyak(problem, steps=300, record_every=7, loss=loss, engine=engine)
            for engine in ("compiled", "torch")]
    np.testing.assert_array_equal(runs[0].steps, runs[1].steps)
    assert runs[0].steps[-1] == 300 and runs[0].steps[-2] == 294
    for name in ("W", "probs", "loss"):
        got, want = getattr(runs[0], name), getattr(runs[1], name)
        assert got.shape == want.shape and got.dtype == torch.float64, name
        torch.testing.assert_close(got, want, rtol=1e-11, atol=1e-11 * float(want.abs().max()), msg=name)
    assert runs[0].K is None and runs[0].p is None


def test_a_problems_run_does_not_depend_on_its_batch():
    """Lanes are independent: the same bits alone, in a batch of 7 (padded to 8 lanes) and in the second block of
    a batch of BLOCK + 6; "auto" is the compiled loop on the CPU."""
    problems = data.equal_scores_problem(4, 3, 8, seed=0, batch=BLOCK + 6)
    starts = 0.1 * torch.as_tensor(np.random.default_rng(1).standard_normal((BLOCK + 6, 8, 8)))
    big = train.polyak(problems, steps=40, record_every=10, init=starts)
    small = train.polyak(problems[BLOCK - 1:BLOCK + 6], steps=40, record_every=10, init=starts[BLOCK - 1:BLOCK + 6],
                         engine="compiled")
    for j in (0, 3, 6):
        one = train.polyak(problems[BLOCK - 1 + j], steps=40, record_every=10, init=starts[BLOCK - 1 + j],
                           engine="compiled")
        for name in ("W", "probs", "loss"):
            assert torch.equal(getattr(small, name)[:, j], getattr(one, name)), name
            assert torch.equal(getattr(big, name)[:, BLOCK - 1 + j], getattr(one, name)), name
    batch = data.Problem(*(part.reshape((2, 35) + part.shape[1:]) for part in
                           (problems.X, problems.Y, problems.Z, problems.v)))
    shaped = train.polyak(batch, steps=40, record_every=10, init=starts.reshape(2, 35, 8, 8))
    assert shaped.W.shape == (5, 2, 35, 8, 8) and torch.equal(shaped.W.reshape(big.W.shape), big.W)


def _equal_scores_in(problem, sequences):
    """`problem` with every token of the given sequences scored alike (v = e_1: their first coordinates equal)."""
    X = problem.X.clone()
    for i in sequences:
        X[..., i, :, 0] = X[..., i, :1, 0]
    return data.Problem(X, problem.Y, problem.Z, problem.v)


def test_sequences_with_all_scores_equal():
    """A sequence whose tokens all score alike adds nothing to L - L* (its delta_i = 0, log -inf): the loops agree
    step by step; where every sequence is so, L = L* and the gradient is 0 for every W, and neither loop moves."""
    problem = _equal_scores_in(data.equal_scores_problem(4, 3, 5, seed=2), [1])
    _assert_same_steps(problem, "logistic", 60)
    flat = _equal_scores_in(data.equal_scores_problem(4, 3, 5, seed=2), range(4))
    W0 = torch.as_tensor(np.random.default_rng(3).standard_normal((5, 5)))
    assert train.log_loss_gap(flat, W0) == -torch.inf
    for engine in ("compiled", "torch"):
        run = train.polyak(flat, steps=5, init=W0, engine=engine)
        assert torch.equal(run.W, W0.expand(6, 5, 5)), engine
    mixed = data.Problem(*(torch.stack([a, b]) for a, b in zip((flat.X, flat.Y, flat.Z, flat.v),
                                                               (problem.X, problem.Y, problem.Z, problem.v))))
    both = train.polyak(mixed, steps=20, init=torch.stack([W0, W0]), record_every=20)
    assert torch.equal(both.W[:, 0], W0.expand(2, 5, 5))
    assert torch.equal(both.W[:, 1], train.polyak(problem, steps=20, init=W0, record_every=20).W)


def test_the_engine_argument(monkeypatch):
    problem = data.equal_scores_problem(4, 3, 5, seed=0)
    calls = []
    with monkeypatch.context() as patch:
        patch.setattr(_polyak_loop, "polyak", lambda *arguments: calls.append(1) or _LOOP(*arguments))
        for engine, gradient in (("auto", "exact"), ("compiled", "exact"), ("torch", "exact"), ("auto", "autograd")):
            train.polyak(problem, steps=2, engine=engine, gradient=gradient)
    assert len(calls) == 2  # the compiled loop runs for "auto" and "compiled" with the exact rule only
    auto, compiled = (train.polyak(problem, steps=30, engine=engine) for engine in ("auto", "compiled"))
    assert torch.equal(auto.W, compiled.W) and torch.equal(auto.loss, compiled.loss)
    plain = train.polyak(problem, steps=30, gradient="autograd")  # "auto" runs the torch loop for it
    assert torch.equal(plain.W, train.polyak(problem, steps=30, gradient="autograd", engine="torch").W)
    with pytest.raises(ValueError, match=r'^engine="compiled" cannot run this training: it computes the exact rule '
                                         r'only \(gradient="exact"\); use engine="auto" or "torch"$'):
        train.polyak(problem, steps=3, gradient="autograd", engine="compiled")
    with pytest.raises(ValueError, match="engine"):
        train.polyak(problem, steps=3, engine="numba")


def test_the_loop_alone_records_what_it_is_asked():
    problem = data.equal_scores_problem(4, 3, 5, seed=0, batch=3)
    W, probs, outputs = _polyak_loop.polyak(problem, torch.zeros(5, 5, dtype=torch.float64), "logistic", [0, 2, 9],
                                            -40.0)
    assert W.shape == (3, 3, 5, 5) and probs.shape == (3, 3, 4, 3) and outputs.shape == (3, 3, 4)
    run = train.polyak(problem, steps=9, record_every=1, engine="torch")
    torch.testing.assert_close(W, run.W[[0, 2, 9]], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(outputs, model.outputs(problem, run.W[[0, 2, 9]]), rtol=1e-12, atol=1e-12)
