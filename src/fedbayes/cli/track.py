"""The ``track`` subcommand: runs imported into MLflow, one line on an unreachable or full store."""

from __future__ import annotations

import errno
import json
import sys
from pathlib import Path

from fedbayes.cli.common import _params
from fedbayes.tracking import RunRef, TrackingUnavailable, import_pairs, import_runs, summary, tracking_uri


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
