"""book_src/*.md -> book/*.ipynb, keeping the stored outputs (no execution): `make sync`, in one process (a
jupytext process per page took ten times as long).

    python tools/sync_pages.py
"""

from pathlib import Path

from jupytext.cli import jupytext

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    for source in sorted((ROOT / "book_src").glob("*.md")):
        status = jupytext(["--quiet", "--to", "ipynb", "--update", "--output",
                           str(ROOT / "book" / f"{source.stem}.ipynb"), str(source)])
        if status:
            return status
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
