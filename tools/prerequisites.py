"""Store the book's prerequisite graph with the library (`make notebooks` runs this before executing the chapters).

The introduction draws the graph read from every chapter's "Prerequisites:" paragraph in book_src/; a notebook
opened alone (Colab, a copy) has no book_src/, so the graph travels as lib/attnsvm/book/prerequisites.json, read by
`schematics.book_prerequisites`; tests/lib/test_schematics.py checks that it is the graph the sources give.
"""

import json
from pathlib import Path

from attnsvm.book import schematics

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    sources = {page.stem: page.read_text() for page in sorted((ROOT / "book_src").glob("*.md"))}
    graph = schematics.prerequisites(sources)
    stored = {"chapters": sorted(graph), "edges": sorted(map(list, graph.edges(data="kind")))}
    schematics.PREREQUISITES_FILE.write_text(json.dumps(stored) + "\n")
    print(f"wrote {schematics.PREREQUISITES_FILE}")


if __name__ == "__main__":
    main()
