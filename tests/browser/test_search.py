"""The search page (search.html?q=...), offline in headless chromium at 1280 and 400 px: each hit links to the
section that holds the term where it can, and its snippet is prose around the term from the page's article, not
its table of contents, not TeX source (assets/html/search_sections.js).
"""

import re

import pytest

from conftest import _visits, open_page
from test_pages import ROOT, element_ids

# (query, the stems of its words as Sphinx's search matches them: each snippet contains every one, and the first
# hit's snippet the query itself)
QUERIES = [("Lipschitz", ["lipschitz"]), ("regularization path", ["regular", "path"]), ("KKT", ["kkt"])]
RESULTS = """() => [...document.querySelectorAll('#search-results ul.search > li')].map(item => ({
    href: item.querySelector('a').getAttribute('href'), title: item.querySelector('a').innerText,
    snippet: item.querySelector('p.context') ? item.querySelector('p.context').innerText : null,
    described: !!item.querySelector(':scope > span')}))"""
DONE = """() => {
    const status = document.querySelector('#search-results .search-summary');
    const items = [...document.querySelectorAll('#search-results ul.search > li')];
    return !!status && status.innerText.startsWith('Search finished')
        && items.every(item => item.querySelector('p.context, :scope > span'));
}"""
pytestmark = pytest.mark.xdist_group("search")  # one worker opens the search page of each query once
TOC_RUN = re.compile(r"\b\d+\.\d+\.\s[^.]{1,80}\s\d+\.\d+\.\s")  # two numbered section titles in a row


@pytest.fixture(scope="module", params=[1280, 400], ids=["1280px", "400px"])
def search(request, site, browser):
    """search(query) -> (the Visit of search.html?q=query once every result shows its snippet, its results)."""
    context, _ = _visits(site, browser, request.param)
    done = {}

    def run(query):
        if query not in done:
            visited = open_page(context, f"{site.url}search.html?q={query.replace(' ', '+')}")
            visited.page.wait_for_function(DONE, timeout=30_000)
            visited.page.wait_for_timeout(200)  # the links are rewritten just after their snippets arrive
            done[query] = visited, visited.page.evaluate(RESULTS)
        return done[query]

    yield run
    context.close()


@pytest.mark.parametrize("query, stems", QUERIES)
def test_search_hits_show_prose_around_the_term(query, stems, search):
    visited, results = search(query)
    assert not visited.console, f"search for {query!r}: console errors {visited.console}"
    assert not visited.failures and not visited.external, (visited.failures, visited.external)
    snippets = [result for result in results if not result["described"]]  # API objects show their kind instead
    assert snippets, f"search for {query!r} found no page: {results}"
    assert query.lower() in (snippets[0]["snippet"] or "").lower(), f"search for {query!r}: first hit {snippets[0]}"
    for result in snippets:
        snippet = result["snippet"] or ""
        where = f"search for {query!r}, hit {result['title']!r} ({result['href']}): snippet {snippet!r}"
        assert all(stem in snippet.lower() for stem in stems), f"{where} does not contain {stems}"
        assert "\\" not in snippet and "$" not in snippet, f"{where} shows TeX source"
        assert not snippet.lstrip(".").startswith("Contents") and not TOC_RUN.search(snippet), (
            f"{where} is the page's table of contents")


@pytest.mark.parametrize("query", [query for query, _ in QUERIES])
def test_search_hits_link_to_sections_that_exist(query, search):
    _, results = search(query)
    to_sections = [result["href"] for result in results if "#" in result["href"]]
    assert to_sections, f"search for {query!r}: no hit links to a section: {[r['href'] for r in results]}"
    for href in to_sections:
        page, anchor = href.split("#", 1)
        assert anchor in element_ids(ROOT / "_build" / "html" / page), f"search for {query!r}: {href} leads nowhere"
