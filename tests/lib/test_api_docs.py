"""The public API, as the reference pages (api/) show it: every function, class and method a user calls has a
docstring with an example (run by `make test` as a doctest), type hints on its signature, and a place on a page;
its docstring is numpydoc (sphinx.ext.napoleon renders its sections as lists), with a Parameters section that lists
exactly the parameters of its signature, in order, and a Returns (or Yields) section where it returns a value."""

import importlib
import re
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


def _sections(doc: str) -> dict[str, list[str]]:
    """The numpydoc sections of a docstring: title -> the lines at the section's own indentation (for Parameters,
    Returns, Raises: the `name : type` lines, one per entry)."""
    lines, sections, title = doc.splitlines(), {}, None
    for k, line in enumerate(lines):
        if line.strip() and k + 1 < len(lines) and set(lines[k + 1].strip()) == {"-"}:
            title = line.strip()
            sections[title] = []
        elif title and line.strip() and not line[0].isspace() and set(line.strip()) != {"-"}:
            sections[title].append(line.strip())
    return sections


def _parameters(value) -> list[str]:
    """The names of a callable's parameters as a caller passes them (no self), [] where it has no signature."""
    try:
        signature = inspect.signature(value)
    except ValueError:  # a builtin's __init__ (an exception class without one of its own)
        return []
    return [("*" if p.kind is p.VAR_POSITIONAL else "**" if p.kind is p.VAR_KEYWORD else "") + p.name
            for p in signature.parameters.values() if p.name not in ("self", "cls")]


@pytest.mark.parametrize("name, value", PUBLIC, ids=[name for name, _ in PUBLIC])
def test_parameters_section_lists_the_signature(name, value):
    sections = _sections(inspect.getdoc(value) or "")
    documented = [entry.split(" : ")[0].strip() for entry in sections.get("Parameters", [])]
    assert documented == _parameters(value), (f"{name}: its Parameters section lists {documented}, its signature "
                                              f"{_parameters(value)} (numpydoc: one `name : type` line each)")
    assert "Parameters" in sections or not documented


@pytest.mark.parametrize("name, value", [(n, v) for n, v in PUBLIC if inspect.isfunction(v)],
                         ids=[n for n, v in PUBLIC if inspect.isfunction(v)])
def test_returns_section_where_a_value_is_returned(name, value):
    returns = inspect.signature(value).return_annotation
    sections = _sections(inspect.getdoc(value) or "")
    if returns not in (None, "None"):
        assert "Returns" in sections or "Yields" in sections, f"{name} returns {returns} but has no Returns section"
    assert list(sections)[-1] == "Examples", f"{name}: the Examples section must come last, got {list(sections)}"


@pytest.mark.parametrize("namespace", sorted(set(PAGES)))
def test_every_namespace_has_its_api_page(namespace):
    page = ROOT / "api" / f"{PAGES[namespace]}.md"
    assert f"automodule:: attnsvm.{namespace}" in page.read_text(), f"api/{page.name} does not document {namespace}"


def test_the_api_pages_escape_prose_but_never_math():
    """assets/sphinx/api_docstrings.py takes | and * in prose literally, but not inside a :math: role, even one that
    runs over a line break (ten roles did, and came out as broken LaTeX in the PDF: \\\\| and \\*)."""
    import sys
    sys.path.insert(0, str(ROOT / "assets" / "sphinx"))
    try:
        import api_docstrings
    finally:
        sys.path.remove(str(ROOT / "assets" / "sphinx"))
    lines = ["a |x| and *y*, and :math:`\\|w - w^*\\| \\le", "    \\sqrt{2}` then |z|"]
    api_docstrings._escape(None, None, None, None, None, lines)
    assert lines == ["a \\|x\\| and \\*y\\*, and :math:`\\|w - w^*\\| \\le", "    \\sqrt{2}` then \\|z\\|"]
    roles = 0
    for _, value in PUBLIC:
        lines = (inspect.getdoc(value) or "").splitlines()
        api_docstrings._escape(None, None, None, None, None, lines)
        for math in re.findall(r":math:`([^`]*)`", "\n".join(lines)):
            roles += 1
            assert "\\*" not in math and "\\\\|" not in math, math
    assert roles > 700
