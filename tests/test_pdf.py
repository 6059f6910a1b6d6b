"""The PDF of the book (`make pdf`; `make test` builds it from the stored outputs): it exists, every page of
_toc.yml is a chapter of it, XeLaTeX neither dropped a glyph nor left a reference undefined, and the HTML book
offers this PDF (_build/html/book.pdf).

Needs XeLaTeX (Debian: texlive-xetex texlive-latex-extra texlive-fonts-recommended latexmk fonts-freefont-otf);
without it the test skips, except in CI (ATTNSVM_REQUIRE_LATEX, set by .ci/run), where it fails.
"""

import os
import re
import shutil
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
LATEX = ROOT / "_build" / "latex"

if not shutil.which("xelatex"):
    missing = ("xelatex not found: install texlive-xetex texlive-latex-extra texlive-fonts-recommended latexmk "
               "fonts-freefont-otf (Debian) to build and check the PDF")
    if os.environ.get("ATTNSVM_REQUIRE_LATEX"):
        pytest.fail(missing, pytrace=False)
    pytest.skip(missing, allow_module_level=True)


def toc_files(node):
    if isinstance(node, dict):
        yield from (node[key] for key in ("root", "file") if key in node)
        node = list(node.values())
    if isinstance(node, list):
        for item in node:
            yield from toc_files(item)


def title(name: str) -> str:
    """The first `# heading` of a page's MyST source (book/x: book_src/x.md; the API pages are their own source)."""
    path = ROOT / "book_src" / f"{Path(name).name}.md" if name.startswith("book/") else ROOT / f"{name}.md"
    heading = re.search(r"^# (.+)$", path.read_text(), re.MULTILINE).group(1).strip()
    return heading.replace("`", "")


@pytest.fixture(scope="module")
def log():
    path = LATEX / "book.log"
    if not (LATEX / "book.pdf").is_file() or not path.is_file():
        pytest.fail("_build/latex/book.pdf is missing: run `make pdf` (or `make test`)", pytrace=False)
    return path.read_text(errors="replace")


def test_pdf_has_pages(log):
    pages = int(re.search(r"Output written on book\.pdf \((\d+) pages?", log).group(1))
    assert pages > 50, f"the PDF has only {pages} pages"
    assert (LATEX / "book.pdf").read_bytes()[:5] == b"%PDF-"


def test_every_page_of_the_toc_is_in_the_pdf(log):
    tex = (LATEX / "book.tex").read_text()
    root, *chapters = toc_files(yaml.safe_load((ROOT / "_toc.yml").read_text()))
    literal = r"\\sphinxstyleliteralintitle\{\\sphinxupquote\{(.*?)\}\}"  # a `code` heading
    plain = lambda text: re.sub(literal, r"\1", re.sub(r"\\sphinxhyphen\{\}", "-", re.sub(r"\$[^$]*\$", "", text)))
    headings = [plain(h).replace("\u2019", "'")  # Sphinx writes a typographic apostrophe
                for h in re.findall(r"\\(?:chapter|section)\{(.+?)\}\n", tex)]
    missing = [name for name in chapters if plain(title(name)) not in headings]
    assert not missing, f"pages of _toc.yml missing from the PDF's chapters and sections {headings}: {missing}"
    assert plain(title(root)).split(":")[0] in plain(tex), "the introduction is missing from the PDF"


def test_no_glyph_is_missing_and_no_reference_is_undefined(log):
    missing = sorted(set(re.findall(r"Missing character: There is no (.+?) in font", log)))
    assert not missing, f"XeLaTeX dropped characters its fonts lack: {missing}"
    assert "There were undefined references" not in log, "the PDF has undefined references (see book.log)"


def test_the_html_book_offers_this_pdf(log):
    copy = ROOT / "_build" / "html" / "book.pdf"  # assets/sphinx/book_pdf.py, linked from every page's download menu
    assert copy.is_file() and copy.read_bytes() == (LATEX / "book.pdf").read_bytes(), (
        "_build/html/book.pdf is not this PDF: build the PDF before the HTML, as `make book` and `make test` do")
