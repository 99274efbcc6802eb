"""FedLap-Cov's diagonal GGN on the suite's CNNs: the per-(point, class) VJP (``diag_ggn_vjp``, what the
CNN rows ran before) against the batched per-layer path (``diag_ggn``), in one process back to back, with
a client's local training next to it (``--epochs`` of Adam at batch 64 on the same points: FedLap-Cov's
CIFAR-10 configuration) so a client update's before/after is in the same run, and the floor of the pass (1 forward + C backward passes to the layer outputs + C per-example weight products
≈ (1 + 2C) forwards' multiply-adds) at this process's one-thread matmul/conv rate.

    python benchmarks/bench_ggn.py [--points 128] [--models cifar_cnn acar_cnn]

Prints one JSON line per model (seconds, ratio, floor, max relative difference of the two results)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite_cost import throughput, split_macs  # noqa: E402

from fedbayes.methods.core.curvature import diag_ggn, diag_ggn_vjp, evaluation_mode  # noqa: E402
from fedbayes.models import FlatModel, build_model  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=128)
    ap.add_argument("--models", nargs="*", default=["cifar_cnn", "acar_cnn"])
    ap.add_argument("--epochs", type=int, default=5, help="local epochs of the client update timed alongside")
    args = ap.parse_args()
    torch.set_num_threads(1)
    for name in args.models:
        torch.manual_seed(0)
        shape = (3, 32, 32)
        fm = FlatModel(build_model(name, shape, 10))
        w = fm.flat_params()
        x = torch.rand(args.points, *shape)
        rates = throughput()
        y = torch.randint(0, 10, (args.points,))
        wt = w.clone().requires_grad_(True)
        opt = torch.optim.Adam([wt], lr=1e-3)
        t = time.perf_counter()
        for _ in range(args.epochs):
            for i in range(0, args.points, 64):
                opt.zero_grad()
                torch.nn.functional.cross_entropy(fm(wt, x[i:i + 64]), y[i:i + 64]).backward()
                opt.step()
        t_train = time.perf_counter() - t
        t = time.perf_counter()
        new = diag_ggn(fm, w, x)
        t_new = time.perf_counter() - t
        t = time.perf_counter()
        with evaluation_mode(fm):
            old = diag_ggn_vjp(fm, w, x)
        t_old = time.perf_counter() - t
        lin, conv, _ = split_macs(fm.module, shape)
        fwd = 2 * (lin / (rates["matmul_gflops"] * 1e9) + conv / (rates["conv_gflops"] * 1e9))
        floor = (1 + 2 * 10) * fwd * args.points
        rel = ((new - old).abs().max() / old.abs().max()).item()
        print(json.dumps({"model": name, "params": fm.n_params, "points": args.points, "vjp_s": round(t_old, 3),
                          "batched_s": round(t_new, 3), "speedup": round(t_old / t_new, 1),
                          "train_s": round(t_train, 3), "client_update_before_s": round(t_train + t_old, 3),
                          "client_update_after_s": round(t_train + t_new, 3),
                          "client_update_speedup": round((t_train + t_old) / (t_train + t_new), 2),
                          "floor_s": round(floor, 4), "batched_over_floor": round(t_new / floor, 2),
                          "max_rel_diff": rel, "rates": rates}), flush=True)


if __name__ == "__main__":
    main()
