"""What one table cell holds: each run's statistic at a reported round (``cell_value``: the papers' mean or
maximum over the last three rounds, or the final round; ``best_over_rounds``, ``rounds_to_target`` over a
run's evaluated rounds), whether a run diverged before it, whether the experiment could run here at all
(``experiment_status``) and whether ours is within the published value's tolerance (``within``).
Accuracy-like metrics are in percent, as the tables, figures and MLflow show them (``PERCENT``)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:   # annotations only: the MLflow importer reads PERCENT without paying pandas' import
    import pandas as pd

from fedbayes.study import experiment_config, paths
from fedbayes.eval.registry import METRICS, PERCENT

DIGITS = {name: m.digits for name, m in METRICS.items()}   # decimals a table prints (the metric registry)
STATISTICS = {"mean_last3": np.mean, "max_last3": np.max, "final": lambda v: v[-1]}
ROUND_STATISTICS = ("rounds_to_target", "best")   # over every evaluated round (runfiles.read_curves)


def cell_value(metrics: dict, metric: str, rnd: int, statistic: str) -> float:
    window = [rnd] if statistic == "final" else list(range(max(1, rnd - 2), rnd + 1))
    missing = [r for r in window if str(r) not in metrics["rounds"]]
    if missing:
        raise KeyError(f"rounds {missing} not evaluated in run {metrics['experiment']}/{metrics['method']}"
                       f"/seed{metrics['seed']} (has {sorted(map(int, metrics['rounds']))})")
    vals = np.array([metrics["rounds"][str(r)][metric] for r in window], dtype=float)
    v = float(STATISTICS[statistic](vals))
    return 100.0 * v if metric in PERCENT else v


def diverged_before(metrics_or_info: dict, rnd: float) -> int | None:
    """The round a run diverged at (metrics.json or run.json ``diverged``) if it is ≤ ``rnd``, else None."""
    d = metrics_or_info.get("diverged")
    return int(d["round"]) if d and d["round"] <= rnd else None


def experiment_status(p: dict, exp: str) -> str:
    """``"ok"``, or ``"not run (data unavailable: …)"`` when a dataset of the experiment could not be
    obtained on this machine (the DAG's data checkpoint, ``<work>/data/<dataset>.json``)."""
    e = experiment_config(p, exp)
    for d in (e["dataset"], e.get("ood")):
        if not d:
            continue
        status = Path(paths(p)["work"]) / "data" / f"{d}.json"
        if status.exists():
            st = json.loads(status.read_text())
            if not st["available"]:
                first = st["reason"].strip().splitlines()[0].rstrip(":")
                return f"not run (data unavailable: {first}; see {status})"
        elif not (Path(paths(p)["raw"]) / d / "manifest.json").exists():
            return f"not run (data unavailable: {d} not fetched)"
    return "ok"


def _series(history: pd.DataFrame, metric: str, variant: str = "", running: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(rounds ≥ 1, values) of a metric of a run's curves (``runfiles.read_curves``), in % for accuracy;
    ``running`` > 1 replaces each value by the trailing mean of the last ``running`` rounds (NaN until the
    window is full; pandas ``rolling``), as the FedEP paper's 10- and 100-round running averages."""
    h = history[history["round"] >= 1]
    vals = h[f"{variant}/{metric}" if variant else metric].astype(float)
    if running > 1:
        vals = vals.rolling(running).mean()
    return h["round"].to_numpy(), vals.to_numpy() * (100.0 if metric in PERCENT else 1.0)


def rounds_to_target(history: pd.DataFrame, target: float, metric: str = "test/acc", variant: str = "",
                     running: int = 1) -> float:
    """First round whose metric (its ``running`` average) reaches ``target`` (in %, for accuracy); NaN if never."""
    rounds, vals = _series(history, metric, variant, running)
    hit = np.flatnonzero(vals >= target)
    return float(rounds[hit[0]]) if len(hit) else float("nan")


def best_over_rounds(history: pd.DataFrame, metric: str, rnd: int, variant: str = "", running: int = 1) -> float:
    """The best (largest) value of ``metric`` (its ``running`` average) over rounds 1..``rnd`` of a run's
    curves (FOLA's "best GA", spec 004 D12; the FedEP paper's best 100-round running average); needs
    the metric evaluated every round (``eval_every`` 1)."""
    rounds, vals = _series(history, metric, variant, running)
    vals = vals[rounds <= rnd]
    return float(np.nanmax(vals)) if np.isfinite(vals).any() else float("nan")


def within(has_pub: bool, mean: float, diff: float, tol: float | None, target_cell: bool) -> bool | None:
    """|ours − published| ≤ tolerance. In a rounds-to-target cell "never reached" is a result on either
    side: both never reached agree, one reached and the other not do not."""
    if tol is None:
        return None
    if target_cell and (not has_pub or math.isnan(mean)):
        return (not has_pub) and math.isnan(mean)
    return bool(abs(diff) <= tol) if has_pub and not math.isnan(diff) else None
