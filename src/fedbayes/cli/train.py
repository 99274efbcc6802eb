"""Subcommands of one run: ``train`` (its arguments checked against params.yaml before any file is
touched, one trainer per run directory) and ``evaluate`` (metrics.json from its predictions)."""

from __future__ import annotations

import os
from pathlib import Path

from fedbayes.cli.common import _params
from fedbayes.data.root import fetch_dataset
from fedbayes.engine.partitions import check_partition_target, data_root, ensure_partition
from fedbayes.fileio import LockHeld, try_exclusive_lock, write_text_atomic
from fedbayes.methods.failure import MethodFailed, format_traceback
from fedbayes.runpaths import run_dir
from fedbayes.study import ConfigError, paths, stand_in_size
from fedbayes.study.model import RunSpec, Study


THREADS_PER_CPU = 4   # oversubscription a job may ask for; far more makes torch's thread pool crash (SIGSEGV)


def max_threads() -> int:
    """The most intra-op threads ``fedbayes train --threads`` accepts on this machine."""
    return (os.cpu_count() or 1) * THREADS_PER_CPU


def check_train_args(study: Study, args) -> RunSpec:
    """Every argument of ``fedbayes train`` checked against the study before any file is touched; returns
    the run's RunSpec. ConfigError names the argument and what is accepted."""
    p = study.params
    exp, method, point, seed = args.experiment, args.method, args.point, args.seed
    if args.threads < 0:
        raise ConfigError(f"--threads {args.threads}: a number of threads (0: PyTorch's default)")
    if args.threads > max_threads():
        raise ConfigError(f"--threads {args.threads}: at most {max_threads()} threads on this machine "
                          f"({os.cpu_count()} CPUs × {THREADS_PER_CPU}); 0 takes PyTorch's default")
    if exp not in study.experiments:
        raise ConfigError(f"--experiment {exp!r}: unknown experiment; params.yaml defines {sorted(study.experiments)}")
    methods = list(study.experiments[exp].methods)
    if method not in methods:
        raise ConfigError(f"--method {method!r}: not a method of experiments.{exp} (its methods: {methods})")
    plan = study.experiments[exp].methods[method]
    if point not in plan.points:
        raise ConfigError(f"--point {point!r}: not a point of {exp}/{method}'s sweep {list(plan.points)}")
    if seed not in plan.seeds:
        raise ConfigError(f"--seed {seed}: {exp}/{method} runs seeds {list(plan.seeds)}")
    out, own = Path(args.out), run_dir(study.paths, exp, method, point, seed)
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
        if ran is not None and ran != (exp, method, point, seed, study.scale):
            other = f"{'/'.join(map(str, ran[:3]))}/seed{ran[3]}, scale {ran[4]}"
            raise ConfigError(f"--out: {out / 'run.json'} records another run ({other}), not {name}; "
                              "give this run's directory or an empty one")
    check_partition_target(p, exp, seed, args.partition)
    return study.run(exp, method, seed, point)


def cmd_train(args) -> None:
    p = _params(args)
    run = check_train_args(Study.resolve(p), args)  # before any file is touched
    try:
        lock = try_exclusive_lock(train_lock(args.out))
    except LockHeld as e:
        raise ConfigError(f"{args.out} is being trained by another process (pid {e.holder or '?'} holds {e.path}); "
                          "two trainers on one run would write the same files: let it finish or stop it") from None
    log = traceback_file(p, args)
    with lock:
        try:
            _train(p, args, run)
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


def _train(p: dict, args, run: RunSpec) -> None:
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
    cfg = run.config
    for d in (cfg["dataset"], cfg.get("ood")):
        if d:
            fetch_dataset(d, data_root(p), repair=False, stand_in=stand_in_size(p))
    partition = ensure_partition(p, args.experiment, args.seed, args.partition)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = pick_device(p.get("device", "auto"))
    data, meta = load_run_data(data_root(p), cfg, partition, device)
    batch = p.get("batch_clients", "auto")
    metrics.unlink(missing_ok=True)
    run_federated(run.on_partition(meta["hash"]), data, args.out, device, log=lambda m: print(m, flush=True),
                  batch_clients=None if batch == "auto" else bool(batch))


def cmd_evaluate(args) -> None:
    try:   # a run still training has no predictions yet: that is no reason to retrain it
        if Path(args.run_dir).is_dir():
            with try_exclusive_lock(train_lock(args.run_dir)):
                pass
    except LockHeld as e:
        raise ConfigError(f"{args.run_dir} is still training (pid {e.holder or '?'} holds {e.path}): evaluate it "
                          "when it has finished (Snakemake does so by itself)") from None
    from fedbayes.eval.evaluate import MetricsChanged, evaluate_run  # (lazy: scipy, sklearn)

    try:
        m = evaluate_run(args.run_dir)
    except MetricsChanged as e:   # one line naming the run, the metric, both values and the remedy
        raise ConfigError(str(e)) from None
    final = m["final"]
    print(f"{args.run_dir}: round {m['final_round']}  " + "  ".join(f"{k} {v:.4f}" for k, v in final.items()))
    if skipped := m.get("not_evaluated"):   # metrics added after the run's predictions were gone
        print(f"{args.run_dir}: not evaluated: {', '.join(skipped)} ({args.run_dir}/predictions.npz is missing: "
              "retrain the run to compute them)")
