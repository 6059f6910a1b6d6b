"""Sphinx extension for the library's reference pages (api/): the docstrings are numpydoc (sections such as
``Parameters`` and ``Returns`` that sphinx.ext.napoleon renders as lists), with ``code``, :math:`...` roles and
doctest examples. Before napoleon reads them, the characters that reStructuredText would read as markup in prose
(``|x|`` a substitution, ``*`` emphasis) are taken literally; roles, ``code`` and `code` spans, doctest blocks
(from a ``>>>`` line to the next blank line), section headings and the ``name : type`` lines of a section are
left as they are."""

import re

_SPANS = re.compile(r"(:[\w:+-]+:`[^`]*`|``.+?``|`[^`]+`)")
_MARKUP = re.compile(r"([|*])")
# numpydoc sections whose entries start with a `name : type` line at the section's indentation
_ENTRY_SECTIONS = {"Parameters", "Other Parameters", "Returns", "Yields", "Raises", "Warns", "Attributes"}


def _literal_prose(line: str) -> str:
    return "".join(part if _SPANS.fullmatch(part) else _MARKUP.sub(r"\\\1", part) for part in _SPANS.split(line))


def _is_heading(lines, k):
    return bool(lines[k].strip()) and k + 1 < len(lines) and set(lines[k + 1].strip()) == {"-"}


def _escape(app, what, name, obj, options, lines):
    in_example, section = False, None
    for k, line in enumerate(lines):
        stripped = line.strip()
        if _is_heading(lines, k):
            section = stripped
            continue
        if stripped and set(stripped) == {"-"} and k and _is_heading(lines, k - 1):
            continue
        if stripped.startswith(">>>"):
            in_example = True
        elif not stripped:
            in_example = False
        entry = section in _ENTRY_SECTIONS and stripped and not line[:1].isspace()
        if not in_example and not entry:
            lines[k] = _literal_prose(line)


def _skip_tuple_fields(app, what, name, obj, skip, options):
    if (getattr(obj, "__doc__", None) or "").startswith("Alias for field number"):
        return True
    return None


def setup(app):
    # before napoleon's own handler (priority 500), which turns the sections into field lists
    app.connect("autodoc-process-docstring", _escape, priority=400)
    app.connect("autodoc-skip-member", _skip_tuple_fields)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
