"""Sphinx extension of the book's HTML pages (loaded through _config.yml's `sphinx.local_extensions`).

- Each script once: sphinx-thebe registers its configuration script again at every build of the environment,
  once with the file name None and once with '', which declares `const THEBE_JS_URL` twice on a page and stops
  the second script with a console error.
- Launch buttons (Binder, Colab) only on pages that have code to run.
- Figures with a phone layout show it in narrow windows (phone_figures.py, in this folder, loaded from here).
"""

from docutils import nodes


def _unique_scripts(app, pagename, templatename, context, doctree):
    seen, unique = set(), []
    for script in context.get("script_files", []):
        attributes = getattr(script, "attributes", {})
        key = (str(getattr(script, "filename", script) or ""), tuple(sorted((k, str(v)) for k, v in attributes.items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"][:] = unique  # in place: it is the list that later handlers (MathJax) append to


def _has_code(doctree) -> bool:
    return any(node.get("nb_element") == "cell_code" for node in doctree.findall(nodes.container))


def _launch_buttons_where_code_runs(app, pagename, templatename, context, doctree):
    if doctree is not None and not _has_code(doctree) and "header_buttons" in context:
        context["header_buttons"] = [button for button in context["header_buttons"]
                                     if button.get("label") != "launch-buttons"]


def setup(app):
    app.setup_extension("phone_figures")
    app.connect("html-page-context", _unique_scripts, priority=100)
    app.connect("html-page-context", _launch_buttons_where_code_runs, priority=502)  # after the theme adds them (501)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
