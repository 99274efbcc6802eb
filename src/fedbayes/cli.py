"""`fedbayes data|partition|train|evaluate|table|track|validate` — what the Snakemake rules call.

Every command reads params.yaml itself (validated against the schema first), so a rule passes only
names (experiment, method, seed) and paths; the numbers come from the one source of truth.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


def _params(args):
    from fedbayes.config import load_params

    return load_params(args.params, scale=args.scale)


def cmd_validate(args) -> None:
    p = _params(args)
    from fedbayes.config import experiment_config, seeds

    for name in p["experiments"]:
        e = experiment_config(p, name)
        print(f"{name}: {e['dataset']} × {e['clients']} clients, {e['partition']['scheme']}, "
              f"{e['rounds']} rounds, methods {e['methods']}")
    print(f"params.yaml is valid (scale {p['scale']}, seeds {seeds(p)})")


def cmd_data(args) -> None:
    from fedbayes.data import fetch

    for name in args.names:
        path = fetch(name, root=args.root, download=not args.no_download)
        print(f"{name}: {path}")


def cmd_partition(args) -> None:
    from fedbayes import data as ds
    from fedbayes.config import partition_config
    from fedbayes.engine import seeds
    from fedbayes.partition import class_counts, make_partition, plot_partition, save_partition, subsample

    p = _params(args)
    pc = partition_config(p, args.experiment, args.seed)
    arrays = ds.load(pc["dataset"], root=p["paths"]["raw"])
    rng = seeds.rng(args.seed, seeds.PARTITION)
    pool = np.arange(len(arrays.y_train))
    if pc["subsample"] < 1.0:
        pool = subsample(len(pool), pc["subsample"], rng)
    scheme = dict(pc["partition"])
    name = scheme.pop("scheme")
    local = make_partition(arrays.y_train[pool], pc["clients"], name, rng, **scheme)
    parts = [pool[ix] for ix in local]
    meta = {**pc, "dataset_hash": ds.dataset_hash(pc["dataset"], root=p["paths"]["raw"])}
    h = save_partition(args.out, parts, arrays.y_train, arrays.n_classes, meta)
    counts = class_counts(arrays.y_train, parts, arrays.n_classes)
    if args.figure:
        plot_partition(counts, args.figure, title=f"{args.experiment} seed {args.seed} ({name})")
    sizes = counts.sum(1)
    print(f"{args.experiment} seed {args.seed}: {len(parts)} clients, sizes {sizes.min()}–{sizes.max()} "
          f"(total {sizes.sum()}), hash {h[:12]}")


def cmd_train(args) -> None:
    import torch

    from fedbayes.config import run_config
    from fedbayes.engine import load_run_data, pick_device, run_federated

    p = _params(args)
    cfg = run_config(p, args.experiment, args.method, args.seed, args.point)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = pick_device(p.get("device", "auto"))
    data, meta = load_run_data(p, cfg, args.partition, device)
    cfg["partition_hash"] = meta["hash"]
    run_federated(cfg, data, args.out, device, log=lambda m: print(m, flush=True))


def cmd_evaluate(args) -> None:
    from fedbayes.eval.evaluate import evaluate_run

    m = evaluate_run(args.run_dir)
    final = m["final"]
    print(f"{args.run_dir}: round {m['final_round']}  " + "  ".join(f"{k} {v:.4f}" for k, v in final.items()))


def cmd_table(args) -> None:
    from fedbayes.reports.tables import build_table

    p = _params(args)
    df = build_table(p, args.table, out=args.out)
    print(df.to_string(index=False, max_colwidth=40))


def cmd_select(args) -> None:
    from fedbayes.reports.selection import write_selection

    sel = write_selection(_params(args), args.experiment, args.method, args.out)
    for c in sel["candidates"]:
        print(f"{args.experiment}/{args.method} {c['point']:>20}: {sel['criterion']['metric']} = {c['value']:.4f}"
              + ("   <- selected" if c["point"] == sel["point"] else ""))


def cmd_sweep_report(args) -> None:
    from fedbayes.config import experiment_config
    from fedbayes.fileio import write_text_atomic
    from fedbayes.reports.selection import sweep_frame

    p = _params(args)
    df = sweep_frame(p, args.experiment, experiment_config(p, args.experiment)["methods"])
    write_text_atomic(args.out, df.to_csv(index=False, float_format="%.6g"))
    print(df.to_string(index=False))


def cmd_track(args) -> None:
    from fedbayes.tracking import log_run

    p = _params(args)
    run_id = log_run(p, args.experiment, args.method, args.point, args.seed, args.run_dir,
                     partition_figure=args.partition_figure, selected=args.selected)
    if args.marker:
        Path(args.marker).parent.mkdir(parents=True, exist_ok=True)
        Path(args.marker).write_text(run_id + "\n")
    print(f"MLflow run {run_id} ({args.experiment}/{args.method}/{args.point}/seed{args.seed})")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="fedbayes", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    def with_params(sp):
        sp.add_argument("--params", default="params.yaml")
        sp.add_argument("--scale", choices=["paper", "smoke"], default=None,
                        help="override params.yaml's scale")
        return sp

    sp = with_params(sub.add_parser("validate", help="check params.yaml against the schema"))
    sp.set_defaults(fn=cmd_validate)

    sp = sub.add_parser("data", help="fetch and verify datasets into data/raw/<name>/")
    sp.add_argument("names", nargs="+")
    sp.add_argument("--root", default="data/raw")
    sp.add_argument("--no-download", action="store_true", help="use local mirrors only")
    sp.set_defaults(fn=cmd_data)

    sp = with_params(sub.add_parser("partition", help="split one experiment's data into clients for one seed"))
    sp.add_argument("--experiment", required=True)
    sp.add_argument("--seed", type=int, required=True)
    sp.add_argument("--out", required=True)
    sp.add_argument("--figure")
    sp.set_defaults(fn=cmd_partition)

    sp = with_params(sub.add_parser("train", help="run one (experiment, method, seed)"))
    sp.add_argument("--experiment", required=True)
    sp.add_argument("--method", required=True)
    sp.add_argument("--point", default="default", help="sweep point id (see params.yaml methods.<m>.sweep)")
    sp.add_argument("--seed", type=int, required=True)
    sp.add_argument("--partition", required=True)
    sp.add_argument("--out", required=True)
    sp.add_argument("--threads", type=int, default=0)
    sp.set_defaults(fn=cmd_train)

    sp = sub.add_parser("evaluate", help="metrics.json from a run's saved predictions")
    sp.add_argument("run_dir")
    sp.set_defaults(fn=cmd_evaluate)

    sp = with_params(sub.add_parser("table", help="build a table (ours vs published)"))
    sp.add_argument("table")
    sp.add_argument("--out", required=True)
    sp.set_defaults(fn=cmd_table)

    sp = with_params(sub.add_parser("select", help="pick a method's sweep point by params.yaml `selection`"))
    sp.add_argument("--experiment", required=True)
    sp.add_argument("--method", required=True)
    sp.add_argument("--out")
    sp.set_defaults(fn=cmd_select)

    sp = with_params(sub.add_parser("sweep-report", help="every sweep point of an experiment, with the selection"))
    sp.add_argument("--experiment", required=True)
    sp.add_argument("--out", required=True)
    sp.set_defaults(fn=cmd_sweep_report)

    sp = with_params(sub.add_parser("track", help="import one run into MLflow (idempotent)"))
    sp.add_argument("--experiment", required=True)
    sp.add_argument("--method", required=True)
    sp.add_argument("--point", default="default")
    sp.add_argument("--seed", type=int, required=True)
    sp.add_argument("--selected", help="the (experiment, method) selection JSON; tags the run selected=true/false")
    sp.add_argument("--run-dir", required=True)
    sp.add_argument("--partition-figure")
    sp.add_argument("--marker")
    sp.set_defaults(fn=cmd_track)

    args = ap.parse_args(argv)
    from fedbayes.config import ConfigError
    from fedbayes.data import DataUnavailableError

    try:
        args.fn(args)
    except (ConfigError, DataUnavailableError, FileNotFoundError) as e:
        print(f"fedbayes {args.cmd}: error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
