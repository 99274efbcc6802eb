"""Where one round's time goes: a method's round on an experiment under torch.profiler, after a warm-up
round (compilation, allocator), as the ops with the most self time on the host and on the device.

    python benchmarks/profile_round.py --experiment fmnist10-iid-k10 --method bayesadmm [--point default]

Written for the GPU (benchmarks/gpu_check.sh profile): a round there is bound by the host dispatching
small kernels and by synchronisations (``.item()``, ``bool(tensor)``), which the host-side table shows.
"""

from __future__ import annotations

import argparse
import tempfile
import time

from torch.profiler import ProfilerActivity, profile

from roofline import make_data
from fedbayes.study import load_params, run_config
from fedbayes.engine import pick_device, run_federated
from fedbayes.study.model import RunSpec


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--experiment", default="fmnist10-iid-k10")
    ap.add_argument("--method", default="bayesadmm")
    ap.add_argument("--point", default=None)
    ap.add_argument("--rows", type=int, default=18)
    args = ap.parse_args()
    p = load_params(args.params, scale="paper")
    device = pick_device(p.get("device", "auto"))
    cfg = run_config(p, args.experiment, args.method, 0, *([args.point] if args.point else []))
    data = make_data(p, args.experiment, cfg, device)
    cfg["rounds"], cfg["save_rounds"] = 1, [1]
    with tempfile.TemporaryDirectory() as tmp:
        run_federated(RunSpec.from_config(cfg), data, f"{tmp}/warm", device, log=lambda m: None)
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        t0 = time.perf_counter()
        with profile(activities=acts) as prof:
            hist = run_federated(RunSpec.from_config(cfg), data, f"{tmp}/run", device, log=lambda m: None)
        wall = time.perf_counter() - t0
    print(f"{args.experiment} {args.method} on {device}: round 1 train {hist[1]['time_s']:.2f} s, "
          f"eval {hist[1]['eval_s']:.2f} s ({wall:.1f} s profiled in all)")
    table = prof.key_averages()
    print(table.table(sort_by="self_cpu_time_total", row_limit=args.rows))
    if device.type == "cuda":
        print(table.table(sort_by="self_cuda_time_total", row_limit=args.rows))


if __name__ == "__main__":
    main()
