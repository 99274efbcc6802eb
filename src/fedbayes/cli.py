"""fedbayes: one subcommand per step the Snakemake rules run, and a few for people (each listed below).

Every command reads params.yaml itself (validated against the schema first), so a rule passes only
names (experiment, method, seed) and paths; the numbers come from the one source of truth.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import json
import os
import sys
from pathlib import Path

from fedbayes.study import METHOD_SPECS
from fedbayes.study import (ConfigError, check_implementations, experiment_config, load_params, overlay_replacements,
                             paths, run_config, seeds, stand_in_size, sweep_points)
from fedbayes.data import DataIntegrityError, DataUnavailableError
from fedbayes.data.root import fetch_dataset
from fedbayes.engine.partitions import check_partition_target, data_root, ensure_partition, locked, write_partition
from fedbayes.engine.replay import numerics_check, record_replay, unrecordable
from fedbayes.fileio import LockHeld, LockRefused, try_exclusive_lock, write_text_atomic
from fedbayes.frontdoor import check_device, environment_problems
from fedbayes.methods.failure import MethodFailed, format_traceback, method_failure
from fedbayes.methods.spec import REQUIRED, plugin_origin
from fedbayes.ownership import check_outputs
from fedbayes.partition import PartitionIntegrityError
from fedbayes.provenance import code_identity
from fedbayes.reports.headline import write_headline
from fedbayes.reports.rehearsal import build_summary
from fedbayes.reports.toys import TOYS, toy_csv, toy_files
from fedbayes.runfiles import DamagedFile
from fedbayes.runpaths import run_dir, selected_file
from fedbayes.methods.template import new_method
from fedbayes.tracking import RunRef, TrackingUnavailable, import_pairs, import_runs, summary, tracking_uri


def _params(args):
    p = load_params(args.params, scale=args.scale)
    if getattr(args, "table", None) is not None and args.table not in p["tables"]:
        raise ConfigError(f"{_abbreviated(args.table)!r}: not a table of params.yaml (its tables: {', '.join(p['tables'])})")
    data_root(p)  # at rehearsal scale: the stand-ins generated so far read in place of the real data
    return p


def cmd_validate(args) -> None:
    p = _params(args)

    check_implementations(p)  # an installed method that cannot train, before it is planned
    check_device(p)           # a CUDA device this machine lacks (imports torch only for one)

    for name in p["experiments"]:
        e = experiment_config(p, name)
        print(f"{name}: {e['dataset']} × {e['clients']} clients, {e['partition']['scheme']}, "
              f"{e['rounds']} rounds, methods {', '.join(e['methods'])}")
    print(f"params.yaml is valid (scale {p['scale']}, seeds {seeds(p)})")
    if replaced := overlay_replacements(p):
        print(replaced)


def cmd_methods(args) -> None:
    """The methods this installation knows (built-in and installed packages') and, for one, every
    hyperparameter with its code default and what it does: the values params.yaml's `methods.<m>` and
    `experiments.<e>.methods.<m>` override."""
    if args.method is None:
        for key, spec in METHOD_SPECS.items():
            variants = ", ".join(f"@{v}" for v in spec.variants if v)
            origin = plugin_origin(key)   # an installed package's method, not fedbayes' own
            print(f"{key:12s} {spec.doc}" + (f" (predictions: {variants})" if variants else "")
                  + (f"  [outside method, package {origin[0]} {origin[1] or ''}]".replace(" ]", "]") if origin else ""))
        return
    if args.method not in METHOD_SPECS:
        raise ConfigError(f"unknown method {args.method!r}; known: {sorted(METHOD_SPECS)}")
    spec = METHOD_SPECS[args.method]
    print(f"{spec.key}: {spec.doc}\n  implementation {spec.implementation}, numerics version {spec.numerics}"
          + (f", fixed {dict(spec.fixed)}" if spec.fixed else ""))
    for f in dataclasses.fields(spec.params):
        default = "(required)" if f.default is REQUIRED else repr(f.default)
        print(f"  {f.name:18s} {default:12s} {f.metadata['doc']}" + ("  [sweepable]" if f.metadata["sweep"] else ""))


def cmd_new_method(args) -> None:
    root = new_method(args.name, args.out)
    print(f"{root}: the method {args.name!r} as a package (its spec, math, a test); install it with "
          f"`pip install -e {root}`, then `fedbayes methods {args.name}` (docs/adding-a-method.md)")


def cmd_data(args) -> None:
    if args.status and len(args.names) != 1:
        raise SystemExit("fedbayes data: --status takes exactly one dataset")
    root = args.root or (f"data/raw-stand-in/{args.stand_in}" if args.stand_in else "data/raw")
    if args.stand_in:
        check_stand_in_root(root, args.names)
    for name in args.names:
        try:
            path = fetch_dataset(name, root, download=not args.no_download, stand_in=args.stand_in)
        except DataUnavailableError as e:
            if not args.status:
                raise
            # recorded, not raised: tables show this experiment's rows as "not run (data unavailable)"
            write_text_atomic(args.status, json.dumps({"dataset": name, "available": False, "reason": str(e)},
                                                      indent=1) + "\n")
            print(f"{name}: unavailable on this machine (recorded in {args.status}):\n{e}", file=sys.stderr)
            continue
        if args.status:
            write_text_atomic(args.status, json.dumps({"dataset": name, "available": True,
                                                       "manifest": str(path / "manifest.json")}, indent=1) + "\n")
        print(f"{name}: {path}" + (f" (STAND-IN data, generated: size {args.stand_in}; never the real {name})"
                                    if args.stand_in else ""))


def check_stand_in_root(root: str, names: list[str]) -> None:
    """Stand-ins go only where no real dataset lies: a folder with a dataset in it but without the
    stand-ins' sources (``<root>/.source``, fedbayes.data.root.stand_in_sources) holds real data."""
    from fedbayes.data.root import stand_in_sources

    if stand_in_sources(root).is_dir():
        return
    for name in names:
        if (Path(root) / name).is_dir() and any((Path(root) / name).iterdir()):
            raise ConfigError(f"--root {root}: {Path(root) / name} holds real data, which stand-in files would "
                              "replace; give a folder of stand-ins (default data/raw-stand-in/SIZE)")


def cmd_partition(args) -> None:
    p = _params(args)
    check_partition_target(p, args.experiment, args.seed, args.out)
    with locked(args.out):
        check_partition_target(p, args.experiment, args.seed, args.out)
        write_partition(p, args.experiment, args.seed, args.out, args.figure)


THREADS_PER_CPU = 4   # oversubscription a job may ask for; far more makes torch's thread pool crash (SIGSEGV)


def max_threads() -> int:
    """The most intra-op threads ``fedbayes train --threads`` accepts on this machine."""
    return (os.cpu_count() or 1) * THREADS_PER_CPU


def check_train_args(p: dict, args) -> dict:
    """Every argument of ``fedbayes train`` checked against params.yaml before any file is touched; returns
    the run's resolved configuration. ConfigError names the argument and what is accepted."""
    exp, method, point, seed = args.experiment, args.method, args.point, args.seed
    if args.threads < 0:
        raise ConfigError(f"--threads {args.threads}: a number of threads (0: PyTorch's default)")
    if args.threads > max_threads():
        raise ConfigError(f"--threads {args.threads}: at most {max_threads()} threads on this machine "
                          f"({os.cpu_count()} CPUs × {THREADS_PER_CPU}); 0 takes PyTorch's default")
    if exp not in p["experiments"]:
        raise ConfigError(f"--experiment {exp!r}: unknown experiment; params.yaml defines {sorted(p['experiments'])}")
    methods = list(experiment_config(p, exp)["methods"])
    if method not in methods:
        raise ConfigError(f"--method {method!r}: not a method of experiments.{exp} (its methods: {methods})")
    points = list(sweep_points(p, exp, method))
    if point not in points:
        raise ConfigError(f"--point {point!r}: not a point of {exp}/{method}'s sweep {points}")
    if seed not in seeds(p, exp, method):
        raise ConfigError(f"--seed {seed}: {exp}/{method} runs seeds {seeds(p, exp, method)}")
    out, own = Path(args.out), run_dir(paths(p), exp, method, point, seed)
    name = f"{exp}/{method}/{point}/seed{seed}"
    if out.resolve() != own.resolve():
        if out.resolve().is_relative_to(Path(p["paths"]["runs"]).resolve()):
            raise ConfigError(f"--out {out} is not the run directory of {name} ({own}); "
                              "under paths.runs each directory holds its own run")
        try:  # a scratch directory elsewhere, but not one holding another run
            import json

            rec = json.loads((out / "run.json").read_text())["config"]
            ran = tuple(rec.get(k) for k in ("experiment", "method", "point", "seed", "scale"))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            ran = None
        if ran is not None and ran != (exp, method, point, seed, p.get("scale", "paper")):
            other = f"{'/'.join(map(str, ran[:3]))}/seed{ran[3]}, scale {ran[4]}"
            raise ConfigError(f"--out: {out / 'run.json'} records another run ({other}), not {name}; "
                              "give this run's directory or an empty one")
    check_partition_target(p, exp, seed, args.partition)
    return run_config(p, exp, method, seed, point)


def cmd_train(args) -> None:
    p = _params(args)
    cfg = check_train_args(p, args)  # before any file is touched
    try:
        lock = try_exclusive_lock(train_lock(args.out))
    except LockHeld as e:
        raise ConfigError(f"{args.out} is being trained by another process (pid {e.holder or '?'} holds {e.path}); "
                          "two trainers on one run would write the same files: let it finish or stop it") from None
    log = traceback_file(p, args)
    with lock:
        try:
            _train(p, args, cfg)
        except MethodFailed as e:   # one line here; the traceback in the log file only
            write_text_atomic(log, format_traceback(e.__cause__ or e))
            e.log = log
            raise
    log.unlink(missing_ok=True)   # a failed attempt's traceback, owned (and now answered) by this run


def traceback_file(p: dict, args) -> Path:
    """Where ``fedbayes train`` writes the traceback of an exception raised in its method's code: beside the
    workflow's log of the job (``<work>/logs/train/<experiment>/<method>/<point>/seed<k>.log``)."""
    return Path(paths(p)["work"], "logs", "train", args.experiment, args.method, args.point,
                f"seed{args.seed}.traceback")


def train_lock(out: str | Path) -> Path:
    """The lock a trainer holds on its run directory: a hidden file beside it, so that the directory itself
    stays as training leaves it (nothing in it before the run has checked its data and partition)."""
    out = Path(out).resolve()
    return out.with_name(f".{out.name}.train.lock")


def _train(p: dict, args, cfg: dict) -> None:
    import torch

    from fedbayes.engine.data import load_run_data  # these two import torch (seconds): only a training job pays it
    from fedbayes.engine.loop import pick_device, run_federated

    # a (re)training run invalidates the run's metrics: Snakemake deletes history.csv and run.json before
    # the job, and if the job is then killed an old metrics.json would still look up to date to a later
    # `snakemake <run>/metrics.json` (it does not look behind an existing target's missing inputs). With
    # its history gone, metrics.json describes nothing and goes now; beside a history it still describes,
    # it goes only once training starts (a job failing on its data or device first costs nothing).
    metrics = Path(args.out) / "metrics.json"
    if not (Path(args.out) / "history.csv").exists():
        metrics.unlink(missing_ok=True)
    # a run depends only on committed files in the DAG (so a fresh clone reuses finished runs): it
    # fetches its data and writes its partition itself when they are missing
    for d in (cfg["dataset"], cfg.get("ood")):
        if d:
            fetch_dataset(d, data_root(p), repair=False, stand_in=stand_in_size(p))
    partition = ensure_partition(p, args.experiment, args.seed, args.partition)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = pick_device(p.get("device", "auto"))
    data, meta = load_run_data(data_root(p), cfg, partition, device)
    cfg["partition_hash"] = meta["hash"]
    batch = p.get("batch_clients", "auto")
    metrics.unlink(missing_ok=True)
    run_federated(cfg, data, args.out, device, log=lambda m: print(m, flush=True),
                  batch_clients=None if batch == "auto" else bool(batch))


def cmd_evaluate(args) -> None:
    try:   # a run still training has no predictions yet: that is no reason to retrain it
        if Path(args.run_dir).is_dir():
            with try_exclusive_lock(train_lock(args.run_dir)):
                pass
    except LockHeld as e:
        raise ConfigError(f"{args.run_dir} is still training (pid {e.holder or '?'} holds {e.path}): evaluate it "
                          "when it has finished (Snakemake does so by itself)") from None
    if not (Path(args.run_dir) / "predictions.npz").exists():
        raise FileNotFoundError(
            f"{args.run_dir}/predictions.npz is missing (predictions are not committed, e.g. in a fresh "
            f"clone): retrain the run to recompute its metrics, e.g. `snakemake -R train <target>` or "
            f"delete {args.run_dir}/history.csv")
    from fedbayes.eval.evaluate import MetricsChanged, evaluate_run  # (lazy: scipy, sklearn)

    try:
        m = evaluate_run(args.run_dir)
    except MetricsChanged as e:   # one line naming the run, the metric, both values and the remedy
        raise ConfigError(str(e)) from None
    final = m["final"]
    print(f"{args.run_dir}: round {m['final_round']}  " + "  ".join(f"{k} {v:.4f}" for k, v in final.items()))


# the configuration keys a replay's training reads from run.json (fedbayes.config.run_config writes them)
REPLAYED_CONFIG = ("experiment", "method", "seed", "rounds", "dataset", "clients", "partition", "model", "input_scale",
                   "hparams")


def cmd_replay(args) -> None:
    """Retrain a finished run's first rounds with the code at hand and judge them against its history by
    machine class (engine.replay.replay_verdict): bit-identical, within round-off, within the seed spread,
    or differs (exit 1)."""
    from fedbayes.engine.replay import replay_verdict

    if args.record and (why := unrecordable(code_identity())) is not None:   # before any replay work
        raise SystemExit(f"fedbayes replay --record: {why}")
    if args.rounds < 1:
        raise ConfigError(f"--rounds {args.rounds}: replay at least one round")
    for d in args.run_dirs:
        if not (Path(d) / "run.json").exists() or not (Path(d) / "history.csv").exists():
            raise ConfigError(f"{d}: not a finished run (run.json and history.csv are needed)")
        try:
            cfg = json.loads((Path(d) / "run.json").read_text())["config"]
            of = int(cfg["rounds"])
        except (ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"{d}/run.json is damaged ({type(e).__name__}: {e})") from None
        if missing := [k for k in REPLAYED_CONFIG if k not in cfg]:   # what the replay's training reads
            raise ConfigError(f"{d}/run.json is damaged: its config lacks {', '.join(missing)}")
        if not isinstance(cfg["method"], str) or cfg["method"] not in METHOD_SPECS:
            raise ConfigError(f"{d}/run.json records method {cfg['method']!r}, which is not installed here "
                              f"(known: {', '.join(sorted(METHOD_SPECS))})")
        if args.rounds > of:
            raise ConfigError(f"--rounds {args.rounds}: {d} has {of} rounds")
    if args.rows_out:   # the replayed rows only (engine.replay.perturbed_rows' child)
        from fedbayes.engine.replay import replay_rows

        rows = replay_rows(args.run_dirs[0], args.rounds, args.root)
        if isinstance(rows, str):
            raise ConfigError(rows)
        write_text_atomic(Path(args.rows_out), json.dumps(rows[1]))
        return
    bad = 0
    for d in args.run_dirs:
        v = replay_verdict(d, rounds=args.rounds, raw=args.root)
        bad += v["verdict"] == "differs"
        recorded = ""
        if args.record and v["verdict"] != "differs":
            r = record_replay(d, args.rounds, v)
            recorded = f" (recorded in run.json: replayed at {r['commit'][:12]}, rounds {r['rounds']} of {r['of']})"
        print(f"{d}: {v['line']}{recorded}", flush=True)
    if bad:
        print(f"fedbayes replay: {bad} of {len(args.run_dirs)} runs differ beyond round-off and the seed spread; a change "
              "that alters numbers bumps its numerics version (the method spec's numerics, or fedbayes/study/rerun.py "
              "CORE_NUMERICS)", file=sys.stderr)
        sys.exit(1)


def cmd_numerics_check(args) -> None:
    """The workflow's numerics rule (engine.replay.numerics_check) for one or more methods in one process:
    exit 0 with each method's check recorded (one line when this machine rounds differently from the
    goldens' machine), or 1 with one line naming the method and the first value its code no longer
    computes."""
    from fedbayes.engine.replay import check_due, golden_methods, roundoff_note

    if args.record and len(args.methods) != 1:
        raise ConfigError("--record names one method's record; give one method, or --work")
    methods = golden_methods(args.goldens) if args.all else args.methods
    if not methods:
        raise ConfigError("name the methods to check, or --all")
    unknown = [m for m in methods if m not in METHOD_SPECS]
    if unknown:
        raise ConfigError(f"not installed: {', '.join(unknown)} (`fedbayes methods` lists them)")
    hparams = json.loads(args.hparams) if args.hparams else None
    records = []
    for i, m in enumerate(methods):
        record = Path(args.record) if args.record else Path(args.work) / "numerics" / f"{m}.json"
        hp = hparams if i == 0 else None
        if args.due_only and not check_due(m, record, hp):
            continue
        try:
            problem = numerics_check(m, args.goldens, record, hp)
        except Exception as e:   # an exception in the method's own code: one line naming it, file and line
            failed = method_failure(m, e, during="replaying its numerics golden")
            if failed is None:
                raise
            log = Path(args.work) / "logs" / "numerics" / f"{m}.traceback"
            write_text_atomic(log, format_traceback(e))
            print(f"fedbayes numerics-check: {failed}; traceback in {log}", file=sys.stderr)
            sys.exit(1)
        if problem:
            print(f"fedbayes numerics-check: {problem}", file=sys.stderr)
            sys.exit(1)
        records.append(record)
    note = roundoff_note(records)
    if note:
        print(f"fedbayes numerics-check: {note}", flush=True)


def cmd_table(args) -> None:
    p = _params(args)
    from fedbayes.reports.scorecard import table_summary
    from fedbayes.reports.tables import build_table, built_files, table_csv  # (lazy: matplotlib, pandas)

    if args.table not in p["tables"]:
        raise ConfigError(f"table {args.table!r}: not a table of params.yaml `tables` {sorted(p['tables'])}")
    files = built_files(p, args.table, args.out)
    check_outputs(p, "--out", files, built_files(p, args.table, table_csv(p, args.table)), ".csv")
    md = Path(args.out).with_suffix(".md")
    if md.exists() and not Path(args.out).exists():   # a Markdown file of its own (README.md), not a table's
        raise ConfigError(f"--out {args.out}: {md} exists without {args.out} beside it and is not a table's; "
                          "give another path")
    df = build_table(p, args.table, out=args.out)
    print("\n".join(table_summary(df, args.table, built_files(p, args.table, args.out))), flush=True)


def cmd_headline(args) -> None:
    p = _params(args)
    absent = []
    files = write_headline(p, args.table_csv, args.out, absent)
    plots = [f for f in files if f.suffix == ".csv"]
    print(f"headline ({p['headline']['table']}): {len(files) - len(plots)} experiment × method files under "
          f"{args.out}/ for `dvc metrics show`, {len(plots)} curve files for `dvc plots show`", flush=True)
    if absent:
        print(f"  no curve (runs absent): {', '.join(dict.fromkeys(absent))}", flush=True)
    print("\n".join(f"  wrote {f}" for f in plots), flush=True)


def cmd_scorecard(args) -> None:
    p = _params(args)
    from fedbayes.reports.scorecard import build_scorecard, terminal_line  # (lazy: pandas)

    print(f"wrote {args.out}: {terminal_line(build_scorecard(p, args.out))}")


def cmd_rehearsal_summary(args) -> None:
    p = _params(args)
    if not stand_in_size(p):
        raise ConfigError(f"scale {p['scale']}: the rehearsal summary is built at scale rehearsal (--scale rehearsal)")
    rows = build_summary(p, args.out)
    bad = [f"{r['experiment']}/{r['method']}" for r in rows if not r["ok"]]
    print(f"wrote {args.out}: {len({r['experiment'] for r in rows})} experiments, {len(rows) - len(bad)} of "
          f"{len(rows)} experiment × method pairs ran on stand-in data" + (f"; not: {', '.join(bad)}" if bad else ""))
    if bad:
        sys.exit(1)


def cmd_toy(args) -> None:
    p = _params(args)
    if args.name not in TOYS:
        raise SystemExit(f"fedbayes toy: unknown toy {args.name!r}; known: {sorted(TOYS)}")
    if args.name not in (p.get("toys") or {}):
        raise ConfigError(f"toy {args.name!r}: params.yaml has no `toys.{args.name}` block (its toys: "
                          f"{', '.join(p.get('toys') or {}) or 'none'})")
    # the toy's own files, or paths outside the workflow's folders (fedbayes.ownership), as `table --out`
    check_outputs(p, "--out", toy_files(p, args.name, args.out), toy_files(p, args.name, toy_csv(p, args.name)), ".csv")
    md = Path(args.out).with_suffix(".md")
    if md.exists() and not Path(args.out).exists():   # a Markdown file of its own (README.md), not a toy's
        raise ConfigError(f"--out {args.out}: {md} exists without {args.out} beside it and is not a toy's; "
                          "give another path")
    print(TOYS[args.name].build(p, args.out).to_string(index=False))


def cmd_select(args) -> None:
    from fedbayes.reports.selection import write_selection  # (lazy: pandas)

    p = _params(args)
    own = selected_file(paths(p), args.experiment, args.method)
    if args.out:
        check_outputs(p, "--out", [Path(args.out)], [own], ".json")
    sel = write_selection(p, args.experiment, args.method, args.out)
    if "from" in sel["criterion"]:
        print(f"{args.experiment}/{args.method}: {sel['point']} (selected on {sel['criterion']['from']})")
    for c in sel["candidates"]:
        print(f"{args.experiment}/{args.method} {c['point']:>20}: {sel['criterion']['metric']} = {c['value']:.4f}"
              + ("   <- selected" if c["point"] == sel["point"] else ""))


def cmd_sweep_report(args) -> None:
    p = _params(args)
    from fedbayes.reports.selection import sweep_frame  # (lazy: pandas)

    check_outputs(p, "--out", [Path(args.out)], sweep_report_files(p, args.experiment), ".csv")
    df = sweep_frame(p, args.experiment, list(experiment_config(p, args.experiment)["methods"]))
    write_text_atomic(args.out, df.to_csv(index=False, float_format="%.6g"))
    print(df.to_string(index=False))


def sweep_report_files(p: dict, experiment: str) -> list[Path]:
    """Where the workflow keeps an experiment's sweep report: ``<reports>/sweeps/<experiment>.csv``, and
    ``<reports>/<folder>/sweep_<experiment>.csv`` beside each table with ``sweeps: beside``."""
    reports = Path(paths(p)["reports"])
    folders = sorted({t.rpartition("/")[0] for t, s in p["tables"].items() if s.get("sweeps") == "beside"} - {""})
    return [reports / "sweeps" / f"{experiment}.csv"] + [reports / f / f"sweep_{experiment}.csv" for f in folders]


def disk_full(e: BaseException) -> bool:
    """Is ``e`` (or what it wraps) a full disk: ENOSPC / EDQUOT, or SQLite's "database or disk is full"
    raised through SQLAlchemy and MLflow?"""
    while e is not None:
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if "disk is full" in str(e).lower() or "no space left on device" in str(e).lower():
            return True
        e = e.__cause__ or e.__context__
    return False


def cmd_track(args) -> None:
    """Import runs into MLflow (tracking.import_runs): the runs given (``--point/--seed/--run-dir``, or every
    ``--run`` of one (experiment, method), in one process so MLflow's import is paid once), written anew;
    or every run of a table's pairs (``--pairs``, the workflow's import job), those the store holds as they
    are left alone, closing with one summary line."""
    import time

    p = _params(args)
    t0 = time.monotonic()
    try:
        if args.pairs:
            if not (args.name and args.figure and args.marker):
                raise SystemExit("fedbayes track: --pairs needs --name, --figure and --marker")
            try:
                pairs = json.loads(args.pairs)
            except ValueError:
                raise SystemExit(f"fedbayes track: --pairs is not JSON: {args.pairs[:80]!r}") from None
            n = import_pairs(p, pairs, args.figure, args.marker, log=lambda line: print(line, flush=True))
            print(summary(args.name, n, tracking_uri(p), time.monotonic() - t0), flush=True)
            return
        if not (args.experiment and args.method):
            raise SystemExit("fedbayes track: give --experiment and --method (or --pairs)")
        runs = args.run or [(args.point, args.seed, args.run_dir, args.partition_figure)]
        if any(r[1] is None or r[2] is None for r in runs):
            raise SystemExit("fedbayes track: give --seed and --run-dir, or --run POINT SEED RUN_DIR FIGURE")
        refs = [RunRef(args.experiment, args.method, point, int(seed), Path(folder), figure or None, args.selected)
                for point, seed, folder, figure in runs]
        n = import_runs(p, refs, args.marker, again=True, log=None)
    except TrackingUnavailable as e:  # one line naming the URI or the store file (tracking.store)
        print(f"fedbayes track: error: {e}", file=sys.stderr)
        sys.exit(2)
    except Exception as e:  # noqa: BLE001  (the store's own exception types: sqlite3, SQLAlchemy, MLflow)
        if not disk_full(e):
            raise
        print(f"fedbayes track: error: the MLflow store {tracking_uri(p)} is on a full disk "
              f"({(str(e).strip().splitlines() or ['?'])[0][:160]}); free space and track again "
              "(an import never half-replaces a run: the previous one stays until the new one is finished)",
              file=sys.stderr)
        sys.exit(2)
    for r, run_id in zip(refs, n["ids"]):
        print(f"MLflow run {run_id} ({r.experiment}/{r.method}/{r.point}/seed{r.seed})", flush=True)


def build_parser() -> argparse.ArgumentParser:
    """The `fedbayes` command line: one subcommand per rule of the workflow (and a few for people)."""
    ap = argparse.ArgumentParser(prog="fedbayes", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    def with_params(sp):
        sp.add_argument("--params", default="params.yaml", help="the parameters file (default: %(default)s)")
        sp.add_argument("--scale", choices=["paper", "smoke", "rehearsal"], default=None,
                        help="override params.yaml's scale: paper, smoke (the shrunk DAG) or rehearsal (the smoke DAG on "
                             "stand-in data) (default: params.yaml's `scale`)")
        return sp

    sp = with_params(sub.add_parser("validate", help="check params.yaml against the schema and the known methods; exit 1 on an error"))
    sp.set_defaults(fn=cmd_validate)

    sp = sub.add_parser("methods", help="the known methods; with a key, its hyperparameters and code defaults")
    sp.add_argument("method", nargs="?", help="a method key (fedavg, bayesadmm@mean, ...); without one, list them all")
    sp.set_defaults(fn=cmd_methods)

    sp = sub.add_parser("new-method", help="write a working method package to start from (out of tree: its spec, "
                                           "math, a test and pyproject.toml; pip install -e it)")
    sp.add_argument("name", help="the method's key in params.yaml (a lowercase identifier, e.g. fedswag)")
    sp.add_argument("--out", help="the package's folder (default: ./fedbayes-NAME; must be new or empty)")
    sp.set_defaults(fn=cmd_new_method)

    sp = sub.add_parser("data", help="fetch and verify datasets into data/raw/<name>/")
    sp.add_argument("names", nargs="+", help="dataset names (fmnist, mnist, cifar10, ...)")
    sp.add_argument("--root", help="where to put them (default data/raw; with --stand-in data/raw-stand-in/SIZE)")
    sp.add_argument("--stand-in", choices=["tiny", "paper"], metavar="SIZE",
                    help="generate stand-in files in the dataset's real format (tiny or paper size; deterministic) "
                         "and fetch them by the real code, verified against their own checksums: to rehearse "
                         "the pipeline without the real data, never a result")
    sp.add_argument("--no-download", action="store_true", help="use local mirrors only (FEDBAYES_DATA_MIRRORS; default: "
                    "download when a mirror has no copy)")
    sp.add_argument("--status", help="write whether the dataset could be obtained to this JSON file and "
                                     "exit 0 either way (how the DAG records data availability)")
    sp.set_defaults(fn=cmd_data)

    sp = with_params(sub.add_parser("partition", help="split one experiment's data into clients for one seed"))
    sp.add_argument("--experiment", required=True, help="an experiment of params.yaml `experiments`")
    sp.add_argument("--seed", type=int, required=True, help="the run seed the split is drawn for")
    sp.add_argument("--out", required=True, help="the partition file (.npz: client index lists)")
    sp.add_argument("--figure", help="also draw the clients' class mix to this PNG (default: no figure)")
    sp.set_defaults(fn=cmd_partition)

    sp = with_params(sub.add_parser("train", help="run one (experiment, method, sweep point, seed): history.csv, "
                                    "predictions, run.json"))
    sp.add_argument("--experiment", required=True, help="an experiment of params.yaml `experiments`")
    sp.add_argument("--method", required=True, help="a method of that experiment (`fedbayes methods` lists them)")
    sp.add_argument("--point", default="default", help="sweep point id, e.g. local_epochs=5 (params.yaml "
                    "methods.<m>.sweep; default: %(default)s, the method without a sweep)")
    sp.add_argument("--seed", type=int, required=True, help="the run seed")
    sp.add_argument("--partition", required=True, help="the seed's partition file (fedbayes partition)")
    sp.add_argument("--out", required=True, help="the run directory (results/runs/<experiment>/<method>/<point>/seed<k>)")
    sp.add_argument("--threads", type=int, default=0, help="intra-op threads (default: %(default)s, PyTorch's own)")
    sp.set_defaults(fn=cmd_train)

    sp = sub.add_parser("evaluate", help="metrics.json from a run's saved predictions")
    sp.add_argument("run_dir", help="a finished run's directory (fedbayes train --out)")
    sp.set_defaults(fn=cmd_evaluate)

    sp = sub.add_parser("replay", help="retrain a finished run's first rounds and compare them: bit for bit on its "
                                       "machine class, within round-off or the seed spread on another")
    sp.add_argument("run_dirs", nargs="+", help="finished runs' directories")
    sp.add_argument("--rounds", type=int, default=1, help="how many first rounds to retrain (default: %(default)s)")
    sp.add_argument("--root", default="data/raw", help="where the datasets are (fedbayes data; default: %(default)s)")
    sp.add_argument("--record", action="store_true",
                    help="record the replay's verdict in the run's run.json (\"replayed\"; a clean checkout only): "
                         "the provenance of a run trained from a modified tree or before run.json recorded its code")
    sp.add_argument("--rows-out", help=argparse.SUPPRESS)
    sp.set_defaults(fn=cmd_replay)

    sp = sub.add_parser("numerics-check", help="replay methods' numerics goldens (bit for bit on their machine class, "
                                               "within round-off on another); record the code they hold for "
                                               "(the workflow runs it when the code changed since the last check)")
    sp.add_argument("methods", nargs="*", help="method keys (one process for all)")
    sp.add_argument("--all", action="store_true", help="every installed method with a committed golden")
    sp.add_argument("--due-only", action="store_true", help="only the methods whose code changed since their last check")
    sp.add_argument("--goldens", default="tests/golden/numerics", help="the committed numerics goldens "
                    "(default: %(default)s)")
    sp.add_argument("--work", default="work", help="where each check's record goes: <work>/numerics/<method>.json "
                    "(default: %(default)s)")
    sp.add_argument("--record", help="one method's record file instead (default: under --work)")
    sp.add_argument("--hparams", help="JSON: a run's hyperparameters, for the first method (a method without a committed "
                    "golden gets one from them)")
    sp.set_defaults(fn=cmd_numerics_check)

    sp = with_params(sub.add_parser("table", help="build a table (ours vs published): its CSV, .md and figures"))
    sp.add_argument("table", help="a table of params.yaml `tables` (table1, fedlap/table1, ...)")
    sp.add_argument("--out", required=True, help="the table's CSV (reports/<table>.csv); the .md and figures go beside it")
    sp.set_defaults(fn=cmd_table)

    sp = with_params(sub.add_parser("scorecard", help="reports/README.md: which published cells reproduce, the papers' claims"))
    sp.add_argument("--out", required=True, help="the scorecard's Markdown file (reports/README.md)")
    sp.set_defaults(fn=cmd_scorecard)

    sp = with_params(sub.add_parser("headline", help="DVC metrics and plots of the headline table (params.yaml headline)"))
    sp.add_argument("table_csv", help="the headline table's CSV (fedbayes table)")
    sp.add_argument("--out", required=True, help="directory of the metrics JSONs (<experiment>/<method>.json); "
                    "the curve CSVs go to <reports>/plots/")
    sp.set_defaults(fn=cmd_headline)

    sp = with_params(sub.add_parser("rehearsal-summary", help="what a rehearsal (scale rehearsal) ran: every "
                                    "experiment × method on stand-in data"))
    sp.add_argument("--out", required=True, help="the summary's Markdown file (reports/rehearsal/summary.md)")
    sp.set_defaults(fn=cmd_rehearsal_summary)

    sp = with_params(sub.add_parser("toy", help="a data-free reproduction target (params.yaml toys), e.g. fedep/table4"))
    sp.add_argument("name", help="a toy of params.yaml `toys` (fedep/table4, bayesadmm/figures)")
    sp.add_argument("--out", required=True, help="its CSV (reports/<name>.csv); the .md and figures go beside it")
    sp.set_defaults(fn=cmd_toy)

    sp = with_params(sub.add_parser("select", help="pick a method's sweep point by params.yaml `selection`"))
    sp.add_argument("--experiment", help="an experiment of params.yaml `experiments`")
    sp.add_argument("--method", help="a method of that experiment")
    sp.add_argument("--out", help="the selection JSON (default: results/runs/<experiment>/<method>/selected.json)")
    sp.set_defaults(fn=cmd_select)

    sp = with_params(sub.add_parser("sweep-report", help="every sweep point of an experiment, with the selection and "
                                    "how clearly it won"))
    sp.add_argument("--experiment", required=True, help="an experiment of params.yaml `experiments`")
    sp.add_argument("--out", required=True, help="the report's CSV (reports/sweeps/<experiment>.csv)")
    sp.set_defaults(fn=cmd_sweep_report)

    sp = with_params(sub.add_parser("track", help="import runs into MLflow (idempotent)"))
    sp.add_argument("--experiment", help="an experiment of params.yaml `experiments`")
    sp.add_argument("--method", help="a method of that experiment")
    sp.add_argument("--point", default="default", help="the run's sweep point (default: %(default)s)")
    sp.add_argument("--seed", type=int, help="the run's seed (with --run-dir)")
    sp.add_argument("--selected", help="the (experiment, method) selection JSON; tags the run selected=true/false")
    sp.add_argument("--run-dir", help="one run to import (else every --run)")
    sp.add_argument("--partition-figure", help="the run's partition figure, logged as an artifact")
    sp.add_argument("--run", nargs=4, action="append", metavar=("POINT", "SEED", "RUN_DIR", "FIGURE"),
                    help="a run of this (experiment, method) to import (repeatable; FIGURE may be '')")
    sp.add_argument("--marker", help="write the store and a line per imported MLflow run (id, point, seed, content hash) to this file "
                    "(the workflow's record of the import)")
    sp.add_argument("--pairs", help='instead: every run of these (experiment, method) pairs, JSON {"experiment": '
                    '[methods]} (a table\'s; runs the store holds as they are are not written again)')
    sp.add_argument("--name", help="with --pairs: what the pairs are (a table's name), for the summary line")
    sp.add_argument("--figure", help="with --pairs: a run's partition figure, a path with {experiment} and {seed}")
    sp.set_defaults(fn=cmd_track)
    return ap


# arguments naming a file or folder: an empty one names none (Path("") is the working directory)
PATH_ARGS = ("params", "out", "partition", "figure", "root", "status", "record", "rows_out", "goldens", "work",
             "marker", "table_csv", "run_dir", "selected", "partition_figure")


def argument_problem(args) -> str | None:
    """What argparse cannot say about the parsed arguments: an empty path, a --run SEED that is no integer."""
    for dest in PATH_ARGS:
        if getattr(args, dest, None) == "":
            return f"--{dest.replace('_', '-')}: an empty path names no file"
    for run in getattr(args, "run", None) or ():
        if not run[1].lstrip("-").isdigit():
            return f"--run {' '.join(run)}: SEED {run[1]!r} is not an integer"
    return None


def main(argv=None) -> None:
    ap = build_parser()
    args = ap.parse_args(argv)
    if (why := argument_problem(args)) is not None:
        ap.error(why)
    if env := environment_problems():
        print(f"fedbayes {args.cmd}: error: " + "; ".join(env), file=sys.stderr)
        sys.exit(2)
    try:
        args.fn(args)
    except (ConfigError, DataUnavailableError, DataIntegrityError, PartitionIntegrityError, DamagedFile,
            FileNotFoundError, LockRefused) as e:
        print(f"fedbayes {args.cmd}: error: {e}", file=sys.stderr)
        sys.exit(2)
    except MethodFailed as e:   # an exception in a method's code: the method, its file and line
        log = getattr(e, "log", None)
        print(f"fedbayes {args.cmd}: error: {e}" + (f"; traceback in {log}" if log else ""), file=sys.stderr)
        sys.exit(1)
    except OSError as e:  # a full disk, a read-only or forbidden place, a file that cannot be one: one line
        if e.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM) and e.filename is None:
            raise
        where = f": {_abbreviated(str(e.filename))}" if e.filename else ""
        print(f"fedbayes {args.cmd}: error: {e.strerror}{where}", file=sys.stderr)
        sys.exit(2)


def _abbreviated(name: str, keep: int = 120) -> str:
    return name if len(name) <= keep else f"{name[:keep]}… ({len(name)} characters)"


if __name__ == "__main__":
    main()
