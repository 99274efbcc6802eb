"""No CLI traceback: every `fedbayes` subcommand with missing or garbage arguments, and every environment
variable fedbayes reads set to garbage, ends in an error line ("fedbayes <cmd>: error: ...", argparse's
usage error, or a one-line exit message), never an uncaught exception.

The subcommands and their arguments are read from the parser (``fedbayes.cli.build_parser``), so a new
command or option is covered without editing this file; the environment variables are found in the
sources (``os.environ``), so a new one fails ``test_every_environment_variable_read_is_enumerated`` until
it has a case here. Calls run in this process (a subprocess costs a second or two each), in a scratch
directory holding params.yaml and its schema."""

import argparse
import contextlib
import io
import re
import shutil
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "fedbayes"

# what a garbage value of each kind of argument is; each argument gets them in turn
GARBAGE = ["", "garbage", "{dir}/nonexistent/dir/file", "a" * 5000, "-1", "{dir}"]   # (a missing folder inside the scratch one: a command that makes it writes nowhere else)
# plausible values for the required arguments beside the one made garbage (names params.yaml defines;
# the files they lead to do not exist in the scratch directory)
PLAUSIBLE = {"experiment": "fmnist10-iid-k10", "method": "fedavg", "seed": "0", "table": "table1",
             "name": "fedep/table4", "names": "mnist", "run_dir": "results/runs/x", "run_dirs": "results/runs/x",
             "table_csv": "reports/table1.csv", "methods": "fedavg"}


@pytest.fixture
def scratch(tmp_path, repo, monkeypatch):
    (tmp_path / "workflow/schemas").mkdir(parents=True)
    shutil.copy(repo / "workflow/schemas/params.schema.yaml", tmp_path / "workflow/schemas")
    for f in ("params.yaml", "params.smoke.yaml"):
        shutil.copy(repo / f, tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FEDBAYES_OFFLINE", "1")          # no download is tried
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")   # never the repository's store
    return tmp_path


def run(argv: list[str]) -> tuple[int, str]:
    """(exit code, stderr) of ``fedbayes <argv>`` in this process; an uncaught exception fails the test."""
    from fedbayes.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            main(argv)
            return 0, err.getvalue()
        except SystemExit as e:
            if isinstance(e.code, str):   # raise SystemExit("message"): Python prints it, exit 1
                return 1, err.getvalue() + e.code
            return e.code or 0, err.getvalue()


def subcommands() -> dict[str, argparse.ArgumentParser]:
    from fedbayes.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if not isinstance(a, argparse._HelpAction) and a.help != argparse.SUPPRESS]


def argv_for(cmd: str, parser, garbage_for=None, garbage: str = "") -> list[str]:
    """``cmd`` with its required arguments plausible, except ``garbage_for`` (which gets ``garbage``)."""
    argv = [cmd]
    for a in arguments(parser):
        required = a.required or not a.option_strings and a.nargs not in ("?", "*")
        if a is not garbage_for and not required:
            continue
        value = garbage if a is garbage_for else PLAUSIBLE.get(a.dest, "x")
        if a.option_strings:
            argv += [a.option_strings[-1]] + ([] if a.nargs == 0 else [value] * (a.nargs if isinstance(a.nargs, int) else 1))
        else:
            argv.append(value)
    return argv


def cases() -> list[list[str]]:
    out, i = [], 0
    for cmd, parser in subcommands().items():
        out.append([cmd])                                   # every required argument missing
        for a in arguments(parser):
            if a.nargs == 0:
                continue                                    # a flag: nothing to garble
            out.append(argv_for(cmd, parser, a, GARBAGE[i % len(GARBAGE)]))
            i += 1
    return out


def _short(argv: list[str]) -> str:
    return " ".join(repr(x if len(x) < 40 else x[:10] + f"…({len(x)})") for x in argv)


def one_error_line(code: int, stderr: str) -> bool:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    return "Traceback" not in stderr and bool(lines) and (
        re.match(r"fedbayes( [\w-]+)?: (error: )?", lines[-1]) is not None
        or any(re.match(r"fedbayes [\w-]+: error: ", ln) for ln in lines))


def test_every_subcommand_with_missing_or_garbage_arguments_gives_an_error_line(scratch):
    assert len(subcommands()) >= 15 and len(cases()) > 60
    bad = []
    for argv in cases():
        argv = [x.replace("{dir}", str(scratch)) for x in argv]
        try:
            code, stderr = run(argv)
        except Exception as e:  # noqa: BLE001  (what the test looks for)
            bad.append(f"{_short(argv)}: {type(e).__name__}: {str(e)[:200]}")
            continue
        if code != 0 and not one_error_line(code, stderr):
            bad.append(f"{_short(argv)}: exit {code}: {stderr[-300:]}")
    assert not bad, "\n".join(bad)


# every environment variable fedbayes reads: (garbage, a command that reads it, the exit code wanted)
ENV_CASES = {
    "FEDBAYES_CUDA_GRAPHS": ("sometimes", ["validate"], 2),
    "FEDBAYES_COMPILE": ("maybe", ["validate"], 2),
    "MLFLOW_TRACKING_URI": ("not a uri; rm -rf", ["validate"], 2),
    "MLFLOW_TRACKING_TOKEN": ("\n", ["methods"], 0),
    "MLFLOW_ALLOW_FILE_STORE": ("garbage", ["methods"], 0),
    "FEDBAYES_DATA_MIRRORS": (":/nonexistent::{dir}", ["data", "mnist", "--no-download"], 2),
    "FEDBAYES_OFFLINE": ("garbage", ["data", "mnist"], 2),
    "FEDBAYES_VERIFIED_CACHE": ("{dir}", ["methods"], 0),
    "FEDBAYES_DECOMPRESSED_CACHE": ("/nonexistent/cache", ["methods"], 0),   # read by training jobs (test_data.py)
    "FEDBAYES_IMPORTS_CACHE": ("{dir}", ["methods"], 0),   # read by Snakemake's planning (test_workflow_plan.py)
    "FEDBAYES_NUMERICS_CACHE": ("/nonexistent/cache", ["methods"], 0),   # read by numerics-check --remember (test_replay.py)
    "XDG_CACHE_HOME": ("/nonexistent/cache", ["methods"], 0),
    "ATEN_CPU_CAPABILITY": ("garbage", ["methods"], 0),
    "ONEDNN_MAX_CPU_ISA": ("garbage", ["methods"], 0),
    "MKL_ENABLE_INSTRUCTIONS": ("garbage", ["methods"], 0),
    "NPY_DISABLE_CPU_FEATURES": ("garbage", ["methods"], 0),
    "MALLOC_MMAP_THRESHOLD_": ("garbage", ["methods"], 0),
    "MALLOC_TRIM_THRESHOLD_": ("garbage", ["methods"], 0),
    "GLIBC_TUNABLES": ("garbage", ["methods"], 0),
    "FEDBAYES_WARM": ("not a socket; rm -rf /", ["methods"], 0),   # a command that reaches no server runs itself
}
# PATH: extended (the kernel build's ninja), never parsed; PYTHONIOENCODING, PYTHONUNBUFFERED: read as Python
# reads them, to give a warm job's child (fedbayes.warm) the standard streams a fresh process would have
NOT_OURS = {"PATH", "PYTHONIOENCODING", "PYTHONUNBUFFERED"}


def test_every_environment_variable_read_is_enumerated():
    names = set()
    constants = {}
    for f in SRC.rglob("*.py"):
        text = f.read_text()
        constants |= dict(re.findall(r'^(\w+_ENV) = "([A-Z][A-Z0-9_]*)"', text, re.MULTILINE))
        for line in text.splitlines():
            if "in os.environ" in line:   # any(k in os.environ for k in ("A", "B"))
                names |= set(re.findall(r'"([A-Z][A-Z0-9_]*)"', line))
            names |= set(re.findall(r'environ(?:\.get\(|\[)\s*"([A-Z][A-Z0-9_]*)"', line))
            names |= {constants.get(c, c) for c in re.findall(r"environ(?:\.get\(|\[)\s*(\w+_ENV)\b", line)}
            # a cache entry a variable moves (fileio.user_cache_path("<name>", X_ENV))
            names |= {constants.get(c, c) for c in re.findall(r"user_cache_path\([^)]*?,\s*(\w+_ENV)\)", line)}
    names |= {constants[c] for c in constants if c in ("MIRRORS_ENV", "GZ_MEMO_ENV", "OFFLINE_ENV")}
    from fedbayes import NUMERICS_ENV

    names |= set(NUMERICS_ENV)
    assert names - NOT_OURS <= set(ENV_CASES), sorted(names - NOT_OURS - set(ENV_CASES))


@pytest.mark.parametrize("var", sorted(ENV_CASES))
def test_an_environment_variable_set_to_garbage_gives_an_error_line_or_is_ignored(scratch, monkeypatch, var):
    garbage, argv, want = ENV_CASES[var]
    monkeypatch.setenv(var, garbage.replace("{dir}", str(scratch)))
    code, stderr = run(argv)
    assert code == want, (code, stderr)
    if code:
        assert one_error_line(code, stderr), stderr
        if var.startswith(("FEDBAYES_CUDA", "FEDBAYES_COMPILE", "MLFLOW")):
            assert var in stderr and len(stderr.strip().splitlines()) == 1, stderr


def test_numpy_and_torch_start_with_garbage_cpu_caps(repo):
    """The numerics variables are read at numpy's and torch's import (fedbayes sets them first): garbage is
    warned about or ignored by them, never a crash of the command."""
    import os
    import subprocess
    import sys

    env = {**os.environ, **{k: "garbage" for k in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA",
                                                     "MKL_ENABLE_INSTRUCTIONS", "NPY_DISABLE_CPU_FEATURES")}}
    r = subprocess.run([sys.executable, "-c", "import fedbayes.cli, numpy, torch; torch.ones(3).sum()"],
                       env=env, cwd=repo, capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]


COMMITTED_RUN = Path(__file__).resolve().parents[1] / "results/runs/fmnist10-iid-k10/fedavg/local_epochs=10/seed0"
TRACK = ["track", "--experiment", "fmnist10-iid-k10", "--method", "fedavg", "--point", "local_epochs=10", "--seed", "0",
         "--run-dir"]


@pytest.mark.parametrize("uri", ["foo://bar", "file:///dev/null", "mlruns:x"])
def test_a_tracking_uri_mlflow_cannot_open_is_one_line_before_work(scratch, monkeypatch, uri):
    """A URI of the right shape but a scheme MLflow has no store for (or its file store, which it refuses)
    was an MLflow traceback at the import's first call (UnsupportedModelRegistryStoreURIException)."""
    run_dir = scratch / "run"
    shutil.copytree(COMMITTED_RUN, run_dir)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    code, stderr = run([*TRACK, str(run_dir)])
    assert code == 2 and one_error_line(code, stderr) and "MLFLOW_TRACKING_URI" in stderr and "sqlite:" in stderr, stderr
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    (scratch / "params.yaml").write_text((scratch / "params.yaml").read_text().replace(
        "mlflow_uri: sqlite:///mlflow.db", f"mlflow_uri: {uri}", 1))
    code, stderr = run(["validate"])
    assert code == 2 and "paths.mlflow_uri" in stderr and "Traceback" not in stderr, stderr


def test_a_database_uri_without_its_driver_is_one_line(scratch, monkeypatch):
    run_dir = scratch / "run"
    shutil.copytree(COMMITTED_RUN, run_dir)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "postgresql+nosuchdriver://u@localhost/db")
    code, stderr = run([*TRACK, str(run_dir)])
    assert code == 2 and one_error_line(code, stderr) and "driver" in stderr, stderr


def test_a_full_disk_under_the_store_is_one_line(scratch, monkeypatch):
    """SQLite's "database or disk is full" came through SQLAlchemy and MLflow as a traceback."""
    import sqlite3

    from mlflow.tracking import MlflowClient

    run_dir = scratch / "run"
    shutil.copytree(COMMITTED_RUN, run_dir)

    def full(*a, **k):
        raise RuntimeError("(sqlite3.OperationalError) database or disk is full") from sqlite3.OperationalError(
            "database or disk is full")

    monkeypatch.setattr(MlflowClient, "log_batch", full)
    code, stderr = run([*TRACK, str(run_dir)])
    assert code == 2 and one_error_line(code, stderr) and "full disk" in stderr, stderr


@pytest.mark.parametrize("damage", ["no hparams", "unknown method", "method a list"])
def test_replay_of_a_damaged_run_json_is_one_line(scratch, damage):
    """A run.json that parses, with its rounds, but lacks what training reads (hparams) or names a method
    not installed was a KeyError / ValueError traceback from the replay's training."""
    import json

    run_dir = scratch / "run"
    shutil.copytree(COMMITTED_RUN, run_dir)
    info = json.loads((run_dir / "run.json").read_text())
    if damage == "no hparams":
        info["config"].pop("hparams")
    else:
        info["config"]["method"] = "nosuch" if damage == "unknown method" else ["fedavg"]
    (run_dir / "run.json").write_text(json.dumps(info))
    code, stderr = run(["replay", str(run_dir), "--rounds", "1"])
    assert code == 2 and one_error_line(code, stderr) and "run.json" in stderr, stderr


@pytest.mark.parametrize("hparams", ["-1", "0", "1e999", "[1]", '"x"', "null"])
def test_numerics_check_hparams_that_are_not_an_object_are_one_line(scratch, hparams):
    """`numerics-check fedavg --hparams -1`: JSON, but not an object of hyperparameters (a TypeError traceback)."""
    code, stderr = run(["numerics-check", "fedavg", "--hparams", hparams, "--work", str(scratch / "work")])
    assert code == 2 and one_error_line(code, stderr) and "--hparams" in stderr, stderr
