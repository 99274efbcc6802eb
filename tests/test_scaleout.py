"""Past one machine: the smoke DAG logging to an MLflow tracking server (``mlflow server`` with a SQL
backend on loopback) instead of the local SQLite file. The Slurm path is tests/test_slurm.py; the DVC
remote (push, fresh clone, pull, adopt) is in tests/test_integration.py, on the DAG that test builds."""

from __future__ import annotations

import pandas as pd
import pytest
from dagutil import built_copy, mlflow_server, require_fmnist, sh
from fedbayes.tracking.content import scaled

pytestmark = [pytest.mark.integration, pytest.mark.full]   # runs the DAG: make test-all

EXP = "fmnist10-iid-k10"


def narrow_table1(p: dict) -> None:
    """table1 cut to one experiment and FedAvg: 2 sweep points on seed 0, the selected one on seed 1."""
    p["tables"]["table1"].update({"experiments": [EXP], "methods": ["fedavg"]})
    p["experiments"][EXP]["methods"] = {"fedavg": p["experiments"][EXP]["methods"]["fedavg"]}


# the narrow table and its sweep report built, nothing imported into MLflow yet: one build for this file and
# tests/test_recovery.py (dagutil.built_copy), each of which then imports the runs into its own store
NARROW_BUILD = f"snakemake --cores 2 reports/smoke/table1.csv reports/smoke/sweeps/{EXP}.csv"


def narrow_built(tmp_path_factory, repo):
    require_fmnist(pytest)
    return built_copy(tmp_path_factory, repo, "narrow-table1", narrow_table1, "smoke", NARROW_BUILD)


@pytest.fixture
def tracking_server(tmp_path):
    with mlflow_server(tmp_path) as url:
        yield url, tmp_path


def test_smoke_dag_logs_every_run_to_a_tracking_server(tmp_path_factory, repo, tracking_server):
    url, server_dir = tracking_server
    d = narrow_built(tmp_path_factory, repo)
    out = sh(f"snakemake --cores 2 reports/smoke/table1.csv reports/smoke/sweeps/{EXP}.csv mlflow_table1", d, MLFLOW_TRACKING_URI=url)
    assert "rule mlflow_table1:" in out and "rule train:" not in out   # the import alone, of the built runs
    assert not (d / "mlflow.db").exists()  # nothing went to the local store

    from mlflow.tracking import MlflowClient

    client = MlflowClient(url)
    exp = client.get_experiment_by_name(f"smoke-{EXP}")
    runs = client.search_runs([exp.experiment_id])
    sweep = pd.read_csv(d / f"reports/smoke/sweeps/{EXP}.csv")
    chosen = sweep[sweep.selected].point.iloc[0]
    expected = {f"fedavg s0 {pt}" for pt in sweep.point} | {f"fedavg s1 {chosen}"}
    assert sorted(r.info.run_name for r in runs) == sorted(expected)
    for r in runs:  # every run arrived whole: status, per-round series, tags, artifacts through the server
        assert r.info.status == "FINISHED" and r.data.tags["selected"] == str(chosen in r.info.run_name).lower()
        point, seed = r.data.tags["point"], r.data.tags["seed"]
        hist = pd.read_csv(d / f"results/runs/smoke/{EXP}/fedavg/{point}/seed{seed}/history.csv")
        series = client.get_metric_history(r.info.run_id, "test/acc")
        # accuracy in % in MLflow, as in the tables (history.csv keeps the fraction)
        assert sorted((m.step, m.value) for m in series) == sorted(zip(hist["round"], [scaled(v, 100.0) for v in hist["test/acc"]]))   # no binary noise
        assert {"history.csv", "metrics.json", "run.json"} <= {a.path for a in client.list_artifacts(r.info.run_id)}
    assert any((server_dir / "server-artifacts").rglob("history.csv"))  # stored by the server, not the client
    assert "Nothing to be done" in sh(f"snakemake --cores 2 reports/smoke/table1.csv reports/smoke/sweeps/{EXP}.csv mlflow_table1", d, MLFLOW_TRACKING_URI=url)
