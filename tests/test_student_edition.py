"""The student edition (`make student`): solutions removed, exercise stubs left, and every chapter still runs,
with each coding exercise's self-check reporting the stub as not implemented yet."""

import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted(path.stem for path in (ROOT / "book_src").glob("*.md"))
sys.path.insert(0, str(ROOT / "tools"))
from student_edition import strip_solutions  # noqa: E402


@pytest.fixture(scope="session")
def edition(tmp_path_factory):
    folder = tmp_path_factory.mktemp("student")
    subprocess.run([sys.executable, ROOT / "tools" / "student_edition.py", folder], check=True, capture_output=True)
    return folder


def source(name: str) -> str:
    return (ROOT / "book_src" / f"{name}.md").read_text()


def test_stripping_removes_both_forms_of_solution_and_keeps_everything_else():
    text = ("intro\n```{exercise} E\n:label: ex-a\n\nDo it.\n```\n\n```{solution} ex-a\n:class: dropdown\n\n"
            "Done.\n```\n\n```{code-cell} ipython3\ndef f():\n    raise NotImplementedError\n```\n\n"
            "````{solution-start} ex-a\n:class: dropdown\n````\n\nText.\n\n```{code-cell} ipython3\ndef f():\n"
            "    return 1\n```\n\n````{solution-end}\n````\n\n```{code-cell} ipython3\ncheck(f)\n```\n")
    stripped = strip_solutions(text)
    assert "solution" not in stripped and "Done." not in stripped and "return 1" not in stripped
    for kept in ("intro", "{exercise} E", "Do it.", "raise NotImplementedError", "check(f)"):
        assert kept in stripped


@pytest.mark.parametrize("name", CHAPTERS)
def test_edition_has_exercises_and_stubs_but_no_solutions(edition, name):
    cells = nbformat.read(edition / f"{name}.ipynb", as_version=4).cells
    text = "\n".join(cell.source for cell in cells)
    assert "{solution" not in text, f"{name}: a solution survived in the student edition"
    assert text.count("{exercise}") == source(name).count("{exercise}"), f"{name}: an exercise was lost"
    assert text.count("exercises.check(") == source(name).count("exercises.check("), f"{name}: a self-check was lost"


@pytest.mark.parametrize("name", [name for name in CHAPTERS if "exercises.check(" in source(name)])
def test_edition_runs_and_reports_the_stubs_as_not_implemented(edition, name):
    notebook = nbformat.read(edition / f"{name}.ipynb", as_version=4)
    NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(edition)}}).execute()
    checks = [cell for cell in notebook.cells if cell.cell_type == "code" and "exercises.check(" in cell.source]
    for cell in checks:
        printed = "".join(output.get("text", "") for output in cell.outputs)
        assert re.search(r"not implemented yet", printed), f"{name}: the self-check printed {printed!r}"
