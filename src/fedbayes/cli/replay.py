"""Subcommands that retrain to check numbers: ``replay`` (a finished run's first rounds) and
``numerics-check`` (methods' numerics goldens)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from fedbayes.engine.goldens import numerics_check
from fedbayes.engine.replay import history_gap, record_replay, unrecordable
from fedbayes.engine.replay_verdict import replay_verdict
from fedbayes.fileio import user_cache_path, write_text_atomic
from fedbayes.methods.failure import format_traceback, method_failure
from fedbayes.ownership import check_own_kind, json_with
from fedbayes.provenance import code_identity
from fedbayes.study import METHOD_SPECS, ConfigError


# the configuration keys a replay's training reads from run.json (fedbayes.config.run_config writes them)
REPLAYED_CONFIG = ("experiment", "method", "seed", "rounds", "dataset", "clients", "partition", "model", "input_scale",
                   "hparams")


def cmd_replay(args) -> None:
    """Retrain a finished run's first rounds with the code at hand and judge them against its history by
    machine class (engine.replay_verdict.replay_verdict): bit-identical, within round-off, within the seed spread,
    or differs (exit 1)."""
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
        if problem := history_gap(d, args.rounds):   # a replay compares the rows there: all of them, or nothing
            raise ConfigError(problem)
    if args.rows_out:   # the replayed rows only (engine.replay_verdict.perturbed_rows' child)
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


def record_file(args, method: str) -> Path:
    """Where ``numerics-check`` records ``method``'s check: ``--record``, else ``<work>/numerics/<method>.json``."""
    return Path(args.record) if args.record else Path(args.work) / "numerics" / f"{method}.json"


NUMERICS_CACHE_ENV = "FEDBAYES_NUMERICS_CACHE"


def passed_folder() -> Path:
    """Where ``--remember`` keeps bit-for-bit passes (``engine.goldens.passed_mark``): ``numerics-passed`` in
    the user's cache, or ``$FEDBAYES_NUMERICS_CACHE``."""
    return user_cache_path("numerics-passed", NUMERICS_CACHE_ENV)


def cmd_numerics_check(args) -> None:
    """The workflow's numerics rule (engine.goldens.numerics_check) for one or more methods in one process:
    exit 0 with each method's check recorded (one line when this machine rounds differently from the
    goldens' machine), or 1 with one line naming the method and the first value its code no longer
    computes."""
    from fedbayes.engine.goldens import check_due, golden_methods, roundoff_note

    if args.record and len(args.methods) != 1:
        raise ConfigError("--record names one method's record; give one method, or --work")
    methods = golden_methods(args.goldens) if args.all else args.methods
    paths = []   # (method, hyperparameters of one code path): --path
    for h in args.path or ():
        try:
            d = json.loads(h)
            paths.append((d["method"], dict(d["hparams"])))
        except (ValueError, TypeError, KeyError):
            raise ConfigError(f'--path is not a JSON object {{"method": ..., "hparams": {{...}}}}: {h[:80]!r}') from None
    if not methods and not paths:
        raise ConfigError("name the methods to check, or --all, or --path")
    if args.hparams and not methods:
        raise ConfigError("--hparams are the first named method's: name it")
    unknown = [m for m in dict.fromkeys(methods + [m for m, _ in paths]) if m not in METHOD_SPECS]
    if unknown:
        raise ConfigError(f"not installed: {', '.join(unknown)} (`fedbayes methods` lists them)")
    checks = []   # (method, hyperparameters of one code path or None): every --hparams is the first method's
    for h in args.hparams or ():
        try:
            hp = json.loads(h)
        except ValueError:
            hp = None
        if not isinstance(hp, dict):   # JSON, but not hyperparameters by name (-1, [1], "x")
            raise ConfigError(f"--hparams is not a JSON object of hyperparameters: {h[:80]!r}")
        checks.append((methods[0], hp))
    checks = ((checks or [(methods[0], None)]) + [(m, None) for m in methods[1:]] if methods else []) + paths
    # a record is written over only where it is one already (under --work, the workflow's folder of them, or
    # one cut short: a check that is due anyway)
    ours = json_with("method", damaged_ok=not args.record)
    for m in dict.fromkeys(m for m, _ in checks):
        check_own_kind("--record" if args.record else "--work", record_file(args, m), ".json", ours,
                       "a numerics record (fedbayes numerics-check)")
    records = []
    for m, hp in checks:
        record = record_file(args, m)
        if args.due_only and not check_due(m, record, hp):
            continue
        try:
            problem = numerics_check(m, args.goldens, record, hp, passed=passed_folder() if args.remember else None)
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
    note = roundoff_note(list(dict.fromkeys(records)))
    if note:
        print(f"fedbayes numerics-check: {note}", flush=True)
