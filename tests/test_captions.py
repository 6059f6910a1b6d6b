"""Captions and alt texts name a figure's panels by reading order or title, never by their place.

On a phone a figure with several panels is shown in its phone layout, panels stacked (`attnsvm.book.plots`), so
"Left:", "(right)" or "bottom left" would name a panel that is not there. Only the figure cells' metadata is read:
prose may say "on the left" of an equation.
"""

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "book_src").glob("*.md"))
CELL = re.compile(r"```\{code-cell\}[^\n]*\n---\n(.*?)\n---\n", re.S)
# A sentence that opens with a place ("Left:", "Bottom right,"), "(left)", "left panel", "Top left": a place
# inside one panel ("from the lower left", "nodes on the left") is not a panel's name.
PLACE = re.compile(r"(?:^|(?<=[.;:]\s)|(?<=\n))\s*(?:(?:Top|Bottom|Upper|Lower) )?(?:[Ll]eft|[Rr]ight)(?: panel| column)?\s*[:,]"
                   r"|\((?:left|right)\)|\b[Ll]eft panel\b|\b[Rr]ight panel\b|\b(?:Top|Bottom) (?:left|right)\b")


def panel_places(text: str) -> list[str]:
    """Each caption or alt text of `text`'s figure cells that names a panel by its place, with the words."""
    found = []
    for block in CELL.findall(text):
        meta = yaml.safe_load(block) or {}
        mystnb = meta.get("mystnb") or {}
        for key, words in (("caption", (mystnb.get("figure") or {}).get("caption")),
                           ("alt", (mystnb.get("image") or {}).get("alt"))):
            hits = PLACE.findall(words or "")
            if hits:
                found.append(f"{(mystnb.get('figure') or {}).get('name', '?')} {key}: {hits}")
    return found


def test_the_check_finds_panels_named_by_place():
    cell = ("```{code-cell} ipython3\n---\nmystnb:\n  figure:\n    caption: |\n      Left: a. Right, b;"
            " the loss (left). Bottom left: c.\n    name: fig-x\n  image:\n    alt: Left panel, a curve; on the"
            " left of the line, dots.\n---\nx = 1\n```\n")
    assert panel_places(cell) == ["fig-x caption: ['Left:', 'Right,', '(left)', 'Bottom left:']",
                                  "fig-x alt: ['Left panel,']"]
    assert panel_places(cell.replace("Left", "First").replace("Right", "Second")
                        .replace("(left)", "(first panel)").replace("Bottom left", "Third panel")) == []


@pytest.mark.parametrize("path", SOURCES, ids=lambda path: path.stem)
def test_captions_name_panels_by_order_or_title(path):
    places = panel_places(path.read_text())
    assert not places, (f"{path.name}: a caption or alt text names a panel by its place, which a phone's stacked "
                        f"layout does not keep; name it by reading order ('First panel') or title: {places}")
