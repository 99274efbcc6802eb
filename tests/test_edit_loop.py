"""The edit loop a user starts with, on the real commands in a temporary copy of the repository at scale
smoke (Fashion-MNIST, the headline table cut down to FedAvg on one experiment): an edit that adds work —
a method added to an experiment and to its table, an experiment added to a table — is built by the plain
table target the first time (`snakemake … reports/smoke/table1.csv`, `dvc repro table1`), never answered
"Nothing to be done"; a new table entry masks no other pending edit of the table; unchanged runs are not
retrained; and the same command afterwards has nothing to do.

Before: the table's inputs hung on a sweep selection (a Snakemake checkpoint) that did not exist yet, and
Snakemake 9 checks neither the params nor the mtimes of a job waiting on a checkpoint, so the table was
taken as up to date (docs/workflow.md's `-R table_…` footnote); DVC's table1 stage listed only the
experiments and methods the table had when dvc.yaml was written, so an edit of one added later was skipped
(now dvc.yaml's lists are generated, `make dvc.yaml`, and a stage whose list is out of date stops).
"""

from __future__ import annotations

import copy

import pandas as pd
import pytest
import yaml
from dagutil import mtimes, read_params, sh
from test_scaleout import narrow_built

pytestmark = [pytest.mark.integration, pytest.mark.full]   # runs the DAG: make test-all

TABLE = "reports/smoke/table1.csv"
IID, DIR = "fmnist10-iid-k10", "fmnist10-dir-k10"
GIT = "git -c user.email=ci@example.org -c user.name=ci"


def fedavg_only(p: dict) -> None:
    """The headline table cut down to FedAvg on the iid experiment (the DVC stage's params keys kept)."""
    for e in (IID, DIR):
        p["experiments"][e]["methods"] = {"fedavg": p["experiments"][e]["methods"]["fedavg"]}
    p["experiments"] = {e: p["experiments"][e] for e in (IID, DIR)}
    p["tables"] = {"table1": {**p["tables"]["table1"], "experiments": [IID], "methods": ["fedavg"],
                              "metrics": ["test/acc", "test/nll"]}}
    p["headline"] = {"table": "table1", "metrics": ["test/acc", "test/nll"], "curves": ["test/acc", "test/nll"]}


def edit(d, change) -> None:
    p = read_params(d)
    change(p)
    (d / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))


def rows(d) -> set[tuple[str, str, str]]:
    """(experiment, method, metric) of the table's rows with a number of ours."""
    df = pd.read_csv(d / TABLE)
    return set(df[df.ours_mean.notna()][["experiment", "method", "metric"]].itertuples(index=False, name=None))


def trained(out: str) -> int:
    """How many training jobs a `snakemake` run says it finished."""
    return out.count("(Rule: train)")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, repo):
    """The narrow headline table's build (FedAvg on the iid experiment: tests/test_scaleout.py's, shared),
    cut down further by ``fedavg_only`` as a user edits params.yaml (dvc.yaml's lists follow, `make dvc.yaml`);
    its table target then rebuilds the table from the runs it has."""
    d = narrow_built(tmp_path_factory, repo)
    edit(d, fedavg_only)
    sh("python3 workflow/dvc_stages.py", d)
    out = sh(f"snakemake --cores 1 {TABLE}", d, timeout=1800)
    assert trained(out) == 0, out[-3000:]
    assert rows(d) == {(IID, "fedavg", m) for m in ("test/acc", "test/nll")}
    return d


def test_a_method_and_an_experiment_added_to_a_table_are_built_by_its_target(workdir):
    fedavg_runs = mtimes(workdir, f"results/runs/smoke/{IID}/fedavg/*/*/history.csv")
    assert fedavg_runs

    # a method added to an experiment and to its table
    def add_fedprox(p):
        p["experiments"][IID]["methods"]["fedprox"] = None
        p["tables"]["table1"]["methods"].append("fedprox")

    edit(workdir, add_fedprox)
    out = sh(f"snakemake --cores 1 {TABLE}", workdir, timeout=1800)
    assert "Nothing to be done" not in out and trained(out) == 3, out[-3000:]  # 2 grid points + the 2nd seed
    assert {(IID, m, "test/acc") for m in ("fedavg", "fedprox")} <= rows(workdir)

    # an experiment added to the table, with a pending edit of the table's own (a metric) beside it
    def add_experiment_and_metric(p):
        p["tables"]["table1"]["experiments"].append(DIR)
        p["tables"]["table1"]["metrics"].append("test/ece")

    edit(workdir, add_experiment_and_metric)
    out = sh(f"snakemake --cores 1 {TABLE}", workdir, timeout=1800)
    assert "Nothing to be done" not in out and trained(out) == 3, out[-3000:]
    assert {(e, "fedavg", m) for e in (IID, DIR) for m in ("test/acc", "test/nll", "test/ece")} <= rows(workdir)
    assert (IID, "fedprox", "test/ece") in rows(workdir)

    # nothing retrained that the edits did not touch, and nothing left to do
    assert mtimes(workdir, f"results/runs/smoke/{IID}/fedavg/*/*/history.csv") == fedavg_runs
    assert "Nothing to be done" in sh(f"snakemake --cores 1 {TABLE}", workdir)


def test_dvc_repro_builds_an_experiment_added_to_the_table_and_follows_its_edits(workdir):
    sh(f"snakemake --cores 1 {TABLE} reports/smoke/metrics", workdir)   # every output of DVC's table1 stage
    sh(f"{GIT} init -q && {GIT} add -A >/dev/null && {GIT} commit -qm init && dvc init -q && "
       "dvc commit -f -q data table1", workdir)
    assert "Data and pipelines are up to date" in sh("dvc status data table1", workdir)
    k5 = "fmnist10-iid-k5"

    def add_experiment(p):
        p["experiments"][k5] = {**copy.deepcopy(p["experiments"][IID]), "clients": 5, "methods": {"fedavg": None}}
        p["tables"]["table1"]["experiments"].append(k5)

    edit(workdir, add_experiment)
    # dvc.yaml's params lists predate the experiment: the stage stops, naming the command that follows it
    out = sh("dvc repro table1", workdir, check=False)
    assert "make dvc.yaml" in out and trained(out) == 0, out[-3000:]
    sh("python3 workflow/dvc_stages.py", workdir)   # `make dvc.yaml`
    out = sh("dvc repro table1", workdir, timeout=1800)
    assert "Running stage 'table1'" in out and trained(out) == 3, out[-3000:]
    assert (k5, "fedavg", "test/acc") in rows(workdir)
    runs = mtimes(workdir, f"results/runs/smoke/{k5}/fedavg/*/*/history.csv")
    others = mtimes(workdir, f"results/runs/smoke/{IID}/*/*/*/history.csv")

    # an edit of the experiment added after dvc.yaml was written reaches its runs
    def edit_lr(p):
        p["experiments"][k5]["train"]["lr"] = 0.002

    edit(workdir, edit_lr)
    out = sh("dvc repro table1", workdir, timeout=1800)
    assert "Running stage 'table1'" in out, out[-3000:]
    after = mtimes(workdir, f"results/runs/smoke/{k5}/fedavg/*/*/history.csv")
    assert after.keys() == runs.keys() and all(after[k] > runs[k] for k in runs)
    assert mtimes(workdir, f"results/runs/smoke/{IID}/*/*/*/history.csv") == others
    assert "Data and pipelines are up to date" in sh("dvc status data table1", workdir)
