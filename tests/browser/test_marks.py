"""Every theorem-like statement of the built HTML book shows its status as a provenance mark
(assets/sphinx/provenance_marks.py) that agrees with its provenance line; the PDF keeps the line."""

import importlib.util

import pytest
from bs4 import BeautifulSoup

from test_pages import CHAPTERS, ROOT

_spec = importlib.util.spec_from_file_location("provenance_marks", ROOT / "assets" / "sphinx" / "provenance_marks.py")
provenance_marks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(provenance_marks)

STATEMENTS = ("theorem", "proposition", "lemma", "corollary", "conjecture")


@pytest.mark.parametrize("name", CHAPTERS)
def test_every_statement_carries_a_mark_that_matches_its_status(name):
    soup = BeautifulSoup((ROOT / "_build" / "html" / f"{name}.html").read_text(encoding="utf-8"), "html.parser")
    marks = {mark for _, mark in provenance_marks.MARKS.values()}
    for box in soup.select(".proof.admonition"):
        if not set(box["class"]) & set(STATEMENTS):
            continue
        found = box.select("details.provenance > summary .prov-mark")
        assert len(found) == 1, f"{name}.html#{box.get('id')}: {len(found)} provenance marks, not one"
        line = box.select_one("details.provenance > p").get_text(" ", strip=True)
        status = line.rsplit(". Status: ", 1)[1].rstrip(".")
        assert found[0].get_text() == provenance_marks.MARKS[status][1] and found[0].get_text() in marks, (
            f"{name}.html#{box.get('id')}: mark {found[0].get_text()!r} for status {status!r}")
