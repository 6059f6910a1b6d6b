"""Screenshots of every page of the built book at 1280 px (a laptop) and 400 px (a phone), whole pages, in
_build/screenshots/, for a reviewer's eyes (build artifacts, never committed): `make screenshots`. Not a check,
so not part of `make test` (its name does not start with test_); the checks of what a reader sees are in
test_reading.py.

Run `make book` first.
"""

from pathlib import Path

import pytest

from test_pages import PAGES, ROOT

SCREENSHOTS = ROOT / "_build" / "screenshots"


@pytest.mark.parametrize("name", PAGES)
def test_screenshots_for_review(name, visit, visit_phone):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for width, visited in ((1280, visit(name)), (400, visit_phone(name))):
        path = SCREENSHOTS / f"{Path(name).name}-{width}.png"
        visited.page.screenshot(path=path, full_page=True)
        assert path.stat().st_size > 0
