"""Sphinx extension: each theorem-like statement's provenance line as a compact mark (HTML only).

Every statement of the book opens with a line *Source: ... Status: ...* (tools/provenance.py checks them). In
the HTML book that line becomes a coloured mark that says the status in two or three words (the legend is in
the introduction's Sources section), followed by the full line in a closed <details> element that the reader
opens on demand. The PDF keeps the line as written.
"""

from docutils import nodes
from sphinx.transforms.post_transforms import SphinxPostTransform

# status (as tools/provenance.py spells it) -> (CSS class, mark)
MARKS = {"proved below": ("proved", "proved here"),
         "proof sketch below": ("sketch", "proof sketch"),
         "not proved here; checked numerically": ("checked", "checked numerically"),
         "not proved here; taken on trust": ("trust", "from the source, not proved here"),
         "not proved here; open": ("open", "open"),
         "refuted below": ("refuted", "refuted")}


def _status(paragraph: nodes.paragraph) -> str | None:
    """The status of a provenance paragraph (one emphasis, 'Source: ... Status: <status>.'), else None."""
    if len(paragraph.children) != 1 or not isinstance(paragraph[0], nodes.emphasis):
        return None
    text = paragraph.astext()
    if not text.startswith("Source: ") or ". Status: " not in text:
        return None
    return text.rsplit(". Status: ", 1)[1].rstrip(".")


class ProvenanceMarks(SphinxPostTransform):
    default_priority = 400
    formats = ("html",)

    def run(self, **kwargs) -> None:
        for paragraph in list(self.document.findall(nodes.paragraph)):
            status = _status(paragraph)
            if status not in MARKS:
                continue
            kind, mark = MARKS[status]
            opening = nodes.raw("", f'<details class="provenance"><summary><span class="prov-mark prov-{kind}">'
                                    f'{mark}</span> <span class="prov-hint">source</span></summary>',
                                format="html")
            paragraph.replace_self([opening, paragraph.deepcopy(), nodes.raw("", "</details>", format="html")])


def setup(app):
    app.add_post_transform(ProvenanceMarks)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
