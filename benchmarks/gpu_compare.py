"""A run trained elsewhere (the GPU: benchmarks/gpu_check.sh) beside the committed runs of the same
experiment, method and sweep point: seconds per round and final metrics, and whether its final accuracy
and NLL lie within the committed seeds' noise.

    python benchmarks/gpu_compare.py build/gpu_check/runs      # one folder per run (run.json, history.csv)

"Within seed noise": |new − mean of the committed seeds| ≤ max(2 × their standard deviation, 0.5 % accuracy /
0.02 NLL); with one committed seed, the floors alone. Seconds per round are the mean of ``time_s`` (the
round's training) and ``eval_s`` (its evaluation) over every round after the first (which holds start-up
and compilation).
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FLOOR = {"test/acc": 0.5, "test/nll": 0.02}


def summary(run: Path) -> dict:
    rows = list(csv.DictReader(open(run / "history.csv")))
    timed = [r for r in rows if r.get("time_s") and int(r["round"]) > 1]
    last = rows[-1]

    def mean(col):
        vals = [float(r[col]) for r in timed if r.get(col)]
        return statistics.fmean(vals) if vals else float("nan")

    info = json.loads((run / "run.json").read_text())
    return {"round": int(last["round"]), "train_s": mean("time_s"), "eval_s": mean("eval_s"),
            "test/acc": 100 * float(last["test/acc"]), "test/nll": float(last["test/nll"]),
            "test/ece": float(last["test/ece"]), "device": info.get("device_name"),
            "gpu_peak_mib": info.get("gpu_peak_mib"), "wall_s": info.get("wall_s"), "config": info["config"],
            "batched_rounds": info.get("batched_rounds", 0)}


def main(root: str) -> int:
    out = []
    for run in sorted(p for p in Path(root).iterdir() if (p / "run.json").exists()):
        new = summary(run)
        c = new["config"]
        committed = sorted((REPO / "results/runs" / c["experiment"] / c["method"] / c["point"]).glob("seed*"))
        old = [summary(s) for s in committed if (s / "history.csv").exists()]
        row = {"run": run.name, "point": c["point"], "device": new["device"], "batched_rounds": new["batched_rounds"],
               "rounds": new["round"], "train_s/round": new["train_s"], "eval_s/round": new["eval_s"],
               "wall_s": new["wall_s"], "gpu_peak_mib": new["gpu_peak_mib"], "cpu_seeds": len(old)}
        if old:
            row["cpu_train_s/round"] = statistics.fmean(o["train_s"] for o in old)
            row["speedup"] = row["cpu_train_s/round"] / new["train_s"]
        for k in ("test/acc", "test/nll", "test/ece"):
            row[k] = new[k]
            if old:
                vals = [o[k] for o in old]
                row[f"cpu {k}"] = [round(v, 4) for v in vals]
                if k in FLOOR:
                    sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
                    row[f"{k} within"] = abs(new[k] - statistics.fmean(vals)) <= max(2 * sd, FLOOR[k])
        out.append(row)
    print(json.dumps(out, indent=1))
    for r in out:
        print(f'{r["run"]:40s} {r["device"]}: train {r["train_s/round"]:.3f} s/round '
              f'(CPU {r.get("cpu_train_s/round", float("nan")):.3f}, ×{r.get("speedup", float("nan")):.1f}), '
              f'eval {r["eval_s/round"]:.3f} s, peak {r["gpu_peak_mib"]} MiB, acc {r["test/acc"]:.2f} '
              f'(CPU {r.get("cpu test/acc")}, within: {r.get("test/acc within")}), NLL {r["test/nll"]:.3f} '
              f'(within: {r.get("test/nll within")})')
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
