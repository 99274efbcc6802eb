"""The published cells a run backs: the published value and the verdict of each table cell its numbers
are averaged into, read from the tables' CSVs (``<reports>/<table>.csv``) and worded by the one verdict
vocabulary (``fedbayes.reports.verdicts``), so MLflow says what the tables and the scorecard say.

A run of (experiment, method, point) at any seed backs every published cell of a table row with that
experiment, method (a prediction variant's name, ``bayesadmm@mean``, for the variant's run) and point.
Tags, per metric and address in the run's series (``address``: a round, a statistic, a target):
``published/<metric>/<address>`` (the published mean, in the table's unit, which is the unit MLflow
logs), ``verdict/<metric>/<address>`` (a word of ``VERDICTS``) and ``cell/<metric>/<address>`` (which
tables and published sources, ours and the tolerance); ``published/<metric>`` and ``verdict/<metric>``
repeat the cell at the last round the tables read. Two papers printing other values at one address are
joined by "; ", in the same order in the tags.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from fedbayes.reports.verdicts import is_published_cell, verdict

NUMERIC = ("published_mean", "published_std", "ours_mean", "ours_std", "tolerance", "diff", "target")


def _number(text):
    try:
        return float(text) if text not in (None, "") else float("nan")
    except ValueError:
        return float("nan")


def _fmt(x: float) -> str:
    return "" if math.isnan(x) else f"{x:.6g}"


def table_cells(reports: str | Path, tables) -> dict[tuple[str, str, str], list[dict]]:
    """(experiment, method, point) → the published cells of those rows in the tables' CSVs (a table
    whose CSV is not built yet contributes none)."""
    out: dict[tuple[str, str, str], list[dict]] = {}
    for table in tables:
        path = Path(reports) / f"{table}.csv"
        if not path.exists():
            continue
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                row = {**row, **{k: _number(row.get(k)) for k in NUMERIC if k in row}}
                if not is_published_cell(row):
                    continue
                out.setdefault((row["experiment"], row["method"], row["point"]), []).append({**row, "table": table})
    return out


def address(cell: dict) -> str:
    """Where in a run's series a cell is read: ``round50`` (the mean of the last 3 evaluated rounds up to
    round 50, the tables' default), ``max_last3/round50`` (another statistic), ``rounds_to_75`` (the
    first round reaching a target)."""
    if not math.isnan(cell.get("target", math.nan)):
        return f"rounds_to_{_fmt(cell['target'])}"
    where = f"round{cell['round']}"
    return where if cell.get("statistic") in (None, "", "mean_last3") else f"{cell['statistic']}/{where}"


def cell_tags(cells: list[dict]) -> dict[str, str]:
    """The tags of a run's cells: per metric and address, ``published/<metric>/<address>``,
    ``verdict/<metric>/<address>`` and ``cell/<metric>/<address>`` (the tables and sources that print the
    cell, ours, the tolerance); and without the address, the cell at the last round the tables read
    (mean of the last 3 rounds), the one the runs table shows beside the run's final value."""
    by_key: dict[tuple[str, str], dict[tuple[str, str], list[dict]]] = {}
    for c in cells:
        value = _fmt(c["published_mean"]) or "never reached"
        by_key.setdefault((c["metric"], address(c)), {}).setdefault((value, verdict(c)), []).append(c)
    tags = {}
    for (metric, where), entries in sorted(by_key.items()):
        suffix = f"{metric}/{where}"
        tags[f"published/{suffix}"] = "; ".join(v for v, _ in entries)   # two papers printing other values
        tags[f"verdict/{suffix}"] = "; ".join(w for _, w in entries)
        tags[f"cell/{suffix}"] = "; ".join(_describe(cs) for cs in entries.values())[:5000]
    for metric in sorted({m for m, _ in by_key}):
        rounds = [int(w[len("round"):]) for m, w in by_key if m == metric and w[len("round"):].isdigit()]
        if rounds:
            last = f"{metric}/round{max(rounds)}"
            tags[f"published/{metric}"] = tags[f"published/{last}"]
            tags[f"verdict/{metric}"] = tags[f"verdict/{last}"]
    return tags


def _describe(cells: list[dict]) -> str:
    c = cells[0]
    tables = ", ".join(dict.fromkeys(x["table"] for x in cells))
    sources = ", ".join(dict.fromkeys(x["published_source"] for x in cells))
    std = c.get("published_std", math.nan)
    return (f"{tables} ({sources}): published {_fmt(c['published_mean']) or 'never reached'}"
            + (f" ± {_fmt(std)}" if not math.isnan(std) else "")
            + (f", ours {_fmt(c['ours_mean'])}" if not math.isnan(c.get("ours_mean", math.nan)) else "")
            + (f" over {c['n_seeds']} seeds" if c.get("n_seeds") else "")
            + (f", tolerance {_fmt(c['tolerance'])}" if not math.isnan(c.get("tolerance", math.nan)) else ""))
