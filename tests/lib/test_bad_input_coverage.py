"""Every public function of the science modules is thrown bad and extreme arguments by one of the
tests/lib/test_bad_input_*.py files, each of which lists what it covers in `COVERED`."""

import importlib
import inspect
import sys
from pathlib import Path

import attnsvm

SCIENCE = ("causal", "compiled", "data", "gradients", "heads", "initial", "model", "multitoken", "nuclear", "path",
           "ranks", "svm", "tensor", "theory", "train")
HERE = Path(__file__).parent


def public_functions() -> set[str]:
    names = set()
    for module_name in SCIENCE:
        module = importlib.import_module(f"attnsvm.{module_name}")
        for name, value in vars(module).items():
            if (not name.startswith("_") and inspect.isfunction(value)
                    and value.__module__ == module.__name__):
                names.add(f"{module_name}.{name}")
    return names


def covered() -> set[str]:
    sys.path.insert(0, str(HERE))
    try:
        files = sorted(HERE.glob("test_bad_input_*.py"))
        return set().union(*(importlib.import_module(f.stem).COVERED for f in files if f.stem != Path(__file__).stem))
    finally:
        sys.path.remove(str(HERE))


def test_every_public_function_meets_bad_input():
    missing = sorted(public_functions() - covered())
    assert not missing, f"public functions no bad-input test covers (add them to a COVERED set): {missing}"


def test_the_science_modules_are_the_library_minus_the_book():
    listed = {name for name in attnsvm.__all__ if not name[0].isupper() and not name.startswith("_")}
    book = {"codepaths", "exercises", "plots", "widgets", "setup", "environment", "worker_pool"}
    assert listed - book <= set(SCIENCE)
