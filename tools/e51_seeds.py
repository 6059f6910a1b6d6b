"""Search the first 500 accepted seeds of paper A's E5.1 for each d and store them (`make e51-seeds`).

Chapter 5 trains the stored runs; this search trains every candidate until 500 pass the official filter,
which at d = 10 means some 28,000 runs of 2000 steps, on every core (one process each).
"""

import json
import os
import platform
import time
from pathlib import Path

import attnsvm
from attnsvm.experiments import relu_head as multitoken

COUNT, DIMENSIONS = 500, (4, 6, 8, 10)


def main() -> None:
    attnsvm.setup(seed=0)
    stored = {"count": COUNT, "seeds": {}, "tried": {}, "seconds": {}}
    with attnsvm.worker_pool(os.cpu_count()) as pool:  # started once (the first search's time includes it)
        for d in DIMENSIONS:
            started = time.perf_counter()
            seeds, tried = multitoken.search(d, COUNT, workers=os.cpu_count(), pool=pool)
            stored["seeds"][str(d)], stored["tried"][str(d)] = seeds, tried
            stored["seconds"][str(d)] = round(time.perf_counter() - started, 1)
            print(f"d = {d:>2}: {COUNT} accepted of {tried} candidates in {stored['seconds'][str(d)]} s")
    cpuinfo = Path("/proc/cpuinfo")
    models = [line.split(":", 1)[1].strip() for line in (cpuinfo.read_text().splitlines() if cpuinfo.exists() else [])
              if line.startswith("model name")]
    stored["machine"] = (f"{models[0] if models else platform.machine()}, {os.cpu_count()} cores, "
                         f"Python {platform.python_version()}")
    multitoken.SEEDS_FILE.write_text(json.dumps(stored) + "\n")
    print(f"wrote {multitoken.SEEDS_FILE}")


if __name__ == "__main__":  # the search starts worker processes, which import this file
    main()
