"""Sphinx extension: the whole book's PDF, offered on every HTML page (HTML only).

`make book` and `make test` build the PDF (_build/latex/book.pdf, through XeLaTeX) before the HTML. When that
PDF is there and newer than every page's source, the HTML build copies it to book.pdf at the root of its output
and every page's download menu offers it as "PDF of the whole book"; the theme's per-page ".pdf" (the browser's
print dialog) is labelled "Print this page". Without a current PDF there is neither the link nor the file.
"""

import shutil
from pathlib import Path

from sphinx.util import logging

LOGGER = logging.getLogger(__name__)
NAME = "book.pdf"
LINK = {"type": "link", "text": "PDF of the whole book", "tooltip": "The whole book as one PDF, for print",
        "icon": "fas fa-book", "label": "download-book-pdf-button"}


def _current_pdf(app) -> Path | None:
    """_build/latex/book.pdf, if it is newer than every page's source."""
    pdf = Path(app.outdir).parent / "latex" / NAME
    if not pdf.is_file():
        return None
    sources = [Path(app.env.doc2path(docname)) for docname in app.env.found_docs]
    stale = [path for path in sources if path.is_file() and path.stat().st_mtime > pdf.stat().st_mtime]
    if stale:
        LOGGER.info(f"book_pdf: not offering {pdf}, older than {stale[0]} ({len(stale)} sources in all)")
        return None
    return pdf


def _copy_pdf(app, env):
    if app.builder.format != "html":
        return
    target = Path(app.outdir) / NAME
    pdf = _current_pdf(app)
    app.builder.book_pdf = pdf is not None
    if pdf is None:
        target.unlink(missing_ok=True)
    else:
        shutil.copyfile(pdf, target)


def _download_menu(app, pagename, templatename, context, doctree):
    buttons = context.get("header_buttons")
    if buttons is None:
        return
    group = next((button for button in buttons if button.get("label") == "download-buttons"), None)
    if group is not None:
        group["tooltip"] = "Download"
        for button in group["buttons"]:
            if button.get("label") == "download-pdf-button":
                button.update(text="Print this page", tooltip="This page through the browser's print dialog")
    if not getattr(app.builder, "book_pdf", False):
        return
    if group is None:  # pages without a source (search, indices): a menu with the book alone
        group = {"type": "group", "tooltip": "Download", "icon": "fas fa-download", "buttons": [],
                 "label": "download-buttons"}
        at = next((k for k, button in enumerate(buttons) if button.get("label") == "fullscreen-button"), len(buttons))
        buttons.insert(at, group)
    group["buttons"].insert(0, {**LINK, "url": context["pathto"](NAME, 1)})


def setup(app):
    app.connect("env-updated", _copy_pdf)
    app.connect("html-page-context", _download_menu, priority=502)  # after the theme's buttons (501)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
