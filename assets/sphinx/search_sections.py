"""Sphinx extension: the search page's results link to sections and show prose around the term (HTML only).

Loads assets/html/search_sections.js (in html_static_path) on search.html alone; that script replaces Sphinx's
search summary, which on this theme shows a page's header buttons and table of contents and its math as TeX.
"""


def _search_script(app, pagename, templatename, context, doctree):
    if pagename == "search":
        app.add_js_file("search_sections.js")  # for this page only: Sphinx restores the list after each page


def setup(app):
    app.connect("html-page-context", _search_script)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
