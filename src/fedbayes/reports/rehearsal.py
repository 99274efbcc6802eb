"""The rehearsal's summary: every experiment × method of params.yaml with what ran on stand-in data.

Read from the runs a rehearsal left (run.json, history.csv, metrics.json, the MLflow import markers) and
the tables that list each pair, so a reader sees at a glance that every experiment of the five papers
trained, evaluated every prediction variant, was tracked and reached its tables — or what did not.
"""

from __future__ import annotations

import json
from pathlib import Path

from fedbayes.fileio import write_text_atomic
from fedbayes.study.model import MethodPlan, Study
from fedbayes.tracking import REHEARSAL_IMPORT, marker_runs


def _runs(plan: MethodPlan) -> list[tuple[str, int]]:
    """(point, seed) of every run the DAG trains for the pair: the sweep on the selection's seeds and
    the first point (the selected one, when a sweep is not run) on every seed."""
    runs = {(pt, s) for pt in plan.swept for s in plan.selection_seeds}
    runs |= {(plan.points[0], s) for s in plan.seeds}
    return sorted(runs, key=lambda r: (r[1], r[0]))


def _tables_of(study: Study, exp: str, method: str) -> list[str]:
    return [t for t, table in study.tables.items() if exp in table.comparable and method in table.bases]


def pair_summary(study: Study, exp: str, method: str) -> dict:
    """What ran of one (experiment, method): runs trained, rounds, prediction variants, MLflow runs."""
    root, work = Path(study.paths["runs"]), Path(study.paths["work"])
    e = study.experiments[exp].config
    want = _runs(study.experiments[exp].methods[method])
    trained, rounds, variants, train_s, problems = 0, set(), set(), 0.0, []
    for point, seed in want:
        d = root / exp / method / point / f"seed{seed}"
        try:
            info = json.loads((d / "run.json").read_text())
            metrics = json.loads((d / "metrics.json").read_text())
            lines = (d / "history.csv").read_text().splitlines()
        except (OSError, ValueError) as err:
            problems.append(f"{point}/seed{seed}: {type(err).__name__}: {err}")
            continue
        if info["config"].get("data", "") != f"stand-in ({study.stand_in})":
            problems.append(f"{point}/seed{seed}: not a stand-in run ({info['config'].get('data', 'real data')})")
            continue
        trained += 1
        rounds.add(len(lines) - 2)   # a header and round 0 (the initial model)
        variants |= {""} | set(metrics.get("variants", {}))
        train_s += float(info.get("wall_s") or 0.0)
    tracked = marker_runs(work / "mlflow" / f"{REHEARSAL_IMPORT}.runs", study.scale, exp, method)
    return {"experiment": exp, "method": method, "dataset": e["dataset"], "ood": e.get("ood") or "",
            "model": e["model"]["name"], "clients": e["clients"], "runs": f"{trained}/{len(want)}",
            "rounds": ",".join(str(r) for r in sorted(rounds)) or "-",
            "variants": ", ".join(sorted(v or "default" for v in variants)) or "-",
            "mlflow": tracked, "train_s": round(train_s, 1), "tables": _tables_of(study, exp, method),
            "ok": trained == len(want) and tracked >= trained and all(r >= 2 for r in rounds) and bool(rounds),
            "problems": problems}


TITLE = "# Rehearsal: every experiment of the five papers on stand-in data"


def build_summary(study: Study, out: str | Path) -> list[dict]:
    """Write the rehearsal summary (markdown) to ``out`` and return its rows."""
    rows = [pair_summary(study, exp, m) for exp, x in study.experiments.items() for m in x.methods]
    bad = [r for r in rows if not r["ok"]]
    exps = list(study.experiments)
    L = [TITLE, "",
         f"Scale `{study.scale}`: the smoke DAG (params.smoke.yaml `smoke:` then `rehearsal:`) on generated "
         f"stand-in files in each dataset's real format (size `{study.stand_in}`, fedbayes.data.standin), read "
         "by the real fetch → verify → load code. **Nothing here is a result**: it shows that each experiment "
         "trains, evaluates every prediction variant, is tracked in MLflow and reaches its tables.", "",
         f"{len(exps)} experiments, {len(rows)} experiment × method pairs: "
         + (f"all {len(rows)} ran." if not bad else f"{len(rows) - len(bad)} ran, {len(bad)} did not: "
            + ", ".join(f"{r['experiment']}/{r['method']}" for r in bad) + "."), "",
         "| experiment | method | data (stand-in) | model | clients | runs | rounds | predictions evaluated "
         "| MLflow runs | train s | tables |",
         "|---|---|---|---|---:|---:|---:|---|---:|---:|---|"]
    for r in rows:
        data = r["dataset"] + (f" (OOD {r['ood']})" if r["ood"] else "")
        L.append(f"| {r['experiment']} | {r['method']}{'' if r['ok'] else ' ✗'} | {data} | {r['model']} | "
                 f"{r['clients']} | {r['runs']} | {r['rounds']} | {r['variants']} | {r['mlflow']} | "
                 f"{r['train_s']:.1f} | {', '.join(r['tables']) or '-'} |")
    for r in bad:
        L += ["", f"{r['experiment']}/{r['method']}:"] + [f"- {x}" for x in r["problems"] or ["incomplete"]]
    total = sum(r["train_s"] for r in rows)
    L += ["", f"Training time of all runs (their own wall clock, one thread each): {total / 60:.1f} min."]
    write_text_atomic(out, "\n".join(L) + "\n")
    return rows
