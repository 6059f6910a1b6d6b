"""Search the first 500 accepted seeds of paper A's E5.1 for each d and store them (`make e51-seeds`).

Chapter 5 trains the stored runs; this search trains every candidate until 500 pass the official filter,
which at d = 10 means some 28,000 runs of 2000 steps, on every core (one joblib worker process each; joblib keeps
the processes from one d to the next). On a Dask cluster: run `search` inside
`joblib.parallel_config(backend="dask")` with `workers=None` (lib/README.md).
"""

import json
import os
import platform
import time
from pathlib import Path

import attnsvm
from attnsvm.experiments import relu_head

COUNT, DIMENSIONS = 500, (4, 6, 8, 10)


def main() -> None:
    attnsvm.setup(seed=0)
    stored = {"count": COUNT, "seeds": {}, "tried": {}, "seconds": {}}
    for d in DIMENSIONS:  # the first search's time includes starting the worker processes
        started = time.perf_counter()
        seeds, tried = relu_head.search(d, COUNT, workers=os.cpu_count())
        stored["seeds"][str(d)], stored["tried"][str(d)] = seeds, tried
        stored["seconds"][str(d)] = round(time.perf_counter() - started, 1)
        print(f"d = {d:>2}: {COUNT} accepted of {tried} candidates in {stored['seconds'][str(d)]} s")
    cpuinfo = Path("/proc/cpuinfo")
    models = [line.split(":", 1)[1].strip() for line in (cpuinfo.read_text().splitlines() if cpuinfo.exists() else [])
              if line.startswith("model name")]
    stored["machine"] = (f"{models[0] if models else platform.machine()}, {os.cpu_count()} cores, "
                         f"Python {platform.python_version()}")
    relu_head.SEEDS_FILE.write_text(json.dumps(stored) + "\n")
    print(f"wrote {relu_head.SEEDS_FILE}")


if __name__ == "__main__":
    main()
