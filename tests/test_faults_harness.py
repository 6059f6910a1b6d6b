"""The planted-fault harness of `make faults` (tools/faults.py): its faults install, reach a fresh process
through the import hook (the compiled engine included), and a failing assert is reported with its line."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "faults.py"


def _load():
    spec = importlib.util.spec_from_file_location("faults_under_test", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


faults = _load()


def _python(code: str, fault: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess, Path]:
    """Run `code` in a fresh interpreter with `fault` armed by the harness's sitecustomize; returns the process
    and the mark file the hook writes when it installs the fault."""
    hook, mark = tmp_path / "hook", tmp_path / "mark"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(faults.SITECUSTOMIZE)
    env = dict(os.environ, PYTHONPATH=str(hook), ATTNSVM_FAULT=fault, ATTNSVM_FAULTS_FILE=str(TOOL),
               ATTNSVM_FAULT_MARK=str(mark))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300), mark


def test_at_least_fifteen_documented_faults_each_with_a_catcher():
    planted = [f for f in faults.FAULTS.values() if not f.is_control]
    assert len(planted) >= 15
    for f in planted:
        assert len(f.doc) > 30 and f.catchers, f.name
        for target in f.catchers:
            assert target in faults.CHAPTERS or (ROOT / target.split("::")[0]).exists(), (f.name, target)


def test_every_fault_installs(tmp_path):
    """All faults, installed one after the other into one imported library, raise nothing (each rebinds a name
    that exists: `rebind` raises where a function is bound nowhere)."""
    code = ("import attnsvm, importlib.util, sys\n"
            f"spec = importlib.util.spec_from_file_location('f', {str(TOOL)!r})\n"
            "f = importlib.util.module_from_spec(spec); sys.modules['f'] = f; spec.loader.exec_module(f)\n"
            "for name in f.FAULTS: f.FAULTS[name].install()\n"
            "print('installed', len(f.FAULTS))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert f"installed {len(faults.FAULTS)}" in proc.stdout


def test_the_hook_plants_the_fault_when_a_chapter_imports_the_library(tmp_path):
    """As a chapter does: find_spec first (the install-if-missing cell), then `from attnsvm import ...`."""
    code = ("import importlib.util; assert importlib.util.find_spec('attnsvm') is not None\n"
            "import torch\nfrom attnsvm import tensor\n"
            "print(tensor.vec(torch.arange(4.0).reshape(2, 2)).tolist())")
    proc, mark = _python(code, "vec_column_major", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[0.0, 2.0, 1.0, 3.0]"  # column-major: the fault is in
    assert mark.read_text().split()[1] == "vec_column_major"
    proc, _ = _python(code, "none", tmp_path)
    assert proc.stdout.strip() == "[0.0, 1.0, 2.0, 3.0]"  # the baseline leaves the library alone


def test_a_gradient_fault_reaches_training_on_the_cpu(tmp_path):
    """The compiled engine computes its own gradient; under a gradient fault train.gd must run the faulty torch
    loop: here normalized steps stop having length lr."""
    code = ("from attnsvm import data, train\n"
            "p = data.random_problem(3, 4, 5, seed=0)\n"
            "run = train.gd(p, steps=1, lr=0.1)\n"
            "print(float((run.W[1] - run.W[0]).norm()))")
    proc, _ = _python(code, "gd_not_normalized", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert abs(float(proc.stdout) - 0.1) > 1e-3
    for control in ("none", "torch_loop"):  # the library's engines, and the torch loop alone, step by lr
        proc, _ = _python(code, control, tmp_path)
        assert abs(float(proc.stdout) - 0.1) < 1e-12


def test_a_failing_assert_is_reported_with_its_cell_and_line(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_code_cell("# check\ny = x + 1\nassert y == 3")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path, report = tmp_path / "nb.ipynb", tmp_path / "report.json"
    nbformat.write(nb, path)
    faults.execute_notebook(path, report)
    result = json.loads(report.read_text())
    assert result["status"] == "assert"
    assert "cell `y = x + 1`" in result["detail"] and "line `assert y == 3`" in result["detail"]


def test_list_option(tmp_path):
    proc = subprocess.run([sys.executable, str(TOOL), "--list"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    planted = [f for f in faults.FAULTS.values() if not f.is_control]
    assert proc.stdout.count("expected catchers:") == len(planted)
