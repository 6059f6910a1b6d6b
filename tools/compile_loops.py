"""Compile every Numba loop of the library once, one after the other, into Numba's cache (lib/attnsvm/**/
__pycache__): `make notebooks` and `make test` run it first, so that pages executed side by side do not each
compile the same loops (a first compile takes seconds per loop; loading a cached one, a fraction of a second).

    python tools/compile_loops.py
"""

import time

import attnsvm  # noqa: I001 (first: it pins the CPU code paths before numpy and torch load)
import torch

from attnsvm import causal, data, heads, train


def main() -> None:
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
    for name, run in runs.items():
        start = time.perf_counter()
        for problem in (one, two):
            run(problem)
        print(f"{name}: {time.perf_counter() - start:.1f} s", flush=True)


if __name__ == "__main__":
    main()
