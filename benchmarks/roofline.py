"""Roofline of every protocol: seconds per round against the FLOP floor of the passes it makes.

For each protocol of the tables, a short run of the real engine on the real experiment configuration
(params.yaml at paper scale, the selected or first sweep point; a warm-up round, then ``--rounds``
measured rounds) reports seconds per round split into

* local  : the clients' local training (minibatch steps, incl. IVON's sampling and FOLA's Fisher sum);
* extra  : method-specific work inside the client update, timed separately (FedLap-Cov's diagonal GGN);
* server : the server update (FedLap-Func's Adam on the memory points, FedBE's distillation, …);
* local acc: FOLA-protocol local accuracy (every client model on the test set; not in time_s);
* eval   : one evaluation of every prediction variant (test + OOD); a sampled predictive runs with at most
           ``--eval-samples`` networks and is scaled linearly to the configured ``pred_samples``;

next to its floor: the multiply-adds of the forward passes the method makes (counted per call from the
model's layer shapes and the rows passed; a pass under autograd counts 3× for forward + backward; the
diagonal GGN's C backward passes and its per-layer product are added where it runs) × 2 FLOPs, at this
machine's one-thread fp32 matmul rate (a large ``torch.mm``, measured here). Elementwise work (optimiser
updates, sampling) has no FLOP floor: it shows as the ratio above 1. Timers wrap the method's calls and
the model's forward; no number a run computes changes.

    python benchmarks/roofline.py                                  # every protocol, 1 + 2 rounds each
    python benchmarks/roofline.py --protocols bayesadmm fedivon --label before --md ''
    python benchmarks/roofline.py --baseline before               # table with a "before" column

Writes the table to benchmarks/roofline.md (``--md``) and one JSON line per protocol to
benchmarks/results.jsonl (``--out``). Not a timed test: take numbers on a quiet machine.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import platform
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
from torch import nn

# (name, experiment, method, hyperparameter changes for the measurement, note)
PROTOCOLS = [
    ("fedavg", "fmnist10-dir-k10", "fedavg", {}, ""),
    ("fedprox", "fmnist10-dir-k10", "fedprox", {}, ""),
    ("fedlap", "fmnist10-dir-k10", "fedlap", {}, ""),
    ("fedlap_cov", "fmnist10-dir-k10", "fedlap_cov", {}, "extra = diagonal GGN"),
    ("fedlap_func", "fmnist10-dir-k10", "fedlap_func", {}, "server = Adam on the memory points"),
    ("bayesadmm", "fmnist10-dir-k10", "bayesadmm", {}, "local = IVON (sampling, update)"),
    ("fedivon", "fmnist-shards-k200", "fedivon", {}, "CNN substitute; local = IVON"),
    ("fedep_i", "fmnist10-dir-k10", "fedep_i", {"burn_in": 1}, "burn-in 1 round (the warm-up), then EP rounds"),
    ("fola", "fmnist10-labeldir0.01-k20", "fola", {}, "local incl. Fisher sum; + local accuracy"),
    ("scaffold", "fmnist10-labeldir0.01-k20", "scaffold", {}, "+ local accuracy"),
    ("fedbe", "fmnist10-labeldir0.01-k20", "fedbe", {}, "server = teachers + distillation; + local accuracy"),
]


def split_macs(module: nn.Module, in_shape: tuple[int, ...]) -> tuple[int, int, int]:
    """(Linear, Conv2d, first layer's) multiply-adds of one row's forward pass, from the layers' shapes
    (forward hooks, in the order the layers run)."""
    lin = conv = 0
    first = None

    def hook(mod, inputs, output):
        nonlocal lin, conv, first
        if isinstance(mod, nn.Linear):
            n = mod.in_features * mod.out_features * (output.numel() // output.shape[-1])
            lin += n
        else:
            n = output.numel() * (mod.in_channels // mod.groups) * math.prod(mod.kernel_size)
            conv += n
        first = n if first is None else first

    handles = [m.register_forward_hook(hook) for m in module.modules() if isinstance(m, (nn.Linear, nn.Conv2d))]
    was = module.training
    try:
        with torch.random.fork_rng(), torch.no_grad():
            module.eval()
            module(torch.zeros(1, *in_shape))
    finally:
        module.train(was)
        for h in handles:
            h.remove()
    return lin, conv, first or 0


def forward_macs(module: nn.Module, in_shape: tuple[int, ...]) -> int:
    """Multiply-adds of one row's forward pass through the Linear and Conv layers (weights only; bias
    adds, activations, pooling and normalisation not counted), from the shapes a forward hook sees."""
    lin, conv, _ = split_macs(module, in_shape)
    return lin + conv


def matmul_gflops(n: int = 2048, reps: int = 3) -> float:
    """Best-of-``reps`` fp32 GFLOP/s of an n×n×n torch.mm on the current thread setting."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    best = math.inf
    for _ in range(reps):
        t = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t)
    return 2 * n ** 3 / best / 1e9


class Meter:
    """Seconds and multiply-adds per (round, phase); the phase is set by the wrappers around the method."""

    def __init__(self):
        self.rnd, self.phase = 0, "eval"
        self.sec = defaultdict(float)
        self.macs = defaultdict(float)
        self.steps = defaultdict(int)         # round → local minibatch steps (E · ⌈N_k / B⌉ summed over clients)

    @contextlib.contextmanager
    def timing(self, phase: str):
        prev, self.phase = self.phase, phase
        t = time.perf_counter()
        try:
            yield
        finally:
            self.sec[(self.rnd, phase)] += time.perf_counter() - t
            self.phase = prev

    def per_round(self, rounds, phase: str, table=None) -> float:
        table = self.sec if table is None else table
        return float(np.mean([table.get((r, phase), 0.0) for r in rounds]))


def instrument(meter: Meter, macs_per_row: int, n_classes: int):
    """Patch the engine's model class, the method's entry points and the known extra passes with meters.
    Returns a function that undoes it."""
    from fedbayes.engine import loop
    from fedbayes.methods.fedlap_cov import algorithm as fedlap
    from fedbayes.methods.core.local import local_steps
    from fedbayes.models import FlatModel

    class CountingFlatModel(FlatModel):
        def __call__(self, w, x):
            passes = 3 if torch.is_grad_enabled() and w.requires_grad else 1
            meter.macs[(meter.rnd, meter.phase)] += passes * macs_per_row * x.shape[0]
            return super().__call__(w, x)

    build_method = loop.build_method

    def counting_build_method(spec, fm, hp, sizes, context=None):
        m = build_method(spec, fm, hp, sizes, context)
        hp = m.hp
        broadcast, client_update, server_update, predict = m.broadcast, m.client_update, m.server_update, m.predict_logits

        def b(server, rnd):
            meter.rnd = rnd
            return broadcast(server, rnd)

        def c(k, down, state, data, *a, **kw):
            meter.steps[meter.rnd] += local_steps(len(data), hp.get("batch_size", 32), hp.get("local_epochs", 1))
            with meter.timing("local"):
                return client_update(k, down, state, data, *a, **kw)

        def s(*a, **k):
            with meter.timing("server"):
                return server_update(*a, **k)

        def p(server, x, variant="", seed=0):
            with meter.timing(f"eval:{variant}"):
                return predict(server, x, variant=variant, seed=seed)

        m.broadcast, m.client_update, m.server_update, m.predict_logits = b, c, s, p
        return m

    diag_ggn, local_accuracy = fedlap.diag_ggn, loop.local_accuracy

    def timed_ggn(fm, w, x, *a, **k):
        with meter.timing("extra"):
            # one forward, C backward passes to the layer outputs and the per-layer product Σ g² a² (each
            # about one forward's multiply-adds): the model counts the forward under autograd as 3, add C − 1
            meter.macs[(meter.rnd, "extra")] += (n_classes - 1) * macs_per_row * x.shape[0]
            return diag_ggn(fm, w, x, *a, **k)

    def timed_local_accuracy(*a, **k):
        with meter.timing("local_acc"):
            return local_accuracy(*a, **k)

    saved = {(loop, "FlatModel"): loop.FlatModel, (loop, "build_method"): build_method,
             (fedlap, "diag_ggn"): diag_ggn, (loop, "local_accuracy"): local_accuracy}
    loop.FlatModel, loop.build_method = CountingFlatModel, counting_build_method
    fedlap.diag_ggn, loop.local_accuracy = timed_ggn, timed_local_accuracy

    def undo():
        for (mod, name), val in saved.items():
            setattr(mod, name, val)
    return undo


def pick_point(p: dict, experiment: str, method: str) -> str:
    from fedbayes.study import sweep_points

    points = list(sweep_points(p, experiment, method))
    sel = Path(p["paths"]["runs"]) / experiment / method / "selected.json"
    if sel.exists():
        chosen = json.loads(sel.read_text()).get("point")
        if chosen in points:
            return chosen
    return points[0]


def make_data(p: dict, experiment: str, cfg: dict, device):
    """The run's tensors as the training CLI builds them (load_run_data), on the seed-0 partition."""
    from fedbayes import data as ds
    from fedbayes.study import experiment_config
    from fedbayes.engine import seeds as S
    from fedbayes.engine.data import load_run_data
    from fedbayes.partition import make_partition, subsample

    e = experiment_config(p, experiment)
    y = ds.load(e["dataset"], root=p["paths"]["raw"]).y_train
    rng = S.rng(0, S.PARTITION)
    pool = subsample(len(y), e.get("subsample", 1.0), rng)
    scheme = dict(e["partition"])
    parts = [pool[ix] for ix in make_partition(y[pool], e["clients"], scheme.pop("scheme"), rng, **scheme)]
    return load_run_data(p["paths"]["raw"], cfg, (parts, {}), device)[0]


def measure(p: dict, name: str, experiment: str, method: str, changes: dict, args) -> dict:
    from fedbayes.study import run_config
    from fedbayes.engine import pick_device, run_federated
    from fedbayes.study.model import RunSpec
    from fedbayes.models import build_model

    point = pick_point(p, experiment, method)
    cfg = run_config(p, experiment, method, 0, point)
    hp = cfg["hparams"]
    hp.update(changes)
    if args.local_epochs:                      # debugging only: shrink the local work
        hp["local_epochs"] = args.local_epochs
        hp.update({k: min(hp[k], 20) for k in ("server_iters", "server_epochs") if k in hp})
    rounds = args.warmup + args.rounds
    cfg["rounds"], cfg["save_rounds"] = rounds, [rounds]
    full_samples = int(hp.get("pred_samples", 0) or 0)
    if full_samples:
        hp["pred_samples"] = min(full_samples, args.eval_samples)
    device = pick_device(p.get("device", "auto"))
    data = make_data(p, experiment, cfg, device)
    if args.max_test:                          # debugging only
        data.x_test, data.y_test = data.x_test[:args.max_test], data.y_test[:args.max_test]
        data.x_ood = None if data.x_ood is None else data.x_ood[:args.max_test]
    module = build_model(cfg["model"]["name"], tuple(data.x_train.shape[1:]), data.n_classes,
                         **{k: v for k, v in cfg["model"].items() if k != "name"})
    macs = forward_macs(module, tuple(data.x_train.shape[1:]))
    n_params = sum(q.numel() for q in module.parameters())

    meter = Meter()
    undo = instrument(meter, macs, data.n_classes)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            hist = run_federated(RunSpec.from_config(cfg), data, tmp, device, log=lambda m: None)
    finally:
        undo()
    measured = list(range(args.warmup + 1, rounds + 1))
    rows = [h for h in hist if h["round"] in measured]
    train_s = float(np.mean([h["time_s"] for h in rows]))
    local = meter.per_round(measured, "local")
    extra = meter.per_round(measured, "extra")
    server = meter.per_round(measured, "server")
    local_acc = meter.per_round(measured, "local_acc")
    rate = args.gflops * 1e9
    floor_train = sum(meter.per_round(measured, ph, meter.macs) for ph in ("local", "extra", "server")) * 2 / rate
    # one evaluation of every variant: the mean over the rounds where that variant ran, sampled ones scaled
    eval_s = eval_floor = 0.0
    variants = sorted({ph for (_, ph) in meter.sec if ph.startswith("eval:")})
    for ph in variants:
        rs = [r for (r, q) in meter.sec if q == ph and r > 0] or [r for (r, q) in meter.sec if q == ph]
        scale = full_samples / hp["pred_samples"] if full_samples and _is_sampled(method, ph[5:]) else 1.0
        eval_s += scale * float(np.mean([meter.sec[(r, ph)] for r in rs]))
        eval_floor += scale * float(np.mean([meter.macs.get((r, ph), 0.0) for r in rs])) * 2 / rate
    steps = float(np.mean([meter.steps[r] for r in measured]))
    return {"benchmark": "roofline", "label": args.label, "protocol": name, "experiment": experiment, "method": method,
            "point": point, "changes": changes, "model": cfg["model"]["name"], "params": n_params, "macs_per_row": macs,
            "clients_per_round": int(rows[0]["clients"]), "local_epochs": hp.get("local_epochs"),
            "batch_size": hp["batch_size"], "approx_local_steps": round(steps),
            "rounds_measured": len(measured), "warmup_rounds": args.warmup,
            "train_s_per_round": round(train_s, 4), "local_s": round(local - extra, 4), "extra_s": round(extra, 4),
            "server_s": round(server, 4), "local_acc_s": round(local_acc, 4),
            "floor_train_s": round(floor_train, 4), "ratio_train": round(train_s / floor_train, 2) if floor_train else None,
            "eval_s": round(eval_s, 4), "eval_variants": [v[5:] for v in variants],
            "pred_samples": full_samples or None, "pred_samples_run": hp.get("pred_samples") if full_samples else None,
            "floor_eval_s": round(eval_floor, 4), "ratio_eval": round(eval_s / eval_floor, 2) if eval_floor else None,
            "gflops": round(args.gflops, 1), "threads": torch.get_num_threads(), "torch": torch.__version__,
            "time": datetime.datetime.now().isoformat(timespec="seconds")}


def _is_sampled(method: str, variant: str) -> bool:
    from fedbayes.methods import method_specs

    return method_specs()[method].variants.get(variant) == "samples"


def cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        return next(line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name"))
    except Exception:
        return platform.processor() or platform.machine()


def markdown(results: list[dict], args, baseline: dict[str, dict], load_start: list[str]) -> str:
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else ["?"]
    lines = [
        "# Roofline: seconds per round against the FLOP floor",
        "",
        f"- machine: {cpu_name()}, {torch.get_num_threads()} thread(s); torch {torch.__version__}; "
        f"one-thread fp32 matmul {args.gflops:.1f} GFLOP/s (2048³ torch.mm; each row's own in its GFLOP/s column)",
        f"- date: {datetime.datetime.now().isoformat(timespec='minutes')}; load average at the end {' '.join(load)}",
        f"- command: `{' '.join(['python'] + sys.argv)}`",
        ("- each row: its JSON line's warm-up and measured rounds" if args.render else
         f"- {args.warmup} warm-up round(s), then {args.rounds} measured") + "; seconds per round are the measured "
        "rounds' mean; seed 0; the selected sweep point (results/runs/…/selected.json) where one exists, else the first",
        "- train = the engine's time_s (clients + server); floor = multiply-adds of the passes made × 2 / matmul rate "
        "(forward + backward = 3 forwards); eval = one evaluation of every variant (test + OOD), sampled "
        "predictives scaled from the networks run to pred_samples",
    ]
    if args.render:
        lines.append(f"- rendered from the `{args.render}` lines of the JSON-lines file (one run each; its settings, "
                     "rounds and load are in its line), not measured by this command")
    if args.local_epochs or args.max_test:
        lines.append(f"- **debug scale**: every protocol's local epochs set to {args.local_epochs} (server iterations and "
                     f"epochs capped at 20), test/OOD rows {args.max_test or 'all'}: per-step ratios hold, seconds per "
                     "round do not")
    if float(load_start[0]) > 1.5:
        lines.append(f"- **busy machine** (load average {load_start[0]} at the start): timings and ratios are not "
                     "valid; rerun when the load is below ~1.5")
    lines.append("")
    head = ["protocol", "experiment", "model (params)", "steps/round", "local s", "extra s", "server s",
            "train s/round", "floor s", "ratio"]
    if baseline:
        head += ["before s/round", "before ratio"]
    head += ["local acc s", "eval s (variants)", "eval floor s", "eval ratio", "GFLOP/s", "note"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    notes = {n: note for n, *_, note in PROTOCOLS}
    for r in results:
        row = [r["protocol"], r["experiment"], f"{r['model']} ({r['params']:,})", str(r["approx_local_steps"]),
               f"{r['local_s']:.2f}", f"{r['extra_s']:.2f}", f"{r['server_s']:.2f}", f"{r['train_s_per_round']:.2f}",
               f"{r['floor_train_s']:.2f}", f"{r['ratio_train']:.1f}×" if r["ratio_train"] else "–"]
        if baseline:
            b = baseline.get(r["protocol"])
            row += [f"{b['train_s_per_round']:.2f}" if b else "–", f"{b['ratio_train']:.1f}×" if b else "–"]
        ev = ", ".join(v or "own" for v in r["eval_variants"])
        if r["pred_samples"]:
            ev += f"; {r['pred_samples']} samples (ran {r['pred_samples_run']})"
        row += [f"{r['local_acc_s']:.2f}" if r["local_acc_s"] else "–", f"{r['eval_s']:.2f} ({ev})",
                f"{r['floor_eval_s']:.2f}", f"{r['ratio_eval']:.1f}×" if r["ratio_eval"] else "–", f"{r['gflops']:.1f}",
                notes.get(r["protocol"], "")]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--protocols", nargs="*", help=f"default: all of {[n for n, *_ in PROTOCOLS]}")
    ap.add_argument("--rounds", type=int, default=2, help="measured rounds (after the warm-up)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--eval-samples", type=int, default=8, help="networks a sampled predictive runs here (scaled up)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--label", default="current", help="tag of the JSON lines (e.g. before / after)")
    ap.add_argument("--baseline", default=None, help="label in --out whose latest rows fill a 'before' column")
    ap.add_argument("--md", default="benchmarks/roofline.md", help="markdown table ('' = none)")
    ap.add_argument("--out", default="benchmarks/results.jsonl", help="JSON lines appended here ('' = none)")
    ap.add_argument("--render", default=None, metavar="LABEL",
                    help="run nothing: write --md from the latest --out lines of LABEL (one per protocol)")
    ap.add_argument("--local-epochs", type=int, default=None, help="debugging: override every protocol's E (and cap server iterations/epochs at 20)")
    ap.add_argument("--max-test", type=int, default=None, help="debugging: evaluate on this many test/OOD rows")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    from fedbayes.study import load_params

    p = load_params(args.params, scale="paper")
    load_start = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else ["0"]
    args.gflops = matmul_gflops(reps=1 if args.render else 3)
    print(f"fp32 matmul, {torch.get_num_threads()} thread(s): {args.gflops:.1f} GFLOP/s")
    wanted = args.protocols or [n for n, *_ in PROTOCOLS]
    results = []
    if args.render:
        latest = {rec["protocol"]: rec for rec in map(json.loads, Path(args.out).read_text().splitlines())
                  if rec.get("benchmark") == "roofline" and rec.get("label") == args.render}
        results = [latest[n] for n in wanted if n in latest]
        args.out = "" if not args.baseline else args.out
    for name, experiment, method, changes, _ in PROTOCOLS:
        if args.render or name not in wanted:
            continue
        t0 = time.perf_counter()
        r = measure(p, name, experiment, method, changes, args)
        results.append(r)
        print(f"{name:12s} train {r['train_s_per_round']:7.2f} s/round (local {r['local_s']:.2f}, extra {r['extra_s']:.2f}, "
              f"server {r['server_s']:.2f}) floor {r['floor_train_s']:.2f} → {r['ratio_train']}×; local acc "
              f"{r['local_acc_s']:.2f} s; eval {r['eval_s']:.2f} s floor {r['floor_eval_s']:.2f} → {r['ratio_eval']}×"
              f"  ({time.perf_counter() - t0:.0f} s)", flush=True)
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps(r) + "\n")
    baseline = {}
    if args.baseline and args.out and Path(args.out).exists():
        for line in Path(args.out).read_text().splitlines():
            rec = json.loads(line)
            if rec.get("benchmark") == "roofline" and rec.get("label") == args.baseline:
                baseline[rec["protocol"]] = rec          # the latest line of each protocol wins
    if args.md:
        Path(args.md).write_text(markdown(results, args, baseline, load_start))
        print(f"wrote {args.md}")


if __name__ == "__main__":
    main()
