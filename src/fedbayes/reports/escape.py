"""User-supplied text (titles, statuses, notes files) printed into Markdown that is shown as HTML
(`snakemake --report`, Git hosts): as text, never as markup that a renderer would execute or follow."""

from __future__ import annotations

import re

# HTML-significant characters and Markdown's link and table-cell syntax, as character references: a
# renderer prints them, it never parses them as a tag, a link or a cell border
_INLINE = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "[": "&#91;", "]": "&#93;", "|": "&#124;"}
# a code span: backticks to the same number of backticks, across line breaks but not a paragraph break
_CODE_SPAN = re.compile(r"(`+)(?:(?!\n[ \t]*\n).)+?\1", re.S)


def md_text(s) -> str:
    """``s`` as one line of Markdown text: newlines joined, every HTML and link character escaped."""
    line = " ".join(str(s).split("\n")).replace("\r", " ")
    return "".join(_INLINE.get(c, c) for c in line)


def md_document(text: str) -> str:
    """A Markdown document written by a person (a table's notes file) with its raw HTML made text: ``<``
    escaped outside code spans and fenced code blocks (where a renderer prints it as it is anyway), so a
    tag never reaches the HTML; its Markdown (emphasis, lists, links to files) is kept."""
    out, prose, fenced = [], [], False

    def flush():
        if prose:
            out.append(_outside_code("\n".join(prose), lambda part: part.replace("<", "&lt;")
                                     .replace("javascript:", "javascript&#58;")))
            prose.clear()

    for line in text.split("\n"):
        if line.lstrip().startswith(("```", "~~~")):
            flush()
            fenced = not fenced
            out.append(line)
        elif fenced:
            out.append(line)
        else:
            prose.append(line)
    flush()
    return "\n".join(out)


def _outside_code(text: str, fn) -> str:
    parts, last = [], 0
    for m in _CODE_SPAN.finditer(text):
        parts += [fn(text[last:m.start()]), m.group(0)]
        last = m.end()
    return "".join(parts + [fn(text[last:])])
