"""What a reader sees, in headless chromium at 1280 px (a laptop) and 400 px (a phone): no console error, figures
whose every text is at least 9 CSS px, nothing wider than the column without a scrollbar, explorers that move,
numbered cross-references, no leaked notes. (Screenshots of every page at both widths, for a reviewer's eyes:
`make screenshots`, tests/browser/review_screenshots.py.)

Run `make book` first; the pages are the `root:`/`file:` entries of _toc.yml.
"""

import base64
import io
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import PIL.Image
import pytest

from attnsvm.book import plots

from test_pages import PAGES, ROOT

each_page = pytest.mark.parametrize("name", PAGES)
MIN_TEXT_PX = 9
# Leaked notes and placeholders: internal files, unfinished text, the book's own build chatter.
FORBIDDEN = re.compile(r"UNKNOWN|\bTODO\b|\bTBD\b|\bFIXME\b|\bXXX\b|CONTENT\.md|FRONTIERS\.md|DESIGN\.md|STYLE\.md|"
                       r"being written|as it lands|\bissue \d+\b|\?\?")
UNRENDERED_ROLE = re.compile(r"\{(?:ref|numref|cite|prf:ref)\}")  # in prose; a code example may show one
NUMBERED = ("Exercise", "Theorem", "Proposition", "Lemma", "Corollary", "Definition", "Conjecture", "Figure",
            "Table", "Example", "Remark", "Algorithm", "Assumption")

ARTICLE_IMAGES = """async () => {
    const article = document.querySelector('.bd-article') || document.querySelector('main');
    const images = article ? [...article.querySelectorAll('img')] : [];
    await Promise.all(images.map(img => { img.loading = 'eager'; return img.decode().catch(() => null); }));
    return images.map(img => ({src: img.getAttribute('src'), natural: img.naturalWidth, shown: img.clientWidth}));
}"""


def image_bytes(src: str, page_url: str, root: Path) -> bytes:
    if src.startswith("data:"):
        return base64.b64decode(src.split(",", 1)[1])
    path = unquote(urlsplit(src).path)
    base = Path(unquote(urlsplit(page_url).path)).parent
    return (root / (base / path).as_posix().lstrip("/")).resolve().read_bytes()


def smallest_text_px(data: bytes, shown_width: float) -> float | None:
    """CSS px of the smallest text of a figure saved by attnsvm.book.plots.png, as displayed `shown_width` px wide;
    None for an image that does not say its text size (not drawn through plots.png)."""
    image = PIL.Image.open(io.BytesIO(data))
    text = getattr(image, "text", {})
    if plots.TEXT_KEY not in text or plots.DPI_KEY not in text:
        return None
    points, dpi = float(text[plots.TEXT_KEY]), float(text[plots.DPI_KEY])
    return points * dpi / 72 * shown_width / image.width


@each_page
def test_no_console_errors(name, visit):
    assert not visit(name).console, f"{name}.html: console errors {visit(name).console}"


@each_page
def test_every_figure_text_is_at_least_9_px(name, visit, site):
    visited = visit(name)
    small, unknown = [], []
    for image in visited.page.evaluate(ARTICLE_IMAGES):
        if image["natural"] == 0:
            continue  # test_pages checks that every image loads
        px = smallest_text_px(image_bytes(image["src"], visited.page.url, site.root), image["shown"])
        label = image["src"][:60]
        if px is None:
            unknown.append(label)
        elif px < MIN_TEXT_PX:
            small.append(f"{label} (smallest text {px:.1f} px)")
    assert not unknown, (f"{name}.html: figures that do not record their text size (draw them with the book's style, "
                         f"attnsvm.setup(), so that attnsvm.book.plots.png saves them): {unknown}")
    assert not small, f"{name}.html: figure text below {MIN_TEXT_PX} CSS px at 1280 px: {small}"


def test_figure_text_measure_catches_a_shrunk_figure():
    import matplotlib.pyplot as plt
    plots.use_style()
    figure, ax = plt.subplots(figsize=(plots.WIDTH, 3))
    ax.plot([0, 1])
    data, metadata = plots.png(figure)
    plt.close(figure)
    assert smallest_text_px(data, metadata["width"]) == pytest.approx(9 * 100 / 72, rel=0.01)  # width rounded
    assert smallest_text_px(data, metadata["width"] / 2) < MIN_TEXT_PX
    buffer = io.BytesIO()
    PIL.Image.new("RGB", (10, 10)).save(buffer, format="png")
    assert smallest_text_px(buffer.getvalue(), 10) is None


# What a phone shows of every figure and explorer frame: the image it picked (currentSrc: the phone layout where
# there is one), its place against the column's content box, and whether it or its figure scrolls sideways.
PHONE_FIGURES = """async () => {
    const article = document.querySelector('.bd-article');
    if (!article) return [];
    const style = getComputedStyle(article), box = article.getBoundingClientRect();
    const left = box.left + parseFloat(style.paddingLeft), right = box.right - parseFloat(style.paddingRight);
    const images = [...article.querySelectorAll('img')].filter(img => img.getClientRects().length);
    await Promise.all(images.map(img => { img.loading = 'eager'; return img.decode().catch(() => null); }));
    return images.map(img => {
        const rect = img.getBoundingClientRect(), holder = img.closest('figure, .attnsvm-explorer, .cell_output');
        return {src: img.currentSrc, natural: img.naturalWidth, shown: rect.width,
                outside: Math.max(left - rect.left, rect.right - right),
                scrolls: !!holder && holder.scrollWidth > holder.clientWidth + 1};
    });
}"""


PHONE_DENSITY = 1.9  # image pixels per CSS pixel of a figure on a phone: 2 (plots.DPI), less a rounding margin


def phone_figure_problems(images: list[dict], page_url: str, root: Path) -> list[str]:
    """The figures (PHONE_FIGURES' records) that a phone shows wider than the column, scrolling sideways, with text
    below MIN_TEXT_PX, without a recorded text size, or with fewer than PHONE_DENSITY image pixels per CSS pixel
    (blurry on a phone's screen, which has two or three device pixels per CSS pixel)."""
    problems = []
    for image in images:
        label = image["src"][:60]
        if image["natural"] == 0:  # e.g. a phone layout's file missing (test_pages loads only the wide images)
            problems.append(f"{label} (does not load)")
            continue
        data = image_bytes(image["src"], page_url, root)
        px = smallest_text_px(data, image["shown"])
        pixels = PIL.Image.open(io.BytesIO(data)).width  # naturalWidth counts a srcset "2x" image at half
        if image["outside"] > 1 or image["scrolls"]:
            problems.append(f"{label} ({image['shown']:.0f} px wide, {image['outside']:.0f} px past the column"
                            f"{', scrolls sideways' if image['scrolls'] else ''})")
        if px is None:
            problems.append(f"{label} (does not record its text size: draw it with the book's style)")
        elif px < MIN_TEXT_PX:
            problems.append(f"{label} (smallest text {px:.1f} px)")
        if px is not None and pixels < PHONE_DENSITY * image["shown"]:
            problems.append(f"{label} ({pixels / image['shown']:.1f} image px per CSS px: blurry on a phone's "
                            "screen)")
    return problems


@each_page
def test_every_figure_and_explorer_fits_a_phone(name, visit_phone, site):
    visited = visit_phone(name)
    problems = phone_figure_problems(visited.page.evaluate(PHONE_FIGURES), visited.page.url, site.root)
    assert not problems, (f"{name}.html at 400 px: figures wider than the column, blurry or with text below "
                          f"{MIN_TEXT_PX} px (give them a phone layout: attnsvm.book.plots.phone_layout): {problems}")


def test_phone_figure_check_catches_a_cropped_or_shrunk_figure(browser, tmp_path):
    """A figure too wide for the column that scrolls (the defect of the book before its phone layouts), the same
    figure shrunk to the column (text below 9 px), its phone layout in a <picture>, which passes, a phone layout
    whose file is missing, and a phone layout at the display resolution (the explorers' frames before they were
    saved at 2x: blurry on a phone)."""
    import matplotlib.pyplot as plt
    plots.use_style()
    figure, axes = plt.subplots(1, 2, figsize=(plots.WIDTH, 3))
    data, metadata = plots.output(figure)
    blurry = plots.png(plots.phone_layout(figure), dpi=100, column_px=plots.PHONE_COLUMN_PX)[0]
    plt.close(figure)
    (tmp_path / "wide.png").write_bytes(data)
    (tmp_path / "phone.png").write_bytes(base64.b64decode(metadata[plots.PHONE_KEY]))
    (tmp_path / "blurry.png").write_bytes(blurry)
    width = metadata["width"]
    (tmp_path / "page.html").write_text(
        '<div class="bd-article" style="width:350px;padding:0 16px">'
        f'<figure style="overflow-x:auto;margin:0"><img src="wide.png" style="width:{width}px"></figure>'
        f'<figure style="margin:0"><img src="wide.png" style="width:{width}px;max-width:100%"></figure>'
        f'<figure style="margin:0"><picture><source media="{plots.PHONE_MEDIA}" srcset="phone.png 2x">'
        f'<img src="wide.png" style="width:auto;max-width:100%"></picture></figure>'
        f'<figure style="margin:0"><picture><source media="{plots.PHONE_MEDIA}" srcset="missing.png 2x">'
        f'<img src="wide.png" style="width:auto;max-width:100%"></picture></figure>'
        f'<figure style="margin:0"><picture><source media="{plots.PHONE_MEDIA}" srcset="blurry.png">'
        f'<img src="wide.png" style="width:auto;max-width:100%"></picture></figure></div>')
    page = browser.new_page(viewport={"width": 400, "height": 900})
    page.goto((tmp_path / "page.html").as_uri())
    images = page.evaluate(PHONE_FIGURES)
    url = page.url
    page.close()
    assert [Path(image["src"]).name for image in images] == ["wide.png", "wide.png", "phone.png", "missing.png",
                                                              "blurry.png"]
    problems = phone_figure_problems(images, url, Path("/"))  # file URLs: paths from the root
    assert len(problems) == 4  # the phone layout passes
    assert problems[2].endswith("(does not load)")  # the missing phone layout
    assert problems[3].endswith("(1.0 image px per CSS px: blurry on a phone's screen)")
    assert problems[0].endswith(f"({width} px wide, {width - 350} px past the column, scrolls sideways)")  # cropped
    assert problems[1].endswith(f"(smallest text {9 * 100 / 72 * 350 / width:.1f} px)")  # shrunk


OVERFLOW = """(selector) => {
    const article = document.querySelector('.bd-article');
    if (!article) return [];
    const right = article.getBoundingClientRect().right;
    const scrolls = element => ['auto', 'scroll'].includes(getComputedStyle(element).overflowX);
    // a visible cue: the scrollbar takes room below the content (not an overlay that shows only on touch)
    const cue = element => {
        const style = getComputedStyle(element);
        const borders = parseFloat(style.borderTopWidth) + parseFloat(style.borderBottomWidth);
        return element.offsetHeight - element.clientHeight - borders >= 4;
    };
    const scroller = element => {
        for (let node = element; node && node !== article; node = node.parentElement)
            if (scrolls(node) && node.clientWidth < node.scrollWidth && cue(node)) return node;
        return null;
    };
    const bad = [];
    for (const element of article.querySelectorAll(selector)) {
        if (!element.getClientRects().length || element.closest('.toggle-hidden, details:not([open])')) continue;
        // wider than its box, or than the column, by more than an accent's overhang (math_scroll.js's SLACK); for
        // math, the typeset formula's width (MathJax's hidden copy for screen readers is often wider)
        const shown = element.querySelector(':scope > mjx-container > mjx-math');
        const width = shown ? shown.getBoundingClientRect().width : element.scrollWidth;
        const wide = width > element.clientWidth + 4 || element.getBoundingClientRect().right > right + 4;
        if (wide && !scroller(element)) bad.push(element.innerText.slice(0, 60).replace(/\\s+/g, ' '));
    }
    return bad;
}"""
WIDE = "mjx-container[display='true'], span.math, table, pre, .cell_output, figure, .attnsvm-explorer"


@each_page
def test_nothing_wider_than_the_column_without_a_scrollbar(name, visit, visit_phone):
    for width, visited in ((1280, visit(name)), (400, visit_phone(name))):
        bad = visited.page.evaluate(OVERFLOW, WIDE)
        assert not bad, f"{name}.html at {width} px: wider than the column and not scrollable: {bad[:5]}"
        page_width = visited.page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
        assert page_width <= 1, f"{name}.html at {width} px: the page is {page_width} px wider than the window"


CARD_TABLES = """() => [...document.querySelectorAll('.bd-article .tag_table-cards table')].map(table => ({
    cards: table.classList.contains('attnsvm-cards'), wide: table.scrollWidth > table.clientWidth + 1,
    unnamed: [...table.querySelectorAll('tbody td:not(:first-child)')].filter(cell => cell.textContent.trim()
        && getComputedStyle(cell, '::before').content !== `"${cell.dataset.label}: "`).map(cell => cell.textContent),
    blank: [...table.querySelectorAll('tbody td')].filter(cell => !cell.textContent.trim()
        && getComputedStyle(cell).display !== 'none').length}))"""


@pytest.mark.parametrize("name", ["book/status"])  # scheduled with the page's other checks
def test_card_tables_fit_a_phone_and_name_each_value(name, visit_phone):
    """The status page's benchmark tables (cell tag table-cards) read as cards at 400 px: none scrolls sideways,
    every value is shown under its column's title, and an empty cell (a note not given) is left out."""
    tables = visit_phone(name).page.evaluate(CARD_TABLES)
    assert tables, f"{name}.html has no table tagged table-cards"
    for table in tables:
        assert table["cards"] and not table["wide"] and not table["unnamed"] and not table["blank"], (
            f"{name}.html at 400 px: {table}")


@each_page
def test_display_math_fits_the_column_at_1280_px(name, visit):
    wide = visit(name).page.evaluate("""() => [...document.querySelectorAll('.bd-article mjx-container[display="true"]')]
        .filter(m => m.getClientRects().length && m.scrollWidth > m.clientWidth + 1)
        .map(m => (m.getAttribute('aria-label') || m.innerText).slice(0, 80))""")
    assert not wide, f"{name}.html: display equations wider than the column at 1280 px (break them): {wide}"


@each_page
def test_code_lines_fit_the_column_at_1280_px(name, visit):
    page = visit(name).page
    wide = page.evaluate("""() => {
        const closed = [...document.querySelectorAll('.bd-article details:not([open])')];
        closed.forEach(d => d.open = true);  // hidden code can be shown: it must fit too
        const wide = [...document.querySelectorAll('.bd-article .cell_input pre')]
            .filter(pre => pre.getClientRects().length && pre.scrollWidth > pre.clientWidth + 1)
            .map(pre => pre.innerText.split('\\n').reduce((a, b) => a.length >= b.length ? a : b));
        closed.forEach(d => d.open = false);
        return wide;
    }""")
    assert not wide, f"{name}.html: code lines that run past the cell edge at 1280 px (break them): {wide}"


def test_card_tables_leave_out_empty_cells_only(browser):
    """On a phone, table_cards.js and book.css hide a card's cell without text (an empty paragraph, whitespace) and
    keep one with text or only an image, each under its column's title."""
    page = browser.new_page(viewport={"width": 400, "height": 600})
    page.set_content('<div class="bd-article"><div class="cell tag_table-cards"><table><thead><tr><th>case</th>'
                     '<th>value</th><th>note</th><th>picture</th></tr></thead><tbody><tr><td><p>a</p></td>'
                     '<td><p>1</p></td><td><p></p></td><td><img alt="" src="data:,"></td></tr>'
                     '<tr><td>b</td><td> </td><td>n</td><td></td></tr></tbody></table></div></div>')
    page.add_style_tag(path=str(ROOT / "assets" / "html" / "book.css"))
    page.add_script_tag(path=str(ROOT / "assets" / "html" / "table_cards.js"))
    shown = page.evaluate("""() => [...document.querySelectorAll('tbody tr')].map(row => [...row.children].map(cell =>
        getComputedStyle(cell).display === 'none' ? null : getComputedStyle(cell, '::before').content))""")
    page.close()
    assert shown == [["none", '"value: "', None, '"picture: "'], ["none", None, '"note: "', None]], shown


def test_overflow_check_catches_clipped_math(browser):
    page = browser.new_page(viewport={"width": 400, "height": 300})
    page.set_content('<style>.bd-article ::-webkit-scrollbar { height: 8px; }</style>'
                     '<div class="bd-article" style="width:300px;overflow:hidden">'
                     '<pre style="overflow-x:visible">' + "x" * 200 + '</pre>'
                     '<pre style="overflow-x:auto">' + "y" * 200 + '</pre>'
                     '<span class="math" style="display:inline-flex;max-width:100%;overflow:hidden">' + "z" * 200
                     + '</span></div>')
    bad = page.evaluate(OVERFLOW, "pre, span.math")
    page.close()
    assert bad == ["x" * 60, "z" * 60]  # the clipped pre and the clipped inline math, not the scrolling pre


def test_overflow_check_wants_a_visible_scrollbar(browser):
    page = browser.new_page(viewport={"width": 400, "height": 300})
    page.set_content('<style>.bd-article ::-webkit-scrollbar { height: 0; }</style>'
                     '<div class="bd-article" style="width:300px;overflow:hidden">'
                     '<table style="display:block;overflow-x:auto"><tr><td>' + "t" * 200 + '</td></tr></table>'
                     '</div>')
    bad = page.evaluate(OVERFLOW, "table")
    page.close()
    assert bad == ["t" * 60]  # it scrolls, but nothing shows that it does


@each_page
def test_references_carry_their_numbers(name, visit):
    bare = visit(name).page.evaluate("""(words) => [...document.querySelectorAll('.bd-article a.reference.internal')]
        .map(a => a.innerText.trim()).filter(text => words.includes(text))""", list(NUMBERED))
    assert not bare, f"{name}.html: references without their number (use {{numref}}): {bare}"


@each_page
def test_no_leaked_notes_or_placeholders(name, visit):
    text = visit(name).page.evaluate("() => (document.querySelector('.bd-article') || document.body).innerText")
    prose = visit(name).page.evaluate("""() => { const article = (document.querySelector('.bd-article')
        || document.body).cloneNode(true); article.querySelectorAll('pre').forEach(e => e.remove());
        return article.textContent; }""")
    found = sorted({match.group(0) for match in FORBIDDEN.finditer(text)}
                   | {match.group(0) for match in UNRENDERED_ROLE.finditer(prose)})
    text += "\n" + prose
    assert not found, f"{name}.html shows {found}: " + "; ".join(
        text[max(0, text.index(f) - 50):text.index(f) + 50].replace("\n", " ") for f in found)


@each_page
def test_one_search_box_and_launch_buttons_only_with_code(name, visit):
    page = visit(name).page
    fields = page.evaluate("() => [...document.querySelectorAll('.search-button-field, .bd-search')]"
                           ".filter(e => e.offsetParent !== null && !e.closest('.search-button__wrapper')).length")
    assert fields <= 1, f"{name}.html shows {fields} search fields"
    has_code = page.evaluate("() => !!document.querySelector('.bd-article div.cell')")
    launch = page.evaluate("() => [...document.querySelectorAll('a[href]')].some(a => a.href.includes('mybinder.org'))")
    assert launch == has_code, f"{name}.html: launch buttons {'without' if launch else 'despite'} code to run"


EXPLORERS = "() => document.querySelectorAll('.bd-article .attnsvm-explorer').length"


@each_page
def test_every_explorer_control_changes_its_figure(name, visit):
    page = visit(name).page
    still = []
    for k in range(page.evaluate(EXPLORERS)):
        explorer = page.locator(".bd-article .attnsvm-explorer").nth(k)
        explorer.scroll_into_view_if_needed()
        image = explorer.locator("img")
        for j in range(explorer.locator("input[type=range]").count()):
            slider = explorer.locator("input[type=range]").nth(j)
            before, start = image.screenshot(), slider.input_value()
            other = "0" if start != "0" else slider.get_attribute("max")
            slider.evaluate("(s, v) => { s.value = v; s.dispatchEvent(new Event('input')); }", other)
            page.wait_for_timeout(50)
            if image.screenshot() == before:
                still.append(f"explorer {k + 1}, control {slider.get_attribute('aria-label')}")
            slider.evaluate("(s, v) => { s.value = v; s.dispatchEvent(new Event('input')); }", start)
    assert not still, f"{name}.html: explorer controls that change no pixel of their figure: {still}"
