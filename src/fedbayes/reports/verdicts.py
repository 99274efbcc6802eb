"""The one verdict vocabulary and the two counting bases, in one place, without pandas: the scorecard,
the tables' marks, the table and scorecard jobs' terminal lines and the `dvc metrics` files (read while
a DAG is planned) all take their words from here.

A *published cell* is one number a paper publishes at one address: (paper table, experiment, method,
round or target, metric). Each table CSV has one row per cell of ours; a row is a published cell when it
names a published source and the paper gives a value there (in rounds-to-target tables a blank, "never
reached", is a value too). Every published cell gets exactly one verdict, decided by :func:`verdict`
from the row alone.
"""

from __future__ import annotations

import math

# The one verdict vocabulary: every view (the scorecard, the tables' marks, the terminal lines, the
# `dvc metrics` files) prints these words, or MARK's symbol for them.
VERDICTS = ("within", "outside", "no tolerance", "not run: no data", "not run: other", "diverged", "not comparable")
MEANING = {
    "within": "ours differs from the published mean by at most the table's tolerance",
    "outside": "ours differs by more than the table's tolerance (each listed with its cause)",
    "no tolerance": "both numbers present; the table sets no tolerance for this metric",
    "not run: no data": "the dataset cannot be obtained on the machine that built the table",
    "not run: other": "the method is not run on this experiment (the table row says why)",
    "diverged": "a seed's run diverged (NaN) before the cell's round",
    "not comparable": "no faithful substitute exists here; the published numbers are printed alone",
}
MARK = {"within": "✓", "outside": "✗"}   # the tables' Δ column: the verdict's symbol
RAN = ("within", "outside")               # the compared cells: ours beside a published value and a tolerance

# The two counting bases, named the same in every view. A "published cell" is one number at one address
# of one paper table; the headline table (table1) reprints the papers' cells and is not a basis of its own.
PER_TABLE = "published cells, once per paper table"
PER_NUMBER = "distinct published numbers"


def _isnan(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def is_published_cell(row) -> bool:
    """A row is a published cell when it has a published source and a published value; a blank
    published value counts only in rounds-to-target tables ("the target was never reached")."""
    if not isinstance(row.get("published_source"), str) or not row["published_source"]:
        return False
    return not _isnan(row.get("published_mean")) or not _isnan(row.get("target", float("nan")))


def verdict(row) -> str:
    """The one verdict of a published cell (a row of a table CSV, as a dict or pandas row)."""
    status = row.get("status") if isinstance(row.get("status"), str) else ""
    if status.startswith("not comparable"):
        return "not comparable"
    if status.startswith("not run (data unavailable"):
        return "not run: no data"
    if status.startswith("not run"):
        return "not run: other"
    if status.startswith("diverged"):
        return "diverged"
    within = row.get("within_tol")
    if isinstance(within, str):  # read back from CSV without dtype inference
        within = {"True": True, "False": False}.get(within)
    if within is True or within == 1.0:
        return "within"
    if within is False or within == 0.0:
        return "outside"
    return "no tolerance"
