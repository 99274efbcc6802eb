"""Sweep selection: which grid point of a method enters the tables.

Rule (params.yaml ``selection``): the value of ``metric`` under ``statistic`` at the experiment's
last reported round, on the first seed or (``seeds: all``) averaged over every seed, best by ``mode``;
ties go to the earlier grid point. The
paper protocol selects on test data too (FedLap spec §4.6); every candidate is kept in the sweep
report so other criteria can be applied later.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from fedbayes.config import paths, selection, selection_seeds, sweep_points
from fedbayes.fileio import write_text_atomic
from fedbayes.reports.cells import cell_value, diverged_before
from fedbayes.runfiles import read_metrics, read_selected
from fedbayes.runpaths import run_dir, selected_file


def select(p: dict, experiment: str, method: str) -> dict:
    crit = selection(p, experiment)
    if "from" in crit:  # the point another experiment selected (selection_from): no grid of our own
        src = read_selected(selected_file(paths(p), crit["from"], method))
        return {"experiment": experiment, "method": method, "point": src["point"], "hparams": src["hparams"],
                "criterion": crit, "candidates": []}
    candidates = []
    on = selection_seeds(p, experiment, method)
    for point, values in sweep_points(p, experiment, method).items():
        ms = [read_metrics(run_dir(paths(p), experiment, method, point, s)) for s in on]
        # a point diverged on any seed has no value and is never selected
        r = max((d for m in ms if (d := diverged_before(m, crit["round"]))), default=None)
        vals = [cell_value(m, crit["metric"], crit["round"], crit["statistic"]) for m in ms] if not r else []
        candidates.append({"point": point, "hparams": values, **({"diverged_round": r} if r else {}),
                           **({"per_seed": vals} if len(on) > 1 else {}),
                           "value": float("nan") if r else float(sum(vals) / len(vals))})
    finite = [c for c in candidates if "diverged_round" not in c]
    if finite:
        pick = (max if crit["mode"] == "max" else min)(finite, key=lambda c: c["value"])
    else:  # every point diverged: the one that lasted longest runs on, and the tables show it diverged
        pick = max(candidates, key=lambda c: c["diverged_round"])
    return {"experiment": experiment, "method": method, "point": pick["point"], "hparams": pick["hparams"],
            "criterion": crit, "candidates": candidates}


def write_selection(p: dict, experiment: str, method: str, out: str | Path | None = None) -> dict:
    sel = select(p, experiment, method)
    write_text_atomic(out or selected_file(paths(p), experiment, method), json.dumps(sel, indent=1) + "\n")
    return sel


def selected_point(p: dict, experiment: str, method: str) -> str:
    return read_selected(selected_file(paths(p), experiment, method))["point"]


def sweep_frame(p: dict, experiment: str, methods: list[str]) -> pd.DataFrame:
    rows = []
    for method in methods:
        sel = read_selected(selected_file(paths(p), experiment, method))
        c = sel["criterion"]
        if "from" in c:
            rows.append({"experiment": experiment, "method": method, "point": sel["point"], **sel["hparams"],
                         "criterion": f"selected on {c['from']}", "value": float("nan"), "selected": True})
        for cand in sel["candidates"]:
            rows.append({"experiment": experiment, "method": method, "point": cand["point"], **cand["hparams"],
                         "criterion": f"{c['metric']} {c['statistic']} @ round {c['round']}, "
                                      + ("mean over seeds" if c.get("seeds") == "all" else f"seed {c['seed']}"),
                         "value": cand["value"], "selected": cand["point"] == sel["point"]})
    return pd.DataFrame(rows)
