"""The compiled gradient descent on W (`_cpu_loop`) and on (K, Q) (`_kq_loop`) takes the torch loop's steps, for
every option it covers."""

import math

import numba
import numpy as np
import pytest
import torch

from attnsvm import data, heads, model, train
from attnsvm.train import _cpu_loop as compiled


def _both(problem, **options):
    return [train.gd(problem, engine=engine, **options) for engine in ("compiled", "torch")]


def _assert_same_run(compiled, reference, tol=1e-12):
    np.testing.assert_array_equal(compiled.steps, reference.steps)
    for name in ("W", "K", "Q", "probs", "loss"):
        got, want = getattr(compiled, name), getattr(reference, name)
        if want is None:  # K and Q of a run on W
            assert got is None, name
            continue
        assert got.shape == want.shape and got.dtype == torch.float64, name
        torch.testing.assert_close(got, want, rtol=tol, atol=tol * float(want.abs().max()), msg=name)


@pytest.mark.parametrize("loss", ["logistic", "exponential", "linear"])
@pytest.mark.parametrize("normalized", [True, False])
def test_engines_take_the_same_steps(loss, normalized):
    problem = data.random_problem(6, 8, 10, seed=3, batch=8)
    _assert_same_run(*_both(problem, steps=200, lr=0.1, init="uniform", record_every=40, loss=loss,
                            normalized=normalized))


@pytest.mark.parametrize("batch", [(), (2, 3)])
def test_engines_agree_on_any_batch_shape(batch):
    flat = data.random_problem(3, 4, 5, seed=1, batch=6)
    parts = (getattr(flat, name) for name in "XYZv")
    problem = flat[0] if not batch else data.Problem(*(part.reshape(batch + part.shape[1:]) for part in parts))
    _assert_same_run(*_both(problem, steps=50, lr=0.1, init="uniform", record_every=7))


@pytest.mark.parametrize("shared", [True, False])
def test_engines_agree_with_a_relu_head_and_paper_As_eps(shared):
    problem = data.random_problem(3, 4, 6, seed=2, batch=5)
    head = heads.random_relu(6, seed=4, batch=None if shared else 5)
    _assert_same_run(*_both(problem, steps=300, lr=0.1, init="uniform", record_every=100, head=head, eps=2.2e-16))


def test_engines_agree_with_an_explicit_linear_head():
    problem = data.random_problem(4, 5, 6, seed=5, batch=3)
    head = heads.Linear(torch.randn(3, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64))
    _assert_same_run(*_both(problem, steps=100, lr=0.1, head=head, record_every=25))


def test_engines_agree_far_into_saturation():
    """2000 normalized steps: the logit gaps reach hundreds, every non-selected probability underflows, and
    both engines still follow the same exact gradient direction."""
    problem = data.random_problem(6, 8, 10, seed=0, batch=20)
    compiled, reference = _both(problem, steps=2000, lr=0.1, record_every=500)
    assert (reference.probs[-1].amax(-1) == 1).float().mean() > 0.5  # saturated in float64
    _assert_same_run(compiled, reference, tol=1e-9)


def test_engines_agree_where_every_probability_off_the_top_underflows():
    """Initial logit gaps of thousands on half the problems: there e^{second} underflows and the ratios
    s_t / e^{second} are taken in log space, lane by lane, next to problems where they are quotients."""
    problem = data.random_problem(4, 5, 6, seed=7, batch=6)
    W0 = train.uniform_init((6, 6, 6), 0) * torch.tensor([1.0, 10000.0] * 3)[:, None, None]
    compiled, reference = _both(problem, steps=50, lr=0.1, init=W0, record_every=10)
    second = reference.probs[0].sort(-1).values[..., -2]  # each sequence's second largest probability
    assert (second[1::2] < 1e-290).any(-1).all() and (second[::2] > 1e-290).all()
    _assert_same_run(compiled, reference)


@pytest.mark.parametrize("normalized", [True, False])
def test_a_problem_with_zero_gradient_does_not_move_beside_ones_that_do(normalized):
    """Problem 1's tokens are equal within each sequence: its gradient is exactly 0, and its lane keeps W0
    while the lanes beside it train, as in the torch loop."""
    problem = data.random_problem(4, 5, 6, seed=9, batch=3)
    X = problem.X.clone()
    X[1] = X[1, :, :1]
    problem = data.Problem(X, problem.Y, problem.Z, problem.v)
    W0 = train.uniform_init((3, 6, 6), 0)
    compiled, reference = _both(problem, steps=20, lr=0.1, init=W0, normalized=normalized, record_every=20)
    assert torch.equal(compiled.W[-1, 1], W0[1]) and not torch.equal(compiled.W[-1, 0], W0[0])
    _assert_same_run(compiled, reference)


@pytest.mark.parametrize("size", [1, 5, 70])
def test_a_problems_run_does_not_depend_on_the_rest_of_the_batch(size):
    """Problems run side by side, one per vector lane, in blocks: each lane's arithmetic is its own."""
    problem, W0 = data.random_problem(4, 5, 6, seed=8, batch=70), train.uniform_init((70, 6, 6), 0)
    alone = train.gd(problem[:size], steps=30, lr=0.1, init=W0[:size], engine="compiled").W
    together = train.gd(problem, steps=30, lr=0.1, init=W0, engine="compiled").W[:, :size]
    assert torch.equal(alone, together)


@pytest.mark.parametrize("padded", [0, 1, 3, 4, 8, 64, 65, 68, 100, 128, 129, 200, 300, 500, 1000, 4099])
def test_blocks_cover_the_lanes_in_whole_vectors_an_even_number_of_even_sizes(padded):
    blocks = compiled._blocks(padded)
    if padded == 0:
        assert blocks == []
        return
    assert [block.start for block in blocks] == [0] + [block.stop for block in blocks[:-1]]
    assert blocks[-1].stop == padded
    sizes = [block.stop - block.start for block in blocks]
    assert max(sizes) <= compiled.BLOCK and all(size % compiled.LANES == 0 for size in sizes[:-1])
    fewest = -(-padded // compiled.BLOCK)
    assert len(blocks) == (fewest if fewest == 1 else fewest + fewest % 2)  # as few as can be, but even
    vectors = [-(-size // compiled.LANES) for size in sizes]
    assert max(vectors) - min(vectors) <= 1  # within a vector of each other


def test_blocks_of_the_books_batches():
    assert [(b.start, b.stop) for b in compiled._blocks(300)] == [(0, 52), (52, 104), (104, 156), (156, 204),
                                                                (204, 252), (252, 300)]
    assert [(b.start, b.stop) for b in compiled._blocks(200)] == [(0, 52), (52, 104), (104, 152), (152, 200)]
    assert [(b.start, b.stop) for b in compiled._blocks(64)] == [(0, 64)]


def test_an_empty_batch_trains_to_an_empty_trajectory():
    problems = data.random_problem(3, 4, 5, seed=0, batch=4)[2:2]
    for run in (train.gd(problems, steps=2, lr=0.1), train.gd(problems, param="KQ", steps=2, lr=0.1),
                train.mirror_descent(problems, p=1.75, steps=2, lr=0.1)):
        assert run.W.shape == (3, 0, 5, 5) and run.loss.shape == (3, 0)
    for param in ("W", "diagonal", "diagonal_KQ"):
        flow = train.gradient_flow(problems, param=param, init=None if param != "diagonal_KQ" else (
            torch.ones(0, 5), torch.ones(0, 5)), record_at=[0.1])
        assert flow.W.shape == (2, 0, 5, 5), param


def _on_threads(run, monkeypatch) -> list:
    """run() with setup()'s loop_threads set to 1, 2 and 3 in turn (restored afterwards)."""
    from attnsvm import _session
    runs = []
    for threads in (1, 2, 3):
        monkeypatch.setattr(_session, "_loop_threads", threads)
        runs.append(run())
    return runs


def _ntp_problems(size: int = 150) -> list:
    """``size`` next-token problems (4 sequences of 5 ids, d = 6), each sequence's label its first id."""
    from attnsvm import causal
    ids = torch.randint(0, 5, (size, 4, 5), generator=torch.Generator().manual_seed(3))
    return [causal.ntp_problem(seq, seq[:, 0], d=6, seed=seed, K=5) for seed, seq in enumerate(ids)]


def test_a_block_whose_lanes_all_diverge_stops_alike_on_any_number_of_threads(monkeypatch):
    """The next-token loop stops a block once all its lanes have diverged (their records from there on are not
    finite): with blocks that followed the threads, which records were computed would depend on them."""
    from attnsvm.causal import _ntp_loop
    ntp, W0 = _ntp_problems(), train.uniform_init((150, 6, 6), 0).clone()
    W0[:52] = math.inf  # the first block (of four) diverges at once
    runs = _on_threads(lambda: _ntp_loop.gd(ntp, W0, 0.1, True, [0, 5, 20]), monkeypatch)
    assert (runs[0][3][:52] == 0).all() and (runs[0][3][52:] == -1).all()
    for other in runs[1:]:
        assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(runs[0], other))


@pytest.mark.parametrize("trainer", ["gd", "KQ", "mirror", "prompt", "diagonal", "ntp", "flow", "causal"])
def test_a_run_is_the_same_on_any_number_of_loop_threads(trainer, monkeypatch):
    """The blocks of a batch run side by side on setup()'s loop_threads; a lane's arithmetic is its own."""
    from attnsvm import causal
    from attnsvm.causal import _ntp_loop
    problem, W0 = data.random_problem(4, 5, 6, seed=8, batch=150), train.uniform_init((150, 6, 6), 0)  # 4 blocks
    run = {"gd": lambda: train.gd(problem, steps=20, lr=0.1, init=W0).W,
           "KQ": lambda: train.gd(problem, param="KQ", steps=20, lr=0.1, init=(W0, W0)).K,
           "mirror": lambda: train.mirror_descent(problem, p=1.75, steps=20, lr=0.1, init=W0).W,
           "prompt": lambda: train.gd_prompt(problem, torch.eye(6), steps=20, lr=0.1).probs,
           "diagonal": lambda: train.diagonal_gd(problem, factorized=True, steps=20, lr=0.1,
                                                 init=(W0[:, 0], W0[:, 1])).probs,
           "ntp": lambda: _ntp_loop.gd(_ntp_problems(), W0, 0.1, True, [0, 20])[1],
           "flow": lambda: train.gradient_flow(problem, param="diagonal_KQ", init=(W0[:, 0], W0[:, 1]),
                                               record_at=[0.5, 1.0]).probs,
           "causal": lambda: causal.gd(causal.random_problem(3, 4, 6, seed=8, batch=150), steps=20, lr=0.1,
                                       init=W0).probs}[trainer]
    runs = _on_threads(run, monkeypatch)
    assert all(torch.equal(runs[0], other) for other in runs[1:])


def test_auto_engine_is_the_compiled_one_where_it_applies():
    problem = data.random_problem(3, 4, 5, seed=1, batch=2)
    auto, compiled = (train.gd(problem, steps=20, lr=0.1, engine=e) for e in ("auto", "compiled"))
    assert torch.equal(auto.W, compiled.W)
    lam = heads.Lambda(torch.ones(5), 0.1)  # no compiled lambda head: auto falls back to torch
    torch.testing.assert_close(train.gd(problem, steps=5, lr=0.1, head=lam).W,
                               train.gd(problem, steps=5, lr=0.1, head=lam, engine="torch").W, rtol=0, atol=0)


@pytest.mark.parametrize("options, reason", [
    (dict(param="KQ", rule="official"), 'exact gradient only .*rule="official" defaults to autograd'),
    (dict(gradient="autograd"), "exact gradient only"),
    (dict(head=heads.Lambda(torch.ones(5), 0.1)), "no Lambda head"),
    (dict(param="KQ", head=heads.Lambda(torch.ones(5), 0.1)), "no Lambda head"),
])
def test_compiled_engine_names_what_it_cannot_run(options, reason):
    problem = data.random_problem(3, 4, 5, seed=1)
    with pytest.raises(ValueError, match=f'engine="compiled" cannot run this training: .*{reason}'):
        train.gd(problem, steps=2, lr=0.1, engine="compiled", **options)


def test_compiled_engine_leaves_other_devices_to_the_torch_loop():
    """train.gd's "auto" engine asks `why_not_compiled`: a problem on a GPU trains in the torch loop, on its device."""
    assert compiled.why_not_compiled("W", None, "exact", torch.device("cpu")) is None
    assert compiled.why_not_compiled("W", None, "exact", torch.device("cuda")) == \
        "it runs on the CPU only (the problem is on cuda)"


def test_unknown_engine_is_rejected():
    with pytest.raises(ValueError, match="engine"):
        train.gd(data.random_problem(3, 4, 5, seed=1), steps=2, lr=0.1, engine="numba")


@pytest.mark.parametrize("loss", ["logistic", "exponential", "linear"])
@pytest.mark.parametrize("normalized", [True, False])
def test_engines_take_the_same_steps_on_KQ(loss, normalized):
    """Every step of 50, the first included: K and Q each normalized by its own norm, or the plain step."""
    problem = data.random_problem(6, 8, 10, seed=3, batch=8)
    _assert_same_run(*_both(problem, param="KQ", steps=50, lr=0.1, loss=loss, normalized=normalized))


@pytest.mark.parametrize("options", [dict(schedule="sqrt"), dict(eps=2.2e-16), dict(eps=1e-3, m=3, schedule="sqrt"),
                                     dict(normalized=False, m=1), dict(normalized=False, m=14)], ids=str)
def test_engines_agree_on_KQ_for_every_option(options):
    problem = data.random_problem(4, 5, 6, seed=2, batch=5)
    _assert_same_run(*_both(problem, param="KQ", steps=50, lr=0.1, **options))


@pytest.mark.parametrize("options", [dict(ridge=1e-3), dict(ridge=0.01, m=14), dict(ridge=1e-3, normalized=False),
                                     dict(rule="official", gradient="exact", m=3)], ids=str)
def test_engines_agree_on_KQ_with_a_ridge(options):
    """Each step is the torch loop's to round-off (one step from its iterates). Where the ridge balances the loss
    (with ridge 0.01 and m = 14 the loss part of dL/dK is 6 to 13 times the sum at step 49), the normalized step's
    direction amplifies round-off: the torch loop itself, from K0 changed in its last digit, is 3e-12 away after
    50 steps. So the whole runs agree to 1e-10."""
    problem = data.random_problem(4, 5, 6, seed=2, batch=5)
    compiled, reference = _both(problem, param="KQ", steps=50, lr=0.1, **options)
    _assert_same_run(compiled, reference, tol=1e-10)
    for k in (0, 10, 25, 49):
        _assert_same_run(*_both(problem, param="KQ", steps=1, lr=0.1, init=(reference.K[k], reference.Q[k]),
                                **options))


@pytest.mark.parametrize("head", [heads.random_relu(6, seed=4, batch=5), heads.random_relu(6, seed=5),
                                  heads.Linear(torch.linspace(-1, 1, 6, dtype=torch.float64))],
                         ids=["ReLU per problem", "ReLU shared", "linear"])
def test_engines_agree_on_KQ_with_a_head(head):
    problem = data.random_problem(3, 4, 6, seed=2, batch=5)
    _assert_same_run(*_both(problem, param="KQ", steps=50, lr=0.1, head=head, record_every=10))


def test_engines_agree_on_KQ_where_softmax_saturates():
    """K0 and Q0 1000 times larger on every other problem: there every probability off the top token underflows
    to 0, and the gradient by autograd through softmax is exactly 0 (a naive loop would not move). The exact
    gradient is not, and both engines follow it, next to problems where the ratios are quotients."""
    problem, scale = data.random_problem(4, 5, 6, seed=7, batch=6), torch.tensor([1.0, 1000.0] * 3)[:, None, None]
    K0, Q0 = train.uniform_init((6, 6, 6), 0) * scale, train.uniform_init((6, 6, 6), 1) * scale
    K, Q = K0.clone().requires_grad_(True), Q0.clone().requires_grad_(True)
    naive = torch.autograd.grad(model.loss(problem, K @ Q.mT).sum(), (K, Q))
    assert all((g[1::2] == 0).all() and (g[::2] != 0).any((-2, -1)).all() for g in naive)
    compiled, reference = _both(problem, param="KQ", steps=50, lr=0.1, init=(K0, Q0), record_every=1)
    second = reference.probs[0].sort(-1).values[..., -2]
    assert (second[1::2] == 0).all() and (second[::2] > 1e-290).all()
    moves = (compiled.K[1:] - compiled.K[:-1]).norm(dim=(-2, -1))
    torch.testing.assert_close(moves, torch.full_like(moves, 0.1), rtol=1e-12, atol=0)
    _assert_same_run(compiled, reference)


@pytest.mark.parametrize("normalized", [True, False])
def test_a_KQ_problem_with_zero_gradient_does_not_move_beside_ones_that_do(normalized):
    problem = data.random_problem(4, 5, 6, seed=9, batch=3)
    X = problem.X.clone()
    X[1] = X[1, :, :1]
    problem = data.Problem(X, problem.Y, problem.Z, problem.v)
    compiled, reference = _both(problem, param="KQ", steps=20, lr=0.1, normalized=normalized, record_every=20)
    assert torch.equal(compiled.K[-1, 1], compiled.K[0, 1]) and torch.equal(compiled.Q[-1, 1], compiled.Q[0, 1])
    assert not torch.equal(compiled.K[-1, 0], compiled.K[0, 0])
    _assert_same_run(compiled, reference)


@pytest.mark.parametrize("size", [1, 5, 70])
def test_a_KQ_problems_run_does_not_depend_on_the_rest_of_the_batch(size):
    problem = data.random_problem(4, 5, 6, seed=8, batch=70)
    K0, Q0 = train.uniform_init((70, 6, 6), 0), train.uniform_init((70, 6, 6), 1)
    alone = train.gd(problem[:size], param="KQ", steps=30, lr=0.1, init=(K0[:size], Q0[:size]), engine="compiled")
    together = train.gd(problem, param="KQ", steps=30, lr=0.1, init=(K0, Q0), engine="compiled")
    for name in ("W", "K", "Q", "probs", "loss"):
        assert torch.equal(getattr(alone, name), getattr(together, name)[:, :size]), name


def test_auto_engine_trains_KQ_in_the_compiled_loop():
    assert compiled.why_not_compiled("KQ", heads.random_relu(5, seed=0), "exact", "cpu") is None
    problem = data.random_problem(3, 4, 5, seed=1, batch=2)
    auto, forced = (train.gd(problem, param="KQ", steps=20, lr=0.1, engine=e) for e in ("auto", "compiled"))
    assert torch.equal(auto.K, forced.K) and torch.equal(auto.Q, forced.Q)
    official = train.gd(problem, param="KQ", steps=5, lr=0.1, rule="official")  # autograd: the torch loop
    assert torch.equal(official.K, train.gd(problem, param="KQ", steps=5, lr=0.1, rule="official", engine="torch").K)


def test_engines_agree_on_KQ_in_chapter_4s_experiment():
    """Chapter 4's runs on (K, Q): 100 problems (6, 8, 10), 2000 normalized steps of 0.1 from init="uniform". The
    engines select the same tokens in every run and reach the same loss. Their W directions part by up to ~1e-3
    within a few hundred steps, as the torch loop's own do from K0 changed in its last digit: these runs amplify
    round-off (Chapter 4 prints their correlations to three digits for that reason)."""
    problems = data.random_problem(6, 8, 10, seed=0, batch=100)
    compiled, reference = _both(problems, param="KQ", steps=2000, lr=0.1, init="uniform", record_every=1000)
    assert torch.equal(compiled.selection(), reference.selection())
    torch.testing.assert_close(compiled.loss, reference.loss, rtol=1e-12, atol=0)
    perturbed = train.gd(problems, param="KQ", steps=2000, lr=0.1, init=(reference.K[0] * (1 + 2**-52),
                                                                         reference.Q[0]), record_every=1000,
                         engine="torch")

    def apart(run):
        """The largest entry of the difference of W's direction from the torch loop's, per record."""
        units = [W / W.norm(dim=(-2, -1), keepdim=True) for W in (run.W, reference.W)]
        return (units[0] - units[1]).abs().flatten(1).amax(-1)
    assert (apart(compiled)[1:] < 2 * apart(perturbed)[1:]).all() and (apart(perturbed)[1:] > 1e-4).all()


@pytest.mark.parametrize("libmvec", [True, False])
@pytest.mark.parametrize("name", ["exp", "log", "log1p"])
def test_row_functions_match_numpy_with_and_without_libmvec(monkeypatch, name, libmvec):
    """The in-place row functions: libmvec's four-lane routines where present, else libm entry by entry; either
    way within two ulps of numpy's, special values included, only the first `size` entries of the addressed row
    change (any size: the last entries go through a padded vector), and an entry's value does not depend on the
    entries beside it or on its place in a vector (one problem alone and in a lane get the same digits)."""
    if libmvec and not compiled.LIBMVEC:
        pytest.skip("no libmvec (glibc's vector math library) or no AVX2 here: the fallback is tested instead")
    monkeypatch.setattr(compiled, "LIBMVEC", libmvec)
    function = compiled._in_place(name, getattr(math, name))

    @numba.njit
    def apply(a, i, size):
        function(a, (i,), size)

    row = np.array([-np.inf, -800.0, -30.5, -1e-300, 0.0, 1e-12, 0.75, 3.0, 700.0, 710.0, np.inf, np.nan, 2.5])
    with np.errstate(all="ignore"):
        want = getattr(np, name)(row)
    whole = np.stack([row, row])
    apply(whole, 1, row.size)
    np.testing.assert_array_equal(whole[0], row)
    np.testing.assert_allclose(whole[1], want, rtol=4.5e-16, atol=0)
    for size in range(row.size + 1):
        for start in range(row.size - size + 1):  # the entries row[start:start + size], alone
            a = np.stack([row, row[start:].tolist() + row[:start].tolist()])
            apply(a, 1, size)
            np.testing.assert_array_equal(a[1, :size], whole[1, start:start + size])
            np.testing.assert_array_equal(a[1, size:], np.roll(row, -start)[size:])
