"""Time FedAvg on fmnist10-iid-k10 (the headline experiment) with the real engine.

Prints seconds per round (training and evaluation separately) for fedbayes' engine and, side by
side in the same process, for a plain-PyTorch reference loop written the way federated research
code usually is (torch DataLoader, an nn.Module per client, state_dict averaging), on the same
clients, model and hyperparameters. Speed is reported as the ratio of the two.

    python benchmarks/bench_fedavg.py                       # 50 rounds ours, 5 rounds reference
    python benchmarks/bench_fedavg.py --rounds 10 --ref-rounds 3 --local-epochs 5
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from fedbayes import data as ds
from fedbayes.study import experiment_config, load_params, run_config, sweep_points
from fedbayes.engine import RunData, pick_device, preprocess, run_federated
from fedbayes.study.model import RunSpec
from fedbayes.engine import seeds as S
from fedbayes.models import build_model
from fedbayes.partition import make_partition, subsample


def make_data(p, exp, seed, device):
    e = experiment_config(p, exp)
    a = ds.load(e["dataset"], root=p["paths"]["raw"])
    ood = ds.load(e["ood"], root=p["paths"]["raw"]).x_test
    rng = S.rng(seed, S.PARTITION)
    pool = subsample(len(a.y_train), e["subsample"], rng)
    scheme = dict(e["partition"])
    parts = [pool[ix] for ix in make_partition(a.y_train[pool], e["clients"], scheme.pop("scheme"), rng, **scheme)]
    sc = e["input_scale"]
    return RunData(preprocess(a.x_train, sc).to(device), torch.from_numpy(a.y_train).to(device),
                   preprocess(a.x_test, sc).to(device), torch.from_numpy(a.y_test).to(device),
                   preprocess(ood, sc).to(device), a.n_classes, parts)


def reference_fedavg(cfg, data: RunData, rounds: int) -> float:
    """Plain PyTorch FedAvg: DataLoader + nn.Module + state_dict averaging. Returns s/round (train only)."""
    hp = cfg["hparams"]
    torch.manual_seed(0)
    glob = build_model(cfg["model"]["name"], tuple(data.x_train.shape[1:]), data.n_classes,
                       **{k: v for k, v in cfg["model"].items() if k != "name"}).to(data.x_train.device)
    sizes = np.array([len(p) for p in data.parts], dtype=float)
    loaders = [torch.utils.data.DataLoader(torch.utils.data.TensorDataset(data.x_train[p], data.y_train[p]),
                                           batch_size=hp["batch_size"], shuffle=True) for p in data.parts]
    t0 = time.perf_counter()
    for _ in range(rounds):
        states = []
        for loader in loaders:
            local = copy.deepcopy(glob)
            opt = torch.optim.Adam(local.parameters(), lr=hp["lr"])
            for _ in range(hp["local_epochs"]):
                for xb, yb in loader:
                    opt.zero_grad()
                    torch.nn.functional.cross_entropy(local(xb), yb).backward()
                    opt.step()
            states.append(local.state_dict())
        avg = {k: sum(w * s[k] for w, s in zip(sizes / sizes.sum(), states)) for k in states[0]}
        glob.load_state_dict(avg)
    return (time.perf_counter() - t0) / rounds


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--experiment", default="fmnist10-iid-k10")
    ap.add_argument("--rounds", type=int, default=None, help="ours (default: the experiment's 50)")
    ap.add_argument("--ref-rounds", type=int, default=5, help="reference loop rounds (0 = skip)")
    ap.add_argument("--local-epochs", type=int, default=None,
                    help="default: the selected sweep point (results/.../selected.json), else the largest grid value")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None, help="append the result as a JSON line to this file")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    p = load_params(args.params, scale="paper")
    points = sweep_points(p, args.experiment, "fedavg")
    sel = Path(p["paths"]["runs"]) / args.experiment / "fedavg" / "selected.json"
    point = json.loads(sel.read_text())["point"] if sel.exists() else list(points)[-1]
    cfg = run_config(p, args.experiment, "fedavg", 0, point)
    if args.local_epochs:
        cfg["hparams"]["local_epochs"] = args.local_epochs
    if args.rounds:
        cfg["rounds"], cfg["save_rounds"] = args.rounds, [args.rounds]
    device = pick_device(p.get("device", "auto"))
    data = make_data(p, args.experiment, 0, device)
    print(f"{args.experiment}: FedAvg, E={cfg['hparams']['local_epochs']}, batch {cfg['hparams']['batch_size']}, "
          f"{cfg['rounds']} rounds, {len(data.parts)} clients, device {device}, {torch.get_num_threads()} thread(s)")

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        hist = run_federated(RunSpec.from_config(cfg), data, tmp, device, log=lambda m: None)
        total = time.perf_counter() - t0
    train_s = np.mean([h["time_s"] for h in hist[1:]])
    eval_s = np.mean([h["eval_s"] for h in hist])
    result = {"experiment": args.experiment, "local_epochs": cfg["hparams"]["local_epochs"], "rounds": cfg["rounds"],
              "device": str(device), "threads": torch.get_num_threads(), "total_s": round(total, 2),
              "ours_train_s_per_round": round(float(train_s), 4), "ours_eval_s_per_round": round(float(eval_s), 4),
              "final_acc": hist[-1]["test/acc"]}
    print(f"fedbayes engine : {total:.1f} s for {cfg['rounds']} rounds = {total / cfg['rounds']:.2f} s/round "
          f"(train {train_s:.3f} s, eval {eval_s:.3f} s), final acc {hist[-1]['test/acc']:.4f}")
    if args.ref_rounds:
        ref = reference_fedavg(cfg, data, args.ref_rounds)
        result.update(ref_train_s_per_round=round(ref, 4), speedup=round(ref / train_s, 3))
        print(f"reference loop  : {ref:.3f} s/round train ({args.ref_rounds} rounds)  →  "
              f"speed ratio reference/ours = {ref / train_s:.2f}")
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
