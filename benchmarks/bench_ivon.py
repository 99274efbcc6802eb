"""IVON's local step against Adam's, and against IVON as of another git revision, interleaved in one process.

One BayesADMM client (the experiment's first client, its hyperparameters: λ = N_k/(ρτ), a vector prior
precision and mean, Lagrange vectors) trains one local epoch per timing with ``methods/core/ivon.py`` as it
is, with ``methods/core/ivon.py`` of ``--baseline-rev`` (loaded from git), and FedAvg's Adam
(``Method.local_train``) on the same minibatches. The variants take turns, so a busy machine slows
them alike; medians per step and their ratios are printed, and the two IVON versions' iterates are
checked to be the same bit for bit.

    python benchmarks/bench_ivon.py                           # fmnist10-dir-k10, baseline 52f5b95
    python benchmarks/bench_ivon.py --baseline-rev 52f5b95 --reps 15 --out benchmarks/results.jsonl
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import torch


def load_revision(rev: str) -> types.ModuleType:
    show = [subprocess.run(["git", "show", f"{rev}:src/fedbayes/methods/{path}"], capture_output=True, text=True)
            for path in ("core/ivon.py", "ivon.py")]   # methods/ivon.py before the per-method packages
    src = next((r.stdout for r in show if r.returncode == 0), None)
    if src is None:
        raise SystemExit(f"no methods/core/ivon.py or methods/ivon.py at {rev}")
    mod = types.ModuleType(f"ivon_baseline_{abs(hash(rev))}")
    sys.modules[mod.__name__] = mod          # dataclasses look their module up
    exec(compile(src, f"{rev}:ivon.py", "exec"), mod.__dict__)
    return mod


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--experiment", default="fmnist10-dir-k10")
    ap.add_argument("--baseline-rev", default="52f5b95", help="default: the last revision before the in-place IVON step")
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None, help="append the result as a JSON line to this file")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from roofline import make_data

    from fedbayes.study import load_params, run_config, sweep_points
    from fedbayes.engine import pick_device
    from fedbayes.methods import build_method
    from fedbayes.methods.core.base import ClientData
    from fedbayes.methods.core import ivon as ivon_now
    from fedbayes.models import FlatModel, build_model

    p = load_params(args.params, scale="paper")
    device = pick_device("cpu")
    cfg = run_config(p, args.experiment, "bayesadmm", 0)
    hp = cfg["hparams"]
    data = make_data(p, args.experiment, cfg, device)
    part = torch.from_numpy(data.parts[0])
    client = ClientData(data.x_train[part], data.y_train[part])
    torch.manual_seed(0)
    fm = FlatModel(build_model(cfg["model"]["name"], tuple(data.x_train.shape[1:]), data.n_classes,
                               **{k: v for k, v in cfg["model"].items() if k != "name"}))
    w0 = fm.flat_params()
    P, n_k = fm.n_params, len(client)
    ess = n_k / (float(hp["rho"]) * float(hp["tau"]))
    g = torch.Generator().manual_seed(1)
    s_bar = float(hp["delta"]) + torch.rand(P, generator=g)        # a server precision after some rounds
    kw = dict(epochs=1, batch_size=int(hp["batch_size"]), lr=lambda i, n: float(hp["lr"]), ess=ess,
              delta=s_bar / ess, prior_mean=torch.randn(P, generator=g) * 0.01,
              v=torch.randn(P, generator=g) * 1e-4, u=torch.rand(P, generator=g) * 1e-4,
              beta1=float(hp.get("beta1", 0.9)), beta2=float(hp.get("beta2", 0.99999)))
    start = lambda mod: mod.IVONState(w0.clone(), torch.full_like(w0, float(hp["h0"])), torch.zeros_like(w0), 0)  # noqa: E731
    fa_cfg = run_config(p, args.experiment, "fedavg", 0, next(iter(sweep_points(p, args.experiment, "fedavg"))))
    fa_hp = {**fa_cfg["hparams"], "local_epochs": 1, "client_optimizer": "fresh"}
    fedavg = build_method("fedavg", fm, fa_hp, np.array([n_k]))
    old = load_revision(args.baseline_rev)

    def run(name):
        torch.manual_seed(5)
        rng = np.random.default_rng(5)
        t = time.perf_counter()
        if name == "fedavg":
            out = fedavg.local_train(w0, client, rng).w
        else:
            mod = ivon_now if name == "ivon" else old
            out = mod.ivon_train(fm, start(mod), client, rng, **kw)[0]
        return time.perf_counter() - t, out

    names = ["fedavg", "ivon_baseline", "ivon"]
    times = {n: [] for n in names}
    outs = {}
    for name in names:                          # warm-up
        _, outs[name] = run(name)
    same = all(torch.equal(getattr(outs["ivon"], f), getattr(outs["ivon_baseline"], f)) for f in "mhg")
    for r in range(args.reps):
        for name in names[r % 3:] + names[:r % 3]:   # rotate the order
            times[name].append(run(name)[0])
    steps = -(-n_k // int(hp["batch_size"]))
    med = {n: float(np.median(v)) / steps * 1e3 for n, v in times.items()}
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"{args.experiment}, client 0 ({n_k} points, {steps} steps an epoch), {P:,} parameters, "
          f"{torch.get_num_threads()} thread(s), load average {' '.join(load)}")
    for n in names:
        print(f"{n:14s} {med[n]:.3f} ms/step (median of {args.reps})")
    print(f"IVON / Adam step: baseline {args.baseline_rev} {med['ivon_baseline'] / med['fedavg']:.2f}, "
          f"now {med['ivon'] / med['fedavg']:.2f}; baseline / now {med['ivon_baseline'] / med['ivon']:.2f}; "
          f"iterates bit for bit the same: {same}")
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps({"benchmark": "ivon_step", "experiment": args.experiment, "baseline_rev": args.baseline_rev,
                                "ms_per_step": {n: round(v, 4) for n, v in med.items()}, "reps": args.reps,
                                "ratio_baseline_over_now": round(med["ivon_baseline"] / med["ivon"], 3),
                                "ivon_over_adam": round(med["ivon"] / med["fedavg"], 3),
                                "ivon_baseline_over_adam": round(med["ivon_baseline"] / med["fedavg"], 3),
                                "bit_identical": same, "threads": torch.get_num_threads(), "load": load,
                                "time": datetime.datetime.now().isoformat(timespec="seconds")}) + "\n")


if __name__ == "__main__":
    main()
