"""Every public function of the science (the names each public namespace exports in `__all__`) is thrown bad and
extreme arguments by one of the tests/lib/test_bad_input_*.py files, each of which lists what it covers in
`COVERED`."""

import importlib
import inspect
import sys
from pathlib import Path

import attnsvm

# The public namespaces of the science: the book's helpers (attnsvm.book) and codepaths are not science.
SCIENCE = ("causal", "data", "experiments.relu_head", "experiments.svm_rank", "heads", "linear", "model", "svm",
           "tensor", "theory", "train")
HERE = Path(__file__).parent


def public_functions() -> set[str]:
    names = set()
    for namespace in SCIENCE:
        module = importlib.import_module(f"attnsvm.{namespace}")
        names |= {f"{namespace}.{name}" for name in module.__all__ if inspect.isfunction(getattr(module, name))}
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


def test_the_science_namespaces_are_the_library_minus_the_book():
    listed = {name for name in attnsvm.__all__ if not name[0].isupper() and not name.startswith("_")}
    book = {"book", "codepaths", "setup", "environment"}
    assert listed - book == {name.split(".")[0] for name in SCIENCE}
