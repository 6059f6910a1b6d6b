"""Math that Markdown would mangle before MathJax sees it, found in the sources (the browser checks find the rest).

In a table row, Markdown splits cells at every `|` and turns `\\|` into `|`, even inside `$...$`: absolute values
and norms in tables are written `\\lvert x\\rvert` and `\\Vert x\\Vert`.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "book_src").glob("*.md"))
INLINE_MATH = re.compile(r"\$([^$]+)\$")


def bars_in_table_math(text: str) -> list[str]:
    """The table rows of `text` with a `|` inside inline math."""
    return [line for line in text.splitlines()
            if line.startswith("|") and any("|" in math for math in INLINE_MATH.findall(line))]


def test_the_check_finds_a_norm_in_a_table():
    assert bars_in_table_math("| a | $\\|x\\|_2$ |\n| b | $|y|$ |\n| c | $\\Vert x\\Vert$ |\n$|z|$") == [
        "| a | $\\|x\\|_2$ |", "| b | $|y|$ |"]


@pytest.mark.parametrize("path", SOURCES, ids=lambda path: path.stem)
def test_table_math_has_no_bars(path):
    rows = bars_in_table_math(path.read_text())
    assert not rows, (f"{path.name}: a `|` inside math in a table row splits the cell (or loses its backslash); "
                      f"write \\lvert x\\rvert and \\Vert x\\Vert instead: {rows}")
