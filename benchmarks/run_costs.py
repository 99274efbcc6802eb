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
    args = ap.parse_args()
    cost = defaultdict(list)
    for f in sorted(Path(args.runs).glob("*/*/*/seed*/run.json")):
        r = json.loads(f.read_text())
        exp, method = r["config"]["experiment"], r["config"]["method"]
        if (args.experiments and exp not in args.experiments) or (args.methods and method not in args.methods):
            continue
        cost[(exp, method)].append(float(r.get("wall_s") or 0.0))
    print("| experiment | method | runs | total wall (min) | mean per run (s) |")
    print("|---|---|---|---|---|")
    total = n = 0
    for (exp, method), walls in sorted(cost.items()):
        total += sum(walls)
        n += len(walls)
        print(f"| {exp} | {method} | {len(walls)} | {sum(walls) / 60:.1f} | {sum(walls) / len(walls):.0f} |")
    print(f"| **all** | | {n} | {total / 60:.1f} | |")


if __name__ == "__main__":
    main()
