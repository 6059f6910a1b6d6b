"""The compiled gradient descent on paper B's query p (`_prompt_loop`) takes the torch loop's steps, for every option
of `train.gd_prompt`, however far softmax saturates.

Tolerance: the two loops sum in other orders, so they agree to round-off, not bit for bit. Over whole runs every
recorded p, probability and loss agrees to 1e-12 relative to the largest entry of its kind (measured: at most 2e-15
over 200 to 10000 steps), except in runs that amplify round-off (a test below); a single step from the same
iterate to 1e-14 (measured: at most 5e-16)."""

import numpy as np
import pytest
import torch

from attnsvm import data, train

KEY = data.PROMPT_KEY


def _both(problem, key, **options):
    return [train.gd_prompt(problem, key, engine=engine, **options) for engine in ("compiled", "torch")]


def _assert_same_run(compiled, reference, tol=1e-12):
    np.testing.assert_array_equal(compiled.steps, reference.steps)
    for name in ("W", "K", "Q", "v"):
        assert getattr(compiled, name) is None and getattr(reference, name) is None, name
    for name in ("p", "probs", "loss"):
        got, want = getattr(compiled, name), getattr(reference, name)
        assert got.shape == want.shape and got.dtype == torch.float64, name
        torch.testing.assert_close(got, want, rtol=tol, atol=tol * float(want.abs().max()), msg=name)


def _random_case(batch, seed=0, n=4, T=5, d=6, scale=1.0):
    """A random problem used as a prompt problem (its Z is ignored), a random key and initial p (one per problem)."""
    problem = data.random_problem(n, T, d, seed=seed, batch=batch)
    gen = torch.Generator().manual_seed(seed + 100)
    key = torch.randn(d, d, generator=gen, dtype=torch.float64)
    p0 = scale * torch.randn(problem.batch_shape + (d,), generator=gen, dtype=torch.float64)
    return problem, key, p0


@pytest.mark.parametrize("loss", ["logistic", "exponential", "linear"])
@pytest.mark.parametrize("normalized", [True, False])
def test_engines_take_the_same_steps(loss, normalized):
    """Every step of 200 recorded, on random problems with a random key (seed 4: none of these runs amplifies
    round-off; the test after the next shows runs that do)."""
    problem, key, p0 = _random_case(8, seed=4)
    _assert_same_run(*_both(problem, key, steps=200, lr=0.1, init=p0, loss=loss, normalized=normalized))


@pytest.mark.parametrize("loss", ["logistic", "exponential", "linear"])
@pytest.mark.parametrize("normalized", [True, False])
def test_each_step_is_the_torch_loops_from_the_same_iterate(loss, normalized):
    problem, key, p0 = _random_case(8, seed=0)
    reference = train.gd_prompt(problem, key, steps=200, lr=0.1, init=p0, normalized=normalized, loss=loss,
                                record_every=20, engine="torch")
    for k in range(len(reference.steps)):
        _assert_same_run(*_both(problem, key, steps=1, lr=0.1, init=reference.p[k], normalized=normalized,
                                loss=loss), tol=1e-14)


@pytest.mark.parametrize("seed, loss", [(0, "exponential"), (1, "logistic"), (5, "logistic")])
def test_where_a_run_amplifies_round_off_the_engines_part_as_the_torch_loop_does_from_a_last_digit(seed, loss):
    """Normalized steps that zigzag (consecutive steps at an obtuse angle) amplify round-off: on some of these
    problems the torch loop itself, from p(0) changed in its last digit, is up to 1e-2 away after 200 steps.
    The engines part by no more than 10 times that, problem by problem (measured: at most 4 times), and so
    agree to 1e-12 where the torch loop is stable."""
    problem, key, p0 = _random_case(8, seed=seed)
    options = dict(steps=200, lr=0.1, loss=loss)
    compiled, reference = _both(problem, key, init=p0, **options)
    perturbed = train.gd_prompt(problem, key, init=p0 * (1 + 2**-52), engine="torch", **options)

    def apart(run):
        """The largest difference from the torch loop's p over the run, relative to |p|, per problem."""
        return ((run.p - reference.p).abs().amax(-1) / reference.p.abs().amax(-1)).amax(0)
    assert apart(perturbed).max() > 1e-6  # it amplifies (by 1e10 for seed 1, 1e13 for seeds 0 and 5)
    assert (apart(compiled) <= 10 * apart(perturbed) + 1e-12).all()


@pytest.mark.parametrize("options", [dict(record_every=7, steps=23), dict(record_every=50, steps=50),
                                     dict(steps=0), dict(init=None, steps=30), dict(lr=0.5, steps=40),
                                     dict(normalized=False, lr=3.0, loss="exponential", steps=40)], ids=str)
def test_engines_agree_on_every_option(options):
    problem, key, p0 = _random_case(5, seed=3)
    options = dict(dict(lr=0.1, init=p0), **options)
    _assert_same_run(*_both(problem, key, **options))


def test_engines_agree_with_a_shared_init():
    problem, key, p0 = _random_case(5, seed=3)
    _assert_same_run(*_both(problem, key, steps=30, lr=0.1, init=p0[0]))


@pytest.mark.parametrize("batch", [None, (2, 3)])
def test_engines_agree_on_any_batch_shape(batch):
    flat, key, p0 = _random_case(6, seed=4, n=3, T=4, d=5)
    if batch is None:
        problem, p0 = flat[0], p0[0]
    else:
        problem = data.Problem(*(part.reshape(batch + part.shape[1:]) for part in (flat.X, flat.Y, flat.Z, flat.v)))
        p0 = p0.reshape(batch + (5,))
    compiled, reference = _both(problem, key, steps=50, lr=0.1, init=p0, record_every=7)
    assert compiled.p.shape == (9,) + problem.batch_shape + (5,)
    _assert_same_run(compiled, reference)


@pytest.mark.parametrize("normalized, lr", [(True, 0.1), (False, 1.0)])
def test_engines_agree_on_paper_Bs_examples(normalized, lr):
    """The book's runs: the single-input example (both cases, Chapter 4), the multi-input example, whose
    non-optimal scores are all equal (Assumption B.2), and the loss example (Chapter 3), 1000 steps each from
    several starts, with the token scores' differences (u_t - u_alpha) taken exactly."""
    starts = torch.tensor([[b, c, 0.0] for b in (1.0, 0.0, -1.5) for c in (-2.0, 0.0, 2.0)], dtype=torch.float64)
    problems = [data.single_input_problem(global_case=g).repeat(9) for g in (True, False)]
    problems += [data.multi_input_problem(seed=0).repeat(9)]
    for problem in problems:
        _assert_same_run(*_both(problem, KEY, steps=1000, lr=lr, init=starts, normalized=normalized,
                                record_every=100))
    X_b = torch.stack([data.loss_example_problem(b).X for b in (1.0, 10.0, 100.0)])
    by_b = data.Problem(X_b, torch.ones(3, 2), None, data.multi_input_problem(seed=0).v)
    for loss in ("linear", "logistic"):
        _assert_same_run(*_both(by_b, KEY, steps=1000, lr=lr, normalized=normalized, loss=loss, record_every=100))


def test_engines_agree_far_into_saturation():
    """10000 normalized steps on the loss example (Chapter 3's long run): the logit gaps reach a thousand, the
    non-selected probabilities underflow to 0 (from about step 8000), and both engines still follow the exact
    gradient direction, each step of length lr (to the round-off of iterates of size 1000)."""
    X_b = torch.stack([data.loss_example_problem(b).X for b in (2.0, 100.0)])
    by_b = data.Problem(X_b, torch.ones(2, 2), None, data.multi_input_problem(seed=0).v)
    compiled, reference = _both(by_b, KEY, steps=10000, lr=0.1, record_every=1)
    second = reference.probs[-1].sort(-1).values[..., -2]
    assert (second == 0).all()  # one-hot in float64, e^{second} far below 1e-290
    moves = (compiled.p[1:] - compiled.p[:-1]).norm(dim=-1)
    torch.testing.assert_close(moves, torch.full_like(moves, 0.1), rtol=0, atol=1e-11)
    _assert_same_run(compiled, reference)


def test_engines_agree_where_a_token_has_the_selected_tokens_score():
    """Token 2 has the top token's score 0.9 (equal scores, as in Assumption B.2), token 3 score 0 and a
    logit 100 below: the gradient is of size e^{-100}, along k_1 - k_3 (cosine above 0.9999), as token 2's
    part, u_2 - u_1 + e^{L} top_sum, is smaller still. Taken as u_2 - f the round-off of f, 1e-16, would
    swamp both and turn the steps towards token 2's key (cosine 0.92 or -0.92 with k_1 - k_3)."""
    X = torch.tensor([[[1.0, 0.0, 0.9], [0.9, 0.1, 0.9], [0.0, 0.3, 0.0]]], dtype=torch.float64).repeat(8, 1, 1, 1)
    X[:, 0, 1, 0] += torch.linspace(0, 0.07, 8, dtype=torch.float64)  # token 2's logit 10 to 3 below the top
    problem = data.Problem(X, torch.ones(8, 1), None, torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64))
    compiled, reference = _both(problem, KEY, steps=20, lr=0.1, init=torch.tensor([100.0, 0.0, 0.0]))
    move, keys = compiled.p[1] - compiled.p[0], X[:, 0] @ KEY
    along = keys[:, 0] - keys[:, 2]
    cosine = (move * along).sum(-1) / move.norm(dim=-1) / along.norm(dim=-1)
    assert (cosine > 0.9999).all()
    _assert_same_run(compiled, reference)


@pytest.mark.parametrize("normalized", [True, False])
def test_engines_agree_where_every_probability_off_the_top_underflows(normalized):
    """p(0) 10^4 times larger on every other problem: there the logit gaps are thousands, e^{second}
    underflows and the ratios s_t / e^{second} are taken in log space, lane by lane, next to problems where
    they are quotients. Normalized steps keep length lr there; plain steps e^{log scale} g underflow to 0."""
    problem, key, p0 = _random_case(8, seed=5)
    p0 = p0 * torch.tensor([1.0, 1e4] * 4)[:, None]
    compiled, reference = _both(problem, key, steps=50, lr=0.1, init=p0, normalized=normalized)
    second = reference.probs[0].sort(-1).values[..., -2]  # each sequence's second largest probability
    assert (second[1::2] == 0).all() and (second[::2] > 1e-290).all()
    moves = (compiled.p[1:] - compiled.p[:-1]).norm(dim=-1)
    if normalized:  # a difference of iterates of size 1e4 carries their round-off, 1e-12 each
        torch.testing.assert_close(moves, torch.full_like(moves, 0.1), rtol=0, atol=1e-10)
    else:
        assert (moves[:, 1::2] == 0).all() and (moves[:, ::2] > 0).all()
    _assert_same_run(compiled, reference)


@pytest.mark.parametrize("normalized", [True, False])
def test_a_problem_with_zero_gradient_does_not_move_beside_ones_that_do(normalized):
    """Problem 1's tokens are equal within each sequence: its gradient is exactly 0, and its lane keeps p(0)
    while the lanes beside it train, as in the torch loop."""
    problem, key, p0 = _random_case(3, seed=6)
    X = problem.X.clone()
    X[1] = X[1, :, :1]
    problem = data.Problem(X, problem.Y, None, problem.v)
    compiled, reference = _both(problem, key, steps=20, lr=0.1, init=p0, normalized=normalized)
    assert torch.equal(compiled.p[-1, 1], p0[1]) and not torch.equal(compiled.p[-1, 0], p0[0])
    _assert_same_run(compiled, reference)


@pytest.mark.parametrize("size", [1, 5, 70])
def test_a_problems_run_does_not_depend_on_the_rest_of_the_batch(size):
    """Problems run side by side, one per vector lane, in blocks: each lane's arithmetic is its own, saturated
    lanes (e^{second} underflows) next to others included."""
    problem, key, p0 = _random_case(70, seed=7)
    p0 = p0 * torch.tensor([1.0, 1000.0] * 35)[:, None]
    options = dict(steps=30, lr=0.1, engine="compiled")
    alone = train.gd_prompt(problem[:size], key, init=p0[:size], **options)
    together = train.gd_prompt(problem, key, init=p0, **options)
    for name in ("p", "probs", "loss"):
        assert torch.equal(getattr(alone, name), getattr(together, name)[:, :size]), name


def test_auto_engine_is_the_compiled_one():
    problem, key, p0 = _random_case(3, seed=8)
    auto, compiled, reference = (train.gd_prompt(problem, key, steps=20, lr=0.1, init=p0, engine=engine)
                                 for engine in ("auto", "compiled", "torch"))
    assert torch.equal(auto.p, compiled.p) and torch.equal(auto.probs, compiled.probs)
    assert not torch.equal(compiled.p, reference.p)  # two loops, equal to round-off only


@pytest.mark.parametrize("engine", ["numba", None, "Torch", 3])
def test_unknown_engine_is_rejected(engine):
    problem, key, _ = _random_case(None)
    with pytest.raises((TypeError, ValueError), match=r"^engine"):
        train.gd_prompt(problem, key, steps=2, lr=0.1, engine=engine)


@pytest.mark.parametrize("engine", ["compiled", "torch"])
def test_overflow_is_an_error_naming_lr_in_both_engines(engine):
    """(Plain steps of lr=1e308 saturate softmax first, and then e^{log scale} g underflows: no overflow.)"""
    problem = data.random_problem(2, 3, 2, seed=0, batch=3)
    with pytest.raises(FloatingPointError, match=r"lr=1e\+308 takes steps too large .*key or init"):
        train.gd_prompt(problem, torch.eye(2), steps=20, lr=1e308, engine=engine)
