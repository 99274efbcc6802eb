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


def test_log_run_is_complete_and_idempotent(tmp_path, finished_run, repo, monkeypatch):
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    from fedbayes.tracking import log_run

    p = yaml.safe_load((repo / "params.yaml").read_text())
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)
    p["paths"]["mlartifacts"] = str(tmp_path / "mlartifacts")
    sel = tmp_path / "selected.json"
    sel.write_text('{"point": "local_epochs=5"}')
    first = log_run(p, "fmnist10-iid-k10", "fedavg", "local_epochs=5", 0, finished_run, selected=str(sel))
    second = log_run(p, "fmnist10-iid-k10", "fedavg", "local_epochs=5", 0, finished_run, selected=str(sel))
    other = log_run(p, "fmnist10-iid-k10", "fedavg", "local_epochs=1", 0, finished_run, selected=str(sel))
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("fmnist10-iid-k10")
    runs = {r.info.run_id: r for r in client.search_runs([exp.experiment_id])}
    assert set(runs) == {second, other} and first != second
    run = runs[second]
    assert run.data.tags["run_key"] == "paper/fmnist10-iid-k10/fedavg/local_epochs=5/seed0"
    assert run.data.tags["selected"] == "true" and runs[other].data.tags["selected"] == "false"
    assert run.info.run_name == "fedavg[local_epochs=5]-seed0"
    # a new selection re-tags the runs imported under the old one
    sel.write_text('{"point": "local_epochs=1"}')
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
