"""Seconds per round of BayesADMM vs FedAvg on the same experiment, side by side in one process.

The BayesADMM paper says its method costs about the same per round as FedAvg (an IVON step costs an
Adam step). Both run with BayesADMM's local epochs on the same clients; training time per round is
measured separately from evaluation (BayesADMM's 32-sample predictive is an evaluation cost, not a
training one, and is reported on its own). The first round is a warm-up (kernel loading, compilation):
the means are over the rounds after it.

    python benchmarks/bench_bayesadmm.py                          # fmnist10-dir-k10, 3 rounds each
    python benchmarks/bench_bayesadmm.py --rounds 5 --out benchmarks/results.jsonl
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import numpy as np
import torch

from bench_fedavg import make_data
from fedbayes.study import load_params, run_config, sweep_points
from fedbayes.engine import pick_device, run_federated
from fedbayes.study.model import RunSpec


def per_round(cfg, data, device) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        hist = run_federated(RunSpec.from_config(cfg), data, tmp, device, log=lambda m: None)
    timed = [h for h in hist if "time_s" in h][1:]  # round 1 carries one-time costs (kernel loading, compilation)
    return float(np.mean([h["time_s"] for h in timed])), float(np.mean([h["eval_s"] for h in timed]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--experiment", default="fmnist10-dir-k10")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per run (the first is a warm-up; at least 2)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None, help="append the result as a JSON line to this file")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    p = load_params(args.params, scale="paper")
    device = pick_device(p.get("device", "auto"))
    data = make_data(p, args.experiment, 0, device)
    ba = run_config(p, args.experiment, "bayesadmm", 0)
    fa = run_config(p, args.experiment, "fedavg", 0, next(iter(sweep_points(p, args.experiment, "fedavg"))))
    fa["hparams"]["local_epochs"] = ba["hparams"]["local_epochs"]  # the same local work
    for cfg in (ba, fa):
        cfg["rounds"], cfg["save_rounds"] = args.rounds, [args.rounds]
        cfg["hparams"]["mc_every"] = 1
    E = ba["hparams"]["local_epochs"]
    print(f"{args.experiment}: {args.rounds} rounds each, E = {E}, batch {ba['hparams']['batch_size']}, "
          f"{len(data.parts)} clients, device {device}, {torch.get_num_threads()} thread(s)")
    t0 = time.perf_counter()
    fa_train, fa_eval = per_round(fa, data, device)
    ba_train, ba_eval = per_round(ba, data, device)
    ratio = ba_train / fa_train
    print(f"FedAvg    : train {fa_train:.2f} s/round, eval {fa_eval:.2f} s/round (1 network)")
    print(f"BayesADMM : train {ba_train:.2f} s/round, eval {ba_eval:.2f} s/round "
          f"(@mean + {ba['hparams']['pred_samples']}-sample predictive)")
    print(f"training time ratio BayesADMM / FedAvg = {ratio:.2f}  ({time.perf_counter() - t0:.0f} s in all)")
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps({"benchmark": "bayesadmm_vs_fedavg", "experiment": args.experiment, "rounds": args.rounds,
                                "local_epochs": E, "device": str(device), "threads": torch.get_num_threads(),
                                "fedavg_train_s_per_round": round(fa_train, 3), "fedavg_eval_s_per_round": round(fa_eval, 3),
                                "bayesadmm_train_s_per_round": round(ba_train, 3),
                                "bayesadmm_eval_s_per_round": round(ba_eval, 3), "ratio": round(ratio, 3)}) + "\n")


if __name__ == "__main__":
    main()
