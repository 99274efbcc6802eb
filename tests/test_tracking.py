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
    first = log_run(p, "fmnist10-iid-k10", "fedavg", 0, finished_run)
    second = log_run(p, "fmnist10-iid-k10", "fedavg", 0, finished_run)
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("fmnist10-iid-k10")
    runs = client.search_runs([exp.experiment_id])
    assert [r.info.run_id for r in runs] == [second] and first != second
    run = runs[0]
    assert run.data.tags["run_key"] == "paper/fmnist10-iid-k10/fedavg/seed0"
    assert run.data.tags["partition_hash"] == "abc123"
    assert run.data.tags["device"] == "cpu" and run.data.tags["git_sha"]
    assert run.data.params["hparams.local_epochs"] == "1" and run.data.params["seed"] == "3"
    hist = client.get_metric_history(second, "test/acc")
    assert sorted(m.step for m in hist) == [0, 1, 2, 3, 4]
    assert "final/test/acc" in run.data.metrics
    arts = {a.path for a in client.list_artifacts(second)}
    assert {"history.csv", "metrics.json", "run.json"} <= arts
