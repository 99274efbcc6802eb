"""MLflow import: one run per (experiment, method, seed), per-round metrics, idempotent re-import."""

import pytest
import torch
import yaml

from fedbayes.engine import run_federated
from fedbayes.eval.evaluate import evaluate_run


@pytest.fixture
def finished_run(tmp_path, synthetic_run_data, cfg_factory):
    cfg = cfg_factory(experiment="fmnist10-iid-k10", partition_hash="abc123")
    run_federated(cfg, synthetic_run_data, tmp_path / "run", torch.device("cpu"), log=lambda m: None)
    evaluate_run(tmp_path / "run")
    return tmp_path / "run"


@pytest.fixture
def store(tmp_path, repo, monkeypatch):
    """(params, uri, client) of a fresh SQLite store; the working directory is a stand-in repository root."""
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    p = read_params(repo)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)
    p["paths"]["mlartifacts"] = str(tmp_path / "mlartifacts")
    return p, uri, MlflowClient(uri)


def test_log_run_is_complete_and_idempotent(tmp_path, finished_run, store):
    from fedbayes.tracking import log_run

    p, _, client = store
    sel = tmp_path / "selected.json"
    sel.write_text('{"point": "local_epochs=5", "hparams": {"local_epochs": 5}}')
    first = log_run(p, "fmnist10-iid-k10", "fedavg", "local_epochs=5", 0, finished_run, selected=str(sel))
    second = log_run(p, "fmnist10-iid-k10", "fedavg", "local_epochs=5", 0, finished_run, selected=str(sel))
    other = log_run(p, "fmnist10-iid-k10", "fedavg", "local_epochs=1", 0, finished_run, selected=str(sel))
    exp = client.get_experiment_by_name("fmnist10-iid-k10")
    runs = {r.info.run_id: r for r in client.search_runs([exp.experiment_id])}
    assert set(runs) == {second, other} and first != second
    run = runs[second]
    assert run.data.tags["run_key"] == "paper/fmnist10-iid-k10/fedavg/local_epochs=5/seed0"
    assert run.data.tags["selected"] == "true" and runs[other].data.tags["selected"] == "false"
    assert run.info.run_name == "fedavg[local_epochs=5]-seed0"
    # a new selection re-tags the runs imported under the old one
    sel.write_text('{"point": "local_epochs=1", "hparams": {"local_epochs": 1}}')
    log_run(p, "fmnist10-iid-k10", "fedavg", "local_epochs=1", 0, finished_run, selected=str(sel))
    tags = {r.data.tags["point"]: r.data.tags["selected"] for r in client.search_runs([exp.experiment_id])}
    assert tags == {"local_epochs=5": "false", "local_epochs=1": "true"}
    assert run.data.tags["partition_hash"] == "abc123"
    assert run.data.tags["device"] == "cpu" and run.data.tags["git_sha"]
    assert run.data.params["hparams.local_epochs"] == "1" and run.data.params["seed"] == "3"
    hist = client.get_metric_history(second, "test/acc")
    assert sorted(m.step for m in hist) == [0, 1, 2, 3, 4]
    assert "final/test/acc" in run.data.metrics
    arts = {a.path for a in client.list_artifacts(second)}
    assert {"history.csv", "metrics.json", "run.json"} <= arts


# --- issue 23 part 7 (provenance that is true) and issue 21 class 5 (an atomic import, fail fast) ---

import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from datetime import datetime  # noqa: E402
from pathlib import Path  # noqa: E402

import pandas as pd  # noqa: E402
from dagutil import read_params

KEY = "paper/fmnist10-iid-k10/fedavg/local_epochs=5/seed0"


def _runs(client, key=KEY, exp="fmnist10-iid-k10"):
    e = client.get_experiment_by_name(exp)
    return client.search_runs([e.experiment_id], f"tags.run_key = '{key}'")


def _edit_json(path: Path, **changes):
    info = json.loads(path.read_text())
    for k, v in changes.items():
        if v is None:
            info.pop(k, None)
        else:
            info[k] = v
    path.write_text(json.dumps(info))


def test_provenance_and_times_are_the_training_runs(store, finished_run):
    from fedbayes.tracking import log_run

    p, uri, client = store
    commit = "0123456789abcdef0123456789abcdef01234567"
    _edit_json(finished_run / "run.json", code={"commit": commit, "dirty": True, "source": "f" * 16},
               started="2026-01-02T03:04:05.000+00:00", finished="2026-01-02T04:05:06.500+00:00")
    rid = log_run(p, "fmnist10-iid-k10", "fedavg", "local_epochs=5", 0, finished_run)
    run = client.get_run(rid)
    tags = run.data.tags
    assert tags["git_sha"] == commit and tags["mlflow.source.git.commit"] == commit
    assert tags["git_dirty"] == "true" and tags["source_hash"] == "f" * 16 and tags["mlflow.source.name"]
    # the training's times, not the import's
    assert run.info.start_time == int(datetime.fromisoformat("2026-01-02T03:04:05+00:00").timestamp() * 1000)
    assert run.info.end_time == int(datetime.fromisoformat("2026-01-02T04:05:06.5+00:00").timestamp() * 1000)
    # paths relative to the repository root (the working directory of the workflow), never absolute
    assert not Path(tags["predictions"]).is_absolute() and tags["predictions"].endswith("run/predictions.npz")
    assert (Path.cwd() / tags["predictions"]).exists()
    # accuracy in % as in the tables (history.csv keeps fractions; the experiment description says so)
    hist = pd.read_csv(finished_run / "history.csv")
    series = sorted((m.step, m.value) for m in client.get_metric_history(rid, "test/acc"))
    assert [s for s, _ in series] == list(hist["round"])
    assert [v for _, v in series] == pytest.approx(list(100 * hist["test/acc"]))
    final = json.loads((finished_run / "metrics.json").read_text())["final"]
    assert run.data.metrics["final/test/acc"] == pytest.approx(100 * final["test/acc"])
    assert run.data.metrics["final/test/nll"] == pytest.approx(final["test/nll"])  # other units unchanged
    assert tags["method"] == "fedavg" and tags["base_method"] == "fedavg" and tags["variant"] == "none"
    exp = client.get_experiment_by_name("fmnist10-iid-k10")
    note = exp.tags["mlflow.note.content"]
    assert "fmnist10-iid-k10" in note and "%" in note and "table1" in note
    assert "mlflow.note.content" in tags


def test_a_run_json_without_code_or_times_imports_as_unknown_not_head(store, finished_run):
    """Runs trained before run.json recorded them: commit "unknown" (not the importer's HEAD); the end is
    bounded by when run.json was written, the duration is the history's (training + evaluation)."""
    from fedbayes.tracking import log_run

    p, uri, client = store
    _edit_json(finished_run / "run.json", code=None, started=None, finished=None)
    written = (finished_run / "run.json").stat().st_mtime
    rid = log_run(p, "fmnist10-iid-k10", "fedavg", "local_epochs=5", 0, finished_run)
    run = client.get_run(rid)
    assert run.data.tags["git_sha"] == "unknown" and "mlflow.source.git.commit" not in run.data.tags
    assert run.data.tags["git_dirty"] == "unknown"
    hist = pd.read_csv(finished_run / "history.csv")
    duration = (hist["time_s"].fillna(0) + hist["eval_s"].fillna(0)).sum()
    assert run.info.end_time == int(written * 1000)
    assert abs((run.info.end_time - run.info.start_time) - 1000 * duration) <= 1
    assert "not recorded" in run.data.tags["times"]


def test_prediction_variants_are_runs_that_filters_find(store, finished_run):
    """``fedavg@mean``-style variants (here a fabricated "mean" variant) are one MLflow run each, found by
    ``tags.method = 'm@v'``, their metrics under the plain names (as a table column compares them)."""
    from fedbayes.tracking import log_run

    p, uri, client = store
    hist = pd.read_csv(finished_run / "history.csv")
    for c in [c for c in hist.columns if c.startswith(("test/", "ood/"))]:
        hist[f"mean/{c}"] = hist[c] * 0.5
    hist.to_csv(finished_run / "history.csv", index=False)
    m = json.loads((finished_run / "metrics.json").read_text())
    m["variants"] = {"mean": {"final": {k: v * 0.5 for k, v in m["final"].items()}, "rounds": m["rounds"]}}
    (finished_run / "metrics.json").write_text(json.dumps(m))
    log_run(p, "fmnist10-iid-k10", "fedavg", "local_epochs=5", 0, finished_run)
    exp = client.get_experiment_by_name("fmnist10-iid-k10")
    found = client.search_runs([exp.experiment_id], "tags.method = 'fedavg@mean'")
    assert len(found) == 1
    v = found[0]
    assert v.data.tags["base_method"] == "fedavg" and v.data.tags["variant"] == "mean"
    assert v.info.status == "FINISHED" and v.info.run_name == "fedavg@mean[local_epochs=5]-seed0"
    assert v.data.metrics["final/test/acc"] == pytest.approx(50 * m["final"]["test/acc"])
    series = sorted((s.step, s.value) for s in client.get_metric_history(v.info.run_id, "test/acc"))
    assert [s for s, _ in series] == list(hist["round"])
    assert [x for _, x in series] == pytest.approx(list(100 * hist["mean/test/acc"]))
    assert len(client.search_runs([exp.experiment_id], "tags.variant = 'mean'")) == 1
    assert len(client.search_runs([exp.experiment_id], "tags.base_method = 'fedavg'")) == 2
    # re-importing replaces both, never duplicates
    log_run(p, "fmnist10-iid-k10", "fedavg", "local_epochs=5", 0, finished_run)
    assert len(client.search_runs([exp.experiment_id], "tags.base_method = 'fedavg'")) == 2


def _crash(monkeypatch, name):
    from mlflow.tracking import MlflowClient

    def boom(*a, **k):
        raise ConnectionError(f"server died during {name}")

    monkeypatch.setattr(MlflowClient, name, boom)


@pytest.mark.parametrize("during", ["log_artifact", "set_terminated", "delete_run"])
def test_a_crash_during_reimport_keeps_the_previous_good_import(store, finished_run, monkeypatch, during):
    """Issue 21 class 5: the new import is written and FINISHED before the old one is removed; a crash at
    any point leaves the previous import visible and complete, and the next import leaves exactly one
    FINISHED run of the key (a RUNNING / FAILED leftover of a crashed import is removed then)."""
    from fedbayes.tracking import log_run

    p, uri, client = store
    good = log_run(p, "fmnist10-iid-k10", "fedavg", "local_epochs=5", 0, finished_run)
    n_acc = len(client.get_metric_history(good, "test/acc"))
    with monkeypatch.context() as m:
        _crash(m, during)
        with pytest.raises(ConnectionError):
            log_run(p, "fmnist10-iid-k10", "fedavg", "local_epochs=5", 0, finished_run)
    runs = {r.info.run_id: r for r in _runs(client)}
    assert good in runs and runs[good].info.status == "FINISHED"
    assert len(client.get_metric_history(good, "test/acc")) == n_acc
    if during == "log_artifact":  # the importer could still reach the store: its partial run says FAILED
        assert all(r.info.status == "FAILED" for rid, r in runs.items() if rid != good)
    newest = log_run(p, "fmnist10-iid-k10", "fedavg", "local_epochs=5", 0, finished_run)
    runs = _runs(client)
    assert [r.info.run_id for r in runs] == [newest] and runs[0].info.status == "FINISHED"


def test_an_unreachable_tracking_server_fails_fast_naming_it(finished_run, repo, tmp_path):
    uri = "http://127.0.0.1:9"  # discard port: nothing listens
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "PYTHONPATH": str(repo / "src")}
    cmd = [sys.executable, "-m", "fedbayes.cli", "track", "--params", str(repo / "params.yaml"),
           "--experiment", "fmnist10-iid-k10", "--method", "fedavg", "--point", "local_epochs=5", "--seed", "0",
           "--run-dir", str(finished_run), "--marker", str(tmp_path / "marker")]
    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail("fedbayes track kept retrying an unreachable server for 90 s")
    elapsed = time.monotonic() - t0
    assert r.returncode == 2 and elapsed < 30, (elapsed, r.stderr[-2000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and uri in lines[0] and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert not (tmp_path / "marker").exists()


def test_experiment_description_leads_to_the_tables_figures_and_scorecard(repo):
    """The MLflow experiment says where the results built from its runs are: its tables, their figures
    and the scorecard (paths relative to the repository, under the scale's reports directory)."""
    from fedbayes.config import load_params
    from fedbayes.tracking import experiment_description

    text = experiment_description(load_params(repo / "params.yaml"), "fmnist10-iid-k10")
    for path in ("reports/table1.md", "reports/figures/table1_curves.png", "reports/figures/table1_reliability.png",
                 "reports/bayesadmm/table1.md", "reports/README.md"):
        assert path in text, path
    smoke = experiment_description(load_params(repo / "params.yaml", scale="smoke"), "fmnist10-iid-k10")
    assert "reports/smoke/figures/table1_curves.png" in smoke and "reports/smoke/README.md" in smoke
