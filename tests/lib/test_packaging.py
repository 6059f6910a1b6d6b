"""attnsvm as a package: the science imports without the book's plotting stack, worker processes stay lean,
and the wheel installs and runs its quickstart in a clean environment without the `book` extra."""

import importlib
import inspect
import pkgutil
import shutil
import subprocess
import sys
import textwrap
import tomllib
from importlib.metadata import PackageNotFoundError, distribution, requires
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import attnsvm

ROOT = Path(__file__).resolve().parents[2]
BOOK_ONLY = ("matplotlib", "IPython")


def _python(code: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=300, **kwargs)


def test_import_loads_no_plotting_stack_until_a_book_module_is_used():
    run = _python("""
        import sys, attnsvm
        before = sorted({m.split('.')[0] for m in sys.modules} & {'matplotlib', 'IPython'})
        attnsvm.book.plots.PALETTE
        after = sorted({m.split('.')[0] for m in sys.modules} & {'matplotlib', 'IPython'})
        print(before, after)
    """)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[] ['IPython', 'matplotlib']"


def _book_modules_after_a_task() -> list[str]:
    """In a worker process: run a grid point as the experiments' tasks run, then list the book's modules loaded."""
    attnsvm.experiments.svm_rank.grid([(2, 3, 3)], count=1, max_draws=40, workers=1)
    return sorted({name.split(".")[0] for name in sys.modules} & set(BOOK_ONLY))


def test_worker_processes_do_not_import_matplotlib():
    """The experiments' tasks run in joblib's worker processes (loky), which load the science without the book."""
    from joblib import Parallel, delayed

    assert Parallel(n_jobs=2)(delayed(_book_modules_after_a_task)() for _ in range(2)) == [[], []]


def test_errors_are_exported():
    assert issubclass(attnsvm.SolverError, RuntimeError) and issubclass(attnsvm.InfeasibleSVM, ValueError)
    assert {"SolverError", "InfeasibleSVM"} <= set(attnsvm.__all__)


def _closure(names) -> set[str]:
    """The installed distributions that `names` need (their requirements, recursively, without extras)."""
    seen, todo = set(), list(names)
    while todo:
        name = todo.pop()
        try:
            key = distribution(name).metadata["Name"].lower()
        except PackageNotFoundError:
            continue  # an optional or platform-specific requirement that is not installed
        if key in seen:
            continue
        seen.add(key)
        for spec in requires(name) or []:
            requirement = Requirement(spec)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return seen


def _top_level(name: str) -> set[Path]:
    """The files and folders a distribution puts at the top of site-packages."""
    dist = distribution(name)
    return {Path(dist.locate_file(Path(f.parts[0]))) for f in dist.files or [] if not f.parts[0].startswith("..")}


@pytest.mark.skipif(sys.platform != "linux", reason="the clean environment is assembled with symlinks")
def test_wheel_installs_without_the_book_extra_and_runs_the_quickstart(tmp_path):
    """Build the wheel, install it (no dependencies) into a new virtual environment that sees exactly the
    installed distributions the core requirements need (symlinked), not matplotlib or IPython, and run the
    quickstart of lib/README.md there."""
    wheels, source = tmp_path / "wheels", tmp_path / "lib"  # built from a copy: nothing written into the repo
    shutil.copytree(ROOT / "lib", source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                            "-w", wheels, source], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    (wheel,) = wheels.glob("attnsvm-*.whl")
    core = [Requirement(spec).name for spec in tomllib.loads((ROOT / "lib" / "pyproject.toml").read_text())
            ["project"]["dependencies"]]
    needed = _closure(core)
    assert not needed & {"matplotlib", "ipython"}, f"the core requirements pull in the book's stack: {needed}"
    deps = tmp_path / "deps"
    deps.mkdir()
    for name in needed:
        for path in _top_level(name):
            if path.exists() and not (deps / path.name).exists():
                (deps / path.name).symlink_to(path)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    install = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                              "--target", site, wheel], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr
    (site / "core_dependencies.pth").write_text(f"{deps}\n")
    assert (site / "attnsvm" / "py.typed").is_file()
    assert any(p.name == "LICENSE" for p in site.glob("attnsvm-*.dist-info/**/*"))
    quickstart = (ROOT / "lib" / "README.md").read_text().split("```python\n", 1)[1].split("```", 1)[0]
    check = """
        import importlib.util, sys
        assert importlib.util.find_spec("matplotlib") is None and importlib.util.find_spec("IPython") is None
        import attnsvm
        assert attnsvm.__file__.startswith(sys.prefix), attnsvm.__file__
    """
    run = subprocess.run([python, "-c", textwrap.dedent(check) + quickstart], capture_output=True, text=True,
                         timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert 0.9 < float(run.stdout.strip().splitlines()[-1].split("(")[-1].split(")")[0]) <= 1 + 1e-12


# Every module of the package, private ones included (their `__all__` says what the package re-exports).
MODULES = sorted(info.name.removeprefix("attnsvm.") for info in pkgutil.walk_packages(attnsvm.__path__, "attnsvm."))


@pytest.mark.parametrize("name", MODULES)
def test_every_module_lists_its_public_api(name):
    """`__all__` names every public function and class a module defines, and only names that exist."""
    module = importlib.import_module(f"attnsvm.{name}")
    defined = {key for key, value in vars(module).items() if not key.startswith("_")
               and (inspect.isfunction(value) or inspect.isclass(value)) and value.__module__ == module.__name__}
    assert defined <= set(module.__all__), f"attnsvm.{name}.__all__ misses {sorted(defined - set(module.__all__))}"
    assert all(hasattr(module, key) for key in module.__all__)
