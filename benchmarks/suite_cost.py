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


# ------------------------------------------------------------------------------------------ one row

def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def measure_row(args, e: str, m: str) -> dict:
    """Runs in the child process: 2 rounds of (e, m) at paper-scale shapes, clients capped."""
    import numpy as np
    import torch

    torch.set_num_threads(1)
    from fedbayes.study import experiment_config, load_params, partition_config, run_config, save_rounds, sweep_points
    from fedbayes.data.root import fetch_dataset, open_data_root
    from fedbayes.engine import loop, seeds
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
        chosen = picked[:c] if args.pick == "first" else \
            np.sort(picked[np.argsort(sizes[picked], kind="stable")[:c]])   # --pick smallest: cheaper, same scaling
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
        data, _ = load_run_data(root, cfg, ([parts[k] for k in chosen], meta), device)
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
        rec = {"client": [], "server": [], "predict": [], "rounds": [], "method": None}
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
                    if _n == "client_update":   # progress, read by the parent when the row runs out of time
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
            hist = loop.run_federated(cfg, data, f"{tmp}/run", device, log=log,
                                      batch_clients={"auto": None, True: True, False: False}[p.get("batch_clients", "auto")])
            t_run = time.perf_counter() - t0
        finally:
            loop.build_method, loop.predict = real_build, real_predict
        del keep_alive
    method = rec["method"]
    last = hist[-1]
    if last.get("round") != args.rounds:
        raise RuntimeError(f"run stopped at round {last.get('round')} (diverged?): {last}")
    pts_trained = int(sizes[chosen].sum())
    pts_round = float(sizes.sum()) if n_part == K else float(sizes.mean() * n_part)
    client_s = sum(rec["client"][-c:])            # round 2's c client updates
    other_s = float(last["time_s"]) - client_s    # server step + loop, round 2
    k_pts, k_cl = pts_round / pts_trained, n_part / c
    train_s = client_s * k_pts + other_s * k_cl
    r1_client = sum(rec["client"][:c])
    r1_other = float(hist[1]["time_s"]) - r1_client
    burn = {}
    if cfg["hparams"].get("burn_in") != full_cfg["hparams"].get("burn_in"):
        b = int(full_cfg["hparams"]["burn_in"])
        burn_s = r1_client * k_pts + r1_other * k_cl
        burn = {"burn_in": b, "burn_in_client_s": r1_client, "burn_in_other_s": r1_other,
                "burn_in_train_s_per_round": burn_s,
                "post_burn_in_train_s_per_round": train_s}
        # the run's mean training s/round: burn_in rounds of FedAvg-M, the rest EP / FedPA
        train_s = (b * burn_s + (full_cfg["rounds"] - b) * train_s) / full_cfg["rounds"]
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
        costs = pre_variant if burn and rnd < burn["burn_in"] else per_variant
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
        "clients_measured": int(c), "client_ids": [int(k) for k in chosen],
        "points_measured": pts_trained, "points_per_round": pts_round,
        "batch_size": full_cfg["hparams"].get("batch_size"), "local_epochs": full_cfg["hparams"].get("local_epochs"),
        "rounds": R, "rounds_measured": args.rounds,
        "round1_time_s": float(hist[1]["time_s"]), "round2_time_s": float(last["time_s"]),
        "round2_client_s": client_s, "round2_other_s": other_s,
        "client_update_s_each": rec["client"],
        "scale_client": k_pts, "scale_other": k_cl, "train_s_per_round": train_s, **burn,
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
    ap.add_argument("--pick", choices=("first", "smallest"), default="first",
                    help="which of round 2's clients to train: the first --clients-cap (default) or the smallest "
                         "(cheaper; per-client overheads are then scaled up by points too)")
    ap.add_argument("--test-cap", type=int, default=1000, help="test/OOD points evaluated (0: all)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds run; the last is reported")
    ap.add_argument("--max-seconds", type=float, default=1800, help="per row: the child is killed after this")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or auto (a GPU's rows: give them their own "
                    "--json/--md, e.g. benchmarks/suite_cost_gpu.json)")
    ap.add_argument("--resume", action="store_true", help="keep the rows already in the JSON")
    ap.add_argument("--retry", action="store_true", help="with --resume: re-measure rows that failed or were skipped")
    ap.add_argument("--redo", action="store_true", help="re-measure the selected rows even where the JSON has them")
    ap.add_argument("--report-only", action="store_true", help="only rewrite the markdown from the JSON")
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
    if not args.report_only:
        doc["settings"] = {"clients_cap": args.clients_cap, "test_cap": args.test_cap, "rounds": args.rounds,
                           "max_seconds": args.max_seconds, "stand_in": f"{args.stand_in_root} (size paper)",
                           "host": platform.node(), "cpu": _cpu_name(), "nproc": os.cpu_count()}
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
            row["settings"] = {k: getattr(args, k) for k in ("clients_cap", "test_cap", "rounds", "max_seconds", "pick")}
            doc["rows"][key] = row
            save_json(jpath, doc)
            write_md(p, doc, Path(args.md))
            if row["status"] == "ok":
                print(f"{row['train_s_per_round']:.2f} s/round train, {row['eval_s_per_round']:.2f} s/round eval, "
                      f"{row['peak_rss_mib']:.0f} MiB ({time.perf_counter() - t0:.0f} s)", flush=True)
            else:
                print(f"{row['status'].upper()}: {row['error']}", flush=True)
    write_md(p, doc, Path(args.md))
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
    client, other = row["round2_client_s"] * row["scale_client"], row["round2_other_s"] * row["scale_other"]
    if row.get("burn_in"):   # burn_in rounds of FedAvg-M (round 1 of the measurement), the rest round 2's
        b = row["burn_in"]
        client = (b * row["burn_in_client_s"] + (R - b) * row["round2_client_s"]) / R * row["scale_client"]
        other = (b * row["burn_in_other_s"] + (R - b) * row["round2_other_s"]) / R * row["scale_other"]
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


def write_md(p: dict, doc: dict, path: Path) -> None:

    rows = suite_rows(p)
    prof = _slurm_profile()
    settings = doc.get("settings", {})
    L = ["# What the params.yaml suite costs at paper scale (`benchmarks/suite_cost.py`)", "",
         f"Generated {_now()} from `benchmarks/suite_cost.json` "
         f"({sum(1 for r in doc['rows'].values() if r['status'] == 'ok')} of {len(rows)} (experiment, method) rows "
         f"measured). CPU: {settings.get('cpu', '?')}, one core a row (`taskset`), one torch thread; on "
         f"2026-11-26 two rows were measured at a time, one on each core of this 2-core machine. Stand-in data "
         f"of the real size (`fedbayes.data.standin`, size `paper`), seed 0, the first sweep point of each row; "
         f"the clients measured (`--clients-cap`, `--pick`) are in each row's record in the JSON.", "",
         "## How each number was obtained", "",
         f"* **Train s/round** — *scaled*. `run_federated` ran {settings.get('rounds', 2)} rounds of the row's own "
         "configuration (model, batch size, local epochs of the first sweep point, every hyperparameter), "
         "the second reported. Only the first `--clients-cap` clients (1 or 2; the `how` column names the number) "
         "that round 2 of the real run samples were trained: the partition given to the engine was those clients' parts (participation "
         "1.0, so they trained in both rounds). Their `client_update` time (timed around each call) is scaled by "
         "*points a real round trains / points of the measured clients* (client sizes differ under Dirichlet "
         "splits; epochs × batches ∝ points), the rest of the round (server step and loop) by *clients a round / "
         "clients measured*. The `how` column gives both factors. A row whose round trains no more clients than "
         "were measured is marked **full** (no scaling of training).",
         "* **Burn-in** (FedPA, FedEP-*, FedSEP-*: `burn_in` rounds of FedAvg-M, then the Bayesian rounds): the "
         "measurement sets `burn_in: 1`, so round 1 times a FedAvg-M round and round 2 a post-burn-in round; "
         "train s/round is their mean weighted by the real burn-in (e.g. 400 of 1500 rounds on CIFAR-100).",
         f"* **Eval s/round** — *scaled*. The engine's `predict` was timed per prediction variant on the first "
         f"{settings.get('test_cap', 1000)} test (and OOD) points at round 2 (where every variant is evaluated) and "
         "scaled linearly to the full test and OOD sets (plus the metrics' time, scaled the same way). The column is "
         "the whole run's evaluation (each variant on the rounds the full configuration evaluates it: `eval_every`, "
         "`mc_every`, `mc_round0`, `mc_window`) divided by its rounds; `eval last` is one evaluation of every "
         "variant (the last round's).",
         "* **Peak RSS** — *measured*: `ru_maxrss` of the row's own child process (the whole training set "
         "preprocessed in memory as a run holds it, the full test/OOD tensors kept alive, only the measured "
         "clients' states).",
         "* **Runs** — from params.yaml, as `method_runs` in workflow/rules/track.smk: every swept point on the "
         "selection seeds plus the selected point on each other seed (`sweep points × selection seeds + other "
         "seeds`).",
         "* **Row total** — *scaled*: Σ over runs of rounds × (train + eval s/round); sweep points with other "
         "`local_epochs` than the measured one have their client part scaled by epochs; the selected point on "
         "the other seeds (unknown before the sweep) is costed as the grid's mean. Core-hours on this CPU "
         "(every run is one single-threaded process).", ""]
    L += ["## Rows", "",
          "| experiment | method | model | params | clients/round (measured) | train s/round | eval s/round "
          "(eval last) | peak RSS MiB | runs | rounds | row total (core-h) | how |",
          "|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|"]
    totals, longest, single, per_exp = {}, {}, {}, {}
    n_missing = 0
    from fedbayes.study import experiment_config as _ec
    for e, m in rows:
        runs = dag_runs(p, e, m)
        ex = _ec(p, e)
        r = doc["rows"].get(f"{e}/{m}")
        if r and r["status"] == "ok":
            tot, lng = run_seconds(r, runs)
            totals[(e, m)], longest[(e, m)] = tot, lng
            single[(e, m)] = lng / (2 if runs["swept"] and runs["selected_only"] else 1)
            per_exp[e] = per_exp.get(e, 0.0) + tot
            how = "measured in full" if r["measured_in_full"] else \
                (f"train ×{r['scale_client']:.1f} (clients' points) / ×{r['scale_other']:.0f} (server) from "
                 f"{r['clients_measured']} client{'s' if r['clients_measured'] > 1 else ''}"
                 + (" (smallest)" if r.get("settings", {}).get("pick") == "smallest" else "")
                 + (f"; burn-in {r['burn_in']} of {r['rounds']} rounds at {r['burn_in_train_s_per_round']:.0f} s, "
                    f"the rest {r['post_burn_in_train_s_per_round']:.0f} s" if r.get("burn_in") else ""))
            if r["test_measured"] < r["test_size"] or r["ood_measured"] < r["ood_size"]:
                how += f"; eval ×{r['test_size'] / r['test_measured']:.0f} from {r['test_measured']} test points"
            L.append(f"| {e} | {m} | {r['model']} | {r['n_params']:,} | {r['clients_per_round']} "
                     f"({r['clients_measured']}) | {r['train_s_per_round']:.2f} | {r['eval_s_per_round']:.2f} "
                     f"({r['eval_s_last_round']:.1f}) | {r['peak_rss_mib']:.0f} | {runs['n']} | {r['rounds']} | "
                     f"{_h(tot)} | {how} |")
        else:
            n_missing += 1
            state = "not yet measured" if not r else f"**{r['status']}**: {r['error'][:300]}"
            L.append(f"| {e} | {m} | {ex['model']['name']} | – | {max(1, round(ex.get('participation', 1.0) * ex['clients']))} "
                     f"| – | – | – | {runs['n']} | {ex['rounds']} | – | {state} |")
    total = sum(totals.values())
    n_runs_measured = sum(dag_runs(p, e, m)["n"] for e, m in totals)
    n_runs_all = sum(dag_runs(p, e, m)["n"] for e, m in rows)
    L += ["", "## Per experiment", "", "| experiment | rows measured | runs (measured rows) | core-hours (measured rows) |",
          "|---|---:|---:|---:|"]
    for e in p["experiments"]:
        ms = [m for ee, m in rows if ee == e]
        done = [m for m in ms if (e, m) in totals]
        L.append(f"| {e} | {len(done)} of {len(ms)} | {sum(dag_runs(p, e, m)['n'] for m in done)} | "
                 f"{_h(per_exp[e]) if done else '–'} |")
    cover = f"{len(totals)} of {len(rows)} rows, {n_runs_measured} of {n_runs_all} runs"
    L += ["", "## The whole suite", "",
          f"* **This CPU (one core a run): {_h(total)} core-hours** — *scaled* (above), covering {cover}"
          + (f"; the {n_missing} rows not measured are not in this number." if n_missing else "."),
          "* **H100 GPU-hours: not measured** — no GPU was lent to this session. For context only (not a "
          "measurement of these rows): reports/evidence/gpu.md measured on one H100 FedAvg fmnist10-iid-k10 at "
          "0.21 s/round with clients batched (0.72 one by one; CPU core 0.53), BayesADMM fmnist10-iid-k10 2.62 s/round "
          "(CPU 2.85), FedIVON fmnist-shards-k200 0.145 s/round (CPU 0.79) and its 500-sample predictive 6.6 s "
          "(CPU 35.1 s): small models gain 1–5×, at most; the convolutional rows (ResNet-18/20, CNNs) are where a "
          "GPU would matter and nothing here measures that.", ""]
    if totals:
        lng_key = max(longest, key=longest.get)
        lng = longest[lng_key]
        jobs = prof["jobs"]
        L += [f"### Wall time on a Slurm cluster (`--profile workflow/profiles/slurm`), {cover}", "",
              f"Each run is one Slurm job (rule `train`, 1 CPU: threads 1). The profile queues at most **{jobs} jobs "
              f"at once** (`jobs: {jobs}`), so N workers beyond {jobs} buy nothing. Wall ≈ max(total / min(N, {jobs}), "
              f"longest chain of runs); the longest chain is {lng_key[0]}/{lng_key[1]} at {_dur(lng)} (*scaled*; a row "
              "whose selected point also runs on seeds the sweep did not use waits for the sweep: two runs in a row). "
              "Training jobs only (data, partition, evaluation, selection and MLflow jobs take seconds to "
              "minutes each) and no queueing delay.", "",
              "| workers N | concurrent jobs | wall |", "|---:|---:|---:|"]
        for n in WORKERS:
            eff = min(n, jobs) if jobs else n
            L.append(f"| {n} | {eff} | {_dur(max(total / eff, lng))} |")
        limit = prof["train_runtime_min"]
        if limit:
            over = [(k, v) for k, v in single.items() if v > limit * 60]
            L += ["", f"The profile gives a training job `runtime: {limit}` minutes (and `mem_mb: {prof['train_mem_mb']}`, "
                  f"`gpu: {prof['train_gpu']}` on a GPU partition). On one CPU core "
                  + (f"**{len(over)} measured rows have runs longer than that** and would be killed by Slurm: "
                     + ", ".join(f"{e}/{m} ({_dur(v)})" for (e, m), v in sorted(over, key=lambda kv: -kv[1]))
                     + ". Such runs need the GPU partition (the profile's default) or a longer limit; a killed run "
                       "resumes from its checkpoint when resubmitted." if over else "every measured run fits it.")]
            big = [(f"{r['experiment']}/{r['method']}", r["peak_rss_mib"]) for r in doc["rows"].values()
                   if r["status"] == "ok" and prof["train_mem_mb"] and r["peak_rss_mib"] > prof["train_mem_mb"] / 1.048576]
            if big:
                L += ["", f"Peak RSS above the profile's `mem_mb: {prof['train_mem_mb']}` for training: "
                      + ", ".join(f"{k} ({v:,.0f} MiB)" for k, v in big) + " (measured with the clients capped: a full "
                      "round keeps every client's state)."]
    if doc.get("notes"):   # kept in the JSON (hand-written from a session's observations), not measurements
        L += ["", "## Notes (from the sessions that measured; not part of the totals)", ""] + [f"* {n}" for n in doc["notes"]]
    errs = [r for r in doc["rows"].values() if r["status"] != "ok"]
    if errs:
        L += ["", "## Rows that failed or were skipped", ""]
        for r in errs:
            L += [f"### {r['experiment']}/{r['method']}: {r['status']}", "", "```",
                  (r.get("traceback") or r["error"]).rstrip(), "```", ""]
    L += ["", "## Re-run / continue", "", "```",
          "taskset -c 0 .venv/bin/python benchmarks/suite_cost.py --resume            # every row not yet in the JSON",
          "taskset -c 0 .venv/bin/python benchmarks/suite_cost.py --resume --retry    # also the failed/skipped ones",
          ".venv/bin/python benchmarks/suite_cost.py --report-only                    # this file from the JSON", "```", ""]
    path.write_text("\n".join(L))


if __name__ == "__main__":
    main()
