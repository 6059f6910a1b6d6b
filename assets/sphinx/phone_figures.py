"""Sphinx extension: a figure that has a phone layout shows it in narrow windows.

attnsvm.book.plots stores a figure's phone layout (a PNG drawn for a phone's column) in the metadata of the
figure's PNG output, under plots.PHONE_KEY. myst-nb keeps only the width from that metadata, and names the
figure's image after the SHA-256 of its PNG; so each HTML page of a notebook finds its figures again by that name
and wraps each in a <picture> whose <source> (media plots.PHONE_MEDIA) is the phone layout, written next to the
figure in _images/ and shown at its own size (its DPI over plots.CSS_PX_PER_INCH). The LaTeX build is unchanged.
"""

import base64
import hashlib
import json
import re
from pathlib import Path

from attnsvm.book import plots


def _phone_layouts(path: Path) -> dict[str, bytes]:
    """SHA-256 of a figure's PNG -> the PNG of its phone layout, for the figures of the notebook at ``path``."""
    layouts = {}
    for cell in json.loads(path.read_text(encoding="utf-8")).get("cells", []):
        for output in cell.get("outputs", []):
            phone = output.get("metadata", {}).get("image/png", {}).get(plots.PHONE_KEY)
            if phone is not None:
                wide = base64.b64decode("".join(output["data"]["image/png"]))
                layouts[hashlib.sha256(wide).hexdigest()] = base64.b64decode(phone)
    return layouts


def _pictures(app, pagename, templatename, context, doctree):
    source = Path(app.env.doc2path(pagename)) if pagename in app.env.all_docs else None
    if source is None or source.suffix != ".ipynb" or "body" not in context:
        return
    layouts = _phone_layouts(source)
    if not layouts:
        return
    images = Path(app.outdir) / "_images"
    density = plots.DPI / plots.CSS_PX_PER_INCH

    def picture(match):
        digest = match.group("digest")
        if digest not in layouts:
            return match.group(0)
        name = f"{digest}-phone.png"
        images.mkdir(parents=True, exist_ok=True)
        (images / name).write_bytes(layouts[digest])
        return (f'<picture><source media="{plots.PHONE_MEDIA}" srcset="{match.group("folder")}{name} {density:g}x">'
                f'{match.group(0)}</picture>')

    found = re.compile(r'<img\b[^>]*\bsrc="(?P<folder>[^"]*/)?(?P<digest>[0-9a-f]{64})\.png"[^>]*>')
    context["body"] = found.sub(picture, context["body"])


def setup(app):
    app.connect("html-page-context", _pictures)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
