"""Tables: ours (mean ± std over seeds of each run's per-cell statistic) beside the published value.

A cell is (experiment, method, reported round R, metric). Each run's value is the table statistic
(``fedbayes.reports.cells``) over its evaluated rounds — ``mean_last3``: mean over rounds R−2, R−1, R
(the papers' "average over the previous 3 rounds"); ``max_last3``: their maximum; ``final``: round R —
computed from the run's metrics.json (itself computed from saved predictions). Accuracy is shown in
percent. This module gathers the cells, renders them and draws the table's figures.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from fedbayes.study import STAND_IN, split_variant, stand_in_size
from fedbayes.study.model import Study, TableSpec
from fedbayes.fileio import write_text_atomic
from fedbayes.published import authors_code_files, authors_code_value, published_rounds, published_value
from fedbayes.reports.cells import (DIGITS, ROUND_STATISTICS, PERCENT, best_over_rounds, cell_value, diverged_before,
                                    experiment_status, rounds_to_target, within)
from fedbayes.reports.escape import md_document, md_text
from fedbayes.reports.figures import learning_curves, reliability
from fedbayes.reports.selection import selected_point
from fedbayes.reports.verdicts import MARK, RAN, VERDICTS as VERDICT_ORDER, is_published_cell, verdict
from fedbayes.runfiles import DamagedFile, read_curves, read_metrics, read_run_info
from fedbayes.runpaths import run_dir


def table_rounds(table: TableSpec, e: dict) -> list[int]:
    """The rounds a table reports for an experiment: all its report rounds, or only the last."""
    return e["report_rounds"][-1:] if table.rounds == "last" else list(e["report_rounds"])


def _cells(study: Study, table: TableSpec, exp: str) -> list[tuple[str, float]]:
    """(column, value) keys of one experiment's cells: ("round", R) or ("target", acc). A
    ``not_comparable`` experiment (no params experiment) has the published table's rounds."""
    if table.statistic == "rounds_to_target":
        return [("target", float(t)) for t in table.targets.get(exp, ())]
    if exp in table.not_comparable:
        return [("round", r) for r in published_rounds(list(table.published), exp)]
    return [("round", r) for r in table_rounds(table, study.experiments[exp].config)]


def cell_tolerance(tables: Mapping[str, TableSpec], table: TableSpec, source: str, metric: str) -> float | int:
    """The tolerance a published number is judged by: that of the paper table publishing it (``source``,
    "paper table": ``tables.<paper>/<table>.tolerance``) where the study reports that table, else the
    reporting table's own. A number reprinted by another report table (the headline table reprints the
    papers' cells) thus gets one verdict everywhere; NaN where neither sets one for ``metric``."""
    own = tables.get(source.replace(" ", "/")) if source else None
    tol = own.tolerance if own is not None and metric in own.tolerance else table.tolerance
    return tol.get(metric, float("nan"))


def table_tolerances(tables: Mapping[str, TableSpec], table: TableSpec) -> dict[str, dict[str, float]]:
    """The tolerances of a table's cells, per published source (``table.published``, "paper:table")."""
    out = {}
    for ref in table.published:
        src = ref.replace(":", " ")
        tol = {m: cell_tolerance(tables, table, src, m) for m in table.metrics}
        out[ref] = {m: t for m, t in tol.items() if not math.isnan(t)}
    if not out and table.tolerance:   # no published source named: the table's own
        out[""] = dict(table.tolerance)
    return out


def table_rows(study: Study, table: TableSpec) -> pd.DataFrame:
    p = study.params
    ddof = p.get("std_ddof", 1)
    run_avg = table.running   # running-average window of the statistics over rounds
    refs = list(table.published)
    rows = []
    for exp in table.experiments:
        if exp in table.not_comparable:
            e, status = {"methods": []}, f"not comparable ({table.not_comparable[exp]})"
        else:
            e, status = study.experiments[exp].config, experiment_status(p, exp)
        for method in table.methods:
            base, variant = split_variant(method)  # bayesadmm@mean: the bayesadmm runs' "mean" predictions
            st = status if status != "ok" or base in e["methods"] else \
                f"not run ({base} is not in experiments.{exp}.methods)"
            point, runs, hists, infos, skipped = "", [], [], [], []
            if st == "ok":
                point = selected_point(p, exp, base)
                run_seeds = study.experiments[exp].methods[base].seeds
                dirs = [run_dir(study.paths, exp, base, point, s) for s in run_seeds]
                for d in dirs:
                    check_data_source(p, d)
                if table.statistic in ROUND_STATISTICS:
                    infos = [{**read_run_info(d), "seed": s} for d, s in zip(dirs, run_seeds)]
                    hists = [read_curves(d, info) for d, info in zip(dirs, infos)]
                    skipped = [(s, read_metrics(d, info).get("not_evaluated", {})) for d, s, info in
                               zip(dirs, run_seeds, infos)]
                else:
                    runs = [read_metrics(d) for d in dirs]
                    skipped = [(m["seed"], m.get("not_evaluated", {})) for m in runs]
                    runs = [{**m, "rounds": m.get("variants", {}).get(variant, {}).get("rounds", {})} if variant else m
                            for m in runs]
                    infos = runs
            for key, at in _cells(study, table, exp):
                # seeds whose run diverged (NaN/inf) by this cell: the cell reads "diverged", not a number
                div = [(m["seed"], r) for m in infos if (r := diverged_before(m, math.inf if key == "target" else at))]
                cell_st = st if st != "ok" or not div else \
                    "diverged (" + ", ".join(f"seed {sd} at round {r}" for sd, r in div) + ")"
                for metric in table.metrics:
                    # a metric added after a run's predictions were gone: recorded as not evaluated (eval.evaluate)
                    lacking = [sd for sd, ne in skipped if metric in ne]
                    metric_st = cell_st if cell_st != "ok" or not lacking else (
                        f"not evaluated ({', '.join(f'seed {sd}' for sd in lacking)}: no predictions were kept "
                        f"when {metric} was added; retrain the run to compute it)")
                    if metric_st != "ok":
                        vals = np.array([])
                    elif key == "target":
                        vals = np.array([rounds_to_target(h, at, metric, variant, run_avg) for h in hists])
                    elif table.statistic == "best":
                        vals = np.array([best_over_rounds(h, metric, at, variant, run_avg) for h in hists])
                    else:
                        vals = np.array([cell_value(m, metric, at, table.statistic) for m in runs])
                    pub = None
                    if study.scale == "paper":
                        pub = published_value(refs, exp, table.published_as.get(method, method), metric,
                                              **({"rnd": at} if key == "round" else {"target": at}))
                    missed = int(np.isnan(vals).sum()) if len(vals) else 0
                    ok_vals = vals if not missed else np.array([])  # a target missed by any seed: blank
                    mean = float(ok_vals.mean()) if len(ok_vals) else float("nan")
                    std = float(ok_vals.std(ddof=ddof)) if len(ok_vals) > ddof else float("nan")
                    has_pub = pub is not None and pub[0] is not None
                    theirs = authors_code_value(exp, method, metric, at, table.statistic, ddof) \
                        if study.scale == "paper" and key == "round" else None
                    diff = mean - pub[0] if has_pub else float("nan")
                    tol = float(cell_tolerance(study.tables, table, pub[2] if pub else "", metric))
                    note = metric_st if metric_st != "ok" else (f"target not reached by {missed} of {len(vals)} seeds" if missed else "")
                    if study.scale == "rehearsal":
                        note = "; ".join(filter(None, ["stand-in rehearsal", note]))
                    if has_pub is False and pub is not None and metric_st == "ok":
                        note = (note + "; " if note else "") + "published: not reached / not reported"
                    rows.append({
                        "experiment": exp, "method": method, "point": point,
                        "round": at if key == "round" else float("nan"),
                        "target": at if key == "target" else float("nan"), "metric": metric,
                        "statistic": table.statistic, "ours_mean": mean, "ours_std": std, "n_seeds": len(vals),
                        "published_mean": pub[0] if has_pub else float("nan"),
                        "published_std": pub[1] if has_pub else float("nan"),
                        "published_source": pub[2] if pub else "",
                        "authors_code_mean": theirs[0] if theirs else float("nan"),
                        "authors_code_std": theirs[1] if theirs else float("nan"),
                        "authors_code_n": theirs[2] if theirs else float("nan"),
                        "authors_code_source": theirs[3] if theirs else "",
                        "diff": diff, "tolerance": tol,
                        "within_tol": within(has_pub, mean, diff, None if math.isnan(tol) else tol, key == "target" and pub is not None
                                              and metric_st == "ok"),
                        "scale": study.scale, "status": metric_st, "note": note,
                    })
    df = pd.DataFrame(rows)
    if not (df["target"].notna().any()):
        df = df.drop(columns="target")
    return df


def check_data_source(p: dict, d: str | Path) -> None:
    """A run enters a table only on the data the table is about: a run trained on stand-in data
    (run.json's ``config.data``) never enters a table of results on the real data, nor a real run a
    rehearsal's table (DamagedFile naming the run.json)."""
    ran = read_run_info(d)["config"].get("data")
    want = f"{STAND_IN} ({stand_in_size(p)})" if stand_in_size(p) else None
    if ran != want:
        path = Path(d) / "run.json"
        if want is None:
            raise DamagedFile(path, f"was trained on {ran} data, which never enters a table of results on the real data",
                              "remove it; its real run is trained by the table's target")
        raise DamagedFile(path, f"was trained on {ran or 'the real'} data, not on the rehearsal's {want} data",
                          "remove it; the rehearsal trains its own")


def _fmt(mean, std, n=None, digits=2) -> str:
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return ""
    s = f"{mean:.{digits}f} ± {std:.{digits}f}" if not math.isnan(std) else f"{mean:.{digits}f}"
    return s + (f" (n={n})" if n is not None else "")


STAT_TEXT = {
    "mean_last3": "each run's value at round R is the mean over rounds R−2, R−1, R",
    "max_last3": "each run's value at round R is the maximum over rounds R−2, R−1, R",
    "final": "each run's value is the one at round R",
    "best": "each run's value is its best over rounds 1..R (the paper's \"best\" accuracy)",
    "rounds_to_target": "each run's value is the first round whose (unsmoothed) test accuracy reaches the "
                        "target; blank when any seed never reaches it (as in the paper)",
}


def _at(r) -> str:
    return f"{r.target:g} %" if "target" in r and not math.isnan(r.target) else str(int(r["round"]))


def _digits(metric: str, statistic: str) -> int:
    if metric in DIGITS and statistic != "rounds_to_target":
        return DIGITS[metric]
    return 1 if metric in PERCENT or statistic == "rounds_to_target" else 3


def _delta(r, digits: int) -> str:
    ok = "" if r.within_tol is None or (isinstance(r.within_tol, float) and math.isnan(r.within_tol)) \
        else " " + MARK["within" if r.within_tol else "outside"]
    return "" if math.isnan(r["diff"]) else f"{r['diff']:+.{digits}f}{ok}"


def _header(study: Study, table: TableSpec) -> list[str]:
    per = {ref: ", ".join(f"{k} {v}" for k, v in sorted(t.items())) for ref, t in table_tolerances(study.tables, table).items() if t}
    tol = "" if not per else next(iter(per.values())) if len(set(per.values())) == 1 else \
        "that of the paper table publishing the cell (" + "; ".join(f"{r}: {t}" for r, t in per.items()) + ")"
    stat = STAT_TEXT[table.statistic]
    if table.running > 1:
        stat += f", of the trailing {table.running}-round running average"
    rehearsal = ["**STAND-IN REHEARSAL**: every number below was trained on generated stand-in data "
                 "(fedbayes.data.standin), not on the real datasets: it shows that the pipeline runs, never a "
                 "result; no cell has a verdict.", ""] if study.scale == "rehearsal" else []
    return [f"# {table.name}: {md_text(table.title)}", "", *rehearsal,
            f"Scale `{study.scale}`. {stat[:1].upper() + stat[1:]}; cells are mean ± std over seeds "
            f"(ddof={study.params.get('std_ddof', 1)}, n in brackets). Accuracy in %, NLL in nats, ECE = top-label, "
            "15 equal-width bins, L1; Brier = multi-class form Σ_c (p_c − y_c)² in [0, 2]; OOD AUROC = test set "
            "vs the experiment's OOD set, positive = OOD, score = predictive entropy."
            + (" Published: " + ", ".join(table.published) + ". Δ = ours − published"
               + (f"; {MARK['within']} within / {MARK['outside']} outside the tolerance |Δ| ≤ {tol}" if tol else "")
               + "." if table.published else ""), ""]


def _is_diverged(status: str) -> bool:
    return status.startswith("diverged")


def _is_not_comparable(status: str) -> bool:
    return status.startswith("not comparable")


def _status_cell(status: str) -> str:
    """What a cell without a number shows: "not run", "not comparable" or "diverged (seed S at round r)"."""
    return md_text(status) if _is_diverged(status) else "not comparable" if _is_not_comparable(status) else "not run"


def _not_run_notes(df: pd.DataFrame) -> list[str]:
    out = []
    diverged = df[df.status.map(_is_diverged)][["experiment", "method", "status"]].drop_duplicates()
    if not diverged.empty:
        out += ["", "**Diverged (training loss or server state became NaN/inf; history kept up to that round):**", ""]
        out += [f"- {r.experiment}/{r.method}: {md_text(r.status)}"
                for r in diverged.drop_duplicates(["experiment", "method"], keep="first").itertuples()]
    apart = df[df.status.map(_is_not_comparable)][["experiment", "status"]].drop_duplicates()
    if not apart.empty:
        out += ["", "**Not comparable (published numbers only; no run of ours stands beside them):**", ""]
        out += [f"- {r.experiment}: {md_text(r.status)}" for r in apart.itertuples()]
    notes = df[(df.status != "ok") & ~df.status.map(_is_diverged) & ~df.status.map(_is_not_comparable)]
    notes = notes[["experiment", "method", "status"]].drop_duplicates()
    if notes.empty:
        return out
    out += ["", "**Not run on the machine that built this table:**", ""]
    for (exp, status), g in notes.groupby(["experiment", "status"], sort=False):
        out.append(f"- {exp} ({', '.join(g.method)}): {md_text(status)}")
    return out


def render_long(df: pd.DataFrame, table: TableSpec) -> list[str]:
    """One line per (experiment, method, round): every metric, each beside its published value."""
    metrics = table.metrics
    header = ["experiment", "method", "selected", "round"]
    for m in metrics:
        header.append(m)
        if df[df.metric == m]["published_source"].any():
            header += [f"{m} published", "Δ"]
        if df[df.metric == m]["authors_code_source"].any():
            header.append(f"{m} authors' code")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    df = df.assign(at=[_at(r) for _, r in df.iterrows()])
    for (exp, method, at), g in df.groupby(["experiment", "method", "at"], sort=False):
        first = g.iloc[0]
        cells = [exp, method, md_text(first.point) or "not run", at]
        for m in metrics:
            r = g[g.metric == m].iloc[0]
            digits = _digits(m, table.statistic)
            cells.append(_fmt(r.ours_mean, r.ours_std, r.n_seeds, digits) if r.status == "ok" else _status_cell(r.status))
            if f"{m} published" in header:
                cells.append(_fmt(r.published_mean, r.published_std, None, digits))
                cells.append(_delta(r, digits))
            if f"{m} authors' code" in header:
                cells.append(_fmt(r.authors_code_mean, r.authors_code_std, int(r.authors_code_n), digits)
                             if r.authors_code_source else "")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def render_paper(df: pd.DataFrame, table: TableSpec) -> list[str]:
    """The paper's layout: a line per (experiment, round or target[, metric]), a column per method;
    each cell is ours (mean ± std, n) over the published value and Δ. With several metrics, each
    gets its own block of lines (the papers' accuracy / NLL halves)."""
    metrics = list(table.metrics)
    methods = list(table.methods)
    key = "target" if table.statistic == "rounds_to_target" else "round"
    several = len(metrics) > 1
    lines = [f"Metric{'s' if several else ''} {', '.join(f'`{m}`' for m in metrics)}. "
             "Cell: ours (mean ± std, n seeds) / published (mean ± std) / Δ; " + _cell_definition(table) + ".", "",
             "| experiment | " + ("metric | " if several else "") + key + " | " + " | ".join(methods) + " |",
             "|---|---|" + ("---|" if several else "") + "---|" * len(methods)]
    df = df.assign(at=[_at(r) for _, r in df.iterrows()])
    df = df.assign(_m=pd.Categorical(df.metric, categories=metrics))
    for (exp, metric, at), g in df.groupby(["experiment", "_m", "at"], sort=False, observed=True):
        digits = _digits(metric, table.statistic)
        cells = [exp] + ([metric] if several else []) + [at]
        for method in methods:
            r = g[g.method == method]
            if r.empty:
                cells.append("")
                continue
            r = r.iloc[0]
            ours = _fmt(r.ours_mean, r.ours_std, r.n_seeds, digits) if r.status == "ok" else _status_cell(r.status)
            if r.status == "ok" and not ours:
                ours = "— (" + md_text(r.note) + ")"
            pub = _fmt(r.published_mean, r.published_std, None, digits) or ("—" if r.published_source else "")
            parts = [ours or "", pub] + ([_delta(r, digits)] if _delta(r, digits) else [])
            if r.authors_code_source:
                parts.append("authors' code " + _fmt(r.authors_code_mean, r.authors_code_std, int(r.authors_code_n), digits))
            cells.append(" / ".join(x for x in parts if x))
        lines.append("| " + " | ".join(cells) + " |")
    selected = df[df.status == "ok"][["experiment", "method", "point"]].drop_duplicates()
    if not selected.empty:
        lines += ["", "Selected sweep points: " + "; ".join(
            f"{e}/{m}: `{pt}`" for e, m, pt in selected.itertuples(index=False)) + "."]
    return lines


def _cell_definition(table: TableSpec) -> str:
    """How a cell's number is made, in a sentence: the run statistic (e.g. the mean of the last three
    rounds), then mean ± std over seeds."""
    stat = STAT_TEXT[table.statistic]
    if table.running > 1:
        stat += f", of the trailing {table.running}-round running average"
    return f"{stat}; ours is the mean over the n seeds"


def render_grid(df: pd.DataFrame, table: TableSpec) -> list[str]:
    """The table at a glance, first in its .md (a Papers-with-Code style leaderboard): a row per method,
    a column per experiment, each cell the table's key metric (its first metric with published values)
    at the experiment's last reported round or target: ours, the published value and the verdict's mark;
    a last column counts the method's published cells by verdict over the whole table (every metric and
    round). Every number is one of the long table's below, rounded the same way."""
    metrics = list(table.metrics)
    published = [m for m in metrics if df[df.metric == m]["published_source"].astype(bool).any()]
    key = (published or metrics)[0]
    digits = _digits(key, table.statistic)
    exps = list(dict.fromkeys(df.experiment))
    df = df.assign(at=[_at(r) for _, r in df.iterrows()])
    last = {x: df[df.experiment == x]["at"].iloc[-1] for x in exps}
    verdicts = [verdict(r) if is_published_cell(r) else None for _, r in df.iterrows()]
    df = df.assign(_verdict=verdicts)
    where = "target" if table.statistic == "rounds_to_target" else "round"
    what = f"rounds to reach the `{key}` target" if where == "target" else f"`{key}`"
    lines = [f"**At a glance**: {what} at each experiment's last {where} ({', '.join(f'{x}: {last[x]}' for x in exps)}). "
             f"Cell: ours / published, {MARK['within']} within or {MARK['outside']} outside the tolerance; "
             f"{_cell_definition(table)}. Last column: the method's published cells over every metric and {where} "
             "of the table, by verdict.", "",
             "| method | " + " | ".join(exps) + " | published cells |", "|---|" + "---|" * (len(exps) + 1)]
    for method in table.methods:
        cells = [method]
        for x in exps:
            r = df[(df.method == method) & (df.experiment == x) & (df.metric == key) & (df["at"] == last[x])]
            if r.empty:
                cells.append("")
                continue
            r = r.iloc[0]
            ours = (f"{r.ours_mean:.{digits}f}" if not math.isnan(r.ours_mean) else "—") if r.status == "ok" \
                else _status_cell(r.status).split(" (")[0]
            pub = f"{r.published_mean:.{digits}f}" if not math.isnan(r.published_mean) else ""
            mark = {"within": " " + MARK["within"], "outside": " " + MARK["outside"]}.get(r._verdict or "", "")
            cells.append(ours + (f" / {pub}{mark}" if pub else ""))
        mine = df[(df.method == method) & df._verdict.notna()]
        counts = mine._verdict.value_counts()
        cells.append(", ".join(f"{counts[v]} {MARK.get(v, v)}" for v in (*RAN, *counts.index.difference(RAN, sort=False))
                               if v in counts) if len(mine) else "none")
        lines.append("| " + " | ".join(cells) + " |")
    total = df[df._verdict.notna()]._verdict.value_counts()
    if len(total):
        lines += ["", f"Whole table: {int(total.sum())} published cells: " + ", ".join(
            f"{int(total[v])} {v}" for v in VERDICT_ORDER if v in total) + "."]
    return lines + [""]


def render_markdown(df: pd.DataFrame, study: Study, table: TableSpec) -> str:
    lines = _header(study, table)
    at = 4 if study.scale == "rehearsal" else 2   # after the title (and a rehearsal's warning)
    lines[at:at] = render_grid(df, table)
    theirs = df[df.authors_code_source != ""][["experiment", "method", "authors_code_source"]].drop_duplicates()
    if not theirs.empty:
        lines += ["\"Authors' code\": the same cell measured with the authors' released code, run outside this "
                  f"repository on its own draws of the data ({', '.join(authors_code_files())}):"]
        # a list item each: consecutive plain lines would render as one paragraph
        lines += [""] + [f"- {r.experiment}/{r.method}: {r.authors_code_source}." for r in theirs.itertuples()] + [""]
    lines += render_paper(df, table) if table.layout == "paper" else render_long(df, table)
    lines += _not_run_notes(df)
    figures = table.figures
    if figures and not any(experiment_status(study.params, x) == "ok" for x in table.comparable):
        lines += ["", "**Figures:** no experiment of this table ran here, so there are no learning curves: "
                  + "; ".join(f"`{f}` shows " + ("the published values alone" if f.endswith("_curves.png") else
                                                  "the published ECE against the published accuracy (the paper prints no reliability bins)")
                              for f in figures) + "."]
    notes = table.notes
    if notes and Path(notes).exists():
        lines += ["", md_document(Path(notes).read_text().strip())]
    return "\n".join(lines) + "\n"


def table_csv(study: Study, table: TableSpec) -> Path:
    """The table's CSV in the workflow: ``<reports>/<name>.csv``."""
    return Path(study.paths["reports"]) / f"{table.name}.csv"


def figure_dir(study: Study, table: TableSpec, out: str | Path) -> Path:
    """Where the table's figures go: ``<reports>/figures/`` for the workflow's CSV, else beside ``out``
    (a table built elsewhere never rewrites the workflow's figures)."""
    if Path(out).resolve() == table_csv(study, table).resolve():
        return Path(study.paths["reports"]) / "figures"
    return Path(out).parent


def built_files(study: Study, table: TableSpec, out: str | Path) -> list[Path]:
    """The files ``build_table`` writes: the CSV, its rendered .md and the table's figures."""
    out = Path(out)
    fig_dir = figure_dir(study, table, out)
    return [out, out.with_suffix(".md")] + [fig_dir / f for f in table.figures]


def build_table(study: Study, table: TableSpec, out: str | Path) -> pd.DataFrame:
    """Write ``out`` (.csv, long format: one row per cell) and the rendered ``.md`` beside it, plus its
    figures (``TableSpec.figures``: learning curves, and reliability diagrams where ECE is a metric; none
    for a table whose experiments are all ``not_comparable``) under :func:`figure_dir`."""
    out = Path(out)
    df = table_rows(study, table)
    write_text_atomic(out, df.to_csv(index=False, float_format="%.6g"))
    write_text_atomic(out.with_suffix(".md"), render_markdown(df, study, table))
    fig_dir = figure_dir(study, table, out)
    for f in table.figures:
        (learning_curves if f.endswith("_curves.png") else reliability)(study, table, fig_dir / f)
    return df
