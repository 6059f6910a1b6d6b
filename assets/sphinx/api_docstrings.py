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


# a role or code span that opens on this line and closes on a later one (a long :math:`...`)
_OPEN = re.compile(r":[\w:+-]+:`[^`]*$|(?<!`)`[^`]*$")


def _literal_prose(line: str, in_span: bool = False) -> tuple[str, bool]:
    """The line with prose markup escaped, and whether a span is still open at its end (``in_span``: at its start)."""
    head = ""
    if in_span:
        end = line.find("`")
        if end < 0:
            return line, True
        head, line = line[:end + 1], line[end + 1:]
    parts, open_at_end = [], False
    for part in _SPANS.split(line):
        if _SPANS.fullmatch(part):
            parts.append(part)
            continue
        opened = _OPEN.search(part)
        cut = opened.start() if opened else len(part)
        parts.append(_MARKUP.sub(r"\\\1", part[:cut]) + part[cut:])
        open_at_end = opened is not None
    return head + "".join(parts), open_at_end


def _is_heading(lines, k):
    return bool(lines[k].strip()) and k + 1 < len(lines) and set(lines[k + 1].strip()) == {"-"}


def _escape(app, what, name, obj, options, lines):
    in_example, section, in_span = False, None, False
    for k, line in enumerate(lines):
        stripped = line.strip()
        in_span = in_span and bool(stripped)  # no span runs over a blank line
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
            lines[k], in_span = _literal_prose(line, in_span)


def _skip_tuple_fields(app, what, name, obj, skip, options):
    if (getattr(obj, "__doc__", None) or "").startswith("Alias for field number"):
        return True
    return None


def setup(app):
    # before napoleon's own handler (priority 500), which turns the sections into field lists
    app.connect("autodoc-process-docstring", _escape, priority=400)
    app.connect("autodoc-skip-member", _skip_tuple_fields)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
