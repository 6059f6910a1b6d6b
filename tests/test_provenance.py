"""Every theorem-like statement of the book says where it comes from and whether the book proves it.

The first paragraph of each `{prf:theorem}`, `{prf:proposition}`, `{prf:lemma}`, `{prf:corollary}` and
`{prf:conjecture}` is a provenance line,

    *Source: <paper and place, or "this book">. Status: <status>.*

with one of the statuses of tools/provenance.py. "proved below" must be followed by a `{prf:proof}`, "proof sketch below" by a
`{prf:proof}` that opens with "*Sketch", and the other statuses say that the book does not prove the statement
(it is checked numerically, taken on trust, refuted, or "open": a conjecture proved neither by the book nor by a
source it cites, whether the book's own or one that a source proposes). The test prints how many statements of
each status every chapter has, and that the instructors' handout (book_src/proved.md), generated from
these lines, is in sync with them.
"""

import importlib.util
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "book_src").glob("*.md"))
_spec = importlib.util.spec_from_file_location("provenance", ROOT / "tools" / "provenance.py")
provenance = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(provenance)
provenance_errors = provenance.provenance_errors


def test_the_check_finds_missing_and_broken_provenance():
    good = ("```{prf:theorem} A\n:label: a\n\n*Source: this book. Status: proved below.*\n\nText.\n```\n\n"
            "```{prf:proof}\nIt is.\n```\n")
    assert provenance_errors(good) == ([], Counter({"proved below": 1}))
    unlabelled = "```{prf:lemma} B\nText.\n```\n"
    assert len(provenance_errors(unlabelled)[0]) == 1
    no_proof = "```{prf:theorem} C\n*Source: paper A. Status: proved below.*\n```\n"
    assert "no full" in provenance_errors(no_proof)[0][0]
    sketch_as_proof = ("```{prf:theorem} D\n*Source: paper A. Status: proved below.*\n```\n"
                       "```{prf:proof}\n*Sketch.* It is.\n```\n")
    assert "no full" in provenance_errors(sketch_as_proof)[0][0]
    missing_sketch = "```{prf:theorem} E\n*Source: paper A. Status: proof sketch below.*\n```\n"
    assert "'*Sketch'" in provenance_errors(missing_sketch)[0][0]
    unknown_status = "```{prf:corollary} F\n*Source: paper A. Status: obvious.*\n```\n"
    assert len(provenance_errors(unknown_status)[0]) == 1
    definitions_need_none = "```{prf:definition} G\nText.\n```\n"
    assert provenance_errors(definitions_need_none) == ([], Counter())


@pytest.mark.parametrize("path", SOURCES, ids=lambda path: path.stem)
def test_every_theorem_like_statement_has_its_provenance(path):
    errors, counts = provenance_errors(path.read_text())
    print(f"{path.stem}: {sum(counts.values())} theorem-like statements, {dict(counts)}")
    assert not errors, f"{path.name}:\n" + "\n".join(errors)


@pytest.mark.parametrize("path", SOURCES, ids=lambda path: path.stem)
def test_every_theorem_like_statement_has_a_label(path):
    unlabelled = [s["title"] for s in provenance.statements(path.read_text()) if not s["label"]]
    assert not unlabelled, f"{path.name}: no :label: on {unlabelled}"


def test_the_handout_page_is_in_sync_with_the_chapters():
    page = provenance.PAGE.read_text()
    assert provenance.page_with_handout(page) == page, "run `python tools/provenance.py --write`"


def test_the_handout_lists_a_statement_the_book_does_not_prove_with_its_source():
    text = ("(chapter-x)=\n# X\n\n```{prf:theorem} T\n:label: thm-x\n\n"
            "*Source: paper A, Theorem 1; missing: the entry step. Status: not proved here; taken on trust.*\n```\n")
    (found,) = provenance.statements(text)
    assert found == {"kind": "theorem", "title": "T", "label": "thm-x",
                     "source": "paper A, Theorem 1; missing: the entry step", "status": "not proved here; taken on trust"}


def test_every_status_has_a_mark_in_the_html_book():
    spec = importlib.util.spec_from_file_location("provenance_marks", ROOT / "assets" / "sphinx" / "provenance_marks.py")
    marks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(marks)
    assert set(marks.MARKS) == set(provenance.STATUSES), "assets/sphinx/provenance_marks.py: one mark per status"
