"""fedbayes: one subcommand per step the Snakemake rules run, and a few for people (each listed below).

Every command reads params.yaml itself (validated against the schema first), so a rule passes only
names (experiment, method, seed) and paths; the numbers come from the one source of truth.

The subcommands' bodies live in one module per area (cli.methods, cli.data, cli.train, cli.replay,
cli.reports, cli.track); this module holds the parser and ``main``, which turns the errors a user can
cause into one line.
"""

from __future__ import annotations

import argparse
import errno
import sys

from fedbayes.cli.common import _abbreviated
from fedbayes.cli.data import check_stand_in_root, cmd_data, cmd_partition
from fedbayes.cli.methods import cmd_methods, cmd_new_method, cmd_validate
from fedbayes.cli.replay import REPLAYED_CONFIG, cmd_numerics_check, cmd_replay
from fedbayes.cli.reports import (cmd_headline, cmd_rehearsal_summary, cmd_scorecard, cmd_select, cmd_sweep_report,
                                  cmd_table, cmd_toy, sweep_report_files)
from fedbayes.cli.track import cmd_track, disk_full
from fedbayes.cli.train import (THREADS_PER_CPU, check_train_args, cmd_evaluate, cmd_train, max_threads, traceback_file,
                                train_lock)
from fedbayes.data import DataIntegrityError, DataUnavailableError
from fedbayes.fileio import LockRefused
from fedbayes.frontdoor import environment_problems
from fedbayes.methods.failure import MethodFailed
from fedbayes.partition import PartitionIntegrityError
from fedbayes.runfiles import DamagedFile
from fedbayes.study import ConfigError

__all__ = ["REPLAYED_CONFIG", "THREADS_PER_CPU", "build_parser", "check_stand_in_root", "check_train_args", "disk_full",
           "main", "max_threads", "sweep_report_files", "traceback_file", "train_lock"]


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
    sp.add_argument("--remember", action="store_true", help="skip a golden that this very code (every package source, "
                    "the numerics versions) already replayed bit for bit on this machine class, in any clone; passes "
                    "are kept in ~/.cache/fedbayes/numerics-passed ($FEDBAYES_NUMERICS_CACHE moves it)")
    sp.add_argument("--goldens", default="tests/golden/numerics", help="the committed numerics goldens "
                    "(default: %(default)s)")
    sp.add_argument("--work", default="work", help="where each check's record goes: <work>/numerics/<method>.json "
                    "(default: %(default)s)")
    sp.add_argument("--record", help="one method's record file instead (default: under --work)")
    sp.add_argument("--hparams", action="append", help="JSON: a run's hyperparameters, for the first method (a method "
                    "without a committed golden gets one from them); repeated: each of its code paths in turn")
    sp.add_argument("--path", action="append", help='JSON {"method": ..., "hparams": {...}}: one code path of a method '
                    "(the workflow's one job for every due check); repeated: each in turn, after the methods named")
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
    sp.add_argument("--experiment", required=True, help="an experiment of params.yaml `experiments`")
    sp.add_argument("--method", required=True, help="a method of that experiment")
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
