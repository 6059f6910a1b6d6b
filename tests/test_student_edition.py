"""The student edition (`make student`): solutions removed and exercise stubs left in every chapter; for every
chapter, the conditions checked on the code under which its edition runs as the book does (below); and one
chapter's edition (09_rates) executed, each coding exercise's self-check reporting its stub as not implemented yet.

Every chapter of the book executes in full under nbval; the student edition is the same notebook less its
solution cells. So it runs as the book does if no kept cell reads a name that only a solution bound and no
solution changes an object a kept cell made (checked here on the code, with Python's symbol tables, for every
chapter), and its self-checks get the stubs (checked here too; `exercises.check` on a stub prints "not
implemented yet", tests/lib/test_exercises.py). One chapter's edition is executed end to end as well: executing
all of them again would double the time nbval already spends on the book.
"""

import ast
import re
import subprocess
import symtable
import sys
from pathlib import Path

import jupytext
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


def code_cells(text: str) -> list[str]:
    """The code cells of a MyST notebook, IPython magics replaced by `pass`."""
    cells = [cell.source for cell in jupytext.reads(text, fmt="md:myst").cells if cell.cell_type == "code"]
    cells = [re.sub(r"\n{3,}", "\n\n", cell) for cell in cells]  # as strip_solutions leaves them
    return [re.sub(r"^(\s*)[%!].*$", r"\1pass", cell, flags=re.M) for cell in cells]


def solution_flags(text: str) -> list[tuple[str, bool]]:
    """(cell source, removed in the student edition) for every code cell of a MyST notebook, in order."""
    kept = code_cells(strip_solutions(text))
    flags = []
    for cell in code_cells(text):
        is_kept = bool(kept) and kept[0] == cell
        kept = kept[1:] if is_kept else kept
        flags.append((cell, not is_kept))
    assert not kept, "a cell of the student edition is not a cell of the book"
    return flags


def module_names(cell: str) -> tuple[set[str], set[str]]:
    """(names the cell binds at module level, module-level names it reads, in functions too)."""
    table = symtable.symtable(cell, "<cell>", "exec")
    bound = {s.get_name() for s in table.get_symbols() if s.is_assigned() or s.is_imported() or s.is_namespace()}
    read, tables = set(), [table]
    while tables:
        scope = tables.pop()
        tables += scope.get_children()
        read |= {s.get_name() for s in scope.get_symbols() if s.is_referenced()
                 and (scope is table or s.is_global() or s.is_declared_global())}
    return bound, read


def outer_mutations(cell: str) -> set[str]:
    """Module-level names whose objects the cell changes without binding them itself (x[i] = ..., x.a = ...,
    x += ...), at module level or from inside its functions."""
    table = symtable.symtable(cell, "<cell>", "exec")
    bound, _ = module_names(cell)
    changed = set()

    def visit(nodes, scope):
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                name = getattr(node, "name", "lambda")
                children = [t for t in scope.get_children() if t.get_name() == name]
                if children:
                    visit(node.body if isinstance(node.body, list) else [node.body], children[0])
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, ast.AugAssign) else []
            for target in targets:
                while isinstance(target, (ast.Subscript, ast.Attribute)):
                    target = target.value
                if isinstance(target, ast.Name):
                    outer = scope is table or scope.lookup(target.id).is_global()
                    if outer and (isinstance(node, ast.AugAssign) or target.id not in bound):
                        changed.add(target.id)
            visit(ast.iter_child_nodes(node), scope)

    visit(ast.parse(cell).body, table)
    return changed


def test_the_dependency_check_catches_a_kept_cell_that_needs_a_solution():
    assert "answer" in module_names("print(answer)")[1]
    assert "answer" not in module_names("def f(answer):\n    return answer")[1]
    assert "data" in module_names("def f():\n    return data")[1]
    assert outer_mutations("data[0] = 1") == {"data"} and not outer_mutations("data = [1]\ndata[0] = 2")
    assert outer_mutations("def f():\n    data[0] = 1") == {"data"}
    assert not outer_mutations("def f(data):\n    data[0] = 1")


def check_no_kept_cell_needs_a_solution(text: str, name: str) -> None:
    """In the notebook's order, no cell kept in the student edition reads a name bound only by solutions so
    far, and no solution changes an object that a kept cell bound."""
    from_solution, from_kept = set(), set()  # names bound only by solutions so far; bound by kept cells
    for cell, removed in solution_flags(text):
        bound, read = module_names(cell)
        if removed:
            changed = outer_mutations(cell) & from_kept
            assert not changed, f"{name}: a solution changes {sorted(changed)}, made outside it:\n{cell}"
            from_solution |= bound - from_kept
        else:
            needed = sorted(read & from_solution)
            assert not needed, f"{name}: a kept cell reads {needed}, bound only in a solution:\n{cell}"
            from_solution -= bound
            from_kept |= bound


@pytest.mark.parametrize("name", CHAPTERS)
def test_no_kept_cell_needs_a_solution(name):
    check_no_kept_cell_needs_a_solution(source(name), name)


SOLVED = ("```{code-cell} ipython3\ndata = [1, 2]\n```\n\n````{solution-start} ex-a\n````\n\n"
          "```{code-cell} ipython3\n{solution}\n```\n\n````{solution-end}\n````\n\n"
          "```{code-cell} ipython3\nprint(data)\n{after}\n```\n")


@pytest.mark.parametrize("solution, after", [("answer = 42", "print(answer)"), ("data[0] = 0", ""),
                                             ("def f():\n    data.x = 0", "")])
def test_the_dependency_check_fails_on_a_notebook_that_needs_its_solutions(solution, after):
    text = SOLVED.replace("{solution}", solution).replace("{after}", after)
    with pytest.raises(AssertionError, match="bound only in a solution|changes"):
        check_no_kept_cell_needs_a_solution(text, "planted")
    check_no_kept_cell_needs_a_solution(SOLVED.replace("{solution}", "answer = 42").replace("{after}", ""), "ok")


@pytest.mark.parametrize("name", [name for name in CHAPTERS if "exercises.check(" in source(name)])
def test_every_self_check_gets_a_stub(name):
    """In the student edition the function each `exercises.check` names was last defined by a stub that raises
    NotImplementedError."""
    defined = {}
    for cell in code_cells(strip_solutions(source(name))):
        tree = ast.parse(cell)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "check":
                function = node.args[0].value  # the name of the exercise's function
                stub = defined.get(function)
                assert stub is not None, f"{name}: {function} is checked before it is defined"
                assert any(isinstance(n, ast.Raise) and "NotImplementedError" in ast.unparse(n)
                           for n in ast.walk(stub)), f"{name}: {function} reaches its check as a full solution"
        defined.update({n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)})


@pytest.mark.parametrize("name", ["09_rates"])  # one chapter end to end (the fastest with a self-check)
def test_edition_runs_and_reports_the_stubs_as_not_implemented(edition, name):
    notebook = nbformat.read(edition / f"{name}.ipynb", as_version=4)
    NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(edition)}}).execute()
    checks = [cell for cell in notebook.cells if cell.cell_type == "code" and "exercises.check(" in cell.source]
    for cell in checks:
        printed = "".join(output.get("text", "") for output in cell.outputs)
        assert re.search(r"not implemented yet", printed), f"{name}: the self-check printed {printed!r}"
