"""The whole book's PDF from the HTML (assets/sphinx/book_pdf.py): where XeLaTeX built it, every page's download
menu offers it and the file is in the built HTML; without XeLaTeX there is no link, so none dangles. The menu's
per-page print entry says that it prints this page.
"""

import shutil
from urllib.parse import urljoin, urlsplit

import pytest

from conftest import _visits
from test_pages import CHAPTERS, PAGES

BOOK_PDF = "PDF of the whole book"
MENU = """() => [...document.querySelectorAll('.dropdown-download-buttons .dropdown-item')]
    .map(item => ({text: item.innerText.trim(), href: item.getAttribute('href')}))"""
OTHER_PAGES = ["search", "genindex"]  # pages without a source of their own


def book_pdf_links(page) -> list[str]:
    return [item["href"] for item in page.evaluate(MENU) if item["text"] == BOOK_PDF]


@pytest.mark.parametrize("name", [CHAPTERS[0], PAGES[0], "api/index"])
def test_download_menu_offers_the_whole_book_and_prints_this_page(name, visit, site):
    page = visit(name).page
    texts = [item["text"] for item in page.evaluate(MENU)]
    assert "Print this page" in texts and ".pdf" not in texts, f"{name}.html: download menu {texts}"
    links = book_pdf_links(page)
    if not shutil.which("xelatex"):
        assert not links and not (site.root / "book.pdf").exists(), f"{name}.html offers a PDF no build made"
        return
    assert len(links) == 1, f"{name}.html: no single '{BOOK_PDF}' in the download menu {texts}"
    path = urlsplit(urljoin(page.url, links[0])).path.lstrip("/")
    assert path == "book.pdf", f"{name}.html: '{BOOK_PDF}' points to {links[0]}"
    assert (site.root / path).read_bytes()[:5] == b"%PDF-", f"{name}.html: {path} is not a PDF"


@pytest.mark.parametrize("name", OTHER_PAGES)
def test_pages_without_a_source_offer_the_whole_book(name, visit, site):
    links = book_pdf_links(visit(name).page)
    assert len(links) == (1 if shutil.which("xelatex") else 0), f"{name}.html: '{BOOK_PDF}' links {links}"
    assert all((site.root / urlsplit(link).path).is_file() for link in links)


def test_download_menu_opens_at_400_px(site, browser):
    context, load = _visits(site, browser, 400)  # a page of its own: the menu is left open
    page = load(CHAPTERS[0]).page
    page.locator(".dropdown-download-buttons > button").click()
    items = page.locator(".dropdown-download-buttons .dropdown-item")
    assert all(items.nth(k).is_visible() for k in range(items.count())), "the download menu hides entries at 400 px"
    box = page.locator(".dropdown-download-buttons .dropdown-menu").bounding_box()
    context.close()
    assert box["x"] >= 0 and box["x"] + box["width"] <= 400, f"the download menu leaves the 400 px window: {box}"
