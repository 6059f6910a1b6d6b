"""Fixtures of the browser checks: the built book served on 127.0.0.1 and Debian's chromium driven by Playwright.

Every page is opened once per session (`visit`) with every request recorded; requests that would leave
127.0.0.1 are recorded and aborted, so the page behaves as it would offline.
"""

import functools
import http.server
import re
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[2]
HTML = ROOT / "_build" / "html"
CHROMIUM = "/usr/bin/chromium" if Path("/usr/bin/chromium").is_file() else shutil.which("chromium")  # Debian's
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
MATHJAX_TIMEOUT_MS = 20_000  # MathJax's first typeset of the page
REQUEST_TIMEOUT_MS = 20_000  # a late request (font, widget) of the book's own server


def is_local(url: str) -> bool:
    """True for the book's own server and for URLs that need no network (about:, data:, blob:)."""
    parts = urlsplit(url)
    return parts.scheme in ("about", "data", "blob") or parts.hostname == "127.0.0.1"


@dataclass
class Site:
    url: str  # http://127.0.0.1:PORT/
    root: Path  # the folder it serves: _build/html


@dataclass
class Visit:
    page: object  # the open playwright Page
    status: int | None = None
    requests: list[str] = field(default_factory=list)  # every URL the page asked for on 127.0.0.1
    external: list[str] = field(default_factory=list)  # every URL it asked for elsewhere (aborted)
    failures: list[str] = field(default_factory=list)  # local requests that failed or answered >= 400
    mathjax_error: str | None = None  # why MathJax did not finish typesetting, if it did not
    pending: set = field(default_factory=set)  # requests in flight
    console: list[str] = field(default_factory=list)  # console errors and uncaught exceptions of the page


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="session")
def site():
    if not (HTML / "index.html").is_file():
        pytest.fail(f"{HTML.relative_to(ROOT)}/index.html is missing: run `make book` first", pytrace=False)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(HTML)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield Site(f"http://127.0.0.1:{server.server_port}/", HTML)
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def browser():
    with sync_playwright() as playwright:
        # Scrollbars as a reader's browser draws them (Playwright hides them by default), so that the screenshots
        # show where a wide equation, table or figure scrolls.
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
                                             ignore_default_args=["--hide-scrollbars"])
        yield browser
        browser.close()


def _visits(site, browser, width: int):
    context = browser.new_context(viewport={"width": width, "height": 900})
    context.route("**/*", lambda route: route.continue_() if is_local(route.request.url) else route.abort())
    visits = {}

    def load(name: str) -> Visit:
        if name not in visits:
            visits[name] = open_page(context, site.url + name + ".html")
        return visits[name]

    return context, load


@pytest.fixture(scope="session")
def visit(site, browser):
    """visit("book/01_preliminaries") -> Visit of _build/html/book/01_preliminaries.html in a 1280 px wide window,
    loaded once per session."""
    context, load = _visits(site, browser, 1280)
    yield load
    context.close()


@pytest.fixture(scope="session")
def visit_phone(site, browser):
    """The same in a 400 px wide window (a phone)."""
    context, load = _visits(site, browser, 400)
    yield load
    context.close()


def open_page(context, url: str) -> Visit:
    visit = Visit(context.new_page())
    page = visit.page

    def record(request):
        visit.pending.add(request)
        (visit.requests if is_local(request.url) else visit.external).append(request.url)
    page.on("request", record)
    page.on("console", lambda message: message.type == "error" and visit.console.append(message.text))
    page.on("pageerror", lambda error: visit.console.append(f"uncaught: {error}"))
    for event in ("requestfinished", "requestfailed"):
        page.on(event, lambda request: visit.pending.discard(request))
    page.on("requestfailed", lambda request: is_local(request.url)
            and visit.failures.append(f"{request.url} ({request.failure})"))
    page.on("response", lambda response: response.status >= 400
            and visit.failures.append(f"{response.url} (HTTP {response.status})"))
    response = page.goto(url, wait_until="load")
    visit.status = response.status if response else None
    if page.evaluate("() => !!document.querySelector('.math, script[src*=\"mathjax\"]')"):
        try:
            page.wait_for_function("() => window.MathJax && MathJax.startup && MathJax.startup.promise",
                                   timeout=MATHJAX_TIMEOUT_MS)
            page.evaluate("() => { MathJax.startup.promise.then(() => window.__typeset = 'done',"
                          " error => window.__typeset = String(error)); }")
            page.wait_for_function("() => window.__typeset !== undefined", timeout=MATHJAX_TIMEOUT_MS)
            outcome = page.evaluate("() => window.__typeset")
            visit.mathjax_error = None if outcome == "done" else f"MathJax failed: {outcome}"
        except PlaywrightError as error:
            visit.mathjax_error = f"MathJax did not finish within {MATHJAX_TIMEOUT_MS} ms: {error.message.splitlines()[0]}"
    settle(page, visit)
    return visit


def settle(page, visit: Visit) -> None:
    """Wait until the page has no request in flight for half a second, so that late requests (MathJax fonts,
    widgets) are recorded too; a request still pending after REQUEST_TIMEOUT_MS is recorded as a failure."""
    quiet, waited = 0, 0
    while quiet < 500 and waited < REQUEST_TIMEOUT_MS:
        page.wait_for_timeout(100)
        waited += 100
        quiet = 0 if visit.pending else quiet + 100
    visit.failures += [f"{request.url} (no answer within {REQUEST_TIMEOUT_MS} ms)" for request in visit.pending]


PAGE_PARAMETER = re.compile(r"\[([\w/]+)\]$")  # a test id ending in [page], e.g. [book/01_preliminaries]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under pytest-xdist (`make test` runs this suite on every core) all the checks of one page run in one worker,
    which opens the page once: pytest-xdist's scope scheduling, the scope of a test being the page it is
    parametrized with (else the test alone), whatever --dist names. pytest-xdist's own --dist loadgroup no longer
    groups on pytest 9.2 (it renames node ids, which pytest now derives otherwise; pytest-xdist issue 1386). It
    applies where this file is loaded at the start, i.e. when pytest is given tests/browser or a file in it (as the
    Makefile does), not to `pytest tests`."""
    from xdist.scheduler import LoadScopeScheduling

    class ByPage(LoadScopeScheduling):
        _split_scope = staticmethod(page_scope)
    return ByPage(config, log)


def page_scope(nodeid: str) -> str:
    """The page a test is parametrized with, else its own id."""
    page = PAGE_PARAMETER.search(nodeid)
    return page.group(1) if page else nodeid


def pytest_sessionfinish(session, exitstatus):
    """Without chromium and XeLaTeX every module of this suite skips. pytest-xdist then reports that it collected
    nothing (exit status 5); that is the skip the README promises, not a failure."""
    if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED and session.testscollected == 0:
        session.exitstatus = pytest.ExitCode.OK
