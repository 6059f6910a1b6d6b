"""Speed benchmarks: the library's engines against the straightforward reference implementation (reference.py),
timed side by side in one run on the same data, with a check that both give the same answer.

    make bench            (or: .venv/bin/python benchmarks/run.py [--quick])

Times are medians over repeats (wall clock, one thread: the compiled loops too, though the book runs a batch's
blocks on every core, a row of their own, `loop_threads`). Cases whose reference takes minutes
are timed on a stated fraction of the work and scaled up; the table says so. Nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import attnsvm  # noqa: I001 (first: it pins the CPU code paths before numpy and torch load)
import numpy as np
import torch

from attnsvm import causal, data, svm, theory, train
from attnsvm.experiments import relu_head, svm_rank

sys.path.insert(0, str(Path(__file__).parent))
import reference  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ROWS = []
CVXPY = "cvxpy + Clarabel, rebuilt per problem, one constraint per token pair"
AUTOGRAD = "autograd through softmax, one problem at a time"


def timed(function, repeats: int = 3):
    """(median wall time in seconds, last result) of `function()` over `repeats` runs."""
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def row(case: str, ref: float | None, lib: float, agreement: str, note: str = "", *, reference_is: str = "-") -> None:
    ratio = (f"{ref / lib:,.0f}x" if ref / lib >= 10 else f"{ref / lib:.2g}x") if ref else "-"  # 0.52x, not 1x
    ROWS.append((case, reference_is, _seconds(ref), _seconds(lib), ratio, agreement, note))
    print(f"  {case}: reference {_seconds(ref)}, library {_seconds(lib)}, ratio {ratio}; {agreement} {note}",
          flush=True)


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1e3:.1f} ms" if value < 1 else f"{value:.1f} s"


def _unit(W):
    W = np.asarray(W)
    return W / np.linalg.norm(W, axis=(-2, -1), keepdims=True)


def single_solves(repeats: int) -> None:
    for shape in [(6, 8, 10), (15, 15, 20)]:
        problem = data.random_problem(*shape, seed=0)
        X, Z, alpha = problem.X.numpy(), problem.Z.numpy(), theory.optimal_tokens(problem).numpy()
        for norm in ["fro", "nuc"]:
            t_ref, W_ref = timed(lambda: reference.att_svm(X, Z, alpha, norm), repeats)
            t_lib, W_lib = timed(lambda: svm.att_svm(X, Z, alpha, norm), repeats)
            size = np.linalg.norm(W_lib, "fro" if norm == "fro" else "nuc")
            objective = abs(size - np.linalg.norm(W_ref, "fro" if norm == "fro" else "nuc")) / size
            direction = np.abs(_unit(W_ref) - _unit(W_lib)).max()
            row(f"one {'Frobenius' if norm == 'fro' else 'nuclear'} Att-SVM, (n,T,d)={shape}", t_ref, t_lib,
                f"direction {direction:.0e}, objective {objective:.0e}", reference_is=CVXPY)


def batch_of_solves(repeats: int) -> None:
    problems = data.random_problem(6, 8, 10, seed=1, batch=100)
    X, Z, alpha = problems.X.numpy(), problems.Z.numpy(), theory.optimal_tokens(problems).numpy()
    for norm, name in [("fro", "Frobenius"), ("nuc", "nuclear")]:
        t_ref, W_ref = timed(lambda: [reference.att_svm(X[b], Z[b], alpha[b], norm) for b in range(100)], 1)
        t_lib, W_lib = timed(lambda: svm.att_svm(X, Z, alpha, norm), repeats)
        row(f"100 {name} Att-SVMs, (6,8,10)", t_ref, t_lib,
            f"direction {np.abs(_unit(np.stack(W_ref)) - _unit(W_lib)).max():.0e}", reference_is=CVXPY)


def e41(share: int) -> None:
    """Paper A's E4.1 at full fidelity: 100 runs x 2000 iterations, W and (K, Q), then the SVMs of the
    selections; the reference does `share` runs (one at a time) and is scaled to 100."""
    problems = data.random_problem(6, 8, 10, seed=0, batch=100)
    for param in ["W", "KQ"]:
        def library():
            run = train.gd(problems, param=param, steps=2000, lr=0.1, init="uniform", record_every=100)
            alpha = run.selection()
            return run, svm.att_svm(problems.X, problems.Z, alpha), svm.att_svm(problems.X, problems.Z, alpha, "nuc")
        t_lib, (run, _, _) = timed(library, 1)
        init = train.uniform_init((100, 10, 10), seed=0) if param == "W" else (
            train.uniform_init((100, 10, 10), seed=0), train.uniform_init((100, 10, 10), seed=1))

        def ref_run(b):
            X, Y, Z, v = (getattr(problems, name)[b] for name in "XYZv")
            starts = {"W0": init[b]} if param == "W" else {"K0": init[0][b], "Q0": init[1][b]}
            W = reference.gd(X, Y, Z, v, steps=2000, lr=0.1, **starts)
            alpha = torch.softmax(torch.einsum("ntd,de,ne->nt", X, W[-1], Z), -1).argmax(-1).numpy()
            X_, Z_ = X.numpy(), Z.numpy()
            return W, reference.att_svm(X_, Z_, alpha), reference.att_svm(X_, Z_, alpha, "nuc")
        t_ref, ref_runs = timed(lambda: [ref_run(b) for b in range(share)], 1)
        early = max(np.abs(_unit(ref_runs[b][0][100]) - _unit(run.W[1, b])).max() for b in range(share))
        row(f"E4.1 GD on {param} + SVMs, 100 runs x 2000 it.", t_ref * 100 / share, t_lib,
            f"W(100) direction {early:.0e}", f"(reference: {share} runs, x{100 // share})",
            reference_is=f"{AUTOGRAD}; {CVXPY} for the SVMs")


def e22(share: int) -> None:
    """Paper A's E2.2 rank grid (`svm_rank.grid`, two processes): 8 values of d x 5 (n, T), 100 feasible instances
    each (or as many as 2000 draws give; Chapter 2's grid leaves out d = 1 and draws up to 200,000), both SVMs.
    The reference would check every draw with a cvxpy solve and solve the nuclear-norm SVM of every feasible one:
    it is estimated from `share` timed draws and solves per grid point, times the numbers of draws and feasible
    problems the library needed."""
    grid = [(n, 5, d) for n in (5, 10, 15) for d in (1, 2, 3, 4, 5, 10, 15, 20)]
    grid += [(5, T, d) for T in (10, 15) for d in (1, 2, 3, 4, 5, 10, 15, 20)]
    t_lib, results = timed(lambda: svm_rank.grid(grid, workers=2), 1)
    estimate = 0.0
    for n, T, d in grid:
        problems = data.random_problem(n, T, d, seed=d, batch=share)
        alpha = theory.optimal_tokens(problems).numpy()
        X, Z = problems.X.numpy(), problems.Z.numpy()
        check, _ = timed(lambda: [reference.att_svm(X[b], Z[b], alpha[b], "fro") for b in range(share)], 1)
        solve, _ = timed(lambda: [reference.att_svm(X[b], Z[b], alpha[b], "nuc") for b in range(share)], 1)
        spectra = results[n, T, d]
        estimate += (check * spectra.draws + solve * spectra.values.shape[1]) / share
    row("E2.2 rank grid, 40 points x 100 feasible", estimate, t_lib, "ranks: see Chapter 2",
        f"(2 processes; reference estimated from {share} solves per point)",
        reference_is=f"{CVXPY}, for the feasibility check and the nuclear-norm SVM")


def e51(share: int) -> float:
    """Paper A's E5.1 sweep, its gradient descent part: 1000 candidate runs per d in {4, 6, 8, 10} with
    `relu_head`'s settings (Chapter 5 trains the 500 per d that pass the official filter; finding them is
    `e51_search`). Returns the reference's time per run."""
    candidates, runs = 1000, {}

    def library():
        for d in (4, 6, 8, 10):
            runs[d] = relu_head.train_runs(d, np.arange(1, candidates + 1))
    t_lib, _ = timed(library, 1)

    def ref():
        early = 0.0
        for run in runs.values():
            for b in range(share):
                X, Y, Z, v = (getattr(run.problem, name)[b] for name in "XYZv")
                W = reference.gd(X, Y, Z, v, steps=relu_head.STEPS, lr=relu_head.LR,
                                 W0=run.trajectory.W[0, b], V=run.head.V[b], eps=relu_head.EPS)
                step = relu_head.RECORD_EVERY
                early = max(early, np.abs(_unit(W[step]) - _unit(run.trajectory.W[1, b])).max())
        return early
    t_ref, early = timed(ref, 1)
    row("E5.1 GD sweep, 4 x 1000 runs x 2001 it.", t_ref * candidates / share, t_lib,
        f"W(100) direction {early:.0e}", f"(reference: {share} runs per d, x{candidates // share})",
        reference_is=AUTOGRAD)
    return t_ref / (4 * share)


def e51_search(reference_per_run: float) -> None:
    """The full E5.1 search, as `make e51-seeds` runs it: seeds 1, 2, ... until 500 per d pass the filter, one
    worker process per core; the answer must be the stored seeds. The reference is its time per run (`e51`)
    times the runs trained: the candidates whose labels are not all +1, 7/8 of them at n = 3."""
    workers = os.cpu_count()
    relu_head.search(4, 1, chunk=2 * workers, workers=workers)  # start the workers (joblib keeps them)
    start, tried, same = time.perf_counter(), 0, True
    for d in (4, 6, 8, 10):
        seeds, count = relu_head.search(d, 500, workers=workers)
        tried, same = tried + count, same and seeds == relu_head.stored_seeds(d)
    seconds = time.perf_counter() - start
    row(f"E5.1 full search, 500 accepted per d ({tried:,} candidates, {workers} processes)",
        reference_per_run * tried * 7 / 8, seconds, "the stored seeds" if same else "DIFFERENT SEEDS",
        "(reference: the row above's time per run x 7/8 of the candidates)", reference_is=AUTOGRAD)


def chapter(name: str) -> None:
    """One full chapter executed from its source, as `make notebooks` does (its `setup()`: the compiled loops on
    every core)."""
    with tempfile.TemporaryDirectory() as folder:
        target = Path(folder) / f"{name}.ipynb"
        bin_dir = Path(sys.executable).parent
        subprocess.run([bin_dir / "jupytext", "--quiet", "--to", "ipynb", "--output", target,
                        ROOT / "book_src" / f"{name}.md"], check=True)
        start = time.perf_counter()
        subprocess.run([bin_dir / "jupyter", "execute", "--inplace", target], check=True, capture_output=True)
        row(f"chapter {name}, executed", None, time.perf_counter() - start, "asserts pass",
            "(the compiled loops on every core, as the book runs it; the authors' notebook for E4.1 alone: ~7 min, "
            "not run here)")


def gd_floor() -> None:
    """Time per iteration per problem of the W-model step, on both engines, against the arithmetic floor: the
    steady state, after one untimed run (the first call of the compiled engine in a process loads its loop from
    Numba's cache, ~0.4 s, which would count as ~8 us per step here). The machine drifts between a fast and a
    slow state, so each timed run is paired with a matmul timed just before it; medians over the pairs."""
    a = torch.randn(512, 512, dtype=torch.float64)
    n, T, d, B, steps = 6, 8, 10, 100, 500
    flops = 2 * (2 * n * d * d + 2 * n * T * d + 3 * n * T * T)  # W z_i, logits, pairwise terms, gradient
    problems = data.random_problem(n, T, d, seed=0, batch=B)
    for engine in ("torch", "compiled"):
        train.gd(problems, steps=1, lr=0.1, engine=engine)
        pairs = []
        for _ in range(5):
            rate = 2 * 512**3 / timed(lambda: a @ a, 3)[0]
            seconds, _ = timed(lambda: train.gd(problems, steps=steps, lr=0.1, record_every=steps, engine=engine), 1)
            pairs.append((seconds / steps / B, flops / rate))
        per, floor = (statistics.median(values) for values in zip(*pairs))
        ratio, rate = per / floor, flops / floor  # the ratio of the medians shown
        print(f"  GD step ({engine}), (6,8,10), batch {B}: {per * 1e6:.2f} us per iteration per problem; "
              f"arithmetic floor {floor * 1e6:.3f} us ({flops} flop at a measured {rate / 1e9:.1f} GFLOP/s float64 "
              f"matmul): {ratio:.1f}x the floor", flush=True)
        ROWS.append((f"GD step per problem, {engine} engine, (6,8,10), batch {B}", "-", "-", f"{per * 1e6:.2f} us", "-",
                     f"floor {floor * 1e6:.3f} us: {ratio:.1f}x", f"({flops} flop at {rate / 1e9:.1f} GFLOP/s)"))


def loop_threads(repeats: int) -> None:
    """A batch of the training loops on every core the process may use against one thread (``setup()``'s
    ``loop_threads``): mirror descent, p = 1.75, on a batch of 300 problems as Chapter 8 runs it (there, 1500
    steps), 500 steps in the compiled loop, and the authors' rule (the torch loop, in blocks) on 500 problems as
    Chapter 8 replays it (there, 1500 steps), 100 steps; the same bits on both."""
    from attnsvm import _session
    attnsvm.setup(seed=0)
    cores = _session._threads_for_loops()  # every core the process may use
    cases = {"mirror descent p = 1.75, batch 300, 500 steps, compiled":
             (data.random_problem(6, 8, 10, seed=0, batch=300), dict(steps=500)),
             "the authors' mirror descent (rule=\"official\", torch loop), batch 500, 100 steps":
             (data.random_problem(6, 8, 10, seed=0, batch=500), dict(steps=100, rule="official"))}
    for name, (problems, options) in cases.items():
        runs = {}
        for threads in (1, cores):
            attnsvm.setup(seed=0, loop_threads=threads)
            train.mirror_descent(problems, p=1.75, lr=0.1, **{**options, "steps": 1})
            runs[threads] = timed(lambda: train.mirror_descent(problems, p=1.75, lr=0.1, record_every=options["steps"],
                                                               **options), repeats)
        attnsvm.setup(seed=0, loop_threads=1)
        (one, W1), (many, Wn) = runs[1], runs[cores]
        same = "same bits" if torch.equal(W1.W, Wn.W) else "DIFFERENT bits"
        print(f"  {name}: 1 thread {_seconds(one)}, {cores} threads {_seconds(many)} ({same})", flush=True)
        ROWS.append((f"{name}, on {cores} threads", "-", "-", _seconds(many), "-",
                     f"1 thread: {_seconds(one)}, {one / many:.2g}x", same))


def one_problem(repeats: int) -> None:
    """Time per step on ONE problem (6, 8, 10), as a researcher calls the library: gradient descent on W in the
    loop compiled for one lane (against the batched torch loop, `engine="torch"`), on (K, Q), mirror descent
    (p = 1.75), Polyak steps and, on Chapter 10's six sequences (n, T, d) = (6, 4, 8), next-token gradient
    descent, each with its ratio to the W step; then W on 4 and 16 problems. 2000 steps, after an untimed call
    (the first call of a process loads the loop from Numba's cache)."""
    problem, steps = data.random_problem(6, 8, 10, seed=0), 2000
    ids = [[1, 2, 3, 0], [1, 2, 3, 0], [1, 2, 4, 0], [1, 3, 4, 0], [2, 3, 5, 0], [3, 4, 5, 0]]
    six = causal.ntp_problem(ids, [1, 1, 2, 1, 2, 3], d=8, seed=0, K=6)
    runs = {"gradient descent on W": lambda: train.gd(problem, steps=steps, lr=0.1, record_every=steps),
            "gradient descent on (K, Q)": lambda: train.gd(problem, param="KQ", steps=steps, lr=0.1,
                                                          record_every=steps),
            "mirror descent, p = 1.75": lambda: train.mirror_descent(problem, p=1.75, steps=steps, lr=0.1,
                                                                      record_every=steps),
            "Polyak steps": lambda: train.polyak(problem, steps=steps, record_every=steps),
            "next-token GD, six sequences (6, 4, 8)": lambda: causal.ntp_gd(six, steps=steps, lr=0.01,
                                                                             record_every=steps)}
    per_step = {}
    for name, run in runs.items():
        run()
        per_step[name] = timed(run, repeats)[0] / steps
    torch_step = timed(lambda: train.gd(problem, steps=200, lr=0.1, record_every=200, engine="torch"), 1)[0] / 200
    W_step = per_step["gradient descent on W"]
    ROWS.append(("one problem (6,8,10), gradient descent on W, per step", "the library's torch loop (engine='torch')",
                 f"{torch_step * 1e6:.0f} us", f"{W_step * 1e6:.2f} us", f"{torch_step / W_step:.0f}x", "-",
                 "the loop compiled for one lane"))
    for name, seconds in per_step.items():
        print(f"  one problem, {name}: {seconds * 1e6:.2f} us per step, {seconds / W_step:.2g}x the W step",
              flush=True)
        if name != "gradient descent on W":
            ROWS.append((f"one problem, {name}, per step", "-", "-", f"{seconds * 1e6:.2f} us", "-",
                         f"{seconds / W_step:.2g}x the W step", "compiled loop"))
    for B in (4, 16):
        problems = data.random_problem(6, 8, 10, seed=0, batch=B)
        seconds = timed(lambda: train.gd(problems, steps=steps, lr=0.1, record_every=steps), repeats)[0] / steps
        print(f"  GD step (compiled), (6,8,10), batch {B}: {seconds * 1e6:.1f} us per step", flush=True)
        ROWS.append((f"GD step on W, compiled engine, (6,8,10), batch {B}", "-", "-", f"{seconds * 1e6:.1f} us", "-",
                     "per step, all problems", ""))


def gd_kq(repeats: int) -> None:
    """Gradient descent on (K, Q), m = d: the compiled loop against the torch loop (train.gd's engines, the same
    steps), on Chapter 4's 100 problems (6, 8, 10) and on one of them. The first compiled call of a process loads
    the loop from Numba's cache: it runs untimed."""
    for batch, steps in ((100, 500), (1, 2000)):
        problems = data.random_problem(6, 8, 10, seed=0, batch=batch)

        def run(engine):
            return train.gd(problems, param="KQ", steps=steps, lr=0.1, init="uniform", record_every=100,
                            engine=engine)
        run("compiled")
        t_ref, reference = timed(lambda: run("torch"), repeats)
        t_lib, compiled = timed(lambda: run("compiled"), repeats)
        same = float((compiled.selection() == reference.selection()).all(-1).double().mean())
        row(f"GD on (K, Q), (6,8,10), batch {batch}, {steps} it.", t_ref, t_lib,
            f"W(100) rel. diff {_rel(compiled.W[1], reference.W[1]):.0e}, same selection in {same:.0%}",
            f"(per step {t_ref / steps * 1e6:.0f} vs {t_lib / steps * 1e6:.0f} us)",
            reference_is="the library's batched torch loop (train.gd(engine='torch'))")


def mirror(share: int) -> None:
    """The mirror-descent experiment on W at full size for p = 1.75: 100 runs x 1500 steps of normalized MD with
    potential ||W||_p^p, then the lp Att-SVMs of the selections. The reference runs the authors' loop one problem
    at a time (autograd, ||g||_q + eps) on `share` runs and is scaled to 100."""
    problems = data.random_problem(6, 8, 10, seed=0, batch=100)
    W0 = torch.randn((100, 10, 10), dtype=torch.float64, generator=torch.Generator().manual_seed(0))

    def library():
        run = train.mirror_descent(problems, p=1.75, steps=1500, lr=0.1, init=W0, record_every=100)
        return run, svm.att_svm(problems, run.selection(), norm=1.75, solver="dual")
    t_lib, (run, _) = timed(library, 1)

    def ref_run(b):
        X, Y, Z, v = (getattr(problems, name)[b] for name in "XYZv")
        W = reference.mirror_descent(X, Y, Z, v, p=1.75, steps=1500, lr=0.1, W0=W0[b])
        alpha = torch.softmax(torch.einsum("ntd,de,ne->nt", X, W[-1], Z), -1).argmax(-1).numpy()
        return W, reference.lp_svm(X.numpy(), Z.numpy(), alpha, 1.75)
    t_ref, ref_runs = timed(lambda: [ref_run(b) for b in range(share)], 1)
    early = max(np.abs(_unit(ref_runs[b][0][100]) - _unit(run.W[1, b])).max() for b in range(share))
    row("MD (p = 1.75) on W + lp SVMs, 100 runs x 1500 it.", t_ref * 100 / share, t_lib,
        f"W(100) direction {early:.0e}", f"(reference: {share} runs, x{100 // share})",
        reference_is="the authors' loop (autograd, g divided by its q-norm + eps), one problem at a time; cvxpy pnorm "
                     "for the SVMs")


def _processor() -> str:
    """The processor's model name (from /proc/cpuinfo on Linux), else what platform knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _rel(A, B) -> float:
    """||A - B|| / ||A||, Frobenius (A the library's answer)."""
    A, B = np.asarray(A), np.asarray(B)
    return float(np.linalg.norm(A - B) / np.linalg.norm(A))


def polyak(repeats: int) -> None:
    """Chapter 9's Polyak steps on W: its problem (equal_scores_problem(6, 4, 8)), 300 steps from W = 0. The
    reference is the plain rule (L - L* and the gradient by autograd, in float64), which stops moving once L - L*
    has no digit left (Chapter 9); the agreement is W(k) before that, and the step where it stalls."""
    problem = data.equal_scores_problem(6, 4, 8, seed=0)
    train.polyak(problem, steps=1)  # compile, or load from Numba's cache, outside the timing
    t_lib, run = timed(lambda: train.polyak(problem, steps=300), repeats)
    t_ref, W = timed(lambda: reference.polyak(problem.X, problem.Y, problem.Z, problem.v, steps=300), repeats)
    W, stall = W.numpy(), int(np.argmax(np.all(W.numpy()[1:] == W.numpy()[:-1], axis=(1, 2))))
    row("Polyak steps on W, ch. 9 problem (6,4,8), 300 it.", t_ref, t_lib,
        f"W(10) rel. diff {_rel(run.W[10], W[10]):.0e}, W(20) {_rel(run.W[20], W[20]):.0e}",
        f"(one problem, as in the chapter; the reference stalls at k = {stall}, its L - L* spent)",
        reference_is="the plain rule: L - L* and the gradient by autograd, in float64")


def diagonal_gd(share: int) -> None:
    """Chapter 11's factorized diagonal runs (the chapter takes them in the torch loop, whose rounding it counts; the
    default engine, timed here, is the compiled loop): five problems (5, 2, 12), 20,000 normalized steps of lr 0.01
    from the unlocked and the balanced start. The reference (autograd on (k, q) and w = k q, one problem at a time) runs
    the first 2000 steps of `share` problems per start and is scaled to 10 runs x 20,000 steps."""
    problems = data.random_problem(5, 2, 12, seed=[0, 1, 2, 3, 4])
    ones = torch.ones(5, 12, dtype=torch.float64)
    starts = {"unlocked": (0.1 * ones, 0 * ones), "balanced": (0.1 * ones, 0.1 * ones)}
    t_lib, runs = timed(lambda: {name: train.diagonal_gd(problems, factorized=True, steps=20000, lr=0.01, init=init,
                                                         record_every=100) for name, init in starts.items()}, 1)

    def ref():
        return {(name, b): reference.diagonal_gd(*(getattr(problems, f)[b] for f in "XYZv"), steps=2000, lr=0.01,
                                                 k0=init[0][b], q0=init[1][b])
                for name, init in starts.items() for b in range(share)}
    t_ref, ws = timed(ref, 1)
    diff = np.array([[_rel(torch.diagonal(runs[name].W[k // 100, b]), w[k]) for k in range(100, 2001, 100)]
                     for (name, b), w in ws.items()])  # (runs, records)
    part = 100 * (1 + int((diff > 1e-6).any(0).argmax())) if (diff > 1e-6).any() else None
    row("diagonal GD on (k, q), compiled engine, ch. 11's runs: 2 starts x 5 problems x 20,000 it.",
        t_ref * 10 * 5 / share, t_lib,
        f"w(1000) rel. diff {diff[:, 9].max():.0e}; paths part by k = {part} (as a softmax saturates in float64)",
        f"(reference: {share} problem(s) per start x 2000 it., x{10 * 5 // share})",
        reference_is="autograd on (k, q), one problem at a time")


def ntp_gd(repeats: int) -> None:
    """Chapter 10's six-sequence example: 20,000 normalized steps of lr 0.01 from W = 0, in ntp_gd's compiled loop
    (its default engine; a first call outside the timing loads it). The reference (autograd through softmax and
    -log of the label's attention mass, one step of torch operations at a time) runs the first 2000 steps and is
    scaled by 10. Near step 1950 the run starts to amplify round-off by about 1.3 a step (towards its period-two
    swing), so the agreement is W(1000) and W(1500)."""
    ids = [[1, 2, 3, 0], [1, 2, 3, 0], [1, 2, 4, 0], [1, 3, 4, 0], [2, 3, 5, 0], [3, 4, 5, 0]]
    six = causal.ntp_problem(ids, [1, 1, 2, 1, 2, 3], d=8, seed=0, K=6)
    causal.ntp_gd(six, steps=1, lr=0.01, engine="compiled")
    t_lib, run = timed(lambda: causal.ntp_gd(six, steps=20_000, lr=0.01, record_every=500, engine="compiled"),
                       repeats)
    t_ref, W = timed(lambda: reference.ntp_gd(six.ids, six.labels, six.embeddings, steps=2000, lr=0.01), 1)
    row("next-token GD on W, ch. 10 six sequences, 20,000 it.", t_ref * 10, t_lib,
        f"W(1000) rel. diff {_rel(run.W[2], W[1000]):.0e}, W(1500) {_rel(run.W[3], W[1500]):.0e}",
        "(reference: 2000 it., x10)", reference_is="autograd through softmax and -log of the label's mass")


def spectral_svm(repeats: int) -> None:
    """Chapter 12's check: the spectral-norm Att-SVMs of five random problems (6, 4, 6), against cvxpy's sigma_max
    rebuilt per problem. The minimizer need not be unique: the agreement is the optimal value."""
    problems = data.random_problem(6, 4, 6, seed=0, batch=5)
    alpha = theory.optimal_tokens(problems)
    X, Z, a = problems.X.numpy(), problems.Z.numpy(), alpha.numpy()
    t_lib, W_lib = timed(lambda: svm.spectral_att_svm(problems, alpha), repeats)
    t_ref, W_ref = timed(lambda: [reference.spectral_svm(X[b], Z[b], a[b]) for b in range(5)], repeats)
    value = np.linalg.norm(W_lib, 2, axis=(-2, -1))
    gap = np.abs(value - np.linalg.norm(np.stack(W_ref), 2, axis=(-2, -1))) / value
    row("5 spectral-norm Att-SVMs, (6,4,6)", t_ref, t_lib, f"sigma_max rel. diff {gap.max():.0e}",
        reference_is="cvxpy sigma_max + Clarabel, rebuilt per problem")


def graph_svm(repeats: int) -> None:
    """Chapter 10's two graph SVMs (the authors' three sequences and the six-sequence example), Frobenius norm,
    against networkx's components and a cvxpy problem with one equality or margin per (sequence, token)."""
    cases = [causal.ntp_problem([[2, 3, 1], [2, 4, 0], [2, 3, 1]], [2, 2, 1], d=8, seed=1, K=5),
             causal.ntp_problem([[1, 2, 3, 0], [1, 2, 3, 0], [1, 2, 4, 0], [1, 3, 4, 0], [2, 3, 5, 0], [3, 4, 5, 0]],
                                [1, 1, 2, 1, 2, 3], d=8, seed=0, K=6)]
    t_lib, W_lib = timed(lambda: [causal.graph_svm(p) for p in cases], repeats)
    t_ref, W_ref = timed(lambda: [reference.graph_svm(p.ids.tolist(), p.labels.tolist(), p.embeddings.numpy())
                                  for p in cases], repeats)
    row("2 graph SVMs (Frobenius), ch. 10 examples", t_ref, t_lib,
        f"W rel. diff {max(_rel(a, b) for a, b in zip(W_lib, W_ref)):.0e}",
        reference_is="networkx components, then cvxpy + Clarabel with one constraint per (sequence, token)")


def diagonal_svm(repeats: int) -> None:
    """Chapter 11's l1 diagonal Att-SVMs: five problems (5, 2, 12), against cvxpy's norm1 over w. A linear program
    need not have a unique solution: the agreement is the optimal value, with the largest entry difference."""
    problems = data.random_problem(5, 2, 12, seed=[0, 1, 2, 3, 4])
    alpha = theory.optimal_tokens(problems)
    X, Z, a = problems.X.numpy(), problems.Z.numpy(), alpha.numpy()
    t_lib, w_lib = timed(lambda: svm.diagonal_svm(problems, alpha, norm=1), repeats)
    t_ref, w_ref = timed(lambda: np.stack([reference.diagonal_l1_svm(X[b], Z[b], a[b]) for b in range(5)]), repeats)
    value = np.abs(w_lib).sum(-1)
    row("5 l1 diagonal Att-SVMs, (5,2,12)", t_ref, t_lib,
        f"l1 norm rel. diff {(np.abs(value - np.abs(w_ref).sum(-1)) / value).max():.0e}, "
        f"largest entry diff {np.abs(w_lib - w_ref).max():.0e}",
        reference_is="cvxpy norm1 + Clarabel, rebuilt per problem")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats and smaller reference shares")
    args = parser.parse_args()
    attnsvm.setup(seed=0, loop_threads=1)  # one thread everywhere, but in `loop_threads`
    started = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    machine = (f"{_processor()}, {os.cpu_count()} cores, {torch.get_num_threads()} torch thread(s), compiled loops "
               f"on 1 thread but in the rows that say otherwise, Python "
               f"{platform.python_version()}, torch {torch.__version__}; load average at the start "
               f"{os.getloadavg()[0]:.1f}")
    print(f"machine: {machine}", flush=True)
    repeats = 1 if args.quick else 5
    single_solves(repeats)
    batch_of_solves(repeats)
    gd_floor()
    one_problem(repeats)
    gd_kq(repeats)
    e41(share=2 if args.quick else 10)
    e22(share=2 if args.quick else 10)
    e51_search(e51(share=2 if args.quick else 5))
    mirror(share=2 if args.quick else 10)
    polyak(repeats)
    diagonal_gd(share=1 if args.quick else 5)
    ntp_gd(repeats)
    spectral_svm(repeats)
    graph_svm(repeats)
    diagonal_svm(repeats)
    chapter("04r_local_experiments")
    loop_threads(repeats)  # last, so that no thread it starts runs beside a row timed on one
    table = _table(ROWS)
    print("\n" + table)
    store(machine, started, table)


def _table(rows: list) -> str:
    """The rows as Markdown: a table of the engines timed against a reference (what each reference does in a list
    of keys below it, so that the table fits a phone), then a table of those timed alone."""
    keys = {}
    for _, reference_is, *_ in rows:
        if reference_is != "-":
            keys.setdefault(reference_is, f"[{chr(ord('a') + len(keys))}]")
    against = ["| case | reference | library | ratio | same answer | note |", "|---|---|---|---|---|---|"]
    alone = ["| case | library | relative to | note |", "|---|---|---|---|"]
    for case, reference_is, ref, lib, ratio, agreement, note in rows:
        if ref != "-":
            key = f" {keys[reference_is]}" if reference_is in keys else ""
            against.append(f"| {case} | {ref}{key} | {lib} | {ratio} | {agreement} | {note} |")
        else:
            alone.append(f"| {case} | {lib} | {agreement} | {note} |")
    references = ["The references:", ""] + [f"- {key} {what}" for what, key in keys.items()]
    return "\n".join(against + [""] + references + ["", "Timed alone:", ""] + alone)


def store(machine: str, started: str, table: str) -> None:
    """Write the run to benchmarks/results.json (the status page shows it) and its table into README.md between
    the markers BENCH_START and BENCH_END, so that both show the same run."""
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    (ROOT / "benchmarks" / "results.json").write_text(json.dumps(
        {"machine": machine, "started": started, "load_at_end": load, "table": table}, indent=1) + "\n")
    readme = (ROOT / "README.md").read_text()
    start, end = readme.index(BENCH_START) + len(BENCH_START), readme.index(BENCH_END)
    (ROOT / "README.md").write_text(f"{readme[:start]}\n{table}\n{readme[end:]}")


BENCH_START, BENCH_END = "<!-- make bench: start -->", "<!-- make bench: end -->"


if __name__ == "__main__":
    main()
