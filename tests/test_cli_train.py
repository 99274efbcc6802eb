"""`fedbayes train` checks every argument before it touches a file, never overwrites another run's
directory or another configuration's partition file, and refuses a second trainer on a run directory
that one is training (instead of racing it on the same files)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from fedbayes import cli
from fedbayes.study import partition_config, paths
from fedbayes.data.root import fetch_dataset
from dagutil import read_params

SYNTH = {"dataset": "synthetic", "subsample": 1.0, "clients": 4, "partition": {"scheme": "iid"}, "rounds": 2,
         "report_rounds": [2], "model": {"name": "mlp", "hidden": [8], "activation": "relu"},
         "input_scale": "unit", "train": {"optimizer": "adam", "lr": 0.003, "batch_size": 32, "local_epochs": 1},
         "methods": {"fedavg": None}}


@pytest.fixture
def setup(tmp_path, repo):
    """A params.yaml with two small synthetic experiments, every output under ``tmp_path``."""
    p = read_params(repo)
    p["experiments"] = {"synth-a": {**SYNTH, "methods": {"fedavg": {"sweep": {"local_epochs": [1, 2]}}}},
                        "synth-b": {**SYNTH, "clients": 5}}
    p["seeds"] = [0, 1]
    p["smoke"].pop("experiments", None)
    p["tables"] = {}
    p.pop("headline")
    p["paths"] = {k: str(tmp_path / k) for k in ("raw", "partitions", "runs", "reports", "work")}
    p["paths"]["mlflow_uri"] = f"sqlite:///{tmp_path / 'mlflow.db'}"
    (tmp_path / "workflow/schemas").mkdir(parents=True)
    (tmp_path / "workflow/schemas/params.schema.yaml").write_text(
        (repo / "workflow/schemas/params.schema.yaml").read_text())
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(p))
    return tmp_path, p


def run_dir(p, experiment="synth-a", method="fedavg", point="local_epochs=1", seed=0) -> Path:
    return Path(paths(p)["runs"], experiment, method, point, f"seed{seed}")


def part_file(p, experiment="synth-a", seed=0) -> Path:
    return Path(paths(p)["partitions"], experiment, f"seed{seed}.npz")


def train(d: Path, capsys, experiment="synth-a", method="fedavg", point="local_epochs=1", seed=0,
          partition=None, out=None, threads="1") -> tuple[int, str]:
    p = read_params(d)
    argv = ["train", "--params", str(d / "params.yaml"), "--experiment", experiment, "--method", method,
            "--point", point, "--seed", str(seed), "--threads", threads,
            "--partition", str(partition or part_file(p, experiment, seed)),
            "--out", str(out or run_dir(p, experiment, method, point, seed))]
    with pytest.raises(SystemExit) as ex:
        cli.main(argv)
        raise SystemExit(0)
    return ex.value.code, capsys.readouterr().err


def snapshot(root: Path) -> dict:
    return {f: (f.stat().st_mtime_ns, f.read_bytes()) for f in root.rglob("*") if f.is_file()}


def finished_run(d: Path) -> Path:
    """A finished run's directory with a metrics.json that a failed command must leave alone."""
    run = d / "runs/synth-a/fedavg/local_epochs=1/seed0"
    run.mkdir(parents=True)
    (run / "metrics.json").write_text('{"final": {}}\n')
    return run


@pytest.mark.parametrize("args, message", [
    # a misspelt method has the one point "default": the resolved configuration alone does not catch it
    ({"method": "fedavgg", "point": "default"},
     r"--method 'fedavgg': not a method of experiments\.synth-a \(its methods: \['fedavg'\]\)"),
    ({"experiment": "synth-c"}, r"--experiment 'synth-c': unknown experiment; params.yaml defines \['synth-a', 'synth-b'\]"),
    ({"point": "local_epochs=3"}, r"--point 'local_epochs=3': not a point of synth-a/fedavg's sweep "
                                  r"\['local_epochs=1', 'local_epochs=2'\]"),
    ({"seed": 7}, r"--seed 7: synth-a/fedavg runs seeds \[0, 1\]"),
    # deleted the finished run's metrics.json before failing (issue "nothing unchecked")
    ({"threads": "-1"}, r"--threads -1: a number of threads"),
    # deleted the finished run's metrics.json, then torch segfaulted on the thread pool
    ({"threads": "100000"}, r"--threads 100000: at most \d+ threads on this machine"),
], ids=["method", "experiment", "point", "seed", "threads", "threads-huge"])
def test_bad_arguments_are_refused_before_any_file_is_touched(setup, capsys, args, message):
    d, p = setup
    run = finished_run(d)
    before = snapshot(d)
    code, err = train(d, capsys, **args, out=run)
    assert code == 2 and err.startswith("fedbayes train: error: "), err
    assert __import__("re").search(message, err), err
    assert snapshot(d) == before  # metrics.json still there, nothing created (no partition, no lock)


def test_a_run_whose_retraining_fails_before_training_keeps_its_metrics(setup, capsys, monkeypatch):
    """A finished run (history.csv beside metrics.json) retrained by hand keeps its metrics.json when the
    job fails before training starts (here: loading its data); only a run whose history is gone (Snakemake
    deleted it before the job) loses its metrics.json at once."""
    import errno

    from fedbayes.engine import data

    d, p = setup
    run = finished_run(d)
    (run / "history.csv").write_text("round,test/acc\n0,0.1\n")

    def no_space(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", "data")

    monkeypatch.setattr(data, "load_run_data", no_space)
    code, err = train(d, capsys, out=run)
    assert code == 2 and "No space left on device" in err, err
    assert (run / "metrics.json").read_text() == '{"final": {}}\n'
    (run / "history.csv").unlink()
    code, err = train(d, capsys, out=run)
    assert code == 2 and not (run / "metrics.json").exists()


def test_another_runs_directory_is_refused(setup, capsys):
    d, p = setup
    other = finished_run(d)  # seed 0's directory, given to a seed-1 run
    before = snapshot(d)
    code, err = train(d, capsys, seed=1, out=other)
    assert code == 2 and f"--out {other} is not the run directory of synth-a/fedavg/local_epochs=1/seed1" in err, err
    assert snapshot(d) == before


def test_a_directory_recording_another_run_is_refused(setup, capsys, tmp_path):
    """Outside paths.runs (a scratch run) the directory may be anywhere, but not hold another run."""
    import json

    d, p = setup
    out = tmp_path / "scratch"
    out.mkdir()
    (out / "run.json").write_text(json.dumps({"config": {"experiment": "synth-b", "method": "fedavg",
                                                         "point": "default", "seed": 0, "scale": "paper"}}))
    (out / "metrics.json").write_text("{}")
    before = snapshot(d)
    code, err = train(d, capsys, out=out)
    assert code == 2 and f"{out / 'run.json'} records another run (synth-b/fedavg/default/seed0" in err, err
    assert snapshot(d) == before


def save_partition_of(p, experiment, seed, path, clients):
    from fedbayes.partition import save_partition

    parts = np.array_split(np.arange(40), clients)
    save_partition(path, parts, np.arange(40) % 2, 2, partition_config(p, experiment, seed))


def test_another_experiments_partition_file_is_never_overwritten(setup, capsys):
    d, p = setup
    theirs = part_file(p, "synth-b")
    save_partition_of(p, "synth-b", 0, theirs, 5)
    before = snapshot(d)
    code, err = train(d, capsys, partition=theirs)
    assert code == 2 and f"--partition {theirs} is not the partition file of synth-a seed 0" in err, err
    assert snapshot(d) == before


def test_a_partition_file_holding_another_configuration_is_refused(setup, capsys, tmp_path):
    d, p = setup
    elsewhere = tmp_path / "elsewhere/seed0.npz"
    save_partition_of(p, "synth-b", 0, elsewhere, 5)
    before = snapshot(d)
    code, err = train(d, capsys, partition=elsewhere)
    assert code == 2 and f"--partition {elsewhere} holds another configuration (clients" in err, err
    assert "not overwritten" in err and snapshot(d) == before
    code, err = cli_partition(d, capsys, elsewhere)  # `fedbayes partition` is held to the same rule
    assert code == 2 and f"--partition {elsewhere} holds another configuration" in err, err
    assert snapshot(d) == before


def cli_partition(d, capsys, out):
    with pytest.raises(SystemExit) as ex:
        cli.main(["partition", "--params", str(d / "params.yaml"), "--experiment", "synth-a", "--seed", "0",
                  "--out", str(out)])
        raise SystemExit(0)
    return ex.value.code, capsys.readouterr().err


def test_own_stale_partition_is_rewritten_and_the_run_trains(setup, capsys, monkeypatch):
    """This (experiment, seed)'s own file is rewritten when params changed its configuration (training
    has no partition job upstream); every file the run writes goes through a temporary name unique to
    the process (two writers never share one), and the run holds a lock on its directory meanwhile."""
    d, p = setup
    own = part_file(p)
    save_partition_of(p, "synth-b", 0, own, 5)  # as if synth-a had had 5 clients
    replaced = []
    real = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (replaced.append((Path(a).name, Path(b).name)), real(a, b)))
    code, err = train(d, capsys)
    assert code == 0, err
    from fedbayes.partition import load_partition

    assert load_partition(own)[1]["clients"] == 4
    run = run_dir(p)
    assert (run / "history.csv").exists() and (run / "run.json").exists()
    ours = [(a, b) for a, b in replaced if b in {"seed0.npz", "history.csv", "run.json", "predictions.npz",
                                                 "posterior.pt", "checkpoint.pt"}]  # not the data fetch's
    assert {"seed0.npz", "history.csv", "run.json", "predictions.npz", "posterior.pt"} <= {b for _, b in ours}
    assert all(f".{os.getpid()}." in a for a, _ in ours), ours
    assert sorted(f.name for f in run.iterdir()) == ["history.csv", "posterior.pt", "predictions.npz", "run.json"]
    assert (run.parent / ".seed0.train.lock").exists()  # beside the run, released (the kernel's flock)


def test_a_second_trainer_on_a_run_directory_fails_at_once(setup, tmp_path):
    d, p = setup
    params = read_params(d)
    params["experiments"]["synth-a"]["rounds"] = 500  # long enough to be running while the second starts
    params["experiments"]["synth-a"]["report_rounds"] = [500]
    (d / "params.yaml").write_text(yaml.safe_dump(params))
    cmd = [sys.executable, "-m", "fedbayes.cli", "train", "--params", str(d / "params.yaml"), "--experiment",
           "synth-a", "--method", "fedavg", "--point", "local_epochs=1", "--seed", "0", "--threads", "1",
           "--partition", str(part_file(p)), "--out", str(run_dir(p))]
    log = tmp_path / "first.log"
    with open(log, "w") as fh:
        first = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        t0 = time.monotonic()
        while "round   1/500" not in log.read_text():
            assert first.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() - t0 < 300
            time.sleep(0.1)
        t0 = time.monotonic()
        second = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert second.returncode == 2, second.stderr[-3000:]
        assert f"{run_dir(p)} is being trained by another process (pid {first.pid} holds" in second.stderr, second.stderr
        assert "Traceback" not in second.stderr
        assert first.poll() is None  # the first is untouched and still training
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()


def test_atomic_writes_use_a_temporary_name_unique_to_the_process(tmp_path, monkeypatch):
    """Two processes writing one file (two trainers, two table jobs) never write into one temporary file;
    a failed write leaves no temporary file behind."""
    from matplotlib.figure import Figure

    from fedbayes.fileio import atomic_target, save_figure_atomic, write_text_atomic

    replaced = []
    real = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (replaced.append(Path(a).name), real(a, b)))
    write_text_atomic(tmp_path / "a.json", "{}")
    save_figure_atomic(Figure(), tmp_path / "b.png")
    assert replaced == [f"a.json.{os.getpid()}.tmp", f"b.{os.getpid()}.tmp.png"]
    with pytest.raises(RuntimeError), atomic_target(tmp_path / "c.txt") as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed mid-write")
    assert sorted(f.name for f in tmp_path.iterdir()) == ["a.json", "b.png"]


@pytest.fixture
def tiny_disk(tmp_path):
    """A 64 KiB tmpfs (needs mount rights: root in CI), unmounted afterwards."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:  # (the mapping itself is also tested without a mount, below)
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_full_disk_is_named_not_an_iostream_error(setup, tiny_disk, capsys):
    """A run directory on a full disk: torch.save's checkpoint write fails inside a C++ stream; the command
    says "no space left" with the file, exit 2, and leaves no temporary file behind."""
    d, p = setup
    assert train(d, capsys)[0] == 0  # data and partition in place
    rc, err = train(d, capsys, out=tiny_disk / "run")
    assert rc == 2 and "no space left on the device" in err and str(tiny_disk / "run") in err, err
    assert "Traceback" not in err and "PytorchStreamWriter" not in err
    assert not [f for f in tiny_disk.rglob("*.tmp*")]


def test_disk_full_mapping_without_mount_rights(tmp_path, monkeypatch):
    """The same mapping where no tmpfs can be mounted: a C++-stream write error on a disk with no room
    left becomes ENOSPC naming the file; the same error with room left is passed on unchanged."""
    import errno
    import shutil
    from collections import namedtuple

    from fedbayes.fileio import atomic_target

    usage = namedtuple("usage", "total used free")
    target = tmp_path / "checkpoint.pt"
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage(1 << 30, 1 << 30, 0))
    with pytest.raises(OSError) as e, atomic_target(target):
        raise RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")
    assert e.value.errno == errno.ENOSPC and str(target) in str(e.value)
    monkeypatch.setattr(shutil, "disk_usage", lambda _: usage(1 << 30, 0, 1 << 30))
    with pytest.raises(RuntimeError, match="file write failed"), atomic_target(target):
        raise RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")
    assert not list(tmp_path.iterdir())


def test_read_only_data_directory_is_read_without_a_lock(setup, capsys):
    """A complete dataset in a directory this process cannot write (a shared read-only mirror) trains; the
    lock file it cannot create is not an error."""
    d, p = setup
    assert train(d, capsys)[0] == 0
    raw = Path(paths(p)["raw"])
    for f in raw.rglob("*.lock"):
        f.unlink()
    modes = {f: f.stat().st_mode for f in [raw, *raw.rglob("*")] if f.is_dir()}
    try:
        for f in modes:
            f.chmod(0o555)
        if os.geteuid() == 0:  # root writes anyway: make the directory read-only the way root sees it
            ro = d / "ro"
            ro.mkdir()
            r = subprocess.run(["mount", "--bind", "-o", "ro", str(raw), str(ro)], capture_output=True, text=True)
            if r.returncode != 0:
                pytest.skip(f"cannot bind-mount read-only here: {r.stderr.strip()}")
            try:
                subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], check=False)
                q = read_params(d)
                q["paths"]["raw"] = str(ro)
                (d / "params.yaml").write_text(yaml.safe_dump(q))
                rc, err = train(d, capsys, seed=1, partition=d / "part-seed1.npz", out=d / "run-seed1")
            finally:
                subprocess.run(["umount", "-l", str(ro)], check=False)
        else:
            rc, err = train(d, capsys, seed=1, partition=d / "part-seed1.npz", out=d / "run-seed1")
    finally:
        for f, m in modes.items():
            f.chmod(m)
    assert rc == 0, err
    assert (d / "run-seed1" / "history.csv").exists()


def test_a_dirichlet_split_that_cannot_give_every_client_data_is_one_line(setup, capsys):
    """A Dirichlet split that cannot give every client its min_size ended in a ValueError traceback; now
    one line naming the experiment's partition and the seed (exit 2)."""
    d, p = setup
    p["experiments"]["synth-a"]["partition"] = {"scheme": "dirichlet", "alpha1": 0.05, "alpha2": 0.5, "min_size": 480}
    (d / "params.yaml").write_text(yaml.safe_dump(p))
    code, err = train(d, capsys)
    assert code == 2 and err.startswith("fedbayes train: error: experiments.synth-a.partition (seed 0): dirichlet: "
                                        "could not draw a partition"), err
    assert "Traceback" not in err


@pytest.mark.parametrize("where", ["archive", "figure"])
def test_a_full_disk_while_writing_a_partition_leaves_no_file_and_is_one_line(setup, capsys, monkeypatch, where):
    """ENOSPC while the partition (or its figure) is written: half the bytes reached the disk, then the
    write failed. No partial file is left under either name (the figure was written in place), and the
    command says which file in one line (it said "No space left on device", naming none), exit 2."""
    import errno

    from matplotlib.figure import Figure

    d, p = setup
    fetch_dataset("synthetic", paths(p)["raw"])
    out, fig = d / "parts" / "seed0.npz", d / "parts" / "seed0.png"

    def half_then_full(real):
        def write(target, *a, **k):
            (target.write(b"PK\x03\x04 half") if hasattr(target, "write") else Path(target).write_bytes(b"half"))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return write

    if where == "archive":
        monkeypatch.setattr(np, "savez_compressed", half_then_full(np.savez_compressed))
    else:
        monkeypatch.setattr(Figure, "savefig", lambda self, target, *a, **k: half_then_full(None)(target))
    with pytest.raises(SystemExit) as ex:
        cli.main(["partition", "--params", str(d / "params.yaml"), "--experiment", "synth-a", "--seed", "0",
                  "--out", str(out), "--figure", str(fig)])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    named = out if where == "archive" else fig
    assert ex.value.code == 2 and len(lines) == 1 and "no space left" in lines[0].lower(), err
    assert str(named) in lines[0] and "Traceback" not in err, err
    left = sorted(f.name for f in out.parent.iterdir() if not f.name.endswith(".lock")) if out.parent.exists() else []
    assert left == ([] if where == "archive" else ["seed0.npz"]), left


@pytest.mark.parametrize("lock", ["train", "data", "partition"])
def test_a_symlinked_lock_file_is_refused_in_one_line(setup, capsys, tmp_path, lock):
    """A lock file planted as a symbolic link (the trainer's, the dataset's, the partition's) stops the
    job in one line naming it; the link's target is neither truncated nor written."""
    d, p = setup
    where = {"train": run_dir(p).parent / f".{run_dir(p).name}.train.lock",
             "data": Path(paths(p)["raw"]) / "synthetic.lock",
             "partition": Path(str(part_file(p)) + ".lock")}[lock]
    where.parent.mkdir(parents=True, exist_ok=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    where.symlink_to(victim)
    code, err = train(d, capsys)
    assert code == 2 and err.count("\n") == 1 and f"{where}" in err and "symbolic link" in err, err
    assert victim.read_text() == "precious\n"
