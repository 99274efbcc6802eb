"""The published cells a run backs: the published value and the verdict of each table cell its numbers
are averaged into, read from the tables' CSVs (``<reports>/<table>.csv``) and worded by the one verdict
vocabulary (``fedbayes.reports.verdicts``), so MLflow says what the tables and the scorecard say.

A run of (experiment, method, point) at any seed backs every published cell of a table row with that
experiment, method (a prediction variant's name, ``bayesadmm@mean``, for the variant's run) and point.
Tags, per metric: ``published/<metric>`` (the published mean, in the table's unit, which is the unit
MLflow logs), ``verdict/<metric>`` (a word of ``VERDICTS``) and ``cell/<metric>`` (which table and
published source, the round, ours and the tolerance). Two cells of one metric with different values (two
rounds, two papers) are joined by "; ", in the same order in each of the three tags.
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


def cell_tags(cells: list[dict]) -> dict[str, str]:
    """``published/<metric>``, ``verdict/<metric>`` and ``cell/<metric>`` tags of a run's cells."""
    by_metric: dict[str, dict[tuple, tuple[str, str, str]]] = {}
    for c in cells:
        word = verdict(c)
        where = (f"{c['table']}: {c['published_source']}, round {c['round']}, "
                 f"published {_fmt(c['published_mean'])}"
                 + (f" ± {_fmt(c['published_std'])}" if not math.isnan(c.get("published_std", math.nan)) else "")
                 + (f", ours {_fmt(c['ours_mean'])}" if not math.isnan(c.get("ours_mean", math.nan)) else "")
                 + (f" over {c['n_seeds']} seeds" if c.get("n_seeds") else "")
                 + (f", tolerance {_fmt(c['tolerance'])}" if not math.isnan(c.get("tolerance", math.nan)) else ""))
        value = _fmt(c["published_mean"]) or "never reached"
        # one entry per distinct published number and verdict (the headline table reprints a paper's cell)
        key = (value, word, c["published_source"], c["round"])
        by_metric.setdefault(c["metric"], {}).setdefault(key, (value, word, where))
    tags = {}
    for metric, entries in sorted(by_metric.items()):
        values = list(entries.values())
        tags[f"published/{metric}"] = "; ".join(v for v, _, _ in values)
        tags[f"verdict/{metric}"] = "; ".join(w for _, w, _ in values)
        tags[f"cell/{metric}"] = "; ".join(w for _, _, w in values)[:5000]
    return tags
