"""The library's reference pages (api/*.html), opened in headless chromium: a function's parameters render as a
list (sphinx.ext.napoleon's field list: each name in bold with its type and description), in the order of its
signature, with a Returns field, and the docstrings' :math: roles are typeset by MathJax.

Run `make book` first.
"""

import inspect
import os
import shutil
from pathlib import Path

import pytest

if not (Path("/usr/bin/chromium").is_file() or shutil.which("chromium")):  # conftest.CHROMIUM
    missing = "chromium not found: install Debian's chromium (apt-get install chromium) to run the browser tests"
    if os.environ.get("ATTNSVM_REQUIRE_BROWSER"):  # set by .ci/run: in CI the browser checks must run
        pytest.fail(missing, pytrace=False)
    pytest.skip(missing, allow_module_level=True)

from attnsvm import linear, train  # noqa: E402

# (page, a function it documents): the training and the prelude's pages
FUNCTIONS = [("api/train", train.gd), ("api/linear", linear.svm)]

FIELDS = """id => {
    const entry = document.getElementById(id).closest('dl');
    const lists = [...entry.querySelectorAll(':scope > dd > dl.field-list')];
    return lists.flatMap(list => [...list.children].filter(child => child.tagName === 'DT').map(dt => ({
        title: dt.innerText.replace(/:$/, '').trim(),
        names: [...dt.nextElementSibling.querySelectorAll(':scope > ul > li > p > strong, :scope > p > strong')]
            .map(strong => strong.innerText.trim()),
        math: dt.nextElementSibling.querySelectorAll('mjx-container').length,
    })));
}"""


def _fields(visit, name, function):
    anchor = f"{function.__module__.split('._')[0]}.{function.__name__}"
    return {field["title"]: field for field in visit(name).page.evaluate(FIELDS, anchor)}


@pytest.mark.parametrize("name, function", FUNCTIONS, ids=[name for name, _ in FUNCTIONS])
def test_parameters_render_as_a_list_in_signature_order(name, visit, function):
    fields = _fields(visit, name, function)
    assert "Parameters" in fields, f"{name}.html: {function.__name__} shows no Parameters list, got {list(fields)}"
    expected = [p for p in inspect.signature(function).parameters]
    assert fields["Parameters"]["names"] == expected, (f"{name}.html: {function.__name__}'s parameter list shows "
                                                       f"{fields['Parameters']['names']}, its signature {expected}")
    assert "Returns" in fields, f"{name}.html: {function.__name__} shows no Returns field, got {list(fields)}"


@pytest.mark.parametrize("name, function", FUNCTIONS, ids=[name for name, _ in FUNCTIONS])
def test_docstring_math_is_typeset(name, visit, function):
    fields = _fields(visit, name, function)
    typeset = sum(field["math"] for field in fields.values())
    assert typeset, f"{name}.html: no MathJax-typeset :math: in {function.__name__}'s parameter and return lists"
    assert visit(name).mathjax_error is None, f"{name}.html: {visit(name).mathjax_error}"
