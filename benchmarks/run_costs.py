"""Compute cost of finished runs, from each run's run.json (wall seconds of its last session and the
number of threads): per (experiment, method), how many runs, their total and mean wall time.

    python benchmarks/run_costs.py [results/runs] [--experiments fmnist10-iid-k10 ...] [--methods fedavg ...]

The wall time is the run's training time (its rounds, without evaluation). A resumed run records only
the time since its last restart, so totals are lower bounds when runs
were killed and resumed. Prints a markdown table (the FedLap NOTES quote it).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="?", default="results/runs")
    ap.add_argument("--experiments", nargs="*")
    ap.add_argument("--methods", nargs="*")
    ap.add_argument("--now", nargs=2, metavar=("BEFORE", "AFTER"),
                    help="roofline labels: scale each run by its method's s/round AFTER / BEFORE")
    ap.add_argument("--results", default=str(Path(__file__).parent / "results.jsonl"))
    args = ap.parse_args()
    factor = speedups(Path(args.results), *args.now) if args.now else {}
    cost = defaultdict(list)
    for f in sorted(Path(args.runs).glob("*/*/*/seed*/run.json")):
        r = json.loads(f.read_text())
        exp, method = r["config"]["experiment"], r["config"]["method"]
        if (args.experiments and exp not in args.experiments) or (args.methods and method not in args.methods):
            continue
        cost[(exp, method)].append(float(r.get("wall_s") or 0.0))
    now = " now (min) |" if factor else ""
    print("| experiment | method | runs | total wall (min) | mean per run (s) |" + now)
    print("|---|---|---|---|---|" + ("---|" if factor else ""))
    total = total_now = n = 0
    for (exp, method), walls in sorted(cost.items()):
        total += sum(walls)
        total_now += sum(walls) * factor.get(method, 1.0)
        n += len(walls)
        col = f" {sum(walls) * factor.get(method, 1.0) / 60:.1f} |" if factor else ""
        print(f"| {exp} | {method} | {len(walls)} | {sum(walls) / 60:.1f} | {sum(walls) / len(walls):.0f} |" + col)
    col = f" {total_now / 60:.1f} |" if factor else ""
    print(f"| **all** | | {n} | {total / 60:.1f} | |" + col)
    print(f"\n{n} runs: {total / 3600:.1f} core-hours as run" +
          (f"; {total_now / 3600:.1f} core-hours with the code of roofline label {args.now[1]} "
           f"(methods scaled: {', '.join(f'{m} x{f:.2f}' for m, f in sorted(factor.items()))})" if factor else ""))


def speedups(results: Path, before: str, after: str) -> dict[str, float]:
    """method → (training s/round under label ``after``) / (under ``before``), from the latest roofline
    line of each (label, method) in the JSON-lines file."""
    rows: dict[tuple[str, str], float] = {}
    for line in results.read_text().splitlines():
        r = json.loads(line)
        if r.get("benchmark") == "roofline" and r.get("label") in (before, after):
            rows[(r["label"], r["method"])] = float(r["train_s_per_round"])
    return {m: rows[(after, m)] / t for (label, m), t in rows.items() if label == before and (after, m) in rows}


if __name__ == "__main__":
    main()
