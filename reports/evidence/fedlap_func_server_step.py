"""Evidence run (table1 notes): what FedLap-Func's server step does to the clients' progress.

One fmnist10-dir-k10 run (seed 0, the committed partition procedure and data) at the point the FedLap
issue names (δ = 1, τ_f = 1e-4, E = 5; params.yaml otherwise), training exactly as ``fedbayes train``
does, with the server step instrumented: every round, the test accuracy and NLL of Σ_k v_k (what the
server step starts from: FedLap's own w_g) and of w_g after the 5000 Adam steps on the memory points,
and ‖w_g − Σ_k v_k‖. Not part of the DAG: it writes one CSV.

    python reports/evidence/fedlap_func_server_step.py --out reports/evidence/fedlap_func_server_step.csv
"""

from __future__ import annotations

import argparse
import csv
import tempfile
import time
from pathlib import Path

import fedbayes  # noqa: F401  (first: the CPU-numerics caps)
import torch

from fedbayes.study import load_params, run_config
from fedbayes.study.model import RunSpec
from fedbayes.engine.data import load_run_data
from fedbayes.engine.loop import run_federated
from fedbayes.engine.partitions import data_root, write_partition
from fedbayes.methods.fedlap_func.algorithm import FedLapFunc

EXPERIMENT, METHOD = "fmnist10-dir-k10", "fedlap_func"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--delta", type=float, default=1.0)
    ap.add_argument("--tau", type=float, default=1e-4)
    ap.add_argument("--local-epochs", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=None, help="stop after this many rounds")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)

    p = load_params(args.params, scale="paper")
    grid = {"local_epochs": [args.local_epochs], "delta": [args.delta], "tau": [args.tau]}
    p["methods"][METHOD].setdefault("overrides", {}).setdefault(EXPERIMENT, {})["sweep"] = grid
    point = f"delta={args.delta}+local_epochs={args.local_epochs}+tau={args.tau}"
    cfg = run_config(p, EXPERIMENT, METHOD, args.seed, point)

    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        parts = write_partition(p, EXPERIMENT, args.seed, f"{tmp}/partition.npz")
        data, _ = load_run_data(data_root(p), cfg, parts, torch.device("cpu"))
        x_test, y_test = data.x_test, data.y_test
        server_update = FedLapFunc.server_update

        def scores(method, w):
            with torch.no_grad():
                logp = torch.log_softmax(method.fm(w, x_test), -1)
            return float((logp.argmax(-1) == y_test).float().mean()), float(-logp[torch.arange(len(y_test)), y_test].mean())

        def instrumented(self, server, messages, rnd):
            vbar = sum(m["v"] for m in messages.values()) if rnd == 1 else None
            t0 = time.perf_counter()
            out = server_update(self, server, messages, rnd)
            wbar = server["v"].clone()
            for k, m in messages.items():
                wbar[k] = m["v"]
            wbar = wbar.sum(0) if vbar is None else vbar
            acc_v, nll_v = scores(self, wbar)
            acc_g, nll_g = scores(self, out["w"])
            rows.append({"round": rnd, "acc_sum_v": acc_v, "nll_sum_v": nll_v, "acc_w_g": acc_g, "nll_w_g": nll_g,
                         "dist": float((out["w"] - wbar).norm()), "norm_sum_v": float(wbar.norm()),
                         "server_s": time.perf_counter() - t0})
            print(f"round {rnd:3d}  Σv {100 * acc_v:5.1f} %  w_g {100 * acc_g:5.1f} %  ‖w_g − Σv‖ {rows[-1]['dist']:.2f}",
                  flush=True)
            return out

        FedLapFunc.server_update = instrumented
        try:
            run_federated(RunSpec.from_config(cfg), data, f"{tmp}/run", torch.device("cpu"), log=lambda m: None,
                          stop_after=args.rounds)
        finally:
            FedLapFunc.server_update = server_update
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    main()
