"""Clients trained together (``batch_clients: true``) against one by one (``false``), per protocol, in one
process on one device: seconds per round of training, peak memory, one evaluation's seconds, and how far
the two runs' numbers are apart after the same rounds (the batched loop's iterates are the sequential
ones up to float round-off: tests/test_batched.py).

The protocols are the roofline's (benchmarks/roofline.py: every method family of the tables at its paper
configuration and selected point, seed 0). A method without a batched form trains one by one under both
settings (its row says "sequential only"). Each protocol runs ``--warmup`` + ``--rounds`` rounds per
setting, the two settings taking turns, and the means are over the rounds after the warm-up (kernel
loading, torch.compile). Sampled predictives are cut to ``--eval-samples`` networks and their time
scaled to the configured number, as the roofline does.

    python benchmarks/batched.py                                   # this machine's default device, 1 thread
    python benchmarks/batched.py --device cuda --json benchmarks/batched_gpu.json --md benchmarks/batched_gpu.md
    python benchmarks/batched.py --protocols bayesadmm fedivon --rounds 2
    python benchmarks/batched.py --protocols bayesadmm@fmnist10-iid-k10      # a protocol on another experiment
    python benchmarks/batched.py --protocols feddyn@fmnist10-dir-k10         # any method of an experiment
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from roofline import PROTOCOLS, cpu_name, make_data, pick_point  # noqa: E402


def run_once(cfg: dict, data, device, batch: bool) -> dict:
    from fedbayes.engine import run_federated
    from fedbayes.study.model import RunSpec

    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        hist = run_federated(RunSpec.from_config(cfg), data, tmp, device, log=lambda m: None, batch_clients=batch)
        post = torch.load(Path(tmp) / "posterior.pt", map_location="cpu")
        run = json.loads((Path(tmp) / "run.json").read_text())
    wall = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else None
    return {"hist": hist, "post": post, "wall": wall, "peak_mib": peak, "batched_rounds": run.get("batched_rounds", 0)}


def max_difference(a: dict, b: dict) -> float:
    """The largest difference over the final server states' floating tensors (weights, precisions …),
    each relative to that tensor's largest magnitude (BayesADMM's precisions are ~1e7)."""
    out = 0.0
    for k, v in a.items():
        if torch.is_tensor(v) and v.is_floating_point() and k in b:
            scale = max(float(v.double().abs().max()), 1e-30)
            out = max(out, float((v.double() - b[k].double()).abs().max()) / scale)
    return out


def measure(p: dict, name: str, experiment: str, method: str, changes: dict, args, device) -> dict:
    from fedbayes.study import run_config

    point = pick_point(p, experiment, method)
    cfg = run_config(p, experiment, method, 0, point)
    hp = cfg["hparams"]
    hp.update(changes)
    rounds = args.warmup + args.rounds
    cfg["rounds"], cfg["save_rounds"] = rounds, [rounds]
    full_samples = int(hp.get("pred_samples", 0) or 0)
    if full_samples:
        hp["pred_samples"] = min(full_samples, args.eval_samples)
    data = make_data(p, experiment, cfg, device)
    from fedbayes.methods.core import graphs

    graphs.outcomes.clear()
    res = {True: run_once(copy.deepcopy(cfg), data, device, True)}   # on a GPU: the step replayed as a CUDA graph
    steps_ran = dict(graphs.outcomes)
    if device.type == "cuda" and res[True]["batched_rounds"]:        # and together, eagerly
        os.environ["FEDBAYES_CUDA_GRAPHS"] = "0"
        try:
            res["eager"] = run_once(copy.deepcopy(cfg), data, device, True)
        finally:
            os.environ["FEDBAYES_CUDA_GRAPHS"] = "1"
    # a method without a batched form ran one by one already: that run is the sequential one
    res[False] = run_once(copy.deepcopy(cfg), data, device, False) if res[True]["batched_rounds"] else res[True]
    measured = lambda r: [h for h in r["hist"] if h["round"] > args.warmup]  # noqa: E731
    per = {b: float(np.mean([h["time_s"] for h in measured(r)])) for b, r in res.items()}
    graph = "eager" in res
    evals = {b: [h["eval_s"] for h in measured(r) if "eval_s" in h] for b, r in res.items()}
    last = {b: r["hist"][-1] for b, r in res.items()}
    batched = res[True]["batched_rounds"] > 0
    return {
        "benchmark": "batched", "protocol": name, "experiment": experiment, "method": method, "point": point,
        "device": str(device), "device_name": torch.cuda.get_device_name() if device.type == "cuda" else cpu_name(),
        "threads": torch.get_num_threads(), "clients_per_round": int(last[False]["clients"]),
        "rounds_measured": args.rounds, "warmup_rounds": args.warmup, "batches": batched,
        "sequential_s_per_round": round(per[False], 4), "batched_s_per_round": round(per[True], 4) if batched else None,
        "speedup": round(per[False] / per[True], 2) if batched else None,
        "sequential_peak_mib": res[False]["peak_mib"], "batched_peak_mib": res[True]["peak_mib"] if batched else None,
        "eval_s": round(float(np.mean(evals[False])), 4) if evals[False] else None,
        "pred_samples": full_samples or None, "pred_samples_run": hp.get("pred_samples") if full_samples else None,
        "max_rel_difference": max_difference(res[False]["post"], res[True]["post"]) if batched else None,
        # GPU: the batched step eagerly (FEDBAYES_CUDA_GRAPHS=0) beside the captured one; how the loops ran
        "batched_eager_s_per_round": round(per["eager"], 4) if graph else None,
        "batched_eager_peak_mib": res["eager"]["peak_mib"] if graph else None,
        "graph_vs_eager_max_rel_difference": max_difference(res["eager"]["post"], res[True]["post"]) if graph else None,
        "batched_loops": steps_ran,
        "test_nll": [last[False].get("test/nll"), last[True].get("test/nll")],
        "test_acc": [last[False].get("test/acc"), last[True].get("test/acc")],
        "torch": torch.__version__, "time": datetime.datetime.now().isoformat(timespec="seconds"),
    }


def markdown(rows: list[dict]) -> str:
    devices = sorted({r["device_name"] for r in rows}) or ["?"]

    def span(key: str) -> str:
        vals = sorted({r[key] for r in rows})
        return "?" if not vals else str(vals[0]) if len(vals) == 1 else f"{vals[0]}–{vals[-1]}"

    lines = [f"# Clients together vs one by one ({', '.join(devices)})", "",
             "`python benchmarks/batched.py` — seconds per round of training (evaluation excluded), "
             f"means over {span('rounds_measured')} rounds after {span('warmup_rounds')} "
             "warm-up (each row's own in batched_gpu.json), the two settings in one process; peak = the device's allocated memory (GPU only); "
             "max rel. diff = the largest difference between the two runs' final server tensors, relative to the tensor's largest magnitude"
             + ("; device = the card that measured the row (rows of different cards were measured in different calls: "
                "compare a row's two settings, not rows of two cards)." if len(devices) > 1 else "."), "",
             "| protocol | experiment | device | clients/round | one by one s/round | together s/round | speed-up | peak MiB (one by one / together) | max rel. diff | test NLL (one by one / together) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    graph_rows = [r for r in rows if r.get("batched_eager_s_per_round")]
    for r in rows:
        peak = "–" if r["sequential_peak_mib"] is None else \
            f"{r['sequential_peak_mib']:.0f} / {r['batched_peak_mib']:.0f}" if r["batches"] else f"{r['sequential_peak_mib']:.0f} / –"
        nll = " / ".join("–" if v is None else f"{v:.4f}" for v in r["test_nll"]) if r["batches"] else \
            ("–" if r["test_nll"][0] is None else f"{r['test_nll'][0]:.4f}")
        lines.append(f"| {r['protocol']} | {r['experiment']} | {r['device_name']} | {r['clients_per_round']} | {r['sequential_s_per_round']:.3f} | "
                     + (f"{r['batched_s_per_round']:.3f} | {r['speedup']:.2f}× | " if r["batches"] else "sequential only | – | ")
                     + f"{peak} | " + ("–" if r["max_rel_difference"] is None else f"{r['max_rel_difference']:.1e}")
                     + f" | {nll} |")
    if graph_rows:
        lines += ["", "Together, the step replayed as a CUDA graph (`methods.core.graphs`, the default on a GPU) "
                  "beside the same step eagerly (`FEDBAYES_CUDA_GRAPHS=0`), in the same process; max rel. diff = "
                  "between the two batched runs' final server tensors; loops = how the batched local loops ran.", "",
                  "| protocol | together eager s/round | together graph s/round | graph speed-up | peak MiB (eager / graph) | max rel. diff | loops |",
                  "|---|---|---|---|---|---|---|"]
        for r in graph_rows:
            loops = ", ".join(f"{k}: {v}" for k, v in sorted(r.get("batched_loops", {}).items()))
            lines.append(f"| {r['protocol']} | {r['batched_eager_s_per_round']:.3f} | {r['batched_s_per_round']:.3f} | "
                         f"{r['batched_eager_s_per_round'] / r['batched_s_per_round']:.2f}× | "
                         f"{r['batched_eager_peak_mib']:.0f} / {r['batched_peak_mib']:.0f} | "
                         f"{r['graph_vs_eager_max_rel_difference']:.1e} | {loops} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--protocols", nargs="*", help=f"default: all of {[n for n, *_ in PROTOCOLS]}")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--eval-samples", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default=str(HERE / "batched.json"))
    ap.add_argument("--md", default=str(HERE / "batched.md"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from fedbayes.study import load_params
    from fedbayes.engine import pick_device

    p = load_params(args.params, scale="paper")
    device = pick_device(args.device)
    wanted = args.protocols or [n for n, *_ in PROTOCOLS]
    out = Path(args.json)
    rows = {r["protocol"]: r for r in json.loads(out.read_text())} if out.exists() else {}
    spec = {n: (e, m, ch) for n, e, m, ch, _ in PROTOCOLS}
    for name in wanted:                      # in the order given (the most wanted first on a short lease)
        base, _, other = name.partition("@")  # PROTOCOL@EXPERIMENT: the protocol on another experiment
        if base in spec:
            experiment, method, changes = spec[base]
            experiment = other or experiment
        elif other:                           # METHOD@EXPERIMENT: any method of the experiment, its params.yaml point
            experiment, method, changes = other, base, {}
            if "burn_in" in (p["experiments"][experiment]["methods"].get(method) or {}) or \
                    "burn_in" in (p.get("methods", {}).get(method) or {}):
                changes = {"burn_in": args.warmup}    # the warm-up rounds burn in; the timed ones are the method's own
        else:
            sys.exit(f"{name}: not a roofline protocol ({', '.join(spec)}); name another method as METHOD@EXPERIMENT")
        t0 = time.perf_counter()
        try:
            rows[name] = measure(p, name, experiment, method, changes, args, device)
        except Exception as err:  # noqa: BLE001  (one protocol's failure is recorded, the others still run)
            print(f"{name}: FAILED {type(err).__name__}: {err}", flush=True)
            continue
        r = rows[name]
        print(f"{name:12s} one by one {r['sequential_s_per_round']:.3f} s/round, together "
              f"{r['batched_s_per_round'] if r['batches'] else '-'} (max |diff| {r['max_rel_difference']}), "
              f"together eager {r['batched_eager_s_per_round']} (graph vs eager {r['graph_vs_eager_max_rel_difference']}), "
              f"loops {r['batched_loops']}, "
              f"{time.perf_counter() - t0:.0f} s", flush=True)
        order = [n for n, *_ in PROTOCOLS]
        rank = lambda p: order.index(p) if p in order else len(order)  # noqa: E731
        ordered = sorted(rows.values(), key=lambda r: (rank(r["protocol"].partition("@")[0]), r["protocol"]))
        out.write_text(json.dumps(ordered, indent=1) + "\n")
        if args.md:
            Path(args.md).write_text(markdown(ordered))


if __name__ == "__main__":
    main()
