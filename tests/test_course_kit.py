"""Every chapter has what a course relies on: objectives and prerequisites, a link to the notation page, a summary,
at least four exercises with solutions (one of them a coding exercise with a stub and a self-check), an explorer
in chapters 2-6; self-checks that do not give a stub's answer away; code cells short enough to read."""

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted(p.stem for p in (ROOT / "book_src").glob("[0-9][0-9]_*.md") if not p.stem.startswith("00"))
TAUGHT = ["prelude", *CHAPTERS, "03b_central_theorem"]  # the prelude and Chapter 3's section on the central
# theorem have every chapter's anatomy
EXPLORER_CHAPTERS = ("02", "03", "04", "05", "06")


def source(name: str) -> str:
    return (ROOT / "book_src" / f"{name}.md").read_text()


def sections(name: str) -> list[str]:
    """The pages that _toc.yml lists under a chapter (its `sections:`), e.g. its page of reproductions."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    for part in toc["parts"]:
        for chapter in part["chapters"]:
            if chapter["file"] == f"book/{name}":
                return [page["file"].removeprefix("book/") for page in chapter.get("sections", [])]
    return []


def chapter_source(name: str) -> str:
    """A chapter's page and its section pages: exercises and the explorer may sit on any of them."""
    return "\n".join(source(page) for page in [name, *sections(name)])


def code_cells(name: str) -> list[tuple[str, str]]:
    """(options, body) of every code cell of a chapter's source: the options are the `:tags:` line or the
    `---` YAML block under the cell's opening line."""
    cells = re.findall(r"^```\{code-cell\}[^\n]*\n(.*?)^```", source(name), re.MULTILINE | re.DOTALL)
    split = []
    for cell in cells:
        if cell.startswith("---\n"):
            options, _, body = cell[4:].partition("\n---\n")
        else:
            lines = cell.split("\n")
            head = [line for line in lines if line.startswith(":")]
            options, body = "\n".join(head), "\n".join(lines[len(head):])
        split.append((options, body))
    return split


def test_the_book_has_twelve_chapters():
    """Part I (the papers, chapters 1-7) and Part II (the results that followed, chapters 8-12)."""
    assert [name[:2] for name in CHAPTERS] == [f"{k:02d}" for k in range(1, 13)], CHAPTERS


@pytest.mark.parametrize("name", TAUGHT)
def test_chapter_opens_with_objectives_and_links_the_notation_page(name):
    text = source(name)
    assert re.search(r":::\{admonition\} Objectives and prerequisites", text), f"{name}: no objectives box"
    assert "<notation>`" in text, f"{name}: no link to the notation page ({{ref}}`notation page <notation>`)"


@pytest.mark.parametrize("name", TAUGHT)
def test_chapter_closes_with_summary_and_exercises_with_solutions(name):
    assert "\n## Summary\n" in source(name) and "\n## Exercises\n" in source(name), (
        f"{name}: no Summary or Exercises section")
    text = chapter_source(name)
    exercises = re.findall(r"^```\{exercise\}.*\n:label: (\S+)", text, re.MULTILINE)
    solved = set(re.findall(r"^`{3,}\{solution(?:-start)?\} (\S+)", text, re.MULTILINE))
    assert len(exercises) >= 4, f"{name}: {len(exercises)} exercises, at least 4 expected"
    assert not set(exercises) - solved, f"{name}: exercises without a solution: {set(exercises) - solved}"


@pytest.mark.parametrize("name", TAUGHT)
def test_chapter_has_a_coding_exercise_with_a_stub_and_a_self_check(name):
    text = chapter_source(name)
    assert "raise NotImplementedError" in text and "{solution-start}" in text, f"{name}: no coding exercise stub"
    assert "attnsvm.book.exercises.check(" in text, f"{name}: no self-check"


@pytest.mark.parametrize("name", [n for n in CHAPTERS if n[:2] in EXPLORER_CHAPTERS])
def test_chapter_has_an_explorer(name):
    assert "widgets.explorer(" in chapter_source(name), f"{name}: no interactive explorer"


@pytest.mark.parametrize("name", TAUGHT)
def test_self_checks_show_no_output_in_the_book(name):
    """The book runs the hidden solution, so a shown check would print "correct" right under a stub."""
    shown = [body.strip().splitlines()[0] for options, body in code_cells(name)
             if "exercises.check(" in body and "remove-output" not in options]
    assert not shown, f"{name}: self-check cells without the remove-output tag: {shown}"


@pytest.mark.parametrize("name", TAUGHT)
def test_visible_code_cells_are_short(name):
    """About ten lines that read like the math; longer code belongs in attnsvm (or a hide-input plotting cell)."""
    long = [f"{len(body.strip().splitlines())} lines: {body.strip().splitlines()[0]}"
            for options, body in code_cells(name)
            if not re.search(r"hide-input|remove-input|remove-cell|hide-cell", options)
            and len(body.strip().splitlines()) > 20]
    assert not long, f"{name}: visible code cells over 20 lines: {long}"
