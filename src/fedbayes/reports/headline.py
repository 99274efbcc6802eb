"""DVC's view of the headline table: ``dvc metrics show/diff`` and ``dvc plots show``.

params.yaml ``headline`` names the table, the metrics and the curves:

- ``<reports>/metrics/<experiment>/<method>.json``: a JSON per experiment × method, ``{"<metric>": {"ours":
  …, "published": …, "verdict": …}}``, the table's cell at the experiment's last reported round (its
  statistic over seeds; accuracy in %, as in the tables): our value, the published one, and the cell's
  verdict in the scorecard's words (fedbayes.reports.verdicts: ``within`` / ``outside`` the table's
  tolerance, table.md's ✓ / ✗; ``no tolerance`` where the table sets none for the metric).
  ``dvc metrics show`` prints a row per experiment × method and these three columns per metric. A cell
  with no number of ours (not run) is left out, and so are a missing published value and its verdict:
  JSON has no NaN.
- ``<reports>/plots/<table>_<experiment>_<metric>.csv``: long format, ``round,method,<metric>`` (``test_acc``):
  a row per round and table method (``bayesadmm@mean``: the runs' point predictions) with the mean over
  seeds of the metric. A round a method did not evaluate has no row (BayesADMM's and FedIVON's sampled
  predictive: every 5th round), not an empty cell, which DVC would draw as 0. An experiment that did not
  run here has the header only. dvc.yaml's ``plots:`` draw them with .dvc/plots/method_lines.json (a
  colour per method); ``dvc plots show`` embeds Vega (.dvc/config ``plots.html_template``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from fedbayes.study import ConfigError, comparable_experiments, paths, split_variant
from fedbayes.fileio import write_text_atomic
from fedbayes.eval.registry import PERCENT
from fedbayes.reports import verdicts
from fedbayes.reports.cells import experiment_status
from fedbayes.runfiles import read_curves
from fedbayes.runpaths import run_dir

if TYPE_CHECKING:
    import pandas as pd

    from fedbayes.study.model import Study, TableSpec

# pandas (and the selection, which reads it) imported by the functions that use them: the workflow reads
# plot_files when it plans every DAG.


def slug(metric: str) -> str:
    return metric.replace("/", "_")


def plot_files(p: dict, root: str | Path | None = None) -> list[Path]:
    """The curve CSVs ``write_headline`` writes (every experiment of the table of ours, ran or not), in
    ``root`` (default: ``<reports>/plots``). Of the validated params: the workflow plans with it before
    any study is resolved (rules/report.smk)."""
    h = p["headline"]
    root = Path(root or Path(paths(p)["reports"]) / "plots")
    return _plot_files(h["table"], comparable_experiments(p["tables"][h["table"]]), h["curves"], root)


def _plot_files(table: str, experiments, curves, root: Path) -> list[Path]:
    stem = table.replace("/", "_")
    return [root / f"{stem}_{e}_{slug(m)}.csv" for e in experiments for m in curves]


def headline_table(study: Study) -> TableSpec:
    """The table the headline reads (params ``headline.table``)."""
    return study.tables[study.params["headline"]["table"]]


def _missing(x) -> bool:
    """A cell value that is absent (None or NaN), without importing pandas at planning time."""
    return x is None or (isinstance(x, float) and x != x)


def verdict(cell) -> str | None:
    """A table cell's verdict in the one vocabulary (fedbayes.reports.verdicts: ``within``, ``outside``,
    ``no tolerance``, …), or None where the paper has no value (no published cell, no verdict)."""
    row = cell._asdict() if hasattr(cell, "_asdict") else dict(cell)
    return verdicts.verdict(row) if verdicts.is_published_cell(row) else None


def headline_metrics(study: Study, table: pd.DataFrame) -> dict[tuple[str, str], dict[str, dict]]:
    """``{(experiment, method): {metric: {"ours", "published", "verdict"}}}`` at each experiment's last
    reported round, the metrics in ``headline.metrics`` order."""
    h = study.params["headline"]
    df = table[table.metric.isin(h["metrics"]) & table.ours_mean.notna()]
    out: dict[tuple[str, str], dict[str, dict]] = {}
    for exp, rows in df.groupby("experiment", sort=False):
        last = rows[rows["round"] == rows["round"].max()]
        for method, cells in last.groupby("method", sort=False):
            vals = {}
            for c in cells.itertuples(index=False):
                vals[c.metric] = {"ours": float(c.ours_mean)}
                if not _missing(c.published_mean):
                    vals[c.metric]["published"] = float(c.published_mean)
                if verdict(c) is not None:
                    vals[c.metric]["verdict"] = verdict(c)
            out[(exp, method)] = {m: vals[m] for m in h["metrics"] if m in vals}
    return out


def curves(study: Study, exp: str, metric: str, absent: list[str] | None = None) -> pd.DataFrame:
    """Long format ``round, method, <slug(metric)>``: per round that a table method on ``exp`` evaluated (its
    selected runs, every seed), the mean over seeds of ``metric``.
    In the DAG the runs exist (the table read them); run by hand, a method with a run absent (a rerun in
    progress) gets no column and its name is added to ``absent``."""
    import pandas as pd

    from fedbayes.reports.selection import selected_point

    cols = {}
    if experiment_status(study.params, exp) == "ok":
        e = study.experiments[exp].config
        for method in headline_table(study).methods:
            base, variant = split_variant(method)
            if base not in e["methods"]:
                continue
            point = selected_point(study.params, exp, base)
            col = f"{variant}/{metric}" if variant else metric
            dirs = [run_dir(study.paths, exp, base, point, s) for s in study.experiments[exp].methods[base].seeds]
            if not all((d / "metrics.json").exists() for d in dirs):
                if absent is not None:
                    absent.append(f"{exp}/{method}")
                continue
            runs = [read_curves(d).set_index("round") for d in dirs]
            if all(col in h for h in runs):
                v = pd.concat([h[col] for h in runs], axis=1).mean(axis=1, skipna=False)
                cols[method] = v * (100.0 if metric in PERCENT else 1.0)
    long = [pd.DataFrame({"round": v.index, "method": m, slug(metric): v.to_numpy()}).dropna()
            for m, v in cols.items()]
    if not long:
        return pd.DataFrame(columns=["round", "method", slug(metric)])
    return pd.concat(long, ignore_index=True).astype({"round": int})


TABLE_COLUMNS = ("experiment", "method", "metric", "round", "ours_mean", "published_mean")


def read_table(table_csv: str | Path) -> pd.DataFrame:
    """A table's CSV (``fedbayes table``) with the columns the headline reads; ConfigError in one line
    naming the file otherwise."""
    import pandas as pd

    try:
        table = pd.read_csv(table_csv)
    except (OSError, ValueError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise ConfigError(f"{table_csv}: not a table's CSV (fedbayes table): "
                          f"{(str(e).strip().splitlines() or [type(e).__name__])[0][:160]}") from None
    if missing := [c for c in TABLE_COLUMNS if c not in table.columns]:
        raise ConfigError(f"{table_csv}: not a table's CSV (fedbayes table): no column {', '.join(missing)}")
    return table


def write_headline(study: Study, table_csv: str | Path, out: str | Path, absent: list[str] | None = None,
                   plots: str | Path | None = None) -> list[Path]:
    """Write the metrics JSONs under ``out`` (a directory) and the curve CSVs into ``plots``; returns the
    files written (``absent``: as in ``curves``). Earlier JSONs are removed first: with ``plots`` None, ``out``
    is the workflow's own directory (``<reports>/metrics``, the curves in ``<reports>/plots``), and every
    ``*/*.json`` in it goes (an experiment or method no longer in the table); elsewhere, a folder of the
    user's, only those in the table's experiments' folders (nothing the headline did not write)."""
    table = read_table(table_csv)
    spec, h = headline_table(study), study.params["headline"]
    out = Path(out)
    olds = [*out.glob("*/*.json")] if plots is None and out.is_dir() else [
        f for e in spec.comparable for f in (out / e).glob("*.json")]
    for old in olds:
        old.unlink()
    written = []
    for (exp, method), vals in headline_metrics(study, table).items():
        written.append(write_text_atomic(out / exp / f"{method}.json", json.dumps(vals, indent=1) + "\n"))
    root = Path(plots or Path(study.paths["reports"]) / "plots")
    for f in _plot_files(spec.name, spec.comparable, h["curves"], root):
        exp, metric = next((e, m) for e in spec.comparable for m in h["curves"] if f.name.endswith(f"_{e}_{slug(m)}.csv"))
        write_text_atomic(f, curves(study, exp, metric, absent).to_csv(index=False, float_format="%.6g"))
        written.append(f)
    return written
