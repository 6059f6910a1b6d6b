"""One CPU code path for every numerical library, so that a chapter prints the same numbers on any x86-64 machine.

MKL (torch's BLAS), ATen's vector kernels, OpenBLAS (numpy's and scipy's) and Numba each pick their kernels for
the processor they run on; two processors then round some sums differently and a printed digit can change.
Importing `attnsvm` before numpy, torch and numba pins all four to the AVX2 code path (the environment
variables below, each read when its library loads) on x86-64 Linux machines that have AVX2. A variable the
user has set is left as it is. `report()` says which libraries run another code path, `setup()` warns about them.
"""

from __future__ import annotations

import os
import platform
import sys

__all__ = ["report", "PINS", "READERS", "PINNABLE", "LOADED_BEFORE"]

PINS = {"MKL_CBWR": "AVX2,STRICT", "ATEN_CPU_CAPABILITY": "avx2", "OPENBLAS_CORETYPE": "Haswell",
        "NUMBA_CPU_NAME": "haswell"}
# The modules whose import reads each variable: a pin set after them has no effect.
READERS = {"MKL_CBWR": "torch", "ATEN_CPU_CAPABILITY": "torch", "OPENBLAS_CORETYPE": "numpy",
           "NUMBA_CPU_NAME": "numba"}


def _has_avx2() -> bool:
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        return False
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            return any(line.startswith("flags") and " avx2" in line for line in cpuinfo)
    except OSError:
        return False


PINNABLE = _has_avx2()
# Libraries that were already loaded when attnsvm pinned the code paths (their pins came too late).
LOADED_BEFORE = sorted({READERS[name] for name in PINS if READERS[name] in sys.modules})
if PINNABLE:
    for _name, _value in PINS.items():
        os.environ.setdefault(_name, _value)


def report() -> dict[str, str]:
    """The libraries that do not run the pinned code path, each with the reason (empty: all pinned)."""
    if not PINNABLE:
        return {"machine": "not x86-64 Linux with AVX2: the code paths are not pinned"}
    import numba
    import threadpoolctl
    import torch

    problems = {}
    for name, value in PINS.items():
        if os.environ.get(name) != value:
            problems[name] = f"set to {os.environ.get(name)!r} instead of {value!r}"
    for module in LOADED_BEFORE:
        problems[module] = "imported before attnsvm, so the pins came too late for it"
    if torch.backends.cpu.get_cpu_capability() != "AVX2":
        problems["torch"] = f"ATen runs {torch.backends.cpu.get_cpu_capability()}, not AVX2"
    for library in threadpoolctl.threadpool_info():
        if library["internal_api"] == "openblas" and library.get("architecture") != PINS["OPENBLAS_CORETYPE"]:
            problems[os.path.basename(library["filepath"])] = f"OpenBLAS runs {library.get('architecture')}, not Haswell"
    if numba.config.CPU_NAME != PINS["NUMBA_CPU_NAME"]:
        problems["numba"] = f"Numba compiles for {numba.config.CPU_NAME or 'this processor'}, not haswell"
    return problems
