"""attnsvm pins the CPU code paths of numpy, torch and numba when it is imported first, in a bare environment
(no Makefile variables), and says when it could not."""

import json
import os
import subprocess
import sys

from attnsvm import codepaths

BARE = {name: value for name, value in os.environ.items() if name not in codepaths.PINS}


def _run(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-W", "always", "-c", code], env={**BARE, **env}, capture_output=True,
                          text=True, timeout=120, check=True)


def _report(code: str, **env) -> dict:
    return json.loads(_run(code + "\nimport json, attnsvm\nprint(json.dumps(attnsvm.codepaths.report()))",
                           **env).stdout.splitlines()[-1])


def test_this_machine_can_be_pinned():
    # The book's machines are x86-64 Linux with AVX2; elsewhere the report says why nothing is pinned.
    assert codepaths.PINNABLE, codepaths.report()


def test_importing_attnsvm_first_pins_every_library_in_a_bare_environment():
    assert _report("import attnsvm") == {}
    got = _run("import attnsvm, numba, torch, numpy, os\n"
               "print(torch.backends.cpu.get_cpu_capability(), numba.config.CPU_NAME, os.environ['MKL_CBWR'])")
    assert got.stdout.split() == ["AVX2", "haswell", "AVX2,STRICT"]


def test_numpy_imported_first_is_reported_and_setup_warns():
    report = _report("import numpy")
    assert "numpy" in report and any("OpenBLAS runs" in reason for reason in report.values()), report
    warned = _run("import numpy, attnsvm\nattnsvm.setup()")
    assert "restart the kernel and import attnsvm before" in warned.stderr


def test_a_users_own_setting_is_kept_and_reported():
    report = _report("import attnsvm", NUMBA_CPU_NAME="generic")
    assert set(report) == {"NUMBA_CPU_NAME", "numba"}, report

