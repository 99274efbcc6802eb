"""MLflow import: one run per (experiment, method, seed), per-round metrics, idempotent re-import."""

import pytest
import torch

from fedbayes.engine import run_federated
from fedbayes.study.model import RunSpec
from fedbayes.eval.evaluate import evaluate_run


@pytest.fixture
def finished_run(tmp_path, synthetic_run_data, cfg_factory):
    cfg = cfg_factory(experiment="fmnist10-iid-k10", partition_hash="abc123", seed=0, scale="paper")  # tracked with the paper params
    run_federated(RunSpec.from_config(cfg), synthetic_run_data, tmp_path / "run", torch.device("cpu"), log=lambda m: None)
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
    assert run.info.run_name == "fedavg s0 local_epochs=5"  # method and seed first: the column cuts the rest
    # a new selection re-tags the runs imported under the old one
    sel.write_text('{"point": "local_epochs=1", "hparams": {"local_epochs": 1}}')
    log_run(p, "fmnist10-iid-k10", "fedavg", "local_epochs=1", 0, finished_run, selected=str(sel))
    tags = {r.data.tags["point"]: r.data.tags["selected"] for r in client.search_runs([exp.experiment_id])}
    assert tags == {"local_epochs=5": "false", "local_epochs=1": "true"}
    assert run.data.tags["partition_hash"] == "abc123"
    assert run.data.tags["device"] == "cpu" and run.data.tags["git_sha"]
    assert run.data.params["hparams.local_epochs"] == "1" and run.data.params["seed"] == "0"
    hist = client.get_metric_history(second, "test/acc")
    assert sorted(m.step for m in hist) == [0, 1, 2, 3, 4]
    # a final value is its series' last round: no one-point final/… duplicate (a one-dot chart on the run page)
    assert "test/acc" in run.data.metrics and not [k for k in run.data.metrics if k.startswith("final/")]
    arts = {a.path for a in client.list_artifacts(second)}
    assert {"history.csv", "metrics.json", "run.json"} <= arts


# --- provenance that is true, and an atomic import that fails fast ---------------------------------

import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from datetime import datetime  # noqa: E402
from pathlib import Path  # noqa: E402

import shutil  # noqa: E402

import pandas as pd  # noqa: E402
from dagutil import read_params  # noqa: E402

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
    assert run.data.metrics["test/acc"] == pytest.approx(100 * final["test/acc"])   # the latest value: the final one
    assert run.data.metrics["test/nll"] == pytest.approx(final["test/nll"])  # other units unchanged
    assert tags["method"] == "fedavg" and tags["base_method"] == "fedavg" and tags["variant"] == "none"
    exp = client.get_experiment_by_name("fmnist10-iid-k10")
    note = exp.tags["mlflow.note.content"]
    assert "fmnist10-iid-k10" in note and "%" in note and "table1" in note
    assert "mlflow.note.content" in tags


def test_the_defaults_a_run_read_from_its_spec_are_params(store, finished_run):
    """MLflow's params were the resolved configuration only: the defaults the method read from its spec
    (run.json ``defaults``) are params ``defaults.<name>`` too; a run from before run.json recorded them
    gets its method's frozen defaults (``catalog.FROZEN_DEFAULTS``, what the rerun rule assumes it ran)."""
    from fedbayes.tracking import log_run

    p, uri, client = store
    _edit_json(finished_run / "run.json", defaults={"weight_decay": 0.25, "mc_round0": True})
    rid = log_run(p, "fmnist10-iid-k10", "fedavg", "local_epochs=5", 0, finished_run)
    params = client.get_run(rid).data.params
    assert params["defaults.weight_decay"] == "0.25" and params["defaults.mc_round0"] == "True"
    _edit_json(finished_run / "run.json", defaults=None)
    rid = log_run(p, "fmnist10-iid-k10", "fedavg", "local_epochs=5", 0, finished_run)
    params = client.get_run(rid).data.params
    assert params["defaults.weight_decay"] == "0.0" and params["defaults.client_stream"] == "independent"
    assert "defaults.lr" not in params   # set by its configuration (and REQUIRED)


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
    ``tags.method = 'm@v'``, their metrics under the plain names (as a table column compares them), the
    series from metrics.json (the one source of metric values), the same values as history.csv's here."""
    from fedbayes.tracking import log_run

    p, uri, client = store
    hist = pd.read_csv(finished_run / "history.csv")
    for c in [c for c in hist.columns if c.startswith(("test/", "ood/"))]:
        hist[f"mean/{c}"] = hist[c] * 0.5
    hist.to_csv(finished_run / "history.csv", index=False)
    m = json.loads((finished_run / "metrics.json").read_text())
    m["variants"] = {"mean": {"final": {k: v * 0.5 for k, v in m["final"].items()},
                              "rounds": {r: {k: v * 0.5 for k, v in t.items()} for r, t in m["rounds"].items()}}}
    (finished_run / "metrics.json").write_text(json.dumps(m))
    log_run(p, "fmnist10-iid-k10", "fedavg", "local_epochs=5", 0, finished_run)
    exp = client.get_experiment_by_name("fmnist10-iid-k10")
    found = client.search_runs([exp.experiment_id], "tags.method = 'fedavg@mean'")
    assert len(found) == 1
    v = found[0]
    assert v.data.tags["base_method"] == "fedavg" and v.data.tags["variant"] == "mean"
    assert v.info.status == "FINISHED" and v.info.run_name == "fedavg@mean s0 local_epochs=5"
    assert v.data.metrics["test/acc"] == pytest.approx(50 * m["final"]["test/acc"])
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
    from fedbayes.study import load_params
    from fedbayes.tracking import experiment_description

    text = experiment_description(load_params(repo / "params.yaml"), "fmnist10-iid-k10")
    for path in ("reports/table1.md", "reports/figures/table1_curves.png", "reports/figures/table1_reliability.png",
                 "reports/bayesadmm/table1.md", "reports/README.md"):
        assert path in text, path
    smoke = experiment_description(load_params(repo / "params.yaml", scale="smoke"), "fmnist10-iid-k10")
    assert "reports/smoke/figures/table1_curves.png" in smoke and "reports/smoke/README.md" in smoke


# --- a store is checked against what it must hold before it is trusted ---------------------------------

def _track(repo, run, uri, marker, cwd, seed=0, extra_env=None):
    """`fedbayes track` of one run in its own process (as the rule runs it)."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "PYTHONPATH": str(repo / "src"), **(extra_env or {})}
    cmd = [sys.executable, "-m", "fedbayes.cli", "track", "--params", str(repo / "params.yaml"), "--experiment",
           "fmnist10-iid-k10", "--method", "fedavg", "--point", "local_epochs=5", "--seed", str(seed),
           "--run-dir", str(run), "--marker", str(marker)]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture
def tracking_server(tmp_path):
    from dagutil import mlflow_server

    with mlflow_server(tmp_path / "server") as url:
        yield url, tmp_path / "server"


@pytest.mark.full
def test_an_import_is_trusted_only_where_the_store_holds_it(finished_run, repo, tmp_path, tracking_server):
    """The import marker stood for runs in whatever store the URI named: pointed at a tracking server that
    lacks them, nothing was re-imported (a server was never asked). The marker records the store it
    imported into and each run's key and content hash; it stands only where that store holds a FINISHED
    run of each key with that content: another URI, a server that lacks the runs, or a run whose files
    (hence hash) are not the ones imported, make it stale."""
    from fedbayes.tracking import marker_problems

    url, _ = tracking_server
    local = f"sqlite:///{tmp_path / 'mlflow.db'}"
    marker = tmp_path / "work/mlflow/fmnist10-iid-k10/fedavg.runs"
    r = _track(repo, finished_run, local, marker, tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert marker_problems(marker, local) == []
    switched = marker_problems(marker, url)   # the server holds none of them
    assert switched and url in switched[0], switched
    r = _track(repo, finished_run, url, marker, tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert marker_problems(marker, url) == []
    from mlflow.tracking import MlflowClient

    server = MlflowClient(url)   # the run deleted on the server (its store wiped, a user's cleanup): stale
    exp = server.get_experiment_by_name("fmnist10-iid-k10")
    for run in server.search_runs([exp.experiment_id]):
        server.delete_run(run.info.run_id)
    lost = marker_problems(marker, url)
    assert lost and "1 of its 1" in lost[0], lost
    # a store holding the key with other content (imported from other files) is not this import
    r = _track(repo, finished_run, local, marker, tmp_path)
    assert r.returncode == 0 and marker_problems(marker, local) == [], r.stderr[-3000:]
    other = tmp_path / "other"
    shutil.copytree(finished_run, other)
    _edit_json(other / "run.json", device="cuda")
    r = _track(repo, other, local, tmp_path / "other.runs", tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert marker_problems(marker, local) != []


BARRIER = """
import sys, time
from contextlib import nullcontext
from pathlib import Path
import fedbayes.tracking.importer as t
from mlflow.tracking import MlflowClient
barrier, me = Path(sys.argv[1]), sys.argv[2]
t.store_lock = lambda uri: nullcontext()   # a tracking server takes no file lock: importers run side by side
real = MlflowClient.set_terminated
def set_terminated(self, run_id, status=None, end_time=None):
    real(self, run_id, status, end_time)
    if status == "FINISHED":   # both imports written and FINISHED, then both replace their key's runs
        (barrier / me).touch()
        t0 = time.monotonic()
        while len(list(barrier.iterdir())) < 2 and time.monotonic() - t0 < 120:
            time.sleep(0.05)
MlflowClient.set_terminated = set_terminated
from fedbayes.cli import main
main(sys.argv[3:])
"""


@pytest.mark.full
def test_two_importers_of_one_run_never_delete_each_others_imports(finished_run, repo, tmp_path):
    """Two importers of the same run into one store (two Snakemake invocations, a store behind a tracking
    server, which takes no lock) each deleted every other run of the key once theirs was FINISHED: each
    deleted the other's, and none was left. An import deletes only older imports of its key (an import id
    orders them), so the newest import stays, and the marker of each stands for it (same key, same content)."""
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    from fedbayes.tracking import marker_problems

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert _track(repo, finished_run, uri, tmp_path / "first.runs", tmp_path).returncode == 0  # an earlier import
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "PYTHONPATH": str(repo / "src")}
    procs = [subprocess.Popen(
        [sys.executable, "-c", BARRIER, str(barrier), name, "track", "--params", str(repo / "params.yaml"),
         "--experiment", "fmnist10-iid-k10", "--method", "fedavg", "--point", "local_epochs=5", "--seed", "0",
         "--run-dir", str(finished_run), "--marker", str(tmp_path / f"{name}.runs")],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for name in ("a", "b")]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-3000:] for o in outs)
    assert sorted(f.name for f in barrier.iterdir()) == ["a", "b"]   # they did overlap
    runs = _runs(MlflowClient(uri))
    assert len(runs) == 1 and runs[0].info.status == "FINISHED", [(r.info.run_id, r.info.status) for r in runs]
    assert marker_problems(tmp_path / "a.runs", uri) == [] and marker_problems(tmp_path / "b.runs", uri) == []


def test_a_garbage_store_is_one_line_naming_it_and_the_remedy(finished_run, repo, tmp_path):
    """A store file of random bytes gave the import job a database traceback (and so blocked the table):
    now one line naming the file and what to do, exit 2."""
    (tmp_path / "mlflow.db").write_bytes(os.urandom(8192))
    r = _track(repo, finished_run, "sqlite:///mlflow.db", tmp_path / "m.runs", tmp_path)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert "mlflow.db" in lines[0] and "not an SQLite database" in lines[0] and "move it aside" in lines[0], lines
    assert not (tmp_path / "m.runs").exists()


def test_a_fresh_store_opens_the_experiment_on_its_training_runs(store, finished_run):
    """MLflow 3 chooses an experiment's page by its tag ``mlflow.experimentKind``: without it, the page
    opened on an empty GenAI dashboard (traces) and the runs were one click away under "Model training"."""
    from fedbayes.tracking import EXPERIMENT_KIND, log_run

    p, _, client = store
    rid = log_run(p, "fmnist10-iid-k10", "fedavg", "default", 0, finished_run)
    exp = client.get_experiment_by_name("fmnist10-iid-k10")
    assert EXPERIMENT_KIND == "custom_model_development"   # MLflow 3's "Model training" (its UI's enum)
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    assert client.get_run(rid).info.run_name == "fedavg s0"
    # MLflow 3.17's browser-wide GenAI switch overrides the tag: the documented link opens the runs table
    # (workflowType=machine_learning) with the columns of a shared view naming metrics the runs have
    from fedbayes.tracking import VIEW_KEY

    view = json.loads(exp.tags[f"mlflow.sharedViewState.{VIEW_KEY}"])
    metrics = client.get_run(rid).data.metrics
    assert [c for c in view["selectedColumns"] if c.startswith("metrics.")]
    assert all(c[len("metrics.`"):-1] in metrics for c in view["selectedColumns"] if c.startswith("metrics."))
    # the published value and verdict among the first columns, the runs in name order (the store sorts by it)
    assert view["selectedColumns"].index("tags.`verdict/test/acc`") < 3
    ordered = client.search_runs([exp.experiment_id], order_by=[f"{view['orderByKey']} ASC"])
    assert [r.info.run_name for r in ordered] == sorted(r.info.run_name for r in ordered)


# --- the workflow's import: every pair of a table in one process --------------------------------------

def test_import_pairs_imports_each_run_once_and_again_only_what_changed(tmp_path, finished_run, store, monkeypatch):
    """One process imports every run of a table's pairs and writes the table's marker; run again, it
    imports nothing the store holds as it is (no MLflow client is opened) and the marker is the same; a
    changed run is imported again, alone; a new selection re-imports the runs whose selected tag it
    changes, and re-tags the others."""
    import fedbayes.tracking.importer as importer
    from fedbayes.tracking import import_pairs, marker_problems, marker_runs

    p, uri, client = store
    exp, method, first, other = "fmnist10-iid-k10", "fedavg", "local_epochs=5", "local_epochs=10"
    p["paths"]["runs"] = str(tmp_path / "runs")
    root = tmp_path / "runs" / exp / method
    for pt in (first, other):   # the finished run (seed 0) at both sweep points
        shutil.copytree(finished_run, root / pt / "seed0")
    monkeypatch.setattr(importer, "imported_runs", lambda p, e, m, point: [(first, 0), (other, 0)])
    (root / "selected.json").write_text(json.dumps({"point": first, "hparams": {}}))
    marker = tmp_path / "work/mlflow/table1.runs"
    lines = []
    n = import_pairs(p, {exp: [method]}, str(tmp_path / "fig{seed}.png"), str(marker), log=lines.append)
    assert (n["runs"], n["imported"]) == (2, 2) and lines == [f"{exp}/{method}: 2 of 2 runs imported"]
    text = marker.read_text()
    assert len(text.splitlines()) == 3 and marker_problems(marker, uri) == []
    assert marker_runs(marker, p["scale"], exp, method) == 2 and marker_runs(marker, p["scale"], exp, "fedprox") == 0

    opened = []
    real = importer.open_experiment
    monkeypatch.setattr(importer, "open_experiment", lambda *a: opened.append(a) or real(*a))
    assert import_pairs(p, {exp: [method]}, "", str(marker), log=lines.append)["imported"] == 0
    assert not opened and marker.read_text() == text
    # one run's files changed: that run alone is imported again
    h = root / other / "seed0" / "history.csv"
    h.write_text(h.read_text() + "\n")
    assert import_pairs(p, {exp: [method]}, "", str(marker), log=lines.append)["imported"] == 1
    assert marker_problems(marker, uri) == []
    # a new selection: both runs' selected tags change
    (root / "selected.json").write_text(json.dumps({"point": other, "hparams": {}}))
    assert import_pairs(p, {exp: [method]}, "", str(marker), log=lines.append)["imported"] == 2
    exp_id = client.get_experiment_by_name(exp).experiment_id
    tags = {r.data.tags["point"]: r.data.tags["selected"] for r in client.search_runs([exp_id])}
    assert tags == {first: "false", other: "true"}


def test_a_final_value_without_a_series_is_still_logged(store, finished_run):
    """A metric metrics.json holds at the final round but history.csv has no column for is logged as
    ``final/<metric>``: dropping the duplicates loses no value."""
    from fedbayes.tracking import log_run

    p, uri, client = store
    m = json.loads((finished_run / "metrics.json").read_text())
    m["final"]["test/extra"] = 0.25
    (finished_run / "metrics.json").write_text(json.dumps(m))
    log_run(p, "fmnist10-iid-k10", "fedavg", "local_epochs=5", 0, finished_run)
    exp = client.get_experiment_by_name("fmnist10-iid-k10")
    run = client.search_runs([exp.experiment_id], "tags.method = 'fedavg'")[0]
    assert run.data.metrics["final/test/extra"] == pytest.approx(0.25)
    assert "final/test/acc" not in run.data.metrics


def test_a_runs_series_are_its_evaluated_metrics_not_trainings_own(store, finished_run):
    """metrics.json is the one source of metric values (fedbayes.eval.evaluate): the import read its
    curves from history.csv, so a metric definition change re-evaluated metrics.json and left MLflow's
    curves on the old definition. history.csv's evaluated columns are set off here: the series follow
    metrics.json; training's own columns (train/loss) still come from history.csv."""
    from fedbayes.tracking import log_run

    p, uri, client = store
    hist = pd.read_csv(finished_run / "history.csv")
    hist["test/nll"] = hist["test/nll"] + 1.0
    hist.to_csv(finished_run / "history.csv", index=False)
    m = json.loads((finished_run / "metrics.json").read_text())
    log_run(p, "fmnist10-iid-k10", "fedavg", "local_epochs=5", 0, finished_run)
    exp = client.get_experiment_by_name("fmnist10-iid-k10")
    run = client.search_runs([exp.experiment_id], "tags.method = 'fedavg'")[0]
    series = dict((s.step, s.value) for s in client.get_metric_history(run.info.run_id, "test/nll"))
    assert series == pytest.approx({int(r): t["test/nll"] for r, t in m["rounds"].items()})
    loss = dict((s.step, s.value) for s in client.get_metric_history(run.info.run_id, "train/loss"))
    assert loss == pytest.approx({int(r): v for r, v in zip(hist["round"], hist["train/loss"]) if v == v})


def _track_in_process(repo, tmp_path, monkeypatch, capsys, run, method="fedavg", point="local_epochs=5", seed=0):
    from fedbayes import cli

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as ex:
        cli.main(["track", "--params", str(repo / "params.yaml"), "--experiment", "fmnist10-iid-k10", "--method",
                  method, "--point", point, "--seed", str(seed), "--run-dir", str(run)])
        raise SystemExit(0)
    return ex.value.code, capsys.readouterr().err


@pytest.mark.parametrize("change, args, says", [
    ({}, {"seed": 1}, "records seed 0, not --seed 1"),
    ({}, {"method": "fedprox"}, "records method 'fedavg', not --method 'fedprox'"),
    ({"point": "local_epochs=1"}, {}, "records point 'local_epochs=1', not --point 'local_epochs=5'"),
    ({"experiment": "fmnist10-dir-k10"}, {}, "records experiment 'fmnist10-dir-k10', not --experiment 'fmnist10-iid-k10'"),
], ids=["seed", "method", "point", "experiment"])
def test_track_refuses_a_run_that_is_not_the_one_named(finished_run, repo, tmp_path, monkeypatch, capsys,
                                                        change, args, says):
    """`fedbayes track` imported whatever --run-dir held under the --method/--point/--seed it was given
    (seed 0's data as seed 1's import, a FedAvg run labelled FedProx): run.json must record the run named,
    else one line and nothing written to the store."""
    info = json.loads((finished_run / "run.json").read_text())
    info["config"].update(change)
    (finished_run / "run.json").write_text(json.dumps(info))
    code, err = _track_in_process(repo, tmp_path, monkeypatch, capsys, finished_run, **args)
    assert code == 2 and err.count("\n") == 1 and says in err and "Traceback" not in err, err
    assert not (tmp_path / "mlflow.db").exists()


def test_track_refuses_a_stand_in_run_with_the_paper_params(finished_run, repo, tmp_path, monkeypatch, capsys):
    """A rehearsal's run (stand-in data) tracked with the paper params landed in the paper MLflow experiment
    tagged scale=paper, as a result: refused in one line, nothing written to the store."""
    info = json.loads((finished_run / "run.json").read_text())
    info["config"].update(scale="rehearsal", data="stand-in (tiny)")
    (finished_run / "run.json").write_text(json.dumps(info))
    code, err = _track_in_process(repo, tmp_path, monkeypatch, capsys, finished_run)
    assert code == 2 and err.count("\n") == 1 and "records data 'stand-in (tiny)'" in err and "Traceback" not in err, err
    assert "--scale rehearsal" in err
    assert not (tmp_path / "mlflow.db").exists()


def test_track_refuses_a_folder_under_the_runs_that_is_not_the_runs_own(finished_run, repo, tmp_path, monkeypatch, capsys):
    elsewhere = tmp_path / "results" / "runs" / "fmnist10-iid-k10" / "fedavg" / "scratch"
    shutil.copytree(finished_run, elsewhere)
    code, err = _track_in_process(repo, tmp_path, monkeypatch, capsys, elsewhere)
    assert code == 2 and err.count("\n") == 1 and "is not the run directory of" in err, err
    assert not (tmp_path / "mlflow.db").exists()


# --- what a run tells a reader of the papers: published value, verdict, its own metrics only ---------------

TABLE_HEAD = ("experiment,method,point,round,metric,statistic,ours_mean,ours_std,n_seeds,published_mean,published_std,"
              "published_source,diff,tolerance,within_tol,scale,status,note\n")


def _variant(run, factor=0.5):
    """A fabricated prediction variant "mean" of the finished run (its metrics ``factor`` × the method's)."""
    hist = pd.read_csv(run / "history.csv")
    for c in [c for c in hist.columns if c.startswith(("test/", "ood/"))]:
        hist[f"mean/{c}"] = hist[c] * factor
    hist.to_csv(run / "history.csv", index=False)
    m = json.loads((run / "metrics.json").read_text())
    m["variants"] = {"mean": {"final": {k: v * factor for k, v in m["final"].items()},
                              "rounds": {r: {k: v * factor for k, v in t.items()} for r, t in m["rounds"].items()}}}
    (run / "metrics.json").write_text(json.dumps(m))


def test_a_run_carries_the_published_value_and_verdict_of_the_cells_it_backs(tmp_path, store, finished_run):
    """MLflow had no published value and no verdict: a run (the method's, a variant's) is tagged with the
    published value, the verdict (the one vocabulary, reports.verdicts) and the cell of each table cell it
    is averaged into, read from the table's CSV, per metric and round (and, without the round, the last
    round's); a run no table cell reads has none."""
    from fedbayes.reports.verdicts import VERDICTS
    from fedbayes.tracking import log_run

    p, _, client = store
    _variant(finished_run)
    p["paths"]["reports"] = str(tmp_path / "reports")
    p["tables"] = {"table1": p["tables"]["table1"]}
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "table1.csv").write_text(TABLE_HEAD + "\n".join([
        "fmnist10-iid-k10,fedavg,local_epochs=5,10,test/acc,mean_last3,71.55,0.21,3,72.3,0.4,bayesadmm table1,-0.75,1.5,True,paper,ok,",
        "fmnist10-iid-k10,fedavg,local_epochs=5,10,test/nll,mean_last3,0.71,0.01,3,0.6,0,bayesadmm table1,0.11,0.05,False,paper,ok,",
        "fmnist10-iid-k10,fedavg@mean,local_epochs=5,10,test/acc,mean_last3,70.1,0.2,3,72.3,0.4,bayesadmm table1,-2.2,1.5,False,paper,ok,",
        "fmnist10-iid-k10,fedprox,local_epochs=5,10,test/acc,mean_last3,70.1,0.2,3,99,0.4,bayesadmm table1,-2.2,1.5,False,paper,ok,",
    ]) + "\n")
    own = client.get_run(log_run(p, "fmnist10-iid-k10", "fedavg", "local_epochs=5", 0, finished_run)).data.tags
    assert own["published/test/acc"] == "72.3" and own["verdict/test/acc"] == "within"
    assert own["published/test/nll"] == "0.6" and own["verdict/test/nll"] == "outside"
    assert own["published/test/acc/round10"] == "72.3" and own["verdict/test/acc/round10"] == "within"
    assert own["cell/test/acc/round10"].startswith("table1 (bayesadmm table1): published 72.3 ± 0.4, ours 71.55")
    exp = client.get_experiment_by_name("fmnist10-iid-k10").experiment_id
    (variant,) = client.search_runs([exp], "tags.method = 'fedavg@mean'")
    assert variant.data.tags["verdict/test/acc"] == "outside" and "verdict/test/nll" not in variant.data.tags
    words = [v for t in (own, variant.data.tags) for k, v in t.items() if k.startswith("verdict/")]
    assert words and set(words) <= set(VERDICTS)
    other = client.get_run(log_run(p, "fmnist10-iid-k10", "fedavg", "local_epochs=1", 0, finished_run)).data.tags
    assert not [k for k in other if k.startswith(("published/", "verdict/"))]


def test_a_variants_metrics_are_on_the_variants_run_only(store, finished_run):
    """``mean/test/acc`` was logged on the method's own run beside a ``fedavg@mean`` run holding it: the
    method's run now holds its own prediction's metrics and training's columns, the variant's run the
    variant's."""
    from fedbayes.tracking import log_run

    p, _, client = store
    _variant(finished_run)
    own = client.get_run(log_run(p, "fmnist10-iid-k10", "fedavg", "local_epochs=5", 0, finished_run)).data.metrics
    assert "test/acc" in own and "train/loss" in own
    assert not [k for k in own if k.startswith(("mean/", "final/mean/"))], sorted(own)


def test_accuracy_in_percent_has_no_float_noise(store, finished_run):
    """0.7616 × 100 is 76.16000000000001 in binary floating point: the value shown is the stored one in %."""
    from fedbayes.tracking import log_run

    p, _, client = store
    hist = pd.read_csv(finished_run / "history.csv")
    m = json.loads((finished_run / "metrics.json").read_text())
    last = str(int(hist["round"].iloc[-1]))
    for r in m["rounds"]:
        m["rounds"][r]["test/acc"] = 0.7616
    m["final"]["test/acc"] = 0.7616
    (finished_run / "metrics.json").write_text(json.dumps(m))
    assert 0.7616 * 100 != 76.16   # the noise this guards against
    rid = log_run(p, "fmnist10-iid-k10", "fedavg", "local_epochs=5", 0, finished_run)
    assert client.get_run(rid).data.metrics["test/acc"] == 76.16
    assert {h.value for h in client.get_metric_history(rid, "test/acc")} == {76.16}, last


def test_paths_are_tagged_only_where_every_clone_has_the_file(tmp_path, store, finished_run):
    """Tag ``predictions`` named a git-ignored predictions.npz a clone does not have: inside a git work tree
    it is tagged only where git tracks it."""
    from fedbayes.tracking import log_run

    p, _, client = store
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    assert (finished_run / "predictions.npz").exists()
    tags = client.get_run(log_run(p, "fmnist10-iid-k10", "fedavg", "local_epochs=5", 0, finished_run)).data.tags
    assert "predictions" not in tags and tags["run_dir"] == "run"
    subprocess.run(["git", "-C", str(tmp_path), "add", "-f", "run/predictions.npz"], check=True)
    tags = client.get_run(log_run(p, "fmnist10-iid-k10", "fedavg", "local_epochs=5", 0, finished_run)).data.tags
    assert tags["predictions"] == "run/predictions.npz"


def test_hardware_is_the_machine_class_and_methods_have_their_own_colours(store, finished_run):
    """Tag hardware said "x86_64" (the CPU architecture): it is the machine class that computed the bits
    (fedbayes.machine); each method's runs carry its figures' colour (mlflow.runColor), so a comparison of
    FedAvg and BayesADMM does not draw both in one colour."""
    from fedbayes.study import METHOD_SPECS
    from fedbayes.machine import class_id, class_slug, machine_class
    from fedbayes.tracking import log_run
    from fedbayes.tracking.writer import run_colour

    p, _, client = store
    cls = machine_class("cpu")
    _edit_json(finished_run / "run.json", machine=cls, device_name="x86_64")
    tags = client.get_run(log_run(p, "fmnist10-iid-k10", "fedavg", "local_epochs=5", 0, finished_run)).data.tags
    assert tags["hardware"] == class_id(cls) and tags["machine_class"] == class_slug(cls)
    assert "x86_64" not in tags.get("device_name", "")
    assert tags["mlflow.runColor"] == run_colour("fedavg")
    colours = {m: run_colour(m) for m in METHOD_SPECS}
    assert len(set(colours.values())) == len(colours), colours
    _edit_json(finished_run / "run.json", machine=None)
    tags = client.get_run(log_run(p, "fmnist10-iid-k10", "fedavg", "local_epochs=5", 0, finished_run)).data.tags
    assert "not recorded" in tags["hardware"] and "x86_64" not in tags["hardware"]


# --- one store shared by several clones and importers ------------------------------------------------------

def test_two_importers_racing_into_an_empty_store_share_the_experiment(store, finished_run, monkeypatch):
    """Two importers into an empty tracking server: both find no experiment, one creates it, and the
    other's create ended in a RESOURCE_ALREADY_EXISTS traceback. Here the other importer's create happens
    between this one's look-up and its create: the experiment it made is used."""
    from mlflow.tracking import MlflowClient

    from fedbayes.tracking import log_run

    p, uri, client = store
    real = MlflowClient.get_experiment_by_name
    raced = []

    def lookup(self, name):
        if not raced:   # the first look-up misses; meanwhile the other importer creates the experiment
            raced.append(real(self, name) or self.create_experiment(name))
            return None
        return real(self, name)

    monkeypatch.setattr(MlflowClient, "get_experiment_by_name", lookup)
    rid = log_run(p, "fmnist10-iid-k10", "fedavg", "local_epochs=5", 0, finished_run)
    assert client.get_run(rid).info.experiment_id == raced[0]


def _clone(root: Path, run: Path, exp, method, point, finished: str, slower: float) -> Path:
    """A clone's own training of one run: the same numbers, its own wall-clock times and finish time."""
    d = root / "results" / "runs" / exp / method / point / "seed0"
    shutil.copytree(run, d)
    (d.parent.parent / "selected.json").write_text(json.dumps({"point": point, "hparams": {}}))
    hist = pd.read_csv(d / "history.csv")
    hist["time_s"] = hist["time_s"] * slower
    hist.to_csv(d / "history.csv", index=False)
    _edit_json(d / "run.json", started="2026-01-01T00:00:00+00:00", finished=finished)
    return root


def test_two_clones_sharing_a_store_do_not_replace_each_others_runs_forever(tmp_path, store, finished_run,
                                                                             monkeypatch):
    """Two clones, each with its own training of a run (other times, so other content), import into one
    store: each deleted the other's import and re-imported its own on every `make mlflow`, for ever. The
    store keeps the newer training; the clone with the older one leaves it, and neither imports again."""
    import fedbayes.tracking.importer as importer
    from fedbayes.tracking import import_pairs, marker_problems

    p, uri, client = store
    exp, method, point = "fmnist10-iid-k10", "fedavg", "local_epochs=5"
    monkeypatch.setattr(importer, "imported_runs", lambda p, e, m, pt: [(point, 0)])
    a = _clone(tmp_path / "a", finished_run, exp, method, point, "2026-01-02T00:00:00+00:00", 1.5)
    b = _clone(tmp_path / "b", finished_run, exp, method, point, "2026-01-03T00:00:00+00:00", 2.0)

    def make_mlflow(clone):
        monkeypatch.chdir(clone)
        q = json.loads(json.dumps(p))
        q["paths"]["runs"] = str(clone / "results" / "runs")
        n = import_pairs(q, {exp: [method]}, "", str(clone / "work" / "table1.runs"), log=lambda line: None)
        return n["imported"], marker_problems(clone / "work" / "table1.runs", uri)

    assert make_mlflow(a) == (1, [])
    assert make_mlflow(b) == (1, [])     # the newer training replaces the older
    assert make_mlflow(a) == (0, [])     # and stays: clone a's import stands for it
    assert make_mlflow(b) == (0, [])
    assert make_mlflow(a) == (0, [])
    e = client.get_experiment_by_name(exp).experiment_id
    from mlflow.entities import ViewType

    every = client.search_runs([e], f"tags.run_key = '{KEY}'", run_view_type=ViewType.ALL)
    active = [r for r in every if r.info.lifecycle_stage == "active"]
    assert len(active) == 1 and active[0].data.tags["trained"].startswith("2026-01-03")
    assert len(every) == 2   # one replacement (b's of a's), no back and forth


def test_make_mlflow_says_already_imported_when_nothing_was_to_do(tmp_path, store, finished_run, monkeypatch, capsys,
                                                                   repo):
    """The import job's line said "0 of 83 runs imported" when they were all in the store already."""
    import fedbayes.tracking.importer as importer
    from fedbayes import cli

    exp, method, point = "fmnist10-iid-k10", "fedavg", "local_epochs=5"
    monkeypatch.setattr(importer, "imported_runs", lambda p, e, m, pt: [(point, 0)])
    _clone(tmp_path, finished_run, exp, method, point, "2026-01-02T00:00:00+00:00", 1.0)
    args = ["track", "--params", str(repo / "params.yaml"), "--name", "table1", "--pairs", json.dumps({exp: [method]}),
            "--figure", "fig{seed}.png", "--marker", str(tmp_path / "work" / "table1.runs")]
    for _ in range(2):
        cli.main(args)
    out = capsys.readouterr().out.strip().splitlines()
    assert out[1].startswith("MLflow: 1 of 1 runs of table1 imported into "), out
    assert out[-1].startswith("MLflow: all 1 runs of table1 already imported into "), out
    assert "0 of" not in out[-1]


def test_a_changed_verdict_reimports_the_runs_of_its_cell(tmp_path, store, finished_run, monkeypatch):
    """The store holds a run as it was imported; when a table's cell it backs changes verdict (the table
    was rebuilt), the workflow's import writes that run again with the new tags, and only then."""
    import fedbayes.tracking.importer as importer
    from fedbayes.tracking import import_pairs

    p, uri, client = store
    exp, method, point = "fmnist10-iid-k10", "fedavg", "local_epochs=5"
    monkeypatch.setattr(importer, "imported_runs", lambda p, e, m, pt: [(point, 0)])
    _clone(tmp_path, finished_run, exp, method, point, "2026-01-02T00:00:00+00:00", 1.0)
    p["paths"] |= {"runs": str(tmp_path / "results" / "runs"), "reports": str(tmp_path / "reports")}
    p["tables"] = {"table1": p["tables"]["table1"]}
    (tmp_path / "reports").mkdir()
    csv = tmp_path / "reports" / "table1.csv"
    row = "fmnist10-iid-k10,fedavg,local_epochs=5,10,test/acc,mean_last3,71.55,0.21,3,72.3,0.4,bayesadmm table1,-0.75,1.5,{},paper,ok,\n"
    csv.write_text(TABLE_HEAD + row.format("True"))

    def imported():
        return import_pairs(p, {exp: [method]}, "", str(tmp_path / "m.runs"), log=None)["imported"]

    assert (imported(), imported()) == (1, 0)
    csv.write_text(TABLE_HEAD + row.format("False"))
    assert (imported(), imported()) == (1, 0)
    e = client.get_experiment_by_name(exp).experiment_id
    (run,) = client.search_runs([e], f"tags.run_key = '{KEY}'")
    assert run.data.tags["verdict/test/acc"] == "outside"


def test_track_refuses_a_run_of_another_scale(finished_run, repo, tmp_path, monkeypatch, capsys):
    """A smoke run (3 rounds on a fifth of the data) copied out of results/runs/smoke and tracked with the
    paper params landed in the paper MLflow experiment under the paper run's key, tagged scale=paper:
    refused in one line naming its scale, nothing written to the store."""
    info = json.loads((finished_run / "run.json").read_text())
    info["config"]["scale"] = "smoke"
    (finished_run / "run.json").write_text(json.dumps(info))
    code, err = _track_in_process(repo, tmp_path, monkeypatch, capsys, finished_run)
    assert code == 2 and err.count("\n") == 1 and "records scale 'smoke'" in err and "--scale smoke" in err, err
    assert not (tmp_path / "mlflow.db").exists()


def test_tracking_an_older_training_by_hand_leaves_one_active_run_of_its_key(tmp_path, store, finished_run, monkeypatch):
    """`fedbayes track --run-dir` (always written anew) of clone a's older training after clone b's newer one
    left two active FINISHED runs of the key (a's could not delete the newer b's): the store keeps the newer
    training, as `make mlflow` does, and the command's run id is the one that holds the key."""
    from mlflow.entities import ViewType

    from fedbayes.tracking import log_run

    p, uri, client = store
    exp, method, point = "fmnist10-iid-k10", "fedavg", "local_epochs=5"
    a = _clone(tmp_path / "a", finished_run, exp, method, point, "2026-01-02T00:00:00+00:00", 1.5)
    b = _clone(tmp_path / "b", finished_run, exp, method, point, "2026-01-03T00:00:00+00:00", 2.0)
    ids = []
    for clone in (a, b, a):
        monkeypatch.chdir(clone)
        q = json.loads(json.dumps(p))
        q["paths"]["runs"] = str(clone / "results" / "runs")
        ids.append(log_run(q, exp, method, point, 0, clone / "results" / "runs" / exp / method / point / "seed0"))
    e = client.get_experiment_by_name(exp).experiment_id
    active = client.search_runs([e], f"tags.run_key = '{KEY}'", run_view_type=ViewType.ACTIVE_ONLY)
    assert len(active) == 1 and active[0].data.tags["trained"].startswith("2026-01-03"), [
        (r.info.run_id, r.data.tags["trained"]) for r in active]
    assert ids[2] == ids[1] == active[0].info.run_id
