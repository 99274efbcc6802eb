"""The committed Fashion-MNIST reproduction's time on one GPU, estimated from the GPU's measured rows.

For every committed run under results/runs (stand-in rehearsals excluded), its rounds and evaluated rounds
(history.csv) times the seconds a round of its (experiment, method) took on the GPU in
benchmarks/batched_gpu.json (clients together, the step replayed as a CUDA graph): training s/round, and
one evaluation's seconds with the sampled predictive scaled from the benchmark's samples to the run's
own ``pred_samples``
(on the rounds whose history has the run's predictive; the other evaluated rounds at the benchmark's
reduced-sample evaluation, an upper bound for their point predictions). A run whose method has no row on its own experiment takes the method's row on another
experiment of the same cost family (``family``: the fmnist10-* ones; marked); one whose method has no row at all is listed as not measured.

    python benchmarks/gpu_estimate.py [--gpu benchmarks/batched_gpu.json] [--md benchmarks/gpu_estimate.md]
"""

from __future__ import annotations

import argparse
import csv
import json
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent


def rows_by_key(path: Path) -> tuple[dict, list[str]]:
    rows = json.loads(path.read_text())
    out = {}
    for r in rows:
        out[(r["experiment"], r["method"])] = r
    return out, sorted({r["device_name"] for r in rows})


def per_round(r: dict, samples) -> tuple[float, float]:
    """(training s/round, one evaluation's seconds with the run's ``samples`` networks) from GPU row r."""
    train = r["batched_s_per_round"] if r.get("batches") else r["sequential_s_per_round"]
    scale = (float(samples) / r["pred_samples_run"]) if samples and r.get("pred_samples_run") else 1.0
    return float(train), float(r.get("eval_s") or 0.0) * scale


def family(experiment: str) -> str:
    """Experiments whose rounds cost alike: the fmnist10-* ones (10 clients, 60,000 points, the MLP) share
    one; any other is its own."""
    return "fmnist10" if experiment.startswith("fmnist10-") else experiment


def row_eval(r: dict) -> float:
    """One evaluation without the sampled predictive: the benchmark's evaluation at its reduced samples
    (an upper bound for the point predictions alone)."""
    return float(r.get("eval_s") or 0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default="results/runs")
    ap.add_argument("--gpu", default=str(HERE / "batched_gpu.json"))
    ap.add_argument("--md", default=str(HERE / "gpu_estimate.md"))
    args = ap.parse_args()
    gpu, devices = rows_by_key(Path(args.gpu))
    by_method = defaultdict(list)
    for (exp, method), r in gpu.items():
        by_method[method].append(r)
    groups = defaultdict(lambda: {"runs": 0, "rounds": 0, "evals": 0, "how": "", "train_s": 0.0, "eval_s": 0.0})
    for run in sorted(Path(args.runs).glob("*/*/*/seed*/run.json")):
        exp, method = run.parts[-5], run.parts[-4]
        if not exp.startswith("fmnist"):
            continue
        with open(run.parent / "history.csv") as fh:
            hist = list(csv.DictReader(fh))
        rounds = max(int(h["round"]) for h in hist)
        evals = sum(1 for h in hist if h.get("eval_s"))
        sampled = sum(1 for h in hist if h.get("eval_s") and h.get("test/nll"))   # rounds the run's predictive ran
        g = groups[(exp, method)]
        g["runs"] += 1
        g["rounds"] += rounds
        g["evals"] += evals
        row = gpu.get((exp, method))
        how = "this experiment's row"
        similar = [r for r in by_method.get(method, []) if family(r["experiment"]) == family(exp)]
        if row is None and similar:
            row, how = similar[0], f"row of {similar[0]['experiment']}"
        if row is None:
            g["how"] = "not measured on the GPU"
            continue
        samples = json.loads(run.read_text())["config"]["hparams"].get("pred_samples")
        train, ev = per_round(row, samples)
        g["how"] = how + (" (together, CUDA graph" if row.get("batches") else " (one by one") + f", {row['device_name']})"
        g["train_s"] += rounds * train
        g["eval_s"] += sampled * ev + (evals - sampled) * row_eval(row)
    measured = {k: g for k, g in groups.items() if g["how"] != "not measured on the GPU"}
    tot_train = sum(g["train_s"] for g in measured.values())
    tot_eval = sum(g["eval_s"] for g in measured.values())
    runs_measured = sum(g["runs"] for g in measured.values())
    runs_all = sum(g["runs"] for g in groups.values())
    lines = [f"# The committed Fashion-MNIST runs on one GPU ({', '.join(devices) or '?'}), estimated", "",
             f"`python benchmarks/gpu_estimate.py`: {runs_all} committed runs; {runs_measured} of them have a measured "
             f"GPU row (benchmarks/batched_gpu.md): **{(tot_train + tot_eval) / 60:.1f} min** "
             f"({tot_train / 60:.1f} training + {tot_eval / 60:.1f} evaluation). "
             + (f"The other {runs_all - runs_measured} runs' methods have no GPU row yet. " if runs_all > runs_measured else "")
             + ("Rows of different cards (the last column) were measured in different calls; their sum is an "
                "estimate for either card, not a measurement." if len(devices) > 1 else ""), "",
             "| experiment | method | runs | rounds | train min | eval min | from |", "|---|---|---:|---:|---:|---:|---|"]
    for (exp, method), g in sorted(groups.items()):
        m = g["how"] != "not measured on the GPU"
        lines.append(f"| {exp} | {method} | {g['runs']} | {g['rounds']} | "
                     + (f"{g['train_s'] / 60:.2f} | {g['eval_s'] / 60:.2f} | " if m else "– | – | ") + f"{g['how']} |")
    Path(args.md).write_text("\n".join(lines) + "\n")
    print(lines[2])


if __name__ == "__main__":
    main()
