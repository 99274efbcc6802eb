"""What the whole params.yaml suite costs at paper scale: one row per (experiment, method) that params.yaml
runs, each measured on stand-in data of the real size, with the experiment's real model, client count,
batch size, local epochs, participation and every prediction variant.

    taskset -c 0 python benchmarks/suite_cost.py --resume                        # everything (hours)
    taskset -c 0 python benchmarks/suite_cost.py --resume --experiments fmnist10-iid-k10 --methods fedavg
    python benchmarks/suite_cost.py --report-only                                # rewrite the .md from the JSON

How a row is measured (written into benchmarks/suite_cost.md too):

* Data: ``fedbayes.data.standin`` at size ``paper`` (the real file formats and sizes, generated once under
  ``data/raw-stand-in/paper/.source/``), fetched and read by the real fetch/load code; the partition of
  seed 0 is made by the real ``fedbayes.engine.partitions.build_partition`` on it.
* Training: ``fedbayes.engine.run_federated`` on the run's own configuration (``run_config``, seed 0, the
  first sweep point) for 2 rounds; the second round is reported. To stay within one core, only the first
  ``--clients-cap`` clients that round 2 of the real run samples are trained: the partition handed to the
  engine is those clients' parts, with participation 1.0 so all of them train in both rounds. The time of
  the clients' updates (``Method.client_update``, timed around the call) is scaled by
  (points the real round trains) / (points the measured clients hold); the rest of the round (server
  step, loop) by (clients a round) / (clients measured). A row whose round trains every client is
  measured in full.
* Evaluation: the engine's ``predict`` is timed for each prediction variant on the first ``--test-cap``
  test (and OOD) points and scaled linearly to the full test and OOD sets; evaluation over the whole run
  sums each variant's cost over the rounds it is evaluated in (``evaluated_variants``: eval_every,
  mc_every, mc_round0, mc_window of the full configuration).
* Runs: as the DAG trains them (workflow/rules/track.smk ``method_runs``): every swept point on the
  selection seeds and the selected point on every other seed. Points differing in ``local_epochs`` are
  scaled by their epochs (client part only); the selected point (unknown before the sweep) is costed as
  the mean over the grid.

Each row runs in a child process (``--row``): its peak RSS is its own, and a crash is recorded as the
row's error. ``--resume`` keeps the rows already in the JSON (``--retry`` re-measures those that failed
or hit ``--max-seconds``).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
STAND_IN_ROOT = "data/raw-stand-in/paper"
SLURM_PROFILE = REPO / "workflow/profiles/slurm/config.yaml"
WORKERS = (8, 32, 128)


# --------------------------------------------------------------------------------------------- the suite

def suite_rows(p: dict) -> list[tuple[str, str]]:
    from fedbayes.study import experiment_config

    return [(e, m) for e in p["experiments"] for m in experiment_config(p, e)["methods"]]


def dag_runs(p: dict, e: str, m: str) -> dict:
    """The runs the DAG trains for (e, m), as track.smk's method_runs: swept points × selection seeds,
    plus the selected point (unknown before the sweep: written SELECTED) on every seed."""
    from fedbayes.study import method_hparams, seeds, selection_seeds, sweep_points, swept_points

    swept = list(swept_points(p, e, m))
    sel_seeds = selection_seeds(p, e, m)
    all_seeds = seeds(p, e, m)
    runs = {(pt, s) for pt in swept for s in sel_seeds}
    extra = [s for s in all_seeds if not (swept and s in sel_seeds)]   # seeds where only the selected point runs
    grid = sweep_points(p, e, m)
    epochs = {pt: int(method_hparams(p, e, m, pt).get("local_epochs", 1)) for pt in grid}
    return {"n": len(runs) + len(extra), "swept": len(runs), "selected_only": len(extra),
            "seeds": all_seeds, "selection_seeds": sel_seeds, "first_point": next(iter(grid)),
            "epochs": epochs, "swept_points": swept}


# ------------------------------------------------------------------------------------------ the floor

def throughput(reps: int = 3) -> dict:
    """One-thread fp32 GFLOP/s of the two kernels a model's passes are made of, best of ``reps``: a 2048³
    ``torch.mm`` (Linear layers) and a 3×3 conv2d, 64→64 channels on 32×32 maps, batch 32 (Conv2d layers)."""
    import torch

    def best(f, flops):
        f()
        t_min = float("inf")
        for _ in range(reps):
            t = time.perf_counter()
            f()
            t_min = min(t_min, time.perf_counter() - t)
        return flops / t_min / 1e9

    with torch.no_grad():
        a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
        mm = best(lambda: torch.mm(a, b), 2 * 2048 ** 3)
        x, w = torch.randn(32, 64, 32, 32), torch.randn(64, 64, 3, 3)
        conv = best(lambda: torch.nn.functional.conv2d(x, w, padding=1), 2 * 32 * 64 * 32 * 32 * 64 * 9)
    return {"matmul_gflops": mm, "conv_gflops": conv, "threads": torch.get_num_threads(),
            "loadavg": Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else None}


def split_macs(module, in_shape) -> tuple[int, int, int]:
    """(Linear, Conv2d, first layer's) multiply-adds of one row's forward pass (roofline.split_macs: the
    layers' shapes, seen by forward hooks)."""
    here = str(Path(__file__).resolve().parent)   # benchmarks/, also when this module is imported by a test
    if here not in sys.path:
        sys.path.insert(0, here)
    from roofline import split_macs as layer_macs   # (lazy: torch)

    return layer_macs(module, in_shape)


# Passes (in units of one forward of one point) a method makes per client point per round beyond local
# training, from the algorithm: curvature, sampled Fisher, offline Fisher. A forward + backward costs
# 3 − f1 forwards (f1: the first layer's share of the multiply-adds, whose input gradient no pass needs).
# Elementwise work (optimiser, sampling, Fisher accumulation from the step's own gradient) has no FLOP
# floor. Each entry: passes(hp, C, mac) with mac = {"lin", "conv", "first"} multiply-adds of one forward.
def _fb(mac: dict) -> float:
    return 3 - mac["first"] / (mac["lin"] + mac["conv"])


def _ggn(hp: dict, C: int, mac: dict) -> float:
    """FedLap-Cov's diagonal GGN: 1 forward, C backward passes to the layers' outputs, the per-layer product
    (once for Linear layers, Σ_c g² first; per class for Conv2d layers: per-example products)."""
    t = mac["lin"] + mac["conv"]
    return 1 + C * (1 - mac["first"] / t) + (mac["lin"] + C * mac["conv"]) / t


EXTRA_CLIENT = {
    "fedlap_cov": _ggn,
    "fedcurv": lambda hp, C, mac: _fb(mac),                                  # offline Fisher over the client's data
    "fedep_l": lambda hp, C, mac: int(hp.get("laplace_epochs", 5)) * (1 + _fb(mac)),   # sampled Fisher
    "fedsep_l": lambda hp, C, mac: int(hp.get("laplace_epochs", 5)) * (1 + _fb(mac)),
    "fedep_v": lambda hp, C, mac: int(hp.get("ngvi_epochs", 5)) * int(hp.get("ngvi_samples", 1)) * (1 + _fb(mac)),
    "fedsep_v": lambda hp, C, mac: int(hp.get("ngvi_epochs", 5)) * int(hp.get("ngvi_samples", 1)) * (1 + _fb(mac)),
}
BURN_IN_METHODS = ("fedpa", "fedep_i", "fedep_m", "fedep_l", "fedep_v", "fedsep_i", "fedsep_m", "fedsep_l", "fedsep_v")


def server_passes(m: str, hp: dict, C: int, row: dict, mac: dict) -> float:
    """Forward passes (points × passes) of the server step a round: FedBE's teachers and distillation on
    the held-out unlabeled share, FedLap-Func's Adam on the memory points (every client holding every class)."""
    if m == "fedbe":
        U = row["points_per_round"] * float(hp.get("server_unlabeled", 0.0))   # the partition's share held out
        teachers = 1 + int(hp.get("teacher_samples", 0)) + (row["clients_per_round"] if hp.get("teacher_clients") else 0)
        return U * (teachers + _fb(mac) * int(hp.get("server_epochs", 0)))
    if m == "fedlap_func":
        M = int(hp.get("memory_per_class", 0)) * C * row["clients_per_round"]
        return _fb(mac) * M * int(hp.get("server_iters", 0))
    return 0.0


def floor_seconds(row: dict, hp: dict, fwd_s: float, pred_samples: int, mac: dict) -> dict:
    """The round's floor at ``fwd_s`` seconds a forward of one point: training (local passes, the method's
    extra and server passes) and evaluation (each variant's forward passes over test + OOD, a sampled
    predictive ``pred_samples`` times, on the rounds the run evaluates it), averaged over the run's rounds."""
    m, C, R = row["method"], int(row["n_classes"]), int(row["rounds"])
    E = float(hp.get("local_epochs", 1) or 1) * float(hp.get("mc_samples", 1) or 1)
    extra = EXTRA_CLIENT[m](hp, C, mac) if m in EXTRA_CLIENT else 0.0
    b = int(row.get("burn_in") or 0) if m in BURN_IN_METHODS else 0
    per_point = _fb(mac) * E + extra * (R - b) / R      # burn-in rounds are FedAvg-M rounds: no extra passes
    share = float(hp.get("server_unlabeled", 0.0) or 0.0) if m == "fedbe" else 0.0   # held out of the clients
    train = (per_point * row["points_per_round"] * (1 - share) + server_passes(m, hp, C, row, mac) * (R - b) / R) * fwd_s
    n_eval = row["test_size"] + row["ood_size"]
    ev = 0.0
    for v, n in (row.get("evals_per_variant") or {}).items():
        kind = (row["eval_variants"].get(v) or {}).get("kind")
        S = pred_samples if kind == "samples" else 1
        ev += n * n_eval * S * fwd_s
    if b and pred_samples:   # before the burn-in ends a sampled variant is the point network (one pass)
        for v, d in row["eval_variants"].items():
            if d.get("kind") == "samples":
                ev -= min(b, (row.get("evals_per_variant") or {}).get(v, 0)) * n_eval * (pred_samples - 1) * fwd_s
    return {"train_s": train, "eval_s": ev / R, "passes_per_point": per_point}


# ------------------------------------------------------------------------------------------ one row

def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def fit_clients(points: list[int], seconds: list[float], clients: int, round_points: float) -> dict:
    """A client update's time as fixed + per-point cost, t = a + b·n, through two clients of different sizes;
    a round of ``clients`` clients holding ``round_points`` points then costs clients·a + b·round_points
    (scaling the measured time by points alone multiplies the fixed cost of tiny clients)."""
    (n0, n1), (t0, t1) = points, seconds
    if n1 == n0:
        # one size (every client of cifar100-pachinko-k500 holds 100 points): no line to fit. Round 2's first
        # client still pays one-time costs (a method's first post-burn-in step: 10.7 against 5.0 s on the
        # H200), so each client costs the second one's time
        a, b = 0.0, t1 / max(n1, 1)
    else:
        b = max(0.0, (t1 - t0) / (n1 - n0))
        a = max(0.0, t0 - b * n0)
    return {"points": [int(n0), int(n1)], "s": [float(t0), float(t1)], "fixed_s": a, "per_point_s": b,
            "round_client_s": clients * a + b * round_points}


def derive_train(r: dict) -> dict:
    """A row's training seconds a round from its raw timings (round 2's client updates and server step; round
    1 for a burn-in): the client part scaled by points, or by the fit through the two clients of round 2 (a
    round costs clients·a + b·its points), the server step by clients a round / clients measured; a burn-in
    row's mean weights its FedAvg-M rounds (round 1) and the rest (round 2). Adds scale_client, client_fit's
    line and train_s_per_round (and the burn-in's parts) to ``r``."""
    client_s, fit = r["round2_client_s"], r.get("client_fit")
    k_pts = r["points_per_round"] / r["points_measured"]
    if fit:
        line = fit_clients(fit["points"], r["client_update_s_each"][-2:], r["clients_per_round"], r["points_per_round"])
        r["client_fit"] = {**line, "full_sizes": fit["full_sizes"]}
        k_pts = line["round_client_s"] / client_s if client_s > 0 else k_pts   # the fit as a factor on round 2's time
    client, other = client_s * k_pts, r["round2_other_s"] * r["scale_other"]   # a round 2 (post-burn-in) round
    r["scale_client"] = k_pts
    if r.get("burn_in"):
        b, R = r["burn_in"], r["rounds"]
        # round 1 (FedAvg-M) trained the same two clients: its own line where there is a fit
        burn_client = fit_clients(fit["points"], r["client_update_s_each"][:2], r["clients_per_round"],
                                  r["points_per_round"])["round_client_s"] if fit else r["burn_in_client_s"] * k_pts
        burn_other = r["burn_in_other_s"] * r["scale_other"]
        r.update(burn_in_train_s_per_round=burn_client + burn_other, post_burn_in_train_s_per_round=client + other)
        # the run's mean training s/round: burn_in rounds of FedAvg-M, the rest EP / FedPA
        client, other = (b * burn_client + (R - b) * client) / R, (b * burn_other + (R - b) * other) / R
    r.update(client_s_per_round=client, other_s_per_round=other, train_s_per_round=client + other)
    return r


def refit(r: dict) -> dict:
    """``derive_train`` again on a row of the JSON (after a change of the fit: --report-only --refit)."""
    return derive_train(r) if r.get("status", "ok") == "ok" else r


def measure_row(args, e: str, m: str) -> dict:
    """Runs in the child process: 2 rounds of (e, m) at paper-scale shapes, clients capped."""
    import numpy as np
    import torch

    torch.set_num_threads(1)
    rates = throughput()   # this process's one-thread matmul/conv rates, just before the row (the floor's)
    from fedbayes.study import experiment_config, load_params, partition_config, run_config, save_rounds, sweep_points
    from fedbayes.data.root import fetch_dataset, open_data_root
    from fedbayes.engine import loop, seeds
    from fedbayes.study.model import RunSpec
    from fedbayes.engine.data import load_run_data
    from fedbayes.engine.partitions import build_partition

    t_start = time.perf_counter()
    p = load_params(args.params, scale="paper")
    ex = experiment_config(p, e)
    root = args.stand_in_root
    for name in filter(None, (ex["dataset"], ex.get("ood"))):
        fetch_dataset(name, root, stand_in="paper")
    open_data_root(root, "paper")
    point = next(iter(sweep_points(p, e, m)))
    full_cfg = run_config(p, e, m, 0, point)
    with tempfile.TemporaryDirectory(prefix="suite_cost_") as tmp:
        t0 = time.perf_counter()
        parts, meta = build_partition(partition_config(p, e, 0), root, e, f"{tmp}/partition.npz")
        t_partition = time.perf_counter() - t0
        sizes = np.array([len(x) for x in parts])
        K = len(parts)
        n_part = max(1, round(full_cfg.get("participation", 1.0) * K))
        picked = np.arange(K) if n_part == K else \
            np.sort(seeds.rng(0, seeds.SAMPLING, 2).choice(K, n_part, replace=False))
        c = min(args.clients_cap, n_part) if args.clients_cap else n_part
        fit = args.pick == "fit" and n_part > 2
        if fit:
            # two sizes for a fit t = a + b·points per client: the round's smallest client (its fixed cost) and
            # its largest, cut to --fit-points points (a client large enough that per-point time dominates)
            c = 2
            order = picked[np.argsort(sizes[picked], kind="stable")]
            chosen = np.array([order[0], order[-1]])
        else:
            chosen = picked[:c] if args.pick == "first" else \
                np.sort(picked[np.argsort(sizes[picked], kind="stable")[:c]])   # --pick smallest: cheaper, same scaling
        used = [parts[k][:args.fit_points] if fit and k == chosen[-1] else parts[k] for k in chosen]
        cfg = copy.deepcopy(full_cfg)
        cfg["participation"] = 1.0
        cfg["rounds"], cfg["save_rounds"] = args.rounds, [args.rounds]
        # FedPA / FedEP / FedSEP train `burn_in` rounds of FedAvg-M first: the measurement's last round is
        # made a post-burn-in round (burn_in = rounds - 1) and its first rounds burn-in ones, so both regimes
        # are timed; the run's cost then weights them by the real burn_in
        burn_in = full_cfg["hparams"].get("burn_in")
        if burn_in is not None and 0 < int(burn_in) < full_cfg["rounds"]:
            cfg["hparams"]["burn_in"] = args.rounds - 1
        t0 = time.perf_counter()
        device = torch.device(args.device) if args.device != "auto" else \
            torch.device("cuda" if torch.cuda.is_available() else "cpu")
        data, _ = load_run_data(root, cfg, (used, meta), device)
        t_load = time.perf_counter() - t0
        full_test, full_ood = len(data.y_test), (0 if data.x_ood is None else len(data.x_ood))
        keep_alive = (data.x_test, data.y_test, data.x_ood)   # the full sets stay in memory (RSS as a run's)
        cap = args.test_cap
        if cap and cap < full_test:
            data.x_test, data.y_test = data.x_test[:cap], data.y_test[:cap]
        if cap and data.x_ood is not None and cap < full_ood:
            data.x_ood = data.x_ood[:cap]
        n_test, n_ood = len(data.y_test), (0 if data.x_ood is None else len(data.x_ood))

        # timers: client updates / server step (wrapped on the method instance), predict per variant
        rec = {"client": [], "client_points": [], "server": [], "predict": [], "rounds": [], "method": None}
        real_build, real_predict = loop.build_method, loop.predict

        def build_method(*a, **k):
            meth = real_build(*a, **k)
            rec["method"] = meth
            for name in ("client_update", "server_update"):
                f = getattr(meth, name)

                def timed(*aa, _f=f, _n=name, **kk):
                    t = time.perf_counter()
                    out = _f(*aa, **kk)
                    dt = time.perf_counter() - t
                    rec["client" if _n == "client_update" else "server"].append(dt)
                    if _n == "client_update":
                        rec["client_points"].append(len(aa[3]))   # progress, read by the parent when the row runs out of time
                        print(f"PROGRESS client {aa[0]} points {len(aa[3])} seconds {dt:.3f}", file=sys.stderr, flush=True)
                    return out
                setattr(meth, name, timed)
            return meth

        def predict(method, server, x, *a, variant="", **k):
            t = time.perf_counter()
            out = real_predict(method, server, x, *a, variant=variant, **k)
            rec["predict"].append({"variant": variant, "n": len(x), "s": time.perf_counter() - t,
                                   "split": "test" if x is data.x_test else "ood"})
            return out

        pts_round_ = float(sizes.sum()) if n_part == K else float(sizes.mean() * n_part)
        print(f"PROGRESS round_points {pts_round_} clients_per_round {n_part} loaded {time.perf_counter() - t_start:.1f} "
              f"measured_points {int(sizes[chosen].sum())} measured_clients {c}", file=sys.stderr, flush=True)

        def log(msg):
            print(msg, file=sys.stderr, flush=True)
            print(f"PROGRESS logged {time.perf_counter() - t_start:.1f}", file=sys.stderr, flush=True)
            if " round " in msg:   # _evaluate's line closes a round's evaluation
                rec["rounds"].append(rec["predict"])
                rec["predict"] = []

        loop.build_method, loop.predict = build_method, predict
        try:
            t0 = time.perf_counter()
            # one client at a time: the fit needs each client's own time, which clients trained together (the
            # batched path, a GPU's default) do not have; on a GPU the row is then an upper bound for a method
            # with a batched form
            hist = loop.run_federated(RunSpec.from_config(cfg), data, f"{tmp}/run", device, log=log,
                                      batch_clients=False)
            t_run = time.perf_counter() - t0
        finally:
            loop.build_method, loop.predict = real_build, real_predict
        # what the run left on disk (checkpoint, posterior, predictions; with the clients capped, the
        # per-client states of the measured clients only, predictions of the capped test/OOD sets)
        disk = {str(q.relative_to(f"{tmp}/run")): q.stat().st_size for q in Path(f"{tmp}/run").rglob("*") if q.is_file()}
        gpu_peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
        del keep_alive
    method = rec["method"]
    last = hist[-1]
    if last.get("round") != args.rounds:
        raise RuntimeError(f"run stopped at round {last.get('round')} (diverged?): {last}")
    pts_trained = sum(len(u) for u in used)
    pts_round = float(sizes.sum()) if n_part == K else float(sizes.mean() * n_part)
    if len(rec["client"]) != c * args.rounds:
        raise RuntimeError(f"{len(rec['client'])} client updates timed, expected {c} a round "
                           "(clients trained together bypass the per-client timer)")
    client_s = sum(rec["client"][-c:])            # round 2's c client updates
    r1_client = sum(rec["client"][:c])
    raw = {"client_update_s_each": rec["client"], "clients_measured": int(c), "clients_per_round": int(n_part),
           "points_per_round": pts_round, "points_measured": pts_trained, "rounds": full_cfg["rounds"],
           "round2_client_s": client_s, "round2_other_s": float(last["time_s"]) - client_s,   # server step + loop
           "scale_other": n_part / c,
           "client_fit": {"points": rec["client_points"][-2:], "full_sizes": [int(sizes[k]) for k in chosen]} if fit else None}
    if cfg["hparams"].get("burn_in") != full_cfg["hparams"].get("burn_in"):
        raw.update(burn_in=int(full_cfg["hparams"]["burn_in"]), burn_in_client_s=r1_client,
                   burn_in_other_s=float(hist[1]["time_s"]) - r1_client)
    raw = derive_train(raw)
    # evaluation: per variant, round 2 (the last: every variant), scaled to the full test/OOD sets
    def variant_costs(calls):
        out = {}
        for r in calls:
            full = full_test if r["split"] == "test" else full_ood
            d = out.setdefault(r["variant"], {"kind": method.variants.get(r["variant"]), "s_measured": 0.0, "s_full": 0.0})
            d["s_measured"] += r["s"]
            d["s_full"] += r["s"] * full / r["n"]
        return out

    per_variant = variant_costs(rec["rounds"][-1])
    # before the burn-in ends, a method's predictive may be cheaper (FedEP's `mc` is the point network until
    # its posterior exists): those rounds are costed with round 0's evaluation (same, pre-switch state)
    burn = raw.get("burn_in")
    pre_variant = {**per_variant, **variant_costs(rec["rounds"][0])} if burn else per_variant
    predict_measured = sum(d["s_measured"] for d in per_variant.values())
    eval_measured = float(last["eval_s"])
    metrics_s = max(0.0, eval_measured - predict_measured) * full_test / max(1, n_test)
    eval_last_s = sum(d["s_full"] for d in per_variant.values()) + metrics_s
    # the whole run's evaluation: each variant on the rounds the full configuration evaluates it
    R = full_cfg["rounds"]
    full_cfg.setdefault("save_rounds", save_rounds(ex))
    n_evals = {v: 0 for v in per_variant}
    eval_run_s = 0.0
    for rnd in range(0, R + 1):
        vs = loop.evaluated_variants(method, rnd, full_cfg)
        costs = pre_variant if burn and rnd < burn else per_variant
        for v in vs:
            n_evals[v] = n_evals.get(v, 0) + 1
            eval_run_s += costs.get(v, {"s_full": 0.0})["s_full"]
        if vs:
            eval_run_s += metrics_s
    from fedbayes.models import build_model

    module = build_model(full_cfg["model"]["name"], tuple(data.x_train.shape[1:]), data.n_classes,
                         **{k: v for k, v in full_cfg["model"].items() if k != "name"})
    n_params = sum(q.numel() for q in module.parameters())
    full = c == n_part and n_test == full_test and n_ood == full_ood
    return {
        "status": "ok", "experiment": e, "method": m, "point": point, "measured_at": _now(),
        "model": full_cfg["model"]["name"], "n_params": int(n_params),
        "input_shape": list(data.x_train.shape[1:]), "n_classes": int(data.n_classes),
        "dataset": ex["dataset"], "ood": ex.get("ood"), "clients": K, "clients_per_round": int(n_part),
        "client_ids": [int(k) for k in chosen],
        "batch_size": full_cfg["hparams"].get("batch_size"), "local_epochs": full_cfg["hparams"].get("local_epochs"),
        "rounds_measured": args.rounds,
        "round1_time_s": float(hist[1]["time_s"]), "round2_time_s": float(last["time_s"]), **raw,
        "device": device.type, "gpu_name": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "floor_rates": rates, "floor_rates_end": throughput(), "disk_bytes": disk, "gpu_peak_bytes": gpu_peak,
        "test_size": full_test, "ood_size": full_ood, "test_measured": n_test, "ood_measured": n_ood,
        "eval_variants": per_variant, "eval_variants_burn_in": pre_variant if burn else None, "eval_metrics_s": metrics_s,
        "eval_s_last_round": eval_last_s, "eval_s_measured_round2": eval_measured,
        "eval_run_s": eval_run_s, "eval_s_per_round": eval_run_s / R, "evals_per_variant": n_evals,
        "measured_in_full": bool(full),
        "partition_s": t_partition, "load_s": t_load, "run_s": t_run, "child_wall_s": time.perf_counter() - t_start,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "threads": torch.get_num_threads(), "torch": torch.__version__,
        "cpu": platform.processor() or platform.machine(), "affinity": sorted(os.sched_getaffinity(0)),
    }


def child_main(args) -> None:
    e, m = args.row
    try:
        out = measure_row(args, e, m)
    except BaseException as exc:  # noqa: BLE001 — recorded as the row's error
        out = {"status": "error", "experiment": e, "method": m, "measured_at": _now(),
               "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(),
               "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    Path(args.row_out).write_text(json.dumps(out, indent=1))


# ------------------------------------------------------------------------------------- parent: driver

def load_json(path: Path) -> dict:
    if path.exists():
        return json.loads(path.read_text())
    return {"rows": {}}


def save_json(path: Path, doc: dict) -> None:
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def prepare_data(args, p: dict, rows: list[tuple[str, str]]) -> None:
    """Generate (once) and fetch the stand-ins the rows need, in a child of their own, before any row is
    timed: generation (up to minutes for the big sets) counts neither in a row's time nor in its RSS."""
    from fedbayes.study import experiment_config

    names = []
    for e, _ in rows:
        ex = experiment_config(p, e)
        names += [n for n in (ex["dataset"], ex.get("ood")) if n and n not in names]
    if not names:
        return
    print(f"stand-in data (size paper) under {args.stand_in_root}: {', '.join(names)}", flush=True)
    code = ("import sys; from fedbayes.data.root import fetch_dataset\n"
            "for n in sys.argv[2:]: fetch_dataset(n, sys.argv[1], stand_in='paper')")
    subprocess.run([sys.executable, "-c", code, args.stand_in_root, *names], cwd=REPO, check=True,
                   env={**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})


def run_row(args, e: str, m: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="suite_cost_row_") as tmp:
        out = Path(tmp) / "row.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--row", e, m, "--row-out", str(out),
               "--params", args.params, "--stand-in-root", args.stand_in_root, "--clients-cap", str(args.clients_cap),
               "--test-cap", str(args.test_cap), "--rounds", str(args.rounds), "--pick", args.pick,
               "--fit-points", str(args.fit_points),
               "--device", args.device]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, cwd=REPO, env=env, timeout=args.max_seconds, capture_output=True, text=True)
        except subprocess.TimeoutExpired as exc:
            err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
            row = {"status": "skipped", "experiment": e, "method": m, "measured_at": _now(),
                   "error": f"exceeded --max-seconds {args.max_seconds} (child killed after "
                            f"{time.perf_counter() - t0:.0f} s)", "stderr_tail": err[-1500:]}
            # what the child got through: the client updates it finished → a rough training s/round
            done = [ln.split() for ln in err.splitlines() if ln.startswith("PROGRESS client")]
            head = [ln.split() for ln in err.splitlines() if ln.startswith("PROGRESS round_points")]
            if done and head:
                per_point = sum(float(d[6]) for d in done) / sum(int(d[4]) for d in done)
                row["partial"] = {"client_updates_done": [{"client": int(d[2]), "points": int(d[4]),
                                                           "s": float(d[6])} for d in done],
                                  "estimate_train_s_per_round": per_point * float(head[0][2]),
                                  "how": "finished client updates' s/point × points a round (first round's "
                                         "updates include warm-up; no server step, no evaluation)"}
                row["error"] += (f"; {len(done)} client update(s) finished: ≈ "
                                 f"{row['partial']['estimate_train_s_per_round']:,.0f} s/round training (rough)")
            elif head and len(head[0]) > 8:
                # no client update finished: the one under way had run at least since the last evaluation
                logged = [float(ln.split()[2]) for ln in err.splitlines() if ln.startswith("PROGRESS logged")]
                since = args.max_seconds - (logged[-1] if logged else float(head[0][6]))
                bound = since * float(head[0][2]) / int(head[0][8])
                row["partial"] = {"lower_bound_train_s_per_round": bound,
                                  "how": f"no client update finished: the first (of {head[0][8]} points) ran > {since:.0f} s; "
                                         "× points a round / its points"}
                row["error"] += (f"; the first client update ({head[0][8]} points) did not finish in {since:.0f} s: "
                                 f"> {bound:,.0f} s/round training (lower bound)")
            return row
        if out.exists():
            row = json.loads(out.read_text())
        else:
            row = {"status": "error", "experiment": e, "method": m, "measured_at": _now(),
                   "error": f"child exited {proc.returncode} without a result",
                   "traceback": (proc.stderr or "")[-4000:]}
        row["stderr_tail"] = (proc.stderr or "")[-1500:]
        return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--experiments", nargs="*")
    ap.add_argument("--methods", nargs="*")
    ap.add_argument("--clients-cap", type=int, default=2, help="clients trained per round (0: all of the round's)")
    ap.add_argument("--pick", choices=("first", "smallest", "fit"), default="first",
                    help="which of round 2's clients to train: the first --clients-cap (default), the smallest "
                         "(cheaper; per-client overheads are then scaled up by points too), or fit: the smallest "
                         "and the largest cut to --fit-points, fitting fixed + per-point cost per client")
    ap.add_argument("--fit-points", type=int, default=512, help="--pick fit: the large client's points")
    ap.add_argument("--test-cap", type=int, default=1000, help="test/OOD points evaluated (0: all)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds run; the last is reported")
    ap.add_argument("--max-seconds", type=float, default=1800, help="per row: the child is killed after this")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or auto (a GPU's rows: give them their own "
                    "--json/--md, e.g. benchmarks/suite_cost_gpu.json)")
    ap.add_argument("--resume", action="store_true", help="keep the rows already in the JSON")
    ap.add_argument("--retry", action="store_true", help="with --resume: re-measure rows that failed or were skipped")
    ap.add_argument("--redo", action="store_true", help="re-measure the selected rows even where the JSON has them")
    ap.add_argument("--report-only", action="store_true", help="only rewrite the markdown from the JSON")
    ap.add_argument("--refit", action="store_true", help="derive every row's training seconds again from its raw "
                    "timings (after a change of the fit)")
    ap.add_argument("--previous", metavar="JSON", help="with --report-only: record an earlier JSON's total, rows "
                    "below their floor and the core-hours of the rows re-measured since (the 'before' column)")
    ap.add_argument("--merge", nargs="*", metavar="JSON", help="with --report-only: take the rows other JSONs (rows "
                    "measured in parallel into copies) measured later than this one's")
    ap.add_argument("--json", default=str(HERE / "suite_cost.json"))
    ap.add_argument("--md", default=str(HERE / "suite_cost.md"))
    ap.add_argument("--stand-in-root", default=STAND_IN_ROOT)
    ap.add_argument("--row", nargs=2, metavar=("EXPERIMENT", "METHOD"), help=argparse.SUPPRESS)
    ap.add_argument("--row-out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.chdir(REPO)
    if args.row:
        return child_main(args)

    from fedbayes.study import load_params

    p = load_params(args.params, scale="paper")
    jpath = Path(args.json)
    doc = load_json(jpath) if (args.resume or args.report_only) else {"rows": {}}
    for other in args.merge or []:
        for k, r in json.loads(Path(other).read_text())["rows"].items():
            mine = doc["rows"].get(k)
            if r.get("status") == "ok" and (not mine or r.get("measured_at", "") > mine.get("measured_at", "")):
                doc["rows"][k] = r
        save_json(jpath, doc)
    if args.previous:
        record_previous(p, doc, json.loads(Path(args.previous).read_text()))
        save_json(jpath, doc)
    if args.refit:
        doc["rows"] = {k: refit(r) for k, r in doc["rows"].items()}
        save_json(jpath, doc)
    if not args.report_only:
        doc["settings"] = {"clients_cap": args.clients_cap, "test_cap": args.test_cap, "rounds": args.rounds,
                           "max_seconds": args.max_seconds, "stand_in": f"{args.stand_in_root} (size paper)",
                           "host": platform.node(), "cpu": _cpu_name(), "nproc": os.cpu_count(), "device": args.device}
    # the GPU column's JSON gets its own page (seconds on a card, GPU memory, GPU-hours beside the CPU's)
    write = write_gpu_md if doc.get("settings", {}).get("device", "cpu") != "cpu" else write_md
    if not args.report_only:
        todo = [(e, m) for e, m in suite_rows(p)
                if (not args.experiments or e in args.experiments) and (not args.methods or m in args.methods)]
        keep = lambda r: r and not args.redo and (r["status"] == "ok" or not args.retry)  # noqa: E731
        prepare_data(args, p, [(e, m) for e, m in todo if not keep(doc["rows"].get(f"{e}/{m}"))])
        for i, (e, m) in enumerate(todo, 1):
            key = f"{e}/{m}"
            old = doc["rows"].get(key)
            if keep(old):
                print(f"[{i}/{len(todo)}] {key}: kept ({old['status']}, {old.get('measured_at')})", flush=True)
                continue
            print(f"[{i}/{len(todo)}] {key} ...", end=" ", flush=True)
            t0 = time.perf_counter()
            row = run_row(args, e, m)
            row["settings"] = {k: getattr(args, k) for k in ("clients_cap", "test_cap", "rounds", "max_seconds", "pick", "fit_points")}
            doc["rows"][key] = row
            save_json(jpath, doc)
            write(p, doc, Path(args.md))
            if row["status"] == "ok":
                print(f"{row['train_s_per_round']:.2f} s/round train, {row['eval_s_per_round']:.2f} s/round eval, "
                      f"{row['peak_rss_mib']:.0f} MiB ({time.perf_counter() - t0:.0f} s)", flush=True)
            else:
                print(f"{row['status'].upper()}: {row['error']}", flush=True)
    write(p, doc, Path(args.md))
    print(f"wrote {args.md} and {args.json}")


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# ------------------------------------------------------------------------------------- the report

def run_seconds(row: dict, runs: dict) -> tuple[float, float]:
    """(total seconds of all the row's runs, seconds of its longest run), from a measured row."""
    R = row["rounds"]
    ep = runs["epochs"]
    e0 = ep[row["point"]] or 1
    client, other = row["client_s_per_round"], row["other_s_per_round"]   # derive_train: burn-in weighted
    per_run = lambda pt: R * (client * ep[pt] / e0 + other + row["eval_s_per_round"])  # noqa: E731
    swept = [per_run(pt) for pt in runs["swept_points"]]
    selected = sum(per_run(pt) for pt in ep) / len(ep)       # the selected point: mean over the grid
    total = sum(swept) * len(runs["selection_seeds"]) + selected * runs["selected_only"]
    longest = max(swept + [max(per_run(pt) for pt in ep)])
    # the selected point's runs on the other seeds start after the sweep (a checkpoint): two runs in a row
    chain = longest * (2 if swept and runs["selected_only"] else 1)
    return total, chain


def _slurm_profile() -> dict:
    import yaml

    cfg = yaml.safe_load(SLURM_PROFILE.read_text())
    train = (cfg.get("set-resources") or {}).get("train") or {}
    return {"jobs": int(cfg.get("jobs", 0) or 0), "train_runtime_min": train.get("runtime"),
            "train_mem_mb": train.get("mem_mb"), "train_gpu": train.get("gpu")}


def _h(s: float) -> str:
    h = s / 3600
    return f"{h:,.0f}" if h >= 100 else f"{h:,.1f}" if h >= 1 else f"{h:.2f}"


def _dur(s: float) -> str:
    if s >= 86400:
        return f"{s / 86400:,.1f} d"
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    return f"{s / 60:.0f} min"


# the markdown: floors, the planner's summary, rows
REFERENCE_MATMUL_GFLOPS = 110.0   # benchmarks/roofline.md, 2026-11-26 (AMD EPYC, load 0.99): the kept rows' day


def _mean_rates(r: dict) -> dict | None:
    a, b = r.get("floor_rates"), r.get("floor_rates_end")
    if not a:
        return None
    b = b or a
    return {k: (a[k] + b[k]) / 2 for k in ("matmul_gflops", "conv_gflops")}


def reference_rates(doc: dict) -> dict:
    """The rate the kept rows are floored at: the 2026-11-26 matmul rate, and a conv rate in today's
    measured conv/matmul proportion (the median over the rows re-measured with rates)."""
    ratios = sorted(m["conv_gflops"] / m["matmul_gflops"] for m in map(_mean_rates, doc["rows"].values()) if m)
    q = ratios[len(ratios) // 2] if ratios else 1.0
    return {"matmul_gflops": REFERENCE_MATMUL_GFLOPS, "conv_gflops": REFERENCE_MATMUL_GFLOPS * q, "conv_over_matmul": q}


_MACS: dict = {}


def _fwd_seconds(r: dict, rates: dict, model_kw: dict) -> float:
    from fedbayes.models import build_model

    key = (r["model"], tuple(r["input_shape"]), r["n_classes"], json.dumps(model_kw, sort_keys=True))
    if key not in _MACS:
        _MACS[key] = split_macs(build_model(r["model"], tuple(r["input_shape"]), r["n_classes"], **model_kw),
                                tuple(r["input_shape"]))
    lin, conv, _ = _MACS[key]
    return 2 * (lin / (rates["matmul_gflops"] * 1e9) + conv / (rates["conv_gflops"] * 1e9))


def _mac(r: dict, model_kw: dict) -> dict:
    lin, conv, first = _MACS[(r["model"], tuple(r["input_shape"]), r["n_classes"], json.dumps(model_kw, sort_keys=True))]
    return {"lin": lin, "conv": conv, "first": first}


def row_floor(p: dict, r: dict, ref: dict) -> dict:
    """The row's floor per round at its own rates (re-measured rows: measured in its process before and after
    it) and at the reference rates; the measured/floor ratio; the factor that puts the row's seconds at the
    reference rate (1 for the kept rows)."""
    from fedbayes.study import run_config

    cfg = run_config(p, r["experiment"], r["method"], 0, r["point"])
    hp, kw = cfg["hparams"], {k: v for k, v in cfg["model"].items() if k != "name"}
    own = _mean_rates(r)
    ps = int(hp.get("pred_samples") or 0)
    fwd_ref = _fwd_seconds(r, ref, kw)
    f_ref = floor_seconds(r, hp, fwd_ref, ps, _mac(r, kw))
    f_own = floor_seconds(r, hp, _fwd_seconds(r, own, kw), ps, _mac(r, kw)) if own else f_ref
    fl = f_own["train_s"] + f_own["eval_s"]
    k = (f_ref["train_s"] + f_ref["eval_s"]) / fl if own and fl > 0 else 1.0
    return {"hp": hp, "floor_ref": f_ref, "floor_own": f_own, "k": k,
            "ratio": (r["train_s_per_round"] + r["eval_s_per_round"]) / fl if fl > 0 else float("inf"),
            "ratio_train": r["train_s_per_round"] / f_own["train_s"] if f_own["train_s"] > 0 else float("inf"),
            "ratio_eval": r["eval_s_per_round"] / f_own["eval_s"] if f_own["eval_s"] > 0 else float("inf")}


def why_above(r: dict, f: dict) -> str:
    """The work the FLOP floor does not count, named per row where measured/floor > 2 (from the algorithm
    and the model's shapes; not a profile of each row)."""
    if f["ratio"] <= 2:
        return ""
    m, model, P = r["method"], r["model"], r["n_params"]
    out = []
    if P < 1000:
        out.append(f"a {P}-parameter model: the floor is microseconds; Python per step and per round")
    elif model == "mlp":
        out.append("batch-32 matmuls of a small MLP run far below the 2048³ rate; per-step elementwise work")
    elif model == "resnet18_gn":
        out.append("GroupNorm, residual adds and batch-20 convolutions (not in the floor)")
    elif model == "resnet20_gn":
        out.append("16–64-channel convolutions and GroupNorm (not in the floor) below the conv benchmark's rate")
    else:
        out.append("small convolutions, pooling, ReLU and dropout (not in the floor) at batch 32–64")
    if f["ratio_train"] > 2:
        out.append({
            "bayesadmm": "IVON's per-step sampling and Hessian update (elementwise over the parameters)",
            "fedivon": "IVON's per-step sampling and Hessian update (elementwise over the parameters)",
            "fola": "the Fisher accumulation g² every step (elementwise)",
            "fedcurv": "the offline Fisher and the penalty's per-client terms every step (elementwise)",
            "fedlap_cov": "the GGN's per-example products per class (memory-bound on unfolded inputs)",
            "fedlap_func": "the server's Adam on the memory points: small full-batch steps",
            "fedbe": "teacher sampling and batch-128 distillation on the server",
            "fedep_l": "the sampled Fisher's per-example gradients (vmap: batch × parameters materialised and squared)",
            "fedsep_l": "the sampled Fisher's per-example gradients (vmap: batch × parameters materialised and squared)",
            "fedep_v": "the sampled Fisher's per-example gradients at each draw (vmap: batch × parameters materialised)",
            "fedsep_v": "the sampled Fisher's per-example gradients at each draw (vmap: batch × parameters materialised)",
            "feddyn": "the dynamic regulariser's elementwise terms every step",
            "fedpa": "the IASG sample statistics (elementwise)",
        }.get(m, "the optimiser's elementwise update every step"))
    if f["ratio_eval"] > 2 and r["eval_s_per_round"] > 0.2 * r["train_s_per_round"]:
        out.append("evaluation: a sampled predictive draws a parameter vector per sample; metrics on every evaluation")
    return "; ".join(out)


def _gpu_rows(p: dict) -> dict:
    path = HERE / "suite_cost_gpu.json"
    if not path.exists():
        return {}
    d = json.loads(path.read_text())
    return {k: r for k, r in d["rows"].items() if r.get("status") == "ok"}


def write_md(p: dict, doc: dict, path: Path) -> None:
    from fedbayes.study import experiment_config as _ec
    from fedbayes.machine import class_slug, machine_class

    rows = suite_rows(p)
    prof = _slurm_profile()
    ref = reference_rates(doc)
    totals, longest, single, per_exp, floors, gpu_tot = {}, {}, {}, {}, {}, {}
    body = []
    n_missing = below = 0
    gpu = _gpu_rows(p)
    gpu_chain = 0.0
    cards = ", ".join(sorted({r.get("gpu_name") or "?" for r in gpu.values()})) or "none"
    peaks = [r["gpu_peak_bytes"] for r in gpu.values() if r.get("gpu_peak_bytes")]
    for e, m in rows:
        runs = dag_runs(p, e, m)
        ex = _ec(p, e)
        r = doc["rows"].get(f"{e}/{m}")
        if not (r and r["status"] == "ok"):
            n_missing += 1
            state = "not yet measured" if not r else f"**{r['status']}**: {r['error'][:300]}"
            body.append(f"| {e} | {m} | {ex['model']['name']} | – | {max(1, round(ex.get('participation', 1.0) * ex['clients']))} "
                        f"| – | – | – | – | – | {runs['n']} | {ex['rounds']} | – | {state} | |")
            continue
        f = row_floor(p, r, ref)
        floors[(e, m)] = f
        tot, lng = run_seconds(r, runs)
        tot, lng = tot * f["k"], lng * f["k"]   # re-measured rows at the reference rate
        totals[(e, m)], longest[(e, m)] = tot, lng
        single[(e, m)] = lng / (2 if runs["swept"] and runs["selected_only"] else 1)
        per_exp[e] = per_exp.get(e, 0.0) + tot
        if f"{e}/{m}" in gpu:
            gpu_tot[(e, m)], g_chain = run_seconds(gpu[f"{e}/{m}"], runs)
            gpu_chain = max(gpu_chain, g_chain)
        fit = r.get("client_fit")
        if r["measured_in_full"]:
            how = "measured in full"
        elif fit:
            how = (f"train: fit t = {fit['fixed_s'] * 1e3:.0f} ms + {fit['per_point_s'] * 1e3:.2f} ms/point a client through "
                   f"clients of {fit['points'][0]} and {fit['points'][1]} points (the round's smallest and its largest "
                   f"cut from {fit['full_sizes'][1]}), × {r['clients_per_round']} clients, {r['points_per_round']:,.0f} points; "
                   f"server ×{r['scale_other']:.0f}")
        else:
            how = (f"train ×{r['scale_client']:.1f} (clients' points) / ×{r['scale_other']:.0f} (server) from "
                   f"{r['clients_measured']} client{'s' if r['clients_measured'] > 1 else ''} of "
                   f"{r['points_measured']:,} points" + (" (smallest)" if r.get("settings", {}).get("pick") == "smallest" else ""))
        if not fit and not r["measured_in_full"] and r["points_measured"] < r["clients_measured"] * (r["batch_size"] or 32):
            how += " — **not trustworthy**: clients smaller than a batch, their fixed cost scaled by points (not re-measured)"
        if r.get("burn_in"):
            how += (f"; burn-in {r['burn_in']} of {r['rounds']} rounds at {r['burn_in_train_s_per_round']:.0f} s, "
                    f"the rest {r['post_burn_in_train_s_per_round']:.0f} s")
        if r["test_measured"] < r["test_size"] or r["ood_measured"] < r["ood_size"]:
            how += f"; eval ×{r['test_size'] / r['test_measured']:.0f} from {r['test_measured']} test points"
        if _mean_rates(r):
            mr = _mean_rates(r)
            how = (f"**re-measured {r['measured_at'][:10]}** (load {' '.join(r['floor_rates'].get('loadavg') or ['?'])}; "
                   f"matmul {mr['matmul_gflops']:.0f}, conv {mr['conv_gflops']:.0f} GFLOP/s in its process; seconds ×{f['k']:.2f} "
                   f"to the reference rate): " + how)
        else:
            how = f"kept ({r['measured_at'][:10]}): " + how
        fl = f["floor_ref"]["train_s"] + f["floor_ref"]["eval_s"]
        if f["ratio"] < 1:
            below += 1
            how += " — **below its floor**"
        body.append(f"| {e} | {m} | {r['model']} | {r['n_params']:,} | {r['clients_per_round']} ({r['clients_measured']}) | "
                    f"{r['train_s_per_round'] * f['k']:.2f} | {r['eval_s_per_round'] * f['k']:.2f} ({r['eval_s_last_round'] * f['k']:.1f}) | "
                    f"{fl:.2f} | {f['ratio']:.1f}× | {r['peak_rss_mib']:.0f} | {runs['n']} | {r['rounds']} | {_h(tot)} | {how} | "
                    f"{why_above(r, f)} |")
    total = sum(totals.values())
    n_runs_all = sum(dag_runs(p, e, m)["n"] for e, m in rows)
    cover = f"{len(totals)} of {len(rows)} rows, {sum(dag_runs(p, e, m)['n'] for e, m in totals)} of {n_runs_all} runs"
    cls = machine_class()
    re_rows = [k for k, r in doc["rows"].items() if r.get("status") == "ok" and _mean_rates(r)]
    limit = prof["train_runtime_min"]
    over = sorted(((k, v) for k, v in single.items() if limit and v > limit * 60), key=lambda kv: -kv[1])
    lng_key = max(longest, key=longest.get) if longest else None
    jobs = prof["jobs"]
    n_sel = sum(1 for e, m in rows if len(list(dag_runs(p, e, m)["swept_points"])) > 1)
    prev = doc.get("previous_rows", {})
    L = ["# What the params.yaml suite costs at paper scale (`benchmarks/suite_cost.py`)", "",
         f"Generated {_now()} from `benchmarks/suite_cost.json`.", "",
         "## For a cluster planner", "",
         "| | before (2026-11-26) | now |", "|---|---:|---:|",
         f"| CPU core-hours, whole suite ({len(rows)} (experiment, method) rows, {n_runs_all:,} training runs) | "
         f"{_num(doc.get('previous_summary', {}).get('core_h'))} | **{_h(total)}** |",
         f"| rows below their FLOP floor | {_num(doc.get('previous_summary', {}).get('below_floor'))} | {below} |",
         f"| GPU-hours, rows measured on a GPU | 0 of {len(rows)} | {len(gpu_tot)} of {len(rows)}: "
         f"{sum(gpu_tot.values()) / 3600:,.1f} h (one card: {cards}; `suite_cost_gpu.md`) |",
         "| GPU-hours, the other rows | not measured | not measured (`bash benchmarks/gpu_suite_cost.sh` on a GPU "
         "machine measures the next ones, heaviest first) |",
         f"| rows with runs longer than the Slurm profile's {limit} min on one core | "
         f"{_num(doc.get('previous_summary', {}).get('over_limit'))} | {len(over)} |", "",
         f"* **Machines.** Rows marked *kept* were measured on 2026-11-26 on an AMD EPYC (one core a row, two rows "
         f"at a time on 2 cores). Rows marked *re-measured* ({len(re_rows)}) were measured today on fedbayes.machine class "
         f"`{class_slug(cls)}` ({cls['cpu']}, ATen {cls['aten']}), a 2-core machine shared by 8 sessions (load average "
         f"6–17): their seconds are put at the kept rows' rate by the floor — each re-measured row measured its own "
         f"one-thread matmul and conv rate in its process just before and after it, so (seconds ÷ floor at its own "
         f"rate) × (floor at the reference rate) is the row at the 2026-11-26 machine's rate "
         f"({ref['matmul_gflops']:.0f} GFLOP/s matmul, benchmarks/roofline.md; conv at today's conv/matmul proportion "
         f"{ref['conv_over_matmul']:.2f}). Loaded-machine ratios are noisy (± ~2× between runs of one row).",
         "* **The change in the total**, row by row where it moved: " + (", ".join(
             f"{k} {v['core_h']:,.1f} → {_h(totals[tuple(k.split('/'))])} core-h ({v['why']})"
             for k, v in prev.items() if tuple(k.split("/")) in totals) or "none") + ".",
         "* **GPU memory per run**: " + (f"≤ {max(peaks) / 2 ** 30:,.1f} GiB (`torch.cuda.max_memory_allocated`) in the "
                                          f"{len(peaks)} rows that recorded it (suite_cost_gpu.md)" if peaks else "not recorded yet")
         + ". The profile asks `mem_mb: "
         f"{prof['train_mem_mb']}` of host memory; peak host RSS per row is in the table (≤ "
         f"{max([r['peak_rss_mib'] for r in doc['rows'].values() if r['status'] == 'ok'] or [0]):,.0f} MiB).",
         "* **Disk**: a finished run keeps history.csv, metrics.json and run.json (the 166 committed runs: "
         f"{_du(REPO / 'results/runs')} in all), and git-ignored predictions.npz (test + OOD × classes × 4 B × the "
         "saved rounds and variants) and posterior.pt (the server's state), and while it runs checkpoint.pt (the "
         "server's and every client's state, deleted at the end): ≥ 4 B × parameters a vector (ResNet-18: 45 MB, "
         "CIFAR-10's CNN: 5 MB), times the vectors a method keeps (FedLap-Cov: 2 a client + 3). Re-measured rows "
         "record what their run wrote (`disk_bytes`; with the clients capped, their states only)"
         + (": the largest posterior.pt " + max(((r["disk_bytes"].get("posterior.pt", 0), k) for k, r in doc["rows"].items()
                                                 if r.get("disk_bytes")), default=(0, "–"))[1]
            + f" {max(r['disk_bytes'].get('posterior.pt', 0) for r in doc['rows'].values() if r.get('disk_bytes')) / 2 ** 20:,.0f} MiB"
            if any(r.get("disk_bytes") for r in doc["rows"].values()) else "")
         + f". Stand-in data generated here (paper size, the datasets the re-measured rows need): {_du(REPO / STAND_IN_ROOT)}.",
         f"* **Jobs per stage** (the DAG's rules; one Slurm job each): `train` {n_runs_all:,} (one a run, the "
         f"profile's `runtime: {limit}`, `gpu: {prof['train_gpu']}`), `evaluate` {n_runs_all:,} (one a run), `select` "
         f"{n_sel} (one a swept (experiment, method)), then per paper the `sweeps`/table, `scorecard` and `mlflow` "
         f"jobs (seconds to minutes); `data` and `partition` one a dataset / (experiment, seed). At most {jobs} queued at once.",
         f"* **Runs over the time limit**: {len(over)} rows have a run longer than `runtime: {limit}` min on one core "
         "(list under *Wall time*). A run killed at the limit **resumes from its checkpoint**: the engine writes "
         "checkpoint.pt atomically after every round (fedbayes.engine.loop) and restarts from it with the same numbers; "
         "the train rule declares only history.csv and run.json as outputs, so Snakemake's clean-up of a failed job "
         "leaves the checkpoint. Snakemake does not resubmit by itself: run the workflow again (or add `retries: N` to "
         "the profile); each resubmission gains one limit's worth of rounds, so a run of D days needs ⌈D × 24 / 12⌉ "
         "submissions (run.json's `wall_s` then holds only the last one's time).",
         "",
         "## How each number was obtained", "",
         "* **Train s/round** — *scaled* from the clients measured, two ways (the `how` column says which): "
         "**fit** (re-measured rows): the round's smallest client and its largest, cut to `--fit-points` points, trained "
         "2 rounds of the row's own configuration; their round-2 `client_update` times give a fixed + per-point cost "
         "per client, and a real round costs clients × fixed + per-point × its points. **points** (kept rows): the "
         "measured clients' time × points a round / their points — right where the measured clients hold many "
         "batches, wrong where they hold 1–2 points (fixed per-client cost multiplied by up to 30,000: 12 rows "
         "of the label-Dirichlet experiments held 1-point clients; they are re-measured with the fit). The server "
         "step and loop scale by clients a round / clients measured.",
         "* **Burn-in** (FedPA, FedEP-*, FedSEP-*): round 1 of the measurement is a FedAvg-M round, round 2 a "
         "post-burn-in one; their mean is weighted by the real burn-in.",
         "* **Eval s/round** — *scaled*: each prediction variant timed on the first 1,000 test (and OOD) points, "
         "scaled to the full sets and summed over the rounds the run evaluates it; `eval last` is one evaluation "
         "of every variant.",
         "* **Floor s/round** — the FLOP floor of a round at the reference rate: forward passes × the model's "
         "multiply-adds (Linear and Conv2d layers, from their shapes) × 2, at the one-thread matmul rate for "
         "Linear and the conv rate (3×3, 64→64 channels, 32×32, batch 32) for Conv2d. Passes: 3 per point and "
         "local epoch (× IVON's `mc_samples`), plus the method's declared extra passes (`EXTRA_CLIENT`: FedLap-Cov's "
         "GGN 1 + 2C, FedCurv's offline Fisher 3, FedEP/FedSEP-L 4 × laplace_epochs, -V 4 × ngvi_epochs × "
         "ngvi_samples, after the burn-in) and server passes (FedBE: teachers + 3 × server_epochs on the unlabeled "
         "share; FedLap-Func: 3 × server_iters on the memory points), plus evaluation (one pass per test/OOD point "
         "and variant, `pred_samples` for a sampled predictive, on the rounds evaluated). Elementwise work "
         "(optimisers, sampling, normalisation, pooling) has no FLOP floor. **measured/floor** is the row's "
         "(train + eval) s/round over its floor at the rates of the process that measured it; **why > 2×** names "
         "the work the floor does not count (from the algorithm and the model, not a per-row profile).",
         "* **Peak RSS** — *measured*: the row's child process (`ru_maxrss`).",
         "* **Runs** — as `method_runs` in workflow/rules/track.smk: every swept point on the selection seeds "
         "plus the selected point on each other seed.",
         "* **Row total** — Σ over runs of rounds × (train + eval s/round), sweep points with other `local_epochs` "
         "scaled by epochs, the selected point costed as the grid's mean; core-hours at the reference rate.", "",
         "## Rows", "",
         "| experiment | method | model | params | clients/round (measured) | train s/round | eval s/round "
         "(eval last) | floor s/round | measured/floor | peak RSS MiB | runs | rounds | row total (core-h) | how | why > 2× |",
         "|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"] + body
    L += ["", "## Per experiment", "", "| experiment | rows measured | runs (measured rows) | core-hours (measured rows) |",
          "|---|---:|---:|---:|"]
    for e in p["experiments"]:
        ms = [m for ee, m in rows if ee == e]
        done = [m for m in ms if (e, m) in totals]
        L.append(f"| {e} | {len(done)} of {len(ms)} | {sum(dag_runs(p, e, m)['n'] for m in done)} | "
                 f"{_h(per_exp[e]) if done else '–'} |")
    L += ["", "## The whole suite", "",
          f"* **CPU (one core a run, at the reference rate): {_h(total)} core-hours**, covering {cover}"
          + (f"; the {n_missing} rows not measured are not in this number." if n_missing else "."),
          f"* **GPU-hours**: {len(gpu_tot)} rows measured on one card ({cards}; suite_cost_gpu.md: "
          + ", ".join(f"{e}/{m} {gpu[f'{e}/{m}']['train_s_per_round']:.1f} s/round" for e, m in gpu_tot)
          + f"; {sum(gpu_tot.values()) / 3600:,.1f} GPU-h for their runs, against {sum(totals[k] for k in gpu_tot) / 3600:,.0f} "
          "core-h); the other rows not measured: `bash benchmarks/gpu_suite_cost.sh` fills the GPU column (heaviest "
          "experiments first, 90 s a row)."
          + (f" On the Slurm profile with one GPU a job, these rows' runs take ≈ {_dur(max(sum(gpu_tot.values()) / min(8, jobs or 8), gpu_chain))} "
             f"on 8 GPUs and ≈ {_dur(max(sum(gpu_tot.values()) / min(32, jobs or 32), gpu_chain))} on 32 (their longest chain of "
             f"runs {_dur(gpu_chain)}), against {_dur(max(sum(totals[k] for k in gpu_tot) / (jobs or 100), max(longest[k] for k in gpu_tot)))} "
             f"on {jobs or 100} CPU cores." if gpu_tot else ""), ""]
    if totals:
        L += [f"### Wall time on a Slurm cluster (`--profile workflow/profiles/slurm`), {cover}", "",
              f"Each run is one Slurm job (rule `train`, 1 CPU). The profile queues at most **{jobs} jobs at once**, so "
              f"N workers beyond {jobs} buy nothing. Wall ≈ max(total / min(N, {jobs}), longest chain of runs); the "
              f"longest chain is {lng_key[0]}/{lng_key[1]} at {_dur(longest[lng_key])} (a row whose selected point "
              "also runs on seeds the sweep did not use waits for the sweep: two runs in a row). Training jobs only, "
              "no queueing delay, no resubmission delay.", "",
              "| workers N | concurrent jobs | wall |", "|---:|---:|---:|"]
        for n in WORKERS:
            eff = min(n, jobs) if jobs else n
            L.append(f"| {n} | {eff} | {_dur(max(total / eff, longest[lng_key]))} |")
        if limit:
            L += ["", f"Runs longer than `runtime: {limit}` min on one core ({len(over)} rows; submissions a run needs): "
                  + ", ".join(f"{e}/{m} ({_dur(v)}, {math.ceil(v / (limit * 60))})" for (e, m), v in over) + "."]
    L += committed_check(p, doc, floors)
    if doc.get("notes"):
        L += ["", "## Notes (from the sessions that measured; not part of the totals)", ""] + [f"* {n}" for n in doc["notes"]]
    errs = [r for r in doc["rows"].values() if r["status"] != "ok"]
    if errs:
        L += ["", "## Rows that failed or were skipped", ""]
        for r in errs:
            L += [f"### {r['experiment']}/{r['method']}: {r['status']}", "", "```",
                  (r.get("traceback") or r["error"]).rstrip(), "```", ""]
    L += ["", "## Re-run / continue", "", "```",
          "python benchmarks/suite_cost.py --resume --redo --pick fit --experiments E --methods M   # re-measure rows (fit)",
          "python benchmarks/suite_cost.py --resume --retry    # rows not yet in the JSON, and the failed ones",
          "python benchmarks/suite_cost.py --report-only       # this file from the JSON", "```", ""]
    path.write_text("\n".join(L))


def write_gpu_md(p: dict, doc: dict, path: Path) -> None:
    """The GPU column (a JSON measured with --device cuda): each measured row's seconds a round on its card,
    its peak GPU memory, its runs' GPU-hours beside the CPU core-hours of the same row (suite_cost.json)."""
    rows = suite_rows(p)
    cpu_doc = load_json(HERE / "suite_cost.json")
    ref = reference_rates(cpu_doc)
    body, gpu_h, cpu_h, cards, peaks = [], 0.0, 0.0, set(), []
    for e, m in rows:
        r = doc["rows"].get(f"{e}/{m}")
        if not (r and r.get("status") == "ok"):
            continue
        runs = dag_runs(p, e, m)
        tot = run_seconds(r, runs)[0]
        c = cpu_doc["rows"].get(f"{e}/{m}")
        c_tot = None
        if c and c.get("status") == "ok":
            c_tot = run_seconds(c, runs)[0] * row_floor(p, c, ref)["k"]
            gpu_h, cpu_h = gpu_h + tot, cpu_h + c_tot
        card = r.get("gpu_name") or "?"
        cards.add(card)
        peak = r.get("gpu_peak_bytes")
        if peak:
            peaks.append(peak)
        fit = r.get("client_fit")
        if r["measured_in_full"] or r["clients_measured"] == r["clients_per_round"]:
            how = f"all {r['clients_per_round']} clients of round 2 (trained as the engine's default on the GPU does)"
        elif fit:
            if fit["points"][0] == fit["points"][1]:
                how = (f"one by one: every client holds {fit['points'][0]} points, so a client costs round 2's second "
                       f"client, {fit['s'][1]:.2f} s (the first paid one-time costs: {fit['s'][0]:.2f} s) × "
                       f"{r['clients_per_round']} clients")
            else:
                how = (f"one by one: fit t = {fit['fixed_s'] * 1e3:.0f} ms + {fit['per_point_s'] * 1e3:.2f} ms/point through "
                       f"clients of {fit['points'][0]} and {fit['points'][1]} points × {r['clients_per_round']} clients")
        else:
            how = f"train ×{r['scale_client']:.1f} from {r['clients_measured']} clients"
        if r.get("burn_in"):
            how += (f"; burn-in {r['burn_in']} of {r['rounds']} rounds at {r['burn_in_train_s_per_round']:.1f} s, "
                    f"the rest {r['post_burn_in_train_s_per_round']:.1f} s")
        if r["test_measured"] < r["test_size"]:
            how += f"; eval ×{r['test_size'] / r['test_measured']:.0f} from {r['test_measured']} test points"
        body.append(f"| {e} | {m} | {r['model']} | {r['clients_per_round']} ({r['clients_measured']}) | "
                    f"{r['train_s_per_round']:.2f} | {r['eval_s_per_round']:.2f} | "
                    f"{(f'{peak / 2 ** 20:,.0f}' if peak else '–')} | {runs['n']} | {r['rounds']} | {tot / 3600:,.1f} | "
                    f"{_h(c_tot) if c_tot is not None else '–'} | "
                    f"{(f'{c_tot / tot:,.0f}×' if c_tot and tot else '–')} | {card} ({r['measured_at'][:10]}) | {how} |")
    n = len(body)
    L = ["# What the params.yaml suite costs on one GPU (`benchmarks/suite_cost.py --device cuda`)", "",
         f"Generated {_now()} from `benchmarks/{path.with_suffix('.json').name}`: "
         f"**{n} of {len(rows)}** (experiment, method) rows measured, on {', '.join(sorted(cards)) or 'no card'}; "
         "the others are not measured (`bash benchmarks/gpu_suite_cost.sh` measures them, the heaviest CPU rows first, "
         "and keeps the rows already here).", "",
         f"* **The measured rows**: {gpu_h / 3600:,.1f} GPU-hours for their runs, against {cpu_h / 3600:,.0f} core-hours "
         "of the same rows on one CPU core (suite_cost.md, at its reference rate)." if n else "* No row measured yet.",
         "* **How a row is measured**: as the CPU column (suite_cost.md, *How each number was obtained*): 2 rounds "
         "of the row's own configuration on stand-in data of the real size, round 2 reported, the evaluation timed "
         "on 1,000 test points and scaled. Rows of 2026-11-30 trained two clients **one by one** (the fit needs each "
         "client's own time; on a GPU the engine's default trains a round's clients together where the method has a "
         "batched form, so these rows are an upper bound for such methods); rows of 2026-11-26/27 trained all of "
         "round 2's clients. One row at a time, each in its own process, the card to itself.",
         "* **Peak GPU memory**: `torch.cuda.max_memory_allocated` of the row's process"
         + (f": ≤ {max(peaks) / 2 ** 30:,.1f} GiB in the {len(peaks)} rows that recorded it (the rows of 2026-11-26/27 "
            "did not)." if peaks else ": not recorded for these rows."),
         "", "| experiment | method | model | clients/round (measured) | train s/round | eval s/round | peak GPU MiB | "
         "runs | rounds | row total (GPU-h) | same row on CPU (core-h) | CPU/GPU | card | how |",
         "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"] + body
    errs = [r for r in doc["rows"].values() if r.get("status") != "ok"]
    if errs:
        L += ["", "## Rows that failed or were skipped", ""]
        L += [f"* {r['experiment']}/{r['method']}: {r['status']}: {r['error'][:300]}" for r in errs]
    L += ["", "## Re-run / continue", "", "```",
          "bash benchmarks/gpu_suite_cost.sh [SECONDS_A_ROW] [BUDGET_S]   # on the GPU machine: the next rows",
          "python benchmarks/suite_cost.py --report-only --json benchmarks/suite_cost_gpu.json --md benchmarks/suite_cost_gpu.md",
          "```", ""]
    path.write_text("\n".join(L))


def record_previous(p: dict, doc: dict, old: dict) -> None:
    """The earlier JSON's suite total, its rows below their floor (at the reference rates) and, for each row
    measured again since, its core-hours then and why it moved."""
    ref = reference_rates(doc)
    limit = (_slurm_profile()["train_runtime_min"] or 0) * 60
    total, below, over, moved = 0.0, 0, 0, {}
    for e, m in suite_rows(p):
        r = old["rows"].get(f"{e}/{m}")
        if not (r and r["status"] == "ok"):
            continue
        runs = dag_runs(p, e, m)
        tot, chain = run_seconds(r, runs)
        total += tot
        over += bool(limit) and chain / (2 if runs["swept"] and runs["selected_only"] else 1) > limit
        below += row_floor(p, r, ref)["ratio"] < 1
        new = doc["rows"].get(f"{e}/{m}")
        if new and new.get("measured_at") != r.get("measured_at"):
            why = ("fixed + per-point fit replaces scaling 1-point clients by points" if new.get("client_fit")
                   else "the batched diagonal GGN replaces one VJP per (point, class)" if e.startswith("cifar") and m == "fedlap_cov"
                   else "measured again (noise)")
            moved[f"{e}/{m}"] = {"core_h": tot / 3600, "why": why, "measured_at": r.get("measured_at")}
    doc["previous_summary"] = {"core_h": round(total / 3600), "below_floor": int(below), "over_limit": int(over),
                               "generated_from": "benchmarks/suite_cost.json before the floors (rows of 2026-11-26)"}
    doc["previous_rows"] = moved


def committed_check(p: dict, doc: dict, floors: dict) -> list[str]:
    """The rows' training s/round against the committed runs of the same (experiment, method, point): their
    run.json wall_s (training rounds, no evaluation) over their rounds, on the machine that trained them."""
    out = []
    for (e, m), f in floors.items():
        r = doc["rows"][f"{e}/{m}"]
        walls = []
        for q in sorted((REPO / p["paths"]["runs"] / e / m / r["point"]).glob("seed*/run.json")):
            info = json.loads(q.read_text())
            if info.get("wall_s") and not info.get("diverged"):
                walls.append(float(info["wall_s"]) / int(info["config"]["rounds"]))
        if walls:
            est = r["train_s_per_round"] * f["k"]
            tiny = not r.get("client_fit") and r["points_measured"] < r["clients_measured"] * (r["batch_size"] or 32)
            out.append(f"| {e} | {m} | {r['point']} | {len(walls)} | {sum(walls) / len(walls):.2f} | {est:.2f} | "
                       f"{est / (sum(walls) / len(walls)):.2f} | {'re-measured (fit)' if r.get('client_fit') else 'kept'}"
                       f"{' (clients smaller than a batch)' if tiny else ''} |")
    if not out:
        return []
    q = sorted(float(line.split("|")[7]) for line in out)
    fit = sorted(float(line.split("|")[7]) for line in out if "fit" in line.split("|")[8])
    kept_small = sorted(float(line.split("|")[7]) for line in out if "smaller than a batch" in line.split("|")[8])
    return ["", "## Checked against the committed runs", "",
            f"Median table / committed over {len(q)} rows: {q[len(q) // 2]:.2f} (range {q[0]:.2f}–{q[-1]:.2f}); rows "
            f"re-measured with the fit: {', '.join(f'{x:.2f}' for x in fit) or 'none'}; rows still scaled from "
            f"clients smaller than a batch: {', '.join(f'{x:.2f}' for x in kept_small) or 'none'}. The committed runs "
            "ran with older code on a loaded machine (benchmarks/run_costs.py: 32.8 core-hours as run, 25.9 with the "
            "current code), so a ratio below 1 is expected; a table whose rows sit at ~0.3–0.6 of what the runs took "
            "plans a cluster optimistically by that factor on small models.", "",
            "The committed runs of a row's point (real data; trained on 2026-11-2x, two runs at a time on 2 cores, "
            "`wall_s` of run.json: training rounds only) against this table's train s/round. A resumed run records "
            "only its last session, so its s/round is a lower bound.", "",
            "| experiment | method | point | runs | committed s/round | this table's | table / committed | row |",
            "|---|---|---|---:|---:|---:|---:|---|"] + out


def _num(x) -> str:
    return "?" if x is None else f"{x:,}"


def _du(path: Path) -> str:
    n = sum(q.stat().st_size for q in path.rglob("*") if q.is_file()) if path.exists() else 0
    return f"{n / 2 ** 20:,.1f} MiB" if n < 2 ** 30 else f"{n / 2 ** 30:,.1f} GiB"



if __name__ == "__main__":
    main()
