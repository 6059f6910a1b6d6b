"""The torch loops run a large CPU batch in blocks side by side (`_descent._side_by_side`): the blocks depend on
the batch size alone, a run is the same on any number of threads, and each problem keeps the arithmetic it has
in the whole batch (on the pinned AVX2 code path, where the book's numbers are made)."""

import pytest
import torch

from attnsvm import codepaths, data, train
from attnsvm.train import _descent


@pytest.mark.parametrize("size", [0, 1, 255, 256, 257, 300, 500, 512, 513, 1000, 2049])
def test_blocks_cover_the_batch_in_multiples_of_16(size):
    blocks = _descent._torch_blocks(size)
    assert blocks[0].start == 0 and blocks[-1].stop == size
    assert all(a.stop == b.start for a, b in zip(blocks, blocks[1:]))
    if size < _descent.SIDE_BY_SIDE:
        assert len(blocks) == 1
        return
    assert len(blocks) % 2 == 0 and all(block.stop % 16 == 0 for block in blocks[:-1])
    lengths = [block.stop - block.start for block in blocks]
    assert sum(lengths) / len(blocks) <= 256 and max(lengths) - min(lengths) <= 32  # about equal
    fewest = -(-size // 256)  # blocks of 256 or fewer on average, an even number of them
    assert len(blocks) == fewest + fewest % 2


def _runs(problem, W0):
    """Paper A's rule on W and on (K, Q), and the authors' mirror descent, through saturation (lr 0.5)."""
    return {"W": train.gd(problem, steps=60, lr=0.5, init=W0, record_every=20, rule="official"),
            "KQ": train.gd(problem, param="KQ", steps=60, lr=0.5, init=(W0, W0), record_every=20,
                           rule="official"),
            "mirror": train.mirror_descent(problem, p=1.75, steps=60, lr=0.5, init=W0, record_every=20,
                                           rule="official")}


def _fields(run):
    return [value for value in (run.W, run.K, run.Q, run.probs, run.loss) if value is not None]


@pytest.fixture(scope="module")
def batch():
    size = 300  # two blocks, 144 and 156 problems; 300 is not a multiple of 16
    return data.random_problem(4, 5, 6, seed=2, batch=size), train.uniform_init((size, 6, 6), 1)


def test_blocks_keep_each_problems_arithmetic(batch, monkeypatch):
    blocked = _runs(*batch)
    monkeypatch.setattr(_descent, "SIDE_BY_SIDE", 10**9)  # the whole batch at once
    whole = _runs(*batch)
    for name in blocked:
        for got, want in zip(_fields(blocked[name]), _fields(whole[name])):
            if codepaths.report():  # another code path: the claim is made for the pinned one
                torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12)
            else:
                assert torch.equal(got, want), name
        assert not blocked[name].W.requires_grad  # the threads ran without a graph, as the caller


def test_a_blocked_run_is_the_same_on_any_number_of_threads(batch, monkeypatch):
    from attnsvm import _session
    runs = []
    for threads in (1, 2, 3):
        monkeypatch.setattr(_session, "_loop_threads", threads)
        runs.append(_runs(*batch))
    for other in runs[1:]:
        for name in runs[0]:
            assert all(torch.equal(a, b) for a, b in zip(_fields(runs[0][name]), _fields(other[name]))), name


def test_a_per_problem_eps_follows_its_problem(batch, monkeypatch):
    problem, W0 = batch
    eps = torch.linspace(0.0, 1e-3, problem.batch_shape[0])  # large enough to change every step
    run = lambda: train.mirror_descent(problem, p=3.0, steps=30, lr=0.1, init=W0, eps=eps, engine="torch",
                                       record_every=30).W[-1]  # noqa: E731
    blocked = run()
    alone = train.mirror_descent(problem[290:], p=3.0, steps=30, lr=0.1, init=W0[290:], eps=eps[290:],
                                 engine="torch", record_every=30).W[-1]
    torch.testing.assert_close(blocked[290:], alone, rtol=1e-10, atol=1e-12)


def test_the_blocks_run_in_the_callers_grad_mode(batch, monkeypatch):
    """gd runs without a graph (torch.no_grad); a new thread starts with grad mode on, so each block sets it."""
    from attnsvm import _session
    monkeypatch.setattr(_session, "_loop_threads", 2)  # the blocks in threads of their own
    modes, loop = [], _descent._torch_loop

    def spy(*args, **kwargs):
        modes.append(torch.is_grad_enabled())
        return loop(*args, **kwargs)
    monkeypatch.setattr(_descent, "_torch_loop", spy)
    train.gd(batch[0], steps=2, lr=0.1, init=batch[1], rule="official")
    assert modes == [False, False]  # two blocks


@pytest.mark.parametrize("failing", [0, 256])
@pytest.mark.parametrize("error", [KeyboardInterrupt, ValueError])
def test_an_interrupt_or_error_in_a_block_stops_the_others(error, failing, monkeypatch):
    """Ctrl-C (a KeyboardInterrupt) or an error in any block ends the call at once: the other block stops at its
    next step."""
    import threading
    import time

    from attnsvm import _session
    monkeypatch.setattr(_session, "_loop_threads", 2)
    problem, steps, ran, started = data.random_problem(2, 3, 2, seed=0, batch=512), 5000, {}, threading.Event()
    other = 256 - failing

    def loop(block, recorder):
        for k in range(steps):
            if block.start == failing and k == 20:
                started.wait(60)  # the other block is running
                raise error
            recorder.wants(k)
            ran[block.start] = k
            if block.start == other:
                started.set()
            time.sleep(0.001)
    with pytest.raises(error):
        _descent._side_by_side(loop, problem, _descent._recorder(steps, steps, 1.0))
    assert ran[failing] == 19 and ran[other] < steps - 1  # the other block stopped early
