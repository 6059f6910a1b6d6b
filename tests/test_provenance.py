"""Every theorem-like statement of the book says where it comes from and whether the book proves it.

The first paragraph of each `{prf:theorem}`, `{prf:proposition}`, `{prf:lemma}`, `{prf:corollary}` and
`{prf:conjecture}` is a provenance line,

    *Source: <paper and place, or "this book">. Status: <status>.*

with one of the statuses below. "proved below" must be followed by a `{prf:proof}`, "proof sketch below" by a
`{prf:proof}` that opens with "*Sketch", and the other statuses say that the book does not prove the statement
(it is checked numerically, taken on trust, refuted, or "open": a conjecture proved neither by the book nor by a
source it cites, whether the book's own or one that a source proposes). The test prints how many statements of
each status every chapter has.
"""

import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "book_src").glob("*.md"))
THEOREM_LIKE = ("theorem", "proposition", "lemma", "corollary", "conjecture")
STATUSES = ("proved below", "proof sketch below", "not proved here; checked numerically",
            "not proved here; taken on trust", "not proved here; open", "refuted below")
DIRECTIVE = re.compile(r"^(?P<fence>`{3,}|:{3,})\{prf:(?P<kind>[a-z]+)\}(?P<title>.*)$")
PROVENANCE = re.compile(r"^\*Source: (?P<source>.+?)\. Status: (?P<status>[^.*]+)\.\*$")


def directives(text: str) -> list[tuple[str, str, list[str]]]:
    """The prf directives of a MyST text, in order: (kind, title, body lines without the options)."""
    found, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        match = DIRECTIVE.match(lines[i])
        if not match:
            i += 1
            continue
        fence, body, i = match["fence"], [], i + 1
        while i < len(lines) and lines[i].rstrip() != fence:
            body.append(lines[i])
            i += 1
        i += 1
        body = [line for line in body if not re.match(r"^:[a-z_-]+:", line)]
        while body and not body[0].strip():
            body.pop(0)
        found.append((match["kind"], match["title"].strip(), body))
    return found


def provenance_errors(text: str) -> tuple[list[str], Counter]:
    """The theorem-like statements of `text` whose provenance is missing or not kept, and the statuses counted."""
    errors, counts, found = [], Counter(), directives(text)
    for index, (kind, title, body) in enumerate(found):
        if kind not in THEOREM_LIKE:
            continue
        match = PROVENANCE.match(body[0].strip()) if body else None
        if not match or match["status"] not in STATUSES:
            errors.append(f"{kind} '{title}': no line '*Source: ... Status: <{' | '.join(STATUSES)}>.*' first")
            continue
        status = match["status"]
        counts[status] += 1
        after = found[index + 1] if index + 1 < len(found) else None
        proof = after if after and after[0] == "proof" else None
        opens_as_sketch = bool(proof and proof[2] and proof[2][0].lstrip().startswith("*Sketch"))
        if status == "proved below" and (proof is None or opens_as_sketch):
            errors.append(f"{kind} '{title}': says 'proved below' but no full {{prf:proof}} follows")
        if status == "proof sketch below" and not opens_as_sketch:
            errors.append(f"{kind} '{title}': says 'proof sketch below' but no {{prf:proof}} opening '*Sketch' follows")
        if status.startswith(("not proved", "refuted")) and proof is not None and not opens_as_sketch:
            errors.append(f"{kind} '{title}': says '{status}' but a full proof follows")
    return errors, counts


def test_the_check_finds_missing_and_broken_provenance():
    good = ("```{prf:theorem} A\n:label: a\n\n*Source: this book. Status: proved below.*\n\nText.\n```\n\n"
            "```{prf:proof}\nIt is.\n```\n")
    assert provenance_errors(good) == ([], Counter({"proved below": 1}))
    unlabelled = "```{prf:lemma} B\nText.\n```\n"
    assert len(provenance_errors(unlabelled)[0]) == 1
    no_proof = "```{prf:theorem} C\n*Source: paper A. Status: proved below.*\n```\n"
    assert "no full" in provenance_errors(no_proof)[0][0]
    sketch_as_proof = ("```{prf:theorem} D\n*Source: paper A. Status: proved below.*\n```\n"
                       "```{prf:proof}\n*Sketch.* It is.\n```\n")
    assert "no full" in provenance_errors(sketch_as_proof)[0][0]
    missing_sketch = "```{prf:theorem} E\n*Source: paper A. Status: proof sketch below.*\n```\n"
    assert "'*Sketch'" in provenance_errors(missing_sketch)[0][0]
    unknown_status = "```{prf:corollary} F\n*Source: paper A. Status: obvious.*\n```\n"
    assert len(provenance_errors(unknown_status)[0]) == 1
    definitions_need_none = "```{prf:definition} G\nText.\n```\n"
    assert provenance_errors(definitions_need_none) == ([], Counter())


@pytest.mark.parametrize("path", SOURCES, ids=lambda path: path.stem)
def test_every_theorem_like_statement_has_its_provenance(path):
    errors, counts = provenance_errors(path.read_text())
    print(f"{path.stem}: {sum(counts.values())} theorem-like statements, {dict(counts)}")
    assert not errors, f"{path.name}:\n" + "\n".join(errors)
