"""Pages of Snakemake's report: a Markdown or CSV file of the reports rendered as one self-contained HTML
page, so that the report shows it in place (Snakemake's report displays images and HTML; any other file
is only offered as a download).

``python -m fedbayes.report_pages IN OUT``: renders ``IN`` (``.md``: CommonMark with tables; ``.csv``: a
table, every value as written) to ``OUT``. The workflow's ``report_page`` rule (workflow/rules/
report_pages.smk) runs it on the scorecard, every table, toy and notes file. Not a table's input: its
output lives under the git-ignored work folder, and editing it rebuilds no table.
"""

from __future__ import annotations

import csv
import html
import sys
from pathlib import Path

from fedbayes.fileio import write_text_atomic

# Wide tables scroll sideways inside their own box. No sticky header or first column: headless Chromium
# painted those cells blank in a screenshot of the 15-column table1.
STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.2em 1.6em; color: #1f2328; }
h1 { font-size: 1.45em; } h2 { font-size: 1.2em; border-bottom: 1px solid #d0d7de; padding-bottom: .2em; }
h3 { font-size: 1.05em; } code { background: #f2f4f6; padding: 0 .25em; border-radius: 3px; font-size: 92%; }
.scroll { overflow-x: auto; margin: .6em 0 1em; }
table { border-collapse: collapse; font-size: 13px; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #d0d7de; padding: 3px 7px; text-align: left; vertical-align: top; white-space: nowrap; }
th { background: #f6f8fa; }
tr:nth-child(even) td { background: #fbfcfd; }
.source { color: #57606a; font-size: 12px; }
"""


SCORECARD_CATEGORY = "1. Reproduction scorecard"   # the report sorts categories by name: this one first


def markdown_body(text: str) -> str:
    """CommonMark with GitHub tables; raw HTML in the source is shown as text, not interpreted."""
    from markdown_it import MarkdownIt

    body = MarkdownIt("commonmark", {"html": False}).enable("table").render(text)
    return body.replace("<table>", '<div class="scroll"><table>').replace("</table>", "</table></div>")


def csv_body(text: str) -> str:
    """The CSV as one table: a header row and every value exactly as the file writes it."""
    rows = list(csv.reader(text.splitlines()))
    if not rows:
        return "<p>(empty file)</p>"
    head = "".join(f"<th>{html.escape(c)}</th>" for c in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>\n" for r in rows[1:])
    return (f'<p>{len(rows) - 1} rows × {len(rows[0])} columns.</p>'
            f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>\n{body}</tbody></table></div>')


def render_page(src: str | Path, out: str | Path, shown_as: str | None = None) -> Path:
    """Write ``out``: the HTML page of ``src`` (.md or .csv); ``shown_as``: the path named on the page."""
    src, out = Path(src), Path(out)
    text = src.read_text(encoding="utf-8")
    if src.suffix == ".md":
        body = markdown_body(text)
    elif src.suffix == ".csv":
        body = csv_body(text)
    else:
        raise ValueError(f"{src}: a report page is rendered from a .md or .csv file")
    name = html.escape(shown_as or str(src))
    page = (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{name}</title>'
            f"<style>{STYLE}</style></head><body>\n"
            f'<p class="source">{name}, as committed (rendered for the report)</p>\n{body}</body></html>\n')
    write_text_atomic(out, page)
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m fedbayes.report_pages IN.md|IN.csv OUT.html", file=sys.stderr)
        return 2
    src = Path(args[0])
    if not src.is_file() or src.suffix not in (".md", ".csv"):
        print(f"{src}: not a .md or .csv file", file=sys.stderr)
        return 2
    render_page(src, args[1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
