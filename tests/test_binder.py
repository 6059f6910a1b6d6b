"""Binder's environment (binder/) must pin exactly the versions that build and test the book."""

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def pins(path: Path) -> dict:
    """{package name (lower case): version} of the `name==version` lines of a requirements file."""
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return {name.lower(): version for name, _, version in (line.partition("==") for line in lines if "==" in line)}


BINDER = pins(ROOT / "binder" / "requirements.txt")
ROOT_PINS = pins(ROOT / "requirements.txt")


@pytest.mark.parametrize("package", sorted(BINDER))
def test_binder_pins_match_the_book_environment(package):
    assert ROOT_PINS.get(package) == BINDER[package], (
        f"binder/requirements.txt pins {package}=={BINDER[package]} but requirements.txt pins "
        f"{ROOT_PINS.get(package)}: make them equal")


def test_binder_pins_every_library_dependency():
    project = tomllib.loads((ROOT / "lib" / "pyproject.toml").read_text())["project"]
    specs = project["dependencies"] + project["optional-dependencies"]["book"]  # Binder runs the book
    needed = {re.split(r"[<>=!~ ;\[]", spec)[0].lower() for spec in specs}
    assert needed <= set(BINDER), f"binder/requirements.txt misses {sorted(needed - set(BINDER))}"


def test_binder_installs_the_library_and_python_311():
    assert "pip install --no-deps -e ./lib" in (ROOT / "binder" / "postBuild").read_text()
    assert (ROOT / "binder" / "runtime.txt").read_text().strip() == "python-3.11"


def test_binder_start_pins_the_code_paths_of_the_library():
    from attnsvm.codepaths import PINS

    start = (ROOT / "binder" / "start").read_text()
    assert start.rstrip().endswith('exec "$@"')
    exported = dict(re.findall(r"(\w+)=(\S+)", start.split("export", 1)[1].splitlines()[0]))
    assert exported == PINS, f"binder/start exports {exported}, attnsvm.codepaths.PINS is {PINS}: make them equal"
