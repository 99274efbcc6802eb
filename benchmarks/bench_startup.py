"""Start-up cost of a workflow job: torch.optim's first optimiser vs fedbayes' flat-vector one.

Every training job is a fresh process. ``torch.optim``'s first optimiser of a process imports
TorchDynamo (its methods are wrapped in a lazily imported ``torch._dynamo.disable``); fedbayes'
``FlatAdam`` calls the same fused kernel directly. Each variant runs in its own fresh interpreter, in
alternation, ``--repeats`` times; reported: median seconds from ``import torch`` done to the first
optimiser step done, and the ratio. Also the seconds to read and validate params.yaml (libyaml).

    python benchmarks/bench_startup.py                 # 5 repeats
    python benchmarks/bench_startup.py --out benchmarks/results.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

SNIPPETS = {
    "torch.optim.Adam(fused=True)": "opt = torch.optim.Adam([w], lr=1e-3, fused=True)",
    "fedbayes FlatAdam": "from fedbayes.methods.core.local import FlatAdam\nopt = FlatAdam(w, 1e-3)",
}
TEMPLATE = """
import time, torch
t0 = time.perf_counter()
w = torch.zeros(1000, requires_grad=True)
{snippet}
w.sum().backward()
opt.step()
print(time.perf_counter() - t0)
"""
PARAMS = """
import time
t0 = time.perf_counter()
from fedbayes.study import load_params
load_params("params.yaml")
print(time.perf_counter() - t0)
"""


def timed(code: str) -> float:
    return float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", help="append the result as one JSON line")
    args = ap.parse_args()
    times = {name: [] for name in SNIPPETS}
    for _ in range(args.repeats):  # alternate, so load on the machine hits both alike
        for name, snippet in SNIPPETS.items():
            times[name].append(timed(TEMPLATE.format(snippet=snippet)))
    med = {name: statistics.median(t) for name, t in times.items()}
    params_s = statistics.median(timed(PARAMS) for _ in range(args.repeats))
    ref, ours = med["torch.optim.Adam(fused=True)"], med["fedbayes FlatAdam"]
    for name, m in med.items():
        print(f"{name:32s} first step after import torch: {m:6.2f} s (median of {args.repeats})")
    print(f"ratio torch.optim / FlatAdam: {ref / ours:.1f}×   (saved per training job: {ref - ours:.2f} s)")
    print(f"load_params(params.yaml): {params_s:.2f} s")
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps({"bench": "startup", "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
                                "median_s": med, "ratio": ref / ours, "load_params_s": params_s,
                                "repeats": args.repeats}) + "\n")


if __name__ == "__main__":
    main()
