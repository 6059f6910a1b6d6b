"""attnsvm pins the CPU code paths of numpy, torch and numba when it is imported first, in a bare environment
(no Makefile variables), and says when it could not.

Nothing here assumes a fact about the processor: where an expectation depends on one (AVX2, the OpenBLAS kernel
a processor gets by default), the test reads that fact first, and a test that needs AVX2 skips without it."""

import json
import os
import platform
import subprocess
import sys

import pytest

from attnsvm import codepaths

BARE = {name: value for name, value in os.environ.items() if name not in codepaths.PINS}


def _run(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-W", "always", "-c", code], env={**BARE, **env}, capture_output=True,
                          text=True, timeout=120, check=True)


def _report(code: str, **env) -> dict:
    return json.loads(_run(code + "\nimport json, attnsvm\nprint(json.dumps(attnsvm.codepaths.report()))",
                           **env).stdout.splitlines()[-1])


needs_avx2 = pytest.mark.skipif(not codepaths.PINNABLE, reason="not x86-64 Linux with AVX2: nothing is pinned here")


def _has_avx2_in_cpuinfo() -> bool:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            return any(line.startswith("flags") and "avx2" in line.split() for line in cpuinfo)
    except OSError:
        return False


def test_pinnable_exactly_on_x86_64_linux_with_avx2():
    expected = platform.system() == "Linux" and platform.machine() == "x86_64" and _has_avx2_in_cpuinfo()
    assert codepaths.PINNABLE == expected
    if not expected:  # elsewhere the report says why nothing is pinned
        assert set(codepaths.report()) == {"machine"}


def _openblas_default_kernel() -> list:
    """The kernels OpenBLAS picks for this processor when nothing pins it (numpy imported alone)."""
    code = "import numpy, threadpoolctl, json\n" \
           "print(json.dumps([l.get('architecture') for l in threadpoolctl.threadpool_info()" \
           " if l['internal_api'] == 'openblas']))"
    return json.loads(_run(code).stdout.splitlines()[-1])


@needs_avx2
def test_importing_attnsvm_first_pins_every_library_in_a_bare_environment():
    assert _report("import attnsvm") == {}
    got = _run("import attnsvm, numba, torch, numpy, os\n"
               "print(torch.backends.cpu.get_cpu_capability(), numba.config.CPU_NAME, os.environ['MKL_CBWR'])")
    assert got.stdout.split() == ["AVX2", "haswell", "AVX2,STRICT"]


@needs_avx2
def test_numpy_imported_first_is_reported_and_setup_warns():
    report = _report("import numpy")
    assert report["numpy"] == "imported before attnsvm, so the pins came too late for it", report
    # OpenBLAS's own choice may be the pinned kernel already (Haswell on an AMD EPYC without AVX-512): the report
    # names OpenBLAS exactly when its default differs from the pin.
    differs = any(kernel != codepaths.PINS["OPENBLAS_CORETYPE"] for kernel in _openblas_default_kernel())
    assert any("OpenBLAS runs" in reason for reason in report.values()) == differs, report
    warned = _run("import numpy, attnsvm\nattnsvm.setup()")
    assert "restart the kernel and import attnsvm before" in warned.stderr


@needs_avx2
def test_a_users_own_setting_is_kept_and_reported():
    report = _report("import attnsvm", NUMBA_CPU_NAME="generic")
    assert set(report) == {"NUMBA_CPU_NAME", "numba"}, report

