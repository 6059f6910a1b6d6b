"""The public API, as the reference pages (api/) show it: every function, class and method a user calls has a
docstring with an example (run by `make test` as a doctest), type hints on its signature, and a place on a page."""

import importlib
import inspect
from pathlib import Path

import pytest

import attnsvm

ROOT = Path(__file__).resolve().parents[2]
# Public namespaces and the API page that documents each.
PAGES = {"linear": "linear", "data": "data", "model": "model", "heads": "heads", "theory": "theory", "svm": "svm",
         "train": "train", "causal": "causal", "tensor": "tensor", "experiments.relu_head": "experiments",
         "experiments.svm_rank": "experiments", "book.plots": "book", "book.widgets": "book",
         "book.exercises": "book", "book.schematics": "book"}


def _public():
    """(qualified name, object) for every public function, class and public method of the namespaces."""
    items = [("setup", attnsvm.setup), ("environment", attnsvm.environment)]
    for namespace in PAGES:
        module = importlib.import_module(f"attnsvm.{namespace}")
        for name in module.__all__:
            value = getattr(module, name)
            if inspect.isfunction(value) or inspect.isclass(value):
                items.append((f"{namespace}.{name}", value))
            if inspect.isclass(value) and not issubclass(value, BaseException):
                items += [(f"{namespace}.{name}.{key}", member) for key, member in vars(value).items()
                          if not key.startswith("_") and inspect.isfunction(member)]
    return items


PUBLIC = _public()


@pytest.mark.parametrize("name, value", PUBLIC, ids=[name for name, _ in PUBLIC])
def test_has_a_docstring_with_an_example(name, value):
    doc = inspect.getdoc(value) or ""
    assert doc, f"{name} has no docstring"
    if not (inspect.isclass(value) and issubclass(value, BaseException)):
        assert ">>>" in doc, f"{name}'s docstring has no example (a >>> line that `make test` runs as a doctest)"


@pytest.mark.parametrize("name, value", [(n, v) for n, v in PUBLIC if inspect.isfunction(v)],
                         ids=[n for n, v in PUBLIC if inspect.isfunction(v)])
def test_has_type_hints(name, value):
    signature = inspect.signature(value)
    bare = [p.name for p in signature.parameters.values() if p.annotation is inspect.Parameter.empty
            and p.name not in ("self", "cls") and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    assert not bare, f"{name}: parameters without a type hint: {bare}"
    assert signature.return_annotation is not inspect.Signature.empty, f"{name}: no return type hint"


@pytest.mark.parametrize("namespace", sorted(set(PAGES)))
def test_every_namespace_has_its_api_page(namespace):
    page = ROOT / "api" / f"{PAGES[namespace]}.md"
    assert f"automodule:: attnsvm.{namespace}" in page.read_text(), f"api/{page.name} does not document {namespace}"
