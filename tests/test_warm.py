"""Warm jobs (fedbayes.cli.warm): a command run through the server's forked child is the command run in a fresh
process — the same bytes of a trained and evaluated run, the same streams, directory, environment and exit
status — and anything the child could not match (another environment, changed library files, no server)
runs the command itself."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from dagutil import read_params
from pluginutil import synthetic_params
from fedbayes.cli import warm
from fedbayes.study import load_params, sweep_points

# FedAvg, and IVON's sampled weights and a 4-sample predictive: PyTorch's random generator in use
METHODS = {"fedavg": None, "fedivon": None}
FEDBAYES = [sys.executable, "-m", "fedbayes.cli"]


@pytest.fixture
def study(tmp_path):
    """A params.yaml with one small synthetic experiment, every output under ``tmp_path``."""
    synthetic_params(tmp_path, METHODS)
    return tmp_path


def clean_env(**extra) -> dict:
    return {k: v for k, v in os.environ.items() if k != warm.WARM_ENV} | extra


def wait_for(path, proc=None, seconds=120):
    deadline = time.monotonic() + seconds
    while not os.path.exists(path):
        assert (proc is None or proc.poll() is None) and time.monotonic() < deadline, path
        time.sleep(0.1)


@pytest.fixture
def server():
    """A folder of warm servers (as ``start`` makes for a build) with the server for this environment
    running; the folder and that server's log (its stderr)."""
    folder = tempfile.mkdtemp(prefix="fbw-", dir="/tmp")
    sock = warm.socket_for(folder, clean_env())
    log = Path(folder, "test.log")
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-c", warm.SERVE, sock], stderr=err, env=clean_env())
    wait_for(sock, proc)
    yield folder, log, proc
    proc.terminate()
    proc.wait(30)
    for f in Path(folder).glob("*.sock"):   # servers a test's command started for another environment
        f.unlink()
    time.sleep(0.2)
    shutil.rmtree(folder, ignore_errors=True)


def fedbayes(args, cwd, folder=None, check=True, **env_extra):
    env = clean_env(**env_extra)
    if folder:
        env[warm.WARM_ENV] = folder
    r = subprocess.run(FEDBAYES + args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert not check or r.returncode == 0, r.stderr
    return r


def forked(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if line.startswith("fedbayes.cli.warm: ran ")]


def without_times(path: Path) -> list[dict]:
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    for r in rows:
        for k in ("time_s", "wall_s", "eval_s"):
            r.pop(k, None)
    return rows


def test_a_run_trained_and_evaluated_through_the_server_is_byte_identical_to_a_fresh_processs(study, server):
    folder, log, _ = server
    d = study
    part = d / "partitions/synth/seed0.npz"
    fedbayes(["data", "synthetic", "--root", str(d / "raw")], d)
    fedbayes(["partition", "--experiment", "synth", "--seed", "0", "--out", str(part)], d)
    params = load_params(d / "params.yaml")
    for method in ("fedavg", "fedivon"):
        point = next(iter(sweep_points(params, "synth", method)))
        runs = {}
        for how, s in (("fresh", None), ("warm", folder)):
            out = d / how / method
            fedbayes(["train", "--experiment", "synth", "--method", method, "--point", point, "--seed", "0",
                      "--partition", str(part), "--out", str(out), "--threads", "1"], d, s)
            fedbayes(["evaluate", str(out)], d, s)
            runs[how] = out
        a, b = runs["fresh"], runs["warm"]
        assert (a / "predictions.npz").read_bytes() == (b / "predictions.npz").read_bytes(), method
        assert without_times(a / "history.csv") == without_times(b / "history.csv"), method
        ma, mb = ({k: v for k, v in json.loads((r / "metrics.json").read_text()).items() if k != "wall_s"}
                  for r in (a, b))
        assert ma == mb, method
        ca, cb = (json.loads((r / "run.json").read_text())["config_hash"] for r in (a, b))
        assert ca == cb
    assert len(forked(log)) == 4, log.read_text()   # each method's warm train and evaluate ran in a child


def test_the_child_has_the_commands_streams_directory_and_exit_status(study, server):
    folder, log, _ = server
    r = fedbayes(["table", "nosuch", "--out", "t.csv"], study, folder, check=False)
    assert r.returncode == 2 and r.stderr.startswith("fedbayes table: error: 'nosuch': not a table"), r.stderr
    assert r.stdout == ""
    r = fedbayes(["validate"], study, folder)
    assert "params.yaml is valid" in r.stdout and "synth" in r.stdout   # the params.yaml of the command's directory
    r = fedbayes(["train", "--help"], study, folder)
    assert r.stdout.startswith("usage: fedbayes train"), r.stdout
    assert len(forked(log)) == 3, log.read_text()


def test_another_environment_runs_the_command_itself_and_starts_its_own_server(study, server):
    """Snakemake sets a job's thread variables to its threads: each such environment gets a server of its
    own, started in the background by its first command, which runs itself."""
    folder, log, _ = server
    other = {"OMP_NUM_THREADS": "1", "ATEN_CPU_CAPABILITY": "default"}
    r = fedbayes(["validate"], study, folder, **other)
    assert "params.yaml is valid" in r.stdout and forked(log) == []
    sock = warm.socket_for(folder, clean_env(**other))
    wait_for(sock)
    r = fedbayes(["validate"], study, folder, **other)
    assert "params.yaml is valid" in r.stdout and forked(log) == []
    assert len(forked(Path(sock).with_suffix(".log"))) == 1


def test_no_server_or_a_dead_socket_runs_the_command_itself(study, tmp_path):
    folder = tempfile.mkdtemp(prefix="fbw-", dir="/tmp")
    Path(warm.socket_for(folder, clean_env())).write_text("")     # a socket file left by a killed server
    Path(warm.socket_for(folder, clean_env())).with_suffix(".starting").write_text("")
    try:
        for where in (folder, str(tmp_path / "none"), "0", "not a folder; rm -rf /", "/x" * 200):
            r = fedbayes(["validate"], study, where)
            assert "params.yaml is valid" in r.stdout
    finally:
        shutil.rmtree(folder)


def test_a_build_killed_without_stop_leaves_no_folder_behind(study):
    """Snakemake killed outright never calls `stop`: its servers end when it is gone, and the last removes
    the folder (a killed build used to leave one in /tmp)."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    folder = tempfile.mkdtemp(prefix="fbw-", dir="/tmp")
    Path(folder, "owner").write_text(str(gone.pid))
    r = fedbayes(["validate"], study, folder)     # no server yet: it starts one and runs itself
    assert "params.yaml is valid" in r.stdout
    deadline = time.monotonic() + 120
    while Path(folder).exists():
        assert time.monotonic() < deadline, sorted(os.listdir(folder))
        time.sleep(0.2)


def test_start_and_stop_as_the_snakefile_calls_them(study, tmp_path, monkeypatch):
    monkeypatch.delenv(warm.WARM_ENV, raising=False)
    folder = warm.start(tmp_path / "work")
    try:
        assert os.environ[warm.WARM_ENV] == folder and Path(folder, "owner").read_text() == str(os.getpid())
        assert warm.start(tmp_path / "work") is None         # one folder a build
        env = dict(os.environ)
        subprocess.run(FEDBAYES + ["validate"], cwd=study, env=env, check=True, capture_output=True)
        wait_for(warm.socket_for(folder, env))
        subprocess.run(FEDBAYES + ["validate"], cwd=study, env=env, check=True, capture_output=True)
    finally:
        warm.stop()
    assert warm.WARM_ENV not in os.environ and not Path(folder).exists()
    assert len(forked(tmp_path / "work/warm.log")) == 1


def test_a_build_of_a_few_jobs_starts_no_server(tmp_path, monkeypatch):
    """A server's start costs more than it saves for a build of one to three jobs (8.5 CPU-s against 4.7 for a
    one-job build measured): their commands run themselves; four jobs or a checkpoint (jobs follow it) start one."""
    from types import SimpleNamespace as NS

    def jobs(n, checkpoint=False):
        return [NS(rule=NS(is_checkpoint=checkpoint and i == 0)) for i in range(n)]

    monkeypatch.delenv(warm.WARM_ENV, raising=False)
    assert warm.start(tmp_path / "work", jobs(warm.MIN_JOBS - 1)) is None and warm.WARM_ENV not in os.environ
    assert warm.start(tmp_path / "work", jobs(1, checkpoint=True)) is not None
    warm.stop()
    assert warm.start(tmp_path / "work", iter(jobs(warm.MIN_JOBS))) is not None   # Snakemake gives an iterator
    warm.stop()
    assert warm.WARM_ENV not in os.environ


def child_gone(pid: int) -> None:
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z":
        assert time.monotonic() < deadline, "the child outlived its command"
        time.sleep(0.1)


def started(cmd: subprocess.Popen, log: Path) -> int:
    """The pid of the child the server forked for ``cmd``, once it has."""
    deadline = time.monotonic() + 120
    while not forked(log):
        assert cmd.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    return int(forked(log)[0].rsplit(" as ", 1)[1])


def test_a_signal_to_the_command_reaches_its_child_and_comes_back_as_its_status(study, server):
    """Snakemake stops a job by signalling its process: the child (not in the job's process group) gets the
    same signal, and the command dies of it as a fresh process would."""
    folder, log, _ = server
    cmd = long_training(study, folder)
    child = started(cmd, log)
    while not (study / "run/checkpoint.pt").exists():   # signalled while it trains
        assert cmd.poll() is None
        time.sleep(0.2)
    cmd.send_signal(signal.SIGTERM)
    assert cmd.wait(60) == -signal.SIGTERM
    child_gone(child)


def test_a_command_killed_outright_takes_its_child_with_it(study, server):
    folder, log, _ = server
    cmd = long_training(study, folder)
    child = started(cmd, log)
    cmd.kill()
    cmd.wait(30)
    child_gone(child)


def long_training(d: Path, folder: str) -> subprocess.Popen:
    """A training through the warm server that runs until it is signalled."""
    fedbayes(["data", "synthetic", "--root", str(d / "raw")], d)
    part = d / "partitions/synth/seed0.npz"
    fedbayes(["partition", "--experiment", "synth", "--seed", "0", "--out", str(part)], d)
    p = read_params(d)
    p["experiments"]["synth"]["rounds"] = 100000
    p["experiments"]["synth"]["report_rounds"] = [100000]
    (d / "params.yaml").write_text(yaml.safe_dump(p))
    return subprocess.Popen(FEDBAYES + ["train", "--experiment", "synth", "--method", "fedavg", "--point",
                                        "local_epochs=1", "--seed", "0", "--partition", str(part), "--out",
                                        str(d / "run"), "--threads", "1"],
                            cwd=d, env=clean_env(**{warm.WARM_ENV: folder}), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def test_a_server_told_to_stop_still_gives_a_running_command_its_status(study, server):
    """`stop` at the end of a build (onerror with a job still running): the server waits for its children
    and sends each its status; the command never loses it."""
    folder, log, proc = server
    cmd = long_training(study, folder)
    child = started(cmd, log)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(warm.socket_for(folder, clean_env()))
    warm._send(s, {"stop": True}, [])
    assert warm._readline(s) == "stopped"
    s.close()
    time.sleep(0.5)
    assert cmd.poll() is None and proc.poll() is None     # the server waits for its running child
    os.kill(child, signal.SIGTERM)
    assert cmd.wait(60) == -signal.SIGTERM, cmd.stderr.read()
    assert proc.wait(30) == 0


def test_changed_library_files_are_noticed(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("x = 1\n")
    st = f.stat()
    files = {str(f): (st.st_size, st.st_mtime_ns)}
    assert warm._changed(files) is None
    f.write_text("x = 22\n")
    assert warm._changed(files) == str(f)
    f.unlink()
    assert warm._changed(files) == str(f)


def test_the_key_follows_what_libraries_read_at_import():
    base = {"PATH": "/bin", "HOME": "/root"}
    assert warm.env_key(base) == warm.env_key(base | {"HOME": "/elsewhere", "FEDBAYES_WARM": "/x"})
    for k, v in (("OMP_NUM_THREADS", "1"), ("ATEN_CPU_CAPABILITY", "default"), ("PYTHONHASHSEED", "0"),
                 ("MKL_ENABLE_INSTRUCTIONS", "SSE4_2"), ("NPY_DISABLE_CPU_FEATURES", "AVX2")):
        assert warm.env_key(base) != warm.env_key(base | {k: v}), k


def test_the_server_watches_fedbayes_sources_and_the_folders_packages_are_installed_in(tmp_path, monkeypatch):
    """fedbayes' own job modules are preloaded too: an edit of one, or a package installed into a folder
    on sys.path (a plug-in) in the middle of a build, ends the server (the commands then run themselves)."""
    import fedbayes.cli.app

    site = tmp_path / "site-packages"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    files = warm._module_files()
    assert fedbayes.cli.app.__file__ in files and str(site) in files
    assert set(warm.PRELOAD_OWN) >= {"fedbayes.cli.app", "fedbayes.engine.loop"}
    assert warm._changed(files) is None
    (site / "fedbayes_myplugin-1.0.dist-info").mkdir()
    assert warm._changed(files) == str(site)
