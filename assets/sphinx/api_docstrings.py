"""Sphinx extension for the library's reference pages (api/): the docstrings are plain prose with ``code`` and
doctest examples, so the characters that reStructuredText would read as markup in prose (``|x|`` a substitution,
``*`` emphasis) are taken literally. Doctest blocks (from a ``>>>`` line to the next blank line) and ``code``
spans are left as they are; a numpydoc heading (``Examples`` over a line of dashes) becomes a rubric."""

import re

_CODE = re.compile(r"(``.+?``)")
_MARKUP = re.compile(r"([|*])")


def _literal_prose(line: str) -> str:
    return "".join(part if part.startswith("``") else _MARKUP.sub(r"\\\1", part) for part in _CODE.split(line))


def _escape(app, what, name, obj, options, lines):
    in_example = False
    for k, line in enumerate(lines):
        stripped = line.strip()
        if stripped and k + 1 < len(lines) and set(lines[k + 1].strip()) == {"-"}:
            lines[k], lines[k + 1] = f".. rubric:: {stripped}", ""
            continue
        if stripped.startswith(">>>"):
            in_example = True
        elif not stripped:
            in_example = False
        if not in_example:
            lines[k] = _literal_prose(line)


def _skip_tuple_fields(app, what, name, obj, skip, options):
    if (getattr(obj, "__doc__", None) or "").startswith("Alias for field number"):
        return True
    return None


def setup(app):
    app.connect("autodoc-process-docstring", _escape)
    app.connect("autodoc-skip-member", _skip_tuple_fields)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
