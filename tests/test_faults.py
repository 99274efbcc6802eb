"""Faults, on the real commands a user runs (``snakemake``, ``fedbayes train``, ``fedbayes track``), in a
temporary copy of the repository whose params.yaml holds two small experiments on the built-in
synthetic dataset (seconds per run):

- ``kill -9`` of a training job, then the same command: it resumes from its checkpoint, and its history,
  predictions and posterior equal an uninterrupted run's; the same seed twice gives the same history;
- a ``kill -9``-ed ``snakemake`` leaves no output a rerun would trust: the killed job reruns (resuming);
- a method that diverges (NaN loss) is recorded as diverged at its round, the table says so and builds;
- a flipped byte in a raw data file or a partition file: a clear error naming the file, nothing computed;
- ten processes importing runs into one SQLite MLflow store at once: no failure, every run complete.
"""

from __future__ import annotations

import json
import shutil
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from dagutil import built_copy, env, mtimes, sh

TIME_COLS = ["time_s", "wall_s", "eval_s"]  # wall-clock columns: the only ones two runs may differ in
LONG = "synth-long"  # 12 rounds, FedAvg: the run the kill tests interrupt
RUN = "fedavg/local_epochs=1"


def synthetic_params(p: dict) -> None:
    """Two experiments on the synthetic dataset; FedProx with SGD at lr 1e8 diverges in round 1."""
    base = {k: v for k, v in p["experiments"]["fmnist10-dir-k10"].items() if k != "ood"}
    base.update({"dataset": "synthetic", "subsample": 1.0, "clients": 4, "rounds": 4, "report_rounds": [4],
                 "model": {"name": "mlp", "hidden": [32], "activation": "relu"}, "input_scale": "unit",
                 "train": {"optimizer": "adam", "lr": 0.003, "batch_size": 32, "local_epochs": 1},
                 "methods": {"fedavg": {"sweep": {"local_epochs": [1]}},
                             "fedprox": {"optimizer": "sgd", "lr": 1.0e8, "sweep": {"alpha": [0.01]}}}})
    p["experiments"] = {"synth-k4": base, LONG: {**base, "rounds": 12, "report_rounds": [12],
                                                 "methods": {"fedavg": {"sweep": {"local_epochs": [1]}}}}}
    p["seeds"] = [0, 1]
    table = {k: v for k, v in p["tables"]["table1"].items() if k != "notes"}
    table.update({"title": "fault tests", "experiments": ["synth-k4"], "methods": ["fedavg", "fedprox"],
                  "metrics": ["test/acc", "test/nll"], "published": []})
    p["tables"] = {"faults": table}
    p["headline"] = {"table": "faults", "metrics": ["test/acc", "test/nll"], "curves": ["test/acc"]}


# the synthetic table's build, shared by test_faults, test_damaged and test_rerun_rule (one build a session)
SYNTH_BUILD = "snakemake --cores 2 reports/faults.csv"


@pytest.fixture(scope="module")
def synth(tmp_path_factory, repo):
    d = built_copy(tmp_path_factory, repo, "synth", synthetic_params, "paper", SYNTH_BUILD)   # shared
    sh("snakemake --cores 2 mlflow", d)
    return d


def train_cmd(d: Path, out: Path, seed: int = 0) -> list[str]:
    return ["fedbayes", "train", "--params", "work/params.effective.yaml", "--experiment", LONG, "--method", "fedavg",
            "--point", "local_epochs=1", "--seed", str(seed), "--partition", f"data/partitions/{LONG}/seed{seed}.npz",
            "--out", str(out), "--threads", "1"]


def start(cmd, cwd: Path, log: Path) -> subprocess.Popen:
    """A command in its own process group (so ``kill -9`` reaches its children), output to ``log``."""
    fh = open(log, "w")
    return subprocess.Popen(cmd, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT, env=env(), start_new_session=True,
                            shell=isinstance(cmd, str))


def kill9_when(proc: subprocess.Popen, log: Path, text: str, timeout: float = 300) -> None:
    """SIGKILL the process group as soon as ``text`` appears in the log (fails if it ends first)."""
    t0 = time.monotonic()
    while text not in log.read_text():
        assert proc.poll() is None, f"ended before {text!r} appeared:\n{log.read_text()[-3000:]}"
        assert time.monotonic() - t0 < timeout, f"{text!r} did not appear in {timeout} s"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def history(run: Path) -> pd.DataFrame:
    return pd.read_csv(run / "history.csv").drop(columns=TIME_COLS)


@pytest.mark.full
def test_kill9_training_resumes_to_identical_results_and_same_seed_repeats(synth, tmp_path):
    runs = {name: tmp_path / name for name in ("full", "again", "killed")}
    for name in ("full", "again"):
        subprocess.run(train_cmd(synth, runs[name]), cwd=synth, env=env(), check=True, capture_output=True)
    log = tmp_path / "killed.log"
    proc = start(train_cmd(synth, runs["killed"]), synth, log)
    kill9_when(proc, log, "round   5/12")
    assert (runs["killed"] / "checkpoint.pt").exists()
    assert not (runs["killed"] / "history.csv").exists() and not (runs["killed"] / "run.json").exists()
    r = subprocess.run(train_cmd(synth, runs["killed"]), cwd=synth, env=env(), check=True, capture_output=True, text=True)
    resumed_from = int(r.stdout.split("resuming from round ")[1].split()[0])
    assert resumed_from >= 4 and f"round {resumed_from:3d}/12" not in r.stdout  # finished rounds not recomputed
    assert not (runs["killed"] / "checkpoint.pt").exists()

    full = history(runs["full"])
    assert list(full["round"]) == list(range(13)) and full["test/acc"].notna().all()
    pd.testing.assert_frame_equal(history(runs["again"]), full)  # same seed twice: identical history
    pd.testing.assert_frame_equal(history(runs["killed"]), full)  # killed + resumed: identical history
    for name in ("again", "killed"):
        a, b = np.load(runs["full"] / "predictions.npz"), np.load(runs[name] / "predictions.npz")
        assert a.files == b.files and all(np.array_equal(a[k], b[k]) for k in a.files)
        pa, pb = torch.load(runs["full"] / "posterior.pt"), torch.load(runs[name] / "posterior.pt")
        assert pa.keys() == pb.keys() and all(torch.equal(pa[k], pb[k]) for k in pa)
        sh(f"fedbayes evaluate {runs[name]}", synth)
    sh(f"fedbayes evaluate {runs['full']}", synth)
    final = lambda n: json.loads((runs[n] / "metrics.json").read_text())["rounds"]  # noqa: E731
    assert final("full") == final("again") == final("killed")


@pytest.mark.full
def test_killed_snakemake_leaves_nothing_a_rerun_would_trust(synth, tmp_path):
    run = synth / f"results/runs/{LONG}/{RUN}/seed1"
    target = f"results/runs/{LONG}/{RUN}/seed1/metrics.json"
    log = tmp_path / "snakemake.log"
    proc = start(f"snakemake --cores 1 {target}", synth, log)
    kill9_when(proc, log, "round   4/12")
    # the interrupted job's declared outputs are absent (written atomically at the end); its checkpoint is not one
    assert not (run / "history.csv").exists() and not (run / "run.json").exists() and not (run / "metrics.json").exists()
    assert (run / "checkpoint.pt").exists()
    # Snakemake's own lock survives a SIGKILL and refuses a rerun until it is released, as its message says
    locked = sh(f"snakemake --cores 1 {target}", synth, check=False)
    assert "Directory cannot be locked" in locked and "--unlock" in locked
    sh("snakemake --unlock", synth)
    dry = sh(f"snakemake -n --cores 1 {target}", synth)
    assert "rule train:" in dry and "rule evaluate:" in dry
    out = sh(f"snakemake --cores 1 {target}", synth)
    assert "resuming from round" in out
    h = pd.read_csv(run / "history.csv")
    assert list(h["round"]) == list(range(13)) and h["test/acc"].notna().all()
    assert json.loads((run / "metrics.json").read_text())["final_round"] == 12
    assert "Nothing to be done" in sh(f"snakemake --cores 1 {target}", synth)
    # a retraining killed half-way leaves no old metrics.json behind: Snakemake does not look behind an
    # existing target at its missing inputs, so the stale file would read "Nothing to be done"
    log2 = tmp_path / "snakemake2.log"
    # the target before --forcerun, which takes every word after it as a rule name
    proc = start(f"snakemake --cores 1 {target} --forcerun train", synth, log2)
    kill9_when(proc, log2, "round   4/12")
    assert not (run / "metrics.json").exists() and not (run / "history.csv").exists()
    sh("snakemake --unlock", synth)
    assert "rule train:" in sh(f"snakemake -n --cores 1 {target}", synth)


@pytest.mark.full
def test_diverged_run_is_recorded_and_the_table_still_builds(synth):
    for seed in (0, 1):
        run = synth / f"results/runs/synth-k4/fedprox/alpha=0.01/seed{seed}"
        info = json.loads((run / "run.json").read_text())
        assert info["diverged"] == {"round": 1, "reason": "non-finite training loss"}
        h = pd.read_csv(run / "history.csv")  # the history up to the divergence is kept
        assert list(h["round"]) == [0, 1] and h["test/acc"].notna().tolist() == [True, False]
        assert np.isnan(h["train/loss"].iloc[1])
        m = json.loads((run / "metrics.json").read_text())
        assert m["diverged"]["round"] == 1 and m["final_round"] is None
        assert not (run / "checkpoint.pt").exists()
    df = pd.read_csv(synth / "reports/faults.csv")
    prox, avg = df[df.method == "fedprox"], df[df.method == "fedavg"]
    assert (prox.status == "diverged (seed 0 at round 1, seed 1 at round 1)").all() and prox.ours_mean.isna().all()
    assert (avg.status == "ok").all() and avg.ours_mean.notna().all()
    md = (synth / "reports/faults.md").read_text()
    assert "| synth-k4 | fedprox | alpha=0.01 | 4 | diverged (seed 0 at round 1, seed 1 at round 1)" in md
    con = sqlite3.connect(synth / "mlflow.db")
    tags = con.execute("select r.name, t.key, t.value from tags t join runs r using (run_uuid) "
                       "where t.key in ('status', 'diverged_round')").fetchall()
    assert sorted(tags) == sorted((f"fedprox s{s} alpha=0.01", k, v) for s in (0, 1)
                                  for k, v in (("status", "diverged"), ("diverged_round", "1")))


def flip_byte(path: Path, offset: int) -> bytes:
    data = path.read_bytes()
    path.write_bytes(data[:offset] + bytes([data[offset] ^ 0x01]) + data[offset + 1:])
    return data


@pytest.mark.full
@pytest.mark.parametrize("which", ["raw data", "partition"])
def test_flipped_byte_is_refused_naming_the_file(synth, tmp_path, which):
    if which == "raw data":
        victim = next((synth / "data/raw/synthetic").glob("*.npz"))
        offset, expect = victim.stat().st_size // 2, "md5"
    else:
        victim = synth / f"data/partitions/{LONG}/seed0.npz"
        offset, expect = victim.stat().st_size // 2, "corrupt"
    original = flip_byte(victim, offset)
    try:
        out = tmp_path / "run"
        r = subprocess.run(train_cmd(synth, out), cwd=synth, env=env(), capture_output=True, text=True)
        assert r.returncode == 2 and str(victim.relative_to(synth)) in r.stderr and expect in r.stderr
        assert "Traceback" not in r.stderr
        assert not out.exists() or not any(out.iterdir())  # nothing computed from it
        assert victim.read_bytes() != original  # refused, not silently replaced
        # through Snakemake: the forced job fails, nothing downstream of it is rebuilt
        metrics = synth / f"results/runs/{LONG}/{RUN}/seed0/metrics.json"
        before = mtimes(synth, "reports/faults.*")
        r = subprocess.run(f"snakemake --cores 1 --forcerun train --allowed-rules train evaluate -- "
                           f"results/runs/{LONG}/{RUN}/seed0/metrics.json", shell=True, cwd=synth, env=env(),
                           capture_output=True, text=True)
        assert r.returncode != 0 and str(victim.relative_to(synth)) in r.stdout + r.stderr
        # the failed retraining leaves none of the run's results (history.csv and run.json removed by
        # Snakemake, the old metrics.json by the job: nothing stale to trust) and nothing downstream rebuilt
        assert not (metrics.parent / "history.csv").exists() and not metrics.exists()
        assert mtimes(synth, "reports/faults.*") == before
    finally:
        victim.write_bytes(original)
    sh(f"snakemake --cores 1 results/runs/{LONG}/{RUN}/seed0/metrics.json", synth)  # and it recovers
    assert metrics.exists() and (metrics.parent / "history.csv").exists()


@pytest.mark.full
def test_ten_concurrent_writers_on_the_sqlite_mlflow_store(synth, tmp_path):
    run = synth / f"results/runs/synth-k4/{RUN}/seed0"
    for i in range(10):   # ten runs (track refuses a folder whose run.json records another seed): seed0's, renamed
        copy = run.parent / f"seed{100 + i}"
        shutil.copytree(run, copy, dirs_exist_ok=True)
        for f, where in (("run.json", "config"), ("metrics.json", None)):
            info = json.loads((copy / f).read_text())
            (info[where] if where else info)["seed"] = 100 + i
            (copy / f).write_text(json.dumps(info, indent=2))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"  # a fresh store: the writers also race to create its schema
    procs = [subprocess.Popen(
        ["fedbayes", "track", "--params", "work/params.effective.yaml", "--experiment", "synth-k4", "--method", "fedavg",
         "--point", "local_epochs=1", "--seed", str(100 + i), "--run-dir", str(run.parent / f"seed{100 + i}"),
         "--marker", str(tmp_path / f"marker{i}")], cwd=synth, env=env(MLFLOW_TRACKING_URI=uri),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in range(10)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * 10, "\n".join(o[-2000:] for o in outs)
    con = sqlite3.connect(tmp_path / "mlflow.db")
    runs = con.execute("select name, status, run_uuid from runs where lifecycle_stage = 'active'").fetchall()
    assert sorted(n for n, _, _ in runs) == sorted(f"fedavg s{100 + i} local_epochs=1" for i in range(10))
    assert all(s == "FINISHED" for _, s, _ in runs)
    n_rounds = len(pd.read_csv(run / "history.csv"))
    for _, _, rid in runs:  # every run complete: the full per-round series and the imported files
        steps = con.execute("select count(*) from metrics where run_uuid = ? and key = 'test/acc'", (rid,)).fetchone()
        assert steps[0] == n_rounds
    # each marker: "store <uri>", then "<MLflow run id> <point> seed<seed> <experiment id> <run key> <content hash>"
    markers = [(tmp_path / f"marker{i}").read_text().splitlines() for i in range(10)]
    assert all(m[0] == f"store {uri}" for m in markers)
    assert {m[1].split()[0] for m in markers} == {rid for _, _, rid in runs}
