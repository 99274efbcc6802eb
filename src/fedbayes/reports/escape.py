"""User-supplied text (titles, statuses, notes files) printed into Markdown that is shown as HTML
(`snakemake --report`, Git hosts): as text, never as markup that a renderer would execute or follow."""

from __future__ import annotations

import re

# HTML-significant characters and Markdown's link and table-cell syntax, as character references: a
# renderer prints them, it never parses them as a tag, a link or a cell border
_INLINE = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "[": "&#91;", "]": "&#93;", "|": "&#124;"}
_CODE_SPAN = re.compile(r"(`+)(?:.+?)\1")


def md_text(s) -> str:
    """``s`` as one line of Markdown text: newlines joined, every HTML and link character escaped."""
    line = " ".join(str(s).split("\n")).replace("\r", " ")
    return "".join(_INLINE.get(c, c) for c in line)


def md_document(text: str) -> str:
    """A Markdown document written by a person (a table's notes file) with its raw HTML made text: ``<``
    escaped outside code spans and fenced code blocks (where a renderer prints it as it is anyway), so a
    tag never reaches the HTML; its Markdown (emphasis, lists, links to files) is kept."""
    out, fenced = [], False
    for line in text.split("\n"):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced:
            line = _outside_code(line, lambda part: part.replace("<", "&lt;").replace("javascript:", "javascript&#58;"))
        out.append(line)
    return "\n".join(out)


def _outside_code(line: str, fn) -> str:
    parts, last = [], 0
    for m in _CODE_SPAN.finditer(line):
        parts += [fn(line[last:m.start()]), m.group(0)]
        last = m.end()
    return "".join(parts + [fn(line[last:])])
