"""The student edition: every chapter of book_src/ with the exercise solutions removed and the coding exercises'
stubs left in place, as notebooks to work in.

    python tools/student_edition.py OUTPUT_FOLDER      (make student)

A solution is a `{solution}` directive block, or everything from a `{solution-start}` fence to its
`{solution-end}` fence (the gated form, which can hold code cells). The stubs and the self-check cells are not
inside solutions, so in the student edition each check prints "not implemented yet" until the student
completes the function.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import jupytext

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^(`{3,}|:{3,})\{(\w[\w-]*)\}")


def strip_solutions(text: str) -> str:
    """The MyST source without its solutions (see the module docstring)."""
    lines, kept, skipping, closing = text.splitlines(keepends=True), [], None, None
    for line in lines:
        match = FENCE.match(line)
        if skipping == "gated":
            if match and match.group(2) == "solution-end":
                skipping, closing = "fence", match.group(1)  # drop the end directive's own closing fence too
            continue
        if skipping == "fence":
            if line.strip() == closing:
                skipping = None
            continue
        if match and match.group(2) in ("solution", "solution-start"):
            skipping, closing = ("fence", match.group(1)) if match.group(2) == "solution" else ("gated", None)
            continue
        kept.append(line)
    if skipping:
        raise ValueError("a solution block is not closed: check its fences")
    return re.sub(r"\n{3,}", "\n\n", "".join(kept))


def main(output: Path) -> None:
    output.mkdir(parents=True, exist_ok=True)
    for source in sorted((ROOT / "book_src").glob("*.md")):
        notebook = jupytext.reads(strip_solutions(source.read_text()), fmt="md:myst")
        notebook.metadata.pop("jupytext", None)  # a standalone notebook, not paired with book_src/
        jupytext.write(notebook, output / f"{source.stem}.ipynb")
        print(f"{output / source.stem}.ipynb")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} OUTPUT_FOLDER")
    main(Path(sys.argv[1]))
