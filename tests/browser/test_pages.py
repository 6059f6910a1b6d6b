"""Every page of the built book, opened in headless chromium: it loads offline, its math is typeset, its figures
have alt text, its text has enough contrast, its links lead somewhere, and each chapter can be launched in Binder
and Colab.

Run `make book` first; the pages are the `root:`/`file:` entries of _toc.yml.
"""

import functools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import yaml
from bs4 import BeautifulSoup

if not (Path("/usr/bin/chromium").is_file() or shutil.which("chromium")):  # conftest.CHROMIUM
    missing = "chromium not found: install Debian's chromium (apt-get install chromium) to run the browser tests"
    if os.environ.get("ATTNSVM_REQUIRE_BROWSER"):  # set by .ci/run: in CI the browser checks must run
        pytest.fail(missing, pytrace=False)
    pytest.skip(missing, allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
RAW_TEX = ("$", "\\[", "\\(", "\\begin{")  # what untypeset math looks like in the visible text ("$" also
# catches a "$$" display that MyST read as "$" and inline math, which happens when it does not start a paragraph)
FILE_NAME_ALT = re.compile(r"\.(png|svg|jpe?g|gif|webp)\b|/_images/", re.IGNORECASE)


def toc_entries(node):
    """The `root:` and `file:` entries of _toc.yml in reading order, without a suffix."""
    if isinstance(node, dict):
        yield from (str(Path(node[key]).with_suffix("")) for key in ("root", "file") if key in node)
        node = list(node.values())
    if isinstance(node, list):
        for item in node:
            yield from toc_entries(item)


PAGES = list(dict.fromkeys(toc_entries(yaml.safe_load((ROOT / "_toc.yml").read_text()))))
# the prelude and the chapters NN_name with NN != 00
CHAPTERS = [name for name in PAGES if re.match(r"(?!00)\d\d|prelude(_\w+)?$", Path(name).name)]
each_page = pytest.mark.parametrize("name", PAGES)


@functools.cache
def element_ids(path: Path) -> set[str]:
    soup = BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")
    return {tag["id"] for tag in soup.find_all(id=True)} | {tag["name"] for tag in soup.find_all("a", attrs={"name": True})}


@each_page
def test_page_loads(name, visit):
    visited = visit(name)
    assert visited.status == 200, f"{name}.html answered HTTP {visited.status}: run `make book`"
    assert not visited.failures, f"{name}.html: requests to the book's own server failed: {visited.failures}"


@each_page
def test_page_reads_offline(name, visit):
    external = visit(name).external
    assert not external, (f"{name}.html fetches from outside the book, so it does not read offline (serve these "
                          f"from vendor/static instead): {external}")


@each_page
def test_math_is_typeset(name, visit):
    visited = visit(name)
    assert visited.mathjax_error is None, f"{name}.html: {visited.mathjax_error}"
    untypeset = visited.page.evaluate("""() => [...document.querySelectorAll('.math')]
        .filter(element => !element.querySelector('mjx-container')).map(element => element.outerHTML.slice(0, 200))""")
    assert not untypeset, f"{name}.html: math that MathJax did not typeset: {untypeset}"
    # Visible text outside code listings (code may legitimately contain `$` or `\begin{`).
    text = visited.page.evaluate("""() => [...document.querySelectorAll('pre, code')]
        .reduce((text, code) => text.replace(code.innerText, ''), document.body.innerText)""")
    raw = [fragment for fragment in RAW_TEX if fragment in text]
    assert not raw, f"{name}.html shows raw TeX {raw} in its text: " + "; ".join(
        text[max(0, text.index(f) - 60):text.index(f) + 60].replace("\n", " ") for f in raw)


@each_page
def test_figures_have_alt_text_and_load(name, visit):
    images = visit(name).page.evaluate("""async () => {
        const article = document.querySelector('.bd-article') || document.querySelector('main');
        const images = article ? [...article.querySelectorAll('img')] : [];
        await Promise.all(images.map(img => { img.loading = 'eager'; return img.decode().catch(() => null); }));
        return images.map(img => ({src: img.getAttribute('src'), alt: (img.getAttribute('alt') || '').trim(),
                                   loaded: img.complete && img.naturalWidth > 0}));
    }""")
    problems = [f"{image['src']} (no real alt text: give the figure `alt` in the chapter)" for image in images
                if not image["alt"] or FILE_NAME_ALT.search(image["alt"])]
    problems += [f"{image['src']} (did not load)" for image in images if not image["loaded"]]
    assert not problems, f"{name}.html: figures {problems}"


# WCAG 2.1 contrast (level AA): 4.5:1 for body text, 3:1 for large text (>= 24 px, or >= 18.66 px bold).
CONTRAST = """() => {
    const channel = c => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; };
    const rgba = text => (text.match(/[\\d.]+/g) || []).map(Number);
    const luminance = ([r, g, b]) => 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b);
    const background = element => {  // the first opaque background behind the element (white at the root)
        for (let node = element; node && node.nodeType === 1; node = node.parentElement) {
            const [r, g, b, a = 1] = rgba(getComputedStyle(node).backgroundColor);
            if (a > 0.5 && getComputedStyle(node).backgroundImage === 'none') return [r, g, b];
        }
        return [255, 255, 255];
    };
    const article = document.querySelector('.bd-article') || document.querySelector('main');
    const low = [];
    for (const element of article ? article.querySelectorAll('*') : []) {
        const own = [...element.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
        const style = getComputedStyle(element);
        if (!own || style.visibility !== 'visible' || !element.getClientRects().length) continue;
        if (element.closest('mjx-container, svg')) continue;  // math is drawn, not text
        const [r, g, b, a = 1] = rgba(style.color);
        const back = background(element);
        const fore = [r, g, b].map((c, i) => a * c + (1 - a) * back[i]);
        const [hi, lo] = [luminance(fore), luminance(back)].sort((x, y) => y - x);
        const ratio = (hi + 0.05) / (lo + 0.05);
        const size = parseFloat(style.fontSize), bold = parseInt(style.fontWeight) >= 700;
        const needed = size >= 24 || (bold && size >= 18.66) ? 3 : 4.5;
        if (ratio < needed) low.push(`${element.tagName.toLowerCase()} "${element.textContent.trim().slice(0, 40)}" `
                                     + `${style.color} on rgb(${back}): ${ratio.toFixed(2)} < ${needed}`);
    }
    return low;
}"""


@each_page
def test_text_has_enough_contrast(name, visit):
    low = visit(name).page.evaluate(CONTRAST)
    assert not low, f"{name}.html: text below the WCAG AA contrast ratio ({len(low)}): {low[:10]}"


def test_contrast_check_catches_faint_text(browser):
    page = browser.new_page()
    page.set_content('<main><p style="color:#aaa">faint</p><p>dark</p><p style="font-size:30px;color:#888">big</p></main>')
    low = page.evaluate(CONTRAST)
    page.close()
    assert len(low) == 1 and low[0].startswith('p "faint"') and "2.32 < 4.5" in low[0]


@each_page
def test_links_lead_somewhere(name, visit, site):
    links = visit(name).page.evaluate("() => [...document.querySelectorAll('a[href]')].map(a => [a.getAttribute('href'), a.href])")
    broken = []
    for href, url in links:
        parts = urlsplit(url)
        if href.startswith("#") or parts.netloc != urlsplit(site.url).netloc:
            continue  # same-page anchors, external sites, mailto: and friends
        target = site.root / unquote(parts.path).lstrip("/")
        target = target / "index.html" if target.is_dir() else target
        if not target.is_file():
            broken.append(f"{href} (no file {target.relative_to(site.root)})")
        elif parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in element_ids(target):
            broken.append(f"{href} (no id {unquote(parts.fragment)!r} in {target.relative_to(site.root)})")
    assert not broken, f"{name}.html has broken links: {broken}"


@pytest.mark.parametrize("name", CHAPTERS)
def test_chapter_has_launch_buttons(name, visit):
    hrefs = [unquote(href) for href in visit(name).page.evaluate(
        "() => [...document.querySelectorAll('a[href]')].map(a => a.href)")]
    notebook = f"/{name}.ipynb"
    for service in ("mybinder.org", "colab.research.google.com"):
        assert any(service in href and notebook in href for href in hrefs), (
            f"{name}.html has no {service} launch link to {notebook[1:]} (see launch_buttons and repository in "
            f"_config.yml)")


def test_the_checks_of_a_page_share_one_worker(tmp_path):
    """Under pytest-xdist every check of a page runs in one worker (tests/browser/conftest.py), which opens it once;
    any other test is scheduled alone. Checked on a suite of stand-ins under this suite's conftest (no browser:
    the scheduling is the conftest's hook alone)."""
    from conftest import page_scope

    other = "tests/browser/test_search.py::test_search_hits_link_to_sections_that_exist[1280px-Lipschitz]"
    assert page_scope(other) == other
    shutil.copy(Path(__file__).with_name("conftest.py"), tmp_path / "conftest.py")
    (tmp_path / "test_stand_ins.py").write_text(
        "import time\n"
        "import pytest\n"
        "PAGES = ['book/a', 'book/b', 'api/c']\n"
        "def _check(page):\n"
        "    time.sleep(0.05)  # long enough that both workers take tests\n"
        + "".join(f"@pytest.mark.parametrize('page', PAGES)\ndef test_{k}(page):\n    _check(page)\n"
                  for k in range(4))
        + "def test_alone():\n    pass\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "-v", "-p", "no:cacheprovider", str(tmp_path)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    ran = re.findall(r"\[(gw\d+)\] \[ *\d+%\] PASSED \S*::test_\d\[([\w/]+)\]", run.stdout)
    workers = {page: {worker for worker, name in ran if name == page} for page in ("book/a", "book/b", "api/c")}
    assert run.returncode == 0 and len(ran) == 12, run.stdout[-2000:]
    assert all(len(used) == 1 for used in workers.values()), f"the checks of one page ran on {workers}"
    assert len(set().union(*workers.values())) == 2, f"one worker took every page: {workers}"
