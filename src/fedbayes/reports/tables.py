"""Tables: ours (mean ± std over seeds of each run's per-cell statistic) beside the published value.

A cell is (experiment, method, reported round R, metric). Each run's value is the table statistic
over its evaluated rounds — ``mean_last3``: mean over rounds R−2, R−1, R (the papers' "average over
the previous 3 rounds"); ``max_last3``: their maximum; ``final``: round R — computed from the run's
metrics.json (itself computed from saved predictions). Accuracy is shown in percent.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from fedbayes.config import experiment_config, paths, seeds
from fedbayes.fileio import write_text_atomic
from fedbayes.reports.published import published_value

PERCENT = {"test/acc"}
STATISTICS = {"mean_last3": np.mean, "max_last3": np.max, "final": lambda v: v[-1]}


def cell_value(metrics: dict, metric: str, rnd: int, statistic: str) -> float:
    window = [rnd] if statistic == "final" else list(range(max(1, rnd - 2), rnd + 1))
    missing = [r for r in window if str(r) not in metrics["rounds"]]
    if missing:
        raise KeyError(f"rounds {missing} not evaluated in run {metrics['experiment']}/{metrics['method']}"
                       f"/seed{metrics['seed']} (has {sorted(map(int, metrics['rounds']))})")
    vals = np.array([metrics["rounds"][str(r)][metric] for r in window], dtype=float)
    v = float(STATISTICS[statistic](vals))
    return 100.0 * v if metric in PERCENT else v


def table_rows(p: dict, name: str) -> pd.DataFrame:
    from fedbayes.reports.selection import run_dir, selected_point

    spec = p["tables"][name]
    ddof = spec.get("std_ddof", 0)
    tol = spec.get("tolerance", {})
    refs = spec.get("published", [])
    rows = []
    for exp in spec["experiments"]:
        e = experiment_config(p, exp)
        for method in spec["methods"]:
            point = selected_point(p, exp, method)
            runs = [json.loads((run_dir(p, exp, method, point, s) / "metrics.json").read_text()) for s in seeds(p)]
            for rnd in e["report_rounds"]:
                for metric in spec["metrics"]:
                    vals = np.array([cell_value(m, metric, rnd, spec["statistic"]) for m in runs])
                    pub = published_value(refs, exp, method, metric, rnd) if p["scale"] == "paper" else None
                    mean = float(vals.mean())
                    std = float(vals.std(ddof=ddof)) if len(vals) > ddof else float("nan")
                    diff = mean - pub[0] if pub else float("nan")
                    rows.append({
                        "experiment": exp, "method": method, "point": point, "round": rnd, "metric": metric,
                        "statistic": spec["statistic"], "ours_mean": mean, "ours_std": std, "n_seeds": len(vals),
                        "published_mean": pub[0] if pub else float("nan"),
                        "published_std": pub[1] if pub else float("nan"),
                        "published_source": pub[2] if pub else "",
                        "diff": diff, "tolerance": tol.get(metric, float("nan")),
                        "within_tol": (abs(diff) <= tol[metric]) if pub and metric in tol else None,
                        "scale": p["scale"],
                    })
    return pd.DataFrame(rows)


def _fmt(mean, std, n=None, digits=2) -> str:
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return ""
    s = f"{mean:.{digits}f} ± {std:.{digits}f}" if not math.isnan(std) else f"{mean:.{digits}f}"
    return s + (f" (n={n})" if n is not None else "")


def render_markdown(df: pd.DataFrame, p: dict, name: str) -> str:
    spec = p["tables"][name]
    lines = [f"# {name}: {spec.get('title', '')}", ""]
    lines.append(
        f"Scale `{p['scale']}`. Each run's value is the `{spec['statistic']}` statistic at the reported round "
        f"(mean_last3 = mean over rounds R−2..R); cells are mean ± std over seeds "
        f"(ddof={spec.get('std_ddof', 0)}, n in brackets). Accuracy in %, NLL in nats, ECE = top-label, "
        "15 equal-width bins, L1; Brier = multi-class form Σ_c (p_c − y_c)² in [0, 2]; OOD AUROC = test set "
        "vs the experiment's OOD set, positive = OOD, score = predictive entropy. Published: "
        + ", ".join(spec.get("published", [])) + ". Δ = ours − published; ✓ = |Δ| within tolerance "
        + ", ".join(f"{k} {v}" for k, v in spec.get("tolerance", {}).items()) + ".")
    lines.append("")
    metrics = spec["metrics"]
    header = ["experiment", "method", "selected", "round"]
    for m in metrics:
        header.append(m)
        if df[df.metric == m]["published_source"].any():
            header += [f"{m} published", "Δ"]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "---|" * len(header))
    for (exp, method, point, rnd), g in df.groupby(["experiment", "method", "point", "round"], sort=False):
        cells = [exp, method, point, str(rnd)]
        for m in metrics:
            r = g[g.metric == m].iloc[0]
            digits = 1 if m in PERCENT else 3
            cells.append(_fmt(r.ours_mean, r.ours_std, r.n_seeds, digits))
            if f"{m} published" in header:
                cells.append(_fmt(r.published_mean, r.published_std, None, digits))
                ok = "" if r.within_tol is None else (" ✓" if r.within_tol else " ✗")
                cells.append("" if math.isnan(r["diff"]) else f"{r['diff']:+.{digits}f}{ok}")
        lines.append("| " + " | ".join(cells) + " |")
    notes = spec.get("notes")
    if notes and Path(notes).exists():
        lines += ["", Path(notes).read_text().strip()]
    return "\n".join(lines) + "\n"


def build_table(p: dict, name: str, out: str | Path) -> pd.DataFrame:
    """Write ``out`` (.csv, long format: one row per cell) and the rendered ``.md`` beside it, plus
    learning-curve figures under ``reports/figures/``."""
    from fedbayes.reports.figures import learning_curves

    out = Path(out)
    df = table_rows(p, name)
    write_text_atomic(out, df.to_csv(index=False, float_format="%.6g"))
    write_text_atomic(out.with_suffix(".md"), render_markdown(df, p, name))
    spec = p["tables"][name]
    fig_dir = Path(paths(p)["reports"]) / "figures"
    learning_curves(p, spec, fig_dir / f"{out.stem}_curves.png")
    return df
