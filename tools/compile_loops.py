"""Compile every Numba loop of the library once into Numba's cache (lib/attnsvm/**/__pycache__): `make notebooks`
and `make test` run it first, so that pages executed side by side do not each compile the same loops (a first
compile takes seconds to a minute per loop; loading a cached one, a fraction of a second). Two processes, each
this script with `--group`, compile two groups of loops that share no compiled function side by side, each
importing `attnsvm` first (the CPU code path it pins).

    python tools/compile_loops.py
"""

import subprocess
import sys
import time

import attnsvm  # noqa: I001 (first: it pins the CPU code paths before numpy and torch load)
import torch

from attnsvm import causal, data, heads, train


# Two groups that share no compiled function (Numba's cache files take no lock): the loops that call the gradient
# of `_cpu_loop` (`_gradient`: W with both heads, as one function, mirror descent, (K, Q), Polyak steps), and the
# others. Cold, in `make test` beside the PDF build: about 130 s and 100 s (alone, one loop after another in one
# process: W 30 s, then mirror descent 24 s and (K, Q) 22 s, which find the gradient compiled).
GROUPS = (("gd on W", "gd on W, ReLU head", "mirror descent", "gd on (K, Q)", "Polyak steps"),
          ("ntp_gd", "gradient_flow", "gd_prompt", "diagonal_gd", "causal.gd"))


def compile_group(names: tuple) -> list[str]:
    """Run each named training on one problem and on a batch of two (the loops' two compiled entries)."""
    attnsvm.setup(seed=0)
    one, two = data.random_problem(3, 4, 3, seed=0), data.random_problem(3, 4, 3, seed=0, batch=2)
    six = causal.ntp_problem([[1, 2, 3, 0], [1, 2, 4, 0]], [1, 2], d=3, seed=0, K=5)
    sequences = {1: causal.random_problem(3, 4, 3, seed=0), 2: causal.random_problem(3, 4, 3, seed=0, batch=2)}
    ones = torch.ones(3, dtype=torch.float64)
    relu = heads.ReLU(torch.ones(3, 2, dtype=torch.float64))
    runs = {
        "gd on W": lambda p: train.gd(p, steps=2, lr=0.1),
        "gd on W, ReLU head": lambda p: train.gd(p, steps=2, lr=0.1, head=relu),
        "gd on (K, Q)": lambda p: train.gd(p, param="KQ", steps=2, lr=0.1),
        "mirror descent": lambda p: train.mirror_descent(p, p=1.75, steps=2, lr=0.1),
        "Polyak steps": lambda p: train.polyak(p, steps=2),
        "gd_prompt": lambda p: train.gd_prompt(p, torch.eye(3, dtype=torch.float64), steps=2, lr=0.1),
        "diagonal_gd": lambda p: [train.diagonal_gd(p, factorized=f, steps=2, lr=0.1, init=i)
                                  for f, i in ((True, (ones, ones)), (False, None))],
        "causal.gd": lambda p: causal.gd(sequences[p.X.dim() - 2], steps=2, lr=0.1),
        "ntp_gd": lambda p: causal.ntp_gd(six, steps=2, lr=0.1),
        "gradient_flow": lambda p: train.gradient_flow(p, param="diagonal", init=None, record_at=[0.1],
                                                       loss="exponential"),
    }
    lines = []
    for name in names:
        start = time.perf_counter()
        for problem in (one, two):
            runs[name](problem)
        lines.append(f"{name}: {time.perf_counter() - start:.1f} s")
    return lines


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--group":
        print("\n".join(compile_group(GROUPS[int(sys.argv[2])])), flush=True)
        return
    start = time.perf_counter()
    workers = [subprocess.Popen([sys.executable, __file__, "--group", str(k)], stdout=subprocess.PIPE, text=True)
               for k in range(len(GROUPS))]
    outputs = [worker.communicate()[0] for worker in workers]
    print("".join(outputs), end="", flush=True)
    failed = [k for k, worker in enumerate(workers) if worker.returncode]
    if failed:
        sys.exit(f"compiling the loops of group(s) {failed} failed (their errors are above)")
    print(f"every loop compiled or loaded in {time.perf_counter() - start:.1f} s", flush=True)


if __name__ == "__main__":
    main()
