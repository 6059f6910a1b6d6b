"""book/*.ipynb must be the executed twins of book_src/*.md, and every one of them a page of the book.

Read-only: nothing here writes a file. Every failure names the fix, `make notebooks` (which regenerates
book/ from book_src/ one way, md -> ipynb, and executes every notebook in place).
"""

from pathlib import Path

import jupytext
import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SRC, BOOK = ROOT / "book_src", ROOT / "book"
FIX = "run `make notebooks` (regenerates book/ from book_src/ and executes it); never edit book/ by hand"
# The cell metadata that changes how a cell is rendered or run; execution times, ids etc. are ignored.
METADATA_THAT_MATTERS = ("tags", "mystnb")

NAMES = sorted({p.stem for p in SRC.glob("*.md")} | {p.stem for p in BOOK.glob("*.ipynb")})


def toc_files(node) -> set[str]:
    """Every `root:` and `file:` entry of a _toc.yml tree, without its suffix."""
    if isinstance(node, list):
        return set().union(*map(toc_files, node)) if node else set()
    if not isinstance(node, dict):
        return set()
    found = {str(Path(node[key]).with_suffix("")) for key in ("root", "file") if key in node}
    return found.union(*(toc_files(value) for value in node.values()))


def cell_summary(cell) -> tuple:
    metadata = {key: cell.metadata[key] for key in METADATA_THAT_MATTERS if key in cell.metadata}
    return cell.cell_type, cell.source, metadata


def twins(name: str):
    src, nb = SRC / f"{name}.md", BOOK / f"{name}.ipynb"
    if not src.exists():
        pytest.fail(f"book/{name}.ipynb has no source book_src/{name}.md: restore the source, or delete the "
                    f"notebook (and its _toc.yml entry); then {FIX}")
    if not nb.exists():
        pytest.fail(f"book_src/{name}.md has no twin book/{name}.ipynb: {FIX}")
    return jupytext.read(src), nbformat.read(nb, as_version=4)


@pytest.mark.parametrize("name", NAMES)
def test_cells_match_source(name):
    source, notebook = twins(name)
    expected, actual = list(map(cell_summary, source.cells)), list(map(cell_summary, notebook.cells))
    assert len(actual) == len(expected), (
        f"book/{name}.ipynb has {len(actual)} cells, book_src/{name}.md has {len(expected)}: {FIX}")
    for index, (want, got) in enumerate(zip(expected, actual)):
        assert got == want, f"cell {index} of book/{name}.ipynb differs from book_src/{name}.md: {FIX}"


@pytest.mark.parametrize("name", NAMES)
def test_notebook_is_executed(name):
    _, notebook = twins(name)
    unexecuted = [i for i, cell in enumerate(notebook.cells)
                  if cell.cell_type == "code" and cell.get("execution_count") is None]
    assert not unexecuted, (
        f"book/{name}.ipynb: code cells {unexecuted} were never executed, so Binder and Colab users would "
        f"see no results: {FIX}")


@pytest.mark.parametrize("name", NAMES)
def test_notebook_shows_no_error(name):
    """An error output can come from a cell that still succeeded: a display formatter that raised, e.g. a figure
    that attnsvm.book.plots.png refused because its text would be too small to read. The figure is then missing."""
    _, notebook = twins(name)
    errors = [(i, output.get("ename"), str(output.get("evalue", ""))[:200]) for i, cell in enumerate(notebook.cells)
              if cell.cell_type == "code" for output in cell.get("outputs", []) if output.output_type == "error"]
    assert not errors, f"book/{name}.ipynb shows errors {errors}: fix them, then {FIX}"


@pytest.mark.parametrize("name", NAMES)
def test_notebook_carries_no_widget_state(name):
    """The explorers are frames in the page; widget state left in a notebook's metadata would be rendered as
    dead controls."""
    _, notebook = twins(name)
    assert "widgets" not in notebook.metadata, f"book/{name}.ipynb carries ipywidgets state in its metadata: {FIX}"


@pytest.mark.parametrize("name", sorted(p.stem for p in BOOK.glob("*.ipynb")))
def test_notebook_is_in_toc(name):
    listed = toc_files(yaml.safe_load((ROOT / "_toc.yml").read_text()))
    assert f"book/{name}" in listed, (
        f"book/{name}.ipynb is not a page of the book: add `- file: book/{name}` to _toc.yml "
        f"(or delete book_src/{name}.md and book/{name}.ipynb), then {FIX}")
