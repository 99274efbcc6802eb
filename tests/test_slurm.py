"""The smoke DAG through a real Slurm cluster. workflow/cluster/slurm-single-node.sh stands up (or
checks) a single-node cluster on this machine from Debian packages (munge, MariaDB, slurmdbd,
slurmctld, slurmd); then, in a temporary copy of the repository at scale: smoke, Snakemake builds
reports/smoke/table1.csv for one experiment and three methods with workflow/profiles/slurm, its account and
partition set to the test cluster's and without the GPU request of training (the cluster has no GPU).
Checked: the table, every job in Slurm's accounting (sacct) as a COMPLETED job of this Snakemake run
with its rule in the comment, the MLflow import jobs one at a time, one FINISHED MLflow run per
(method, point, seed).

Runs as root where Slurm is installed, or where apt-get can install it and CI (or
FEDBAYES_TEST_SLURM=1) is set: the script installs system packages and starts system daemons, which a
developer's plain `pytest` as root should not do unasked. Skipped when not root or without apt-get
and Slurm; on CI as root with apt, a missing executor plugin or data set is a failure, not a skip."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import sqlite3
import time
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest
import yaml
from dagutil import copy_repo, require_fmnist, sh
from dagutil import read_params

from fedbayes.study import load_params, sweep_points

pytestmark = pytest.mark.slurm

SCRIPT = "workflow/cluster/slurm-single-node.sh"
PROFILE = "workflow/profiles/slurm/config.yaml"
ACCOUNT, PARTITION = "fedbayes", "local"         # the script's defaults
EXPERIMENT = "fmnist10-iid-k10"
METHODS = ["fedavg", "bayesadmm@mean", "bayesadmm"]   # bayesadmm@mean: bayesadmm's runs, point predictions
ON_CI = bool(os.environ.get("CI"))


def _check_prerequisites() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root: the script installs Slurm and starts its daemons")
    installed = shutil.which("slurmctld") is not None or Path("/usr/sbin/slurmctld").exists()
    if not installed and not shutil.which("apt-get"):
        pytest.skip("Slurm is not installed and there is no apt-get to install it")
    if not installed and not (ON_CI or os.environ.get("FEDBAYES_TEST_SLURM") == "1"):
        pytest.skip("would install Slurm system-wide: set FEDBAYES_TEST_SLURM=1 (CI does not need to)")
    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        if ON_CI:
            pytest.fail("snakemake-executor-plugin-slurm is not installed (pip install -e '.[slurm]'); "
                        "CI, as root with apt, must run this test")
        pytest.skip("snakemake-executor-plugin-slurm is not installed (pip install -e '.[slurm]')")


@pytest.fixture(scope="module")
def cluster(repo):
    """The single-node cluster, set up (apt-get install on first use) or found running."""
    _check_prerequisites()
    require_fmnist(pytest)
    t0 = time.monotonic()
    out = sh(f"bash {SCRIPT}", repo, timeout=1200)
    print(out, f"\n[test_slurm] set-up script: {time.monotonic() - t0:.0f} s")
    assert f"ready: cluster fedbayes, partition {PARTITION}, account {ACCOUNT}" in out
    return out


def test_profile_requests_gpus_for_training(repo):
    """What the README command uses on a real cluster: GPUs for training only, placeholders to edit."""
    prof = yaml.safe_load((repo / PROFILE).read_text())
    assert prof["executor"] == "slurm" and "mlflow_db=1" in prof["resources"]
    res = prof["set-resources"]
    assert res["train"]["gpu"] == 1 and all("gpu" not in r for rule, r in res.items() if rule != "train")
    assert {"slurm_account", "slurm_partition", "runtime", "mem_mb"} <= set(prof["default-resources"])
    default = yaml.safe_load((repo / "profiles/default/config.yaml").read_text())
    assert all(prof[k] == v for k, v in default.items()), "the default profile's settings, repeated"


def cluster_profile(repo: Path, dst: Path) -> Path:
    """workflow/profiles/slurm as this cluster needs it: its account and partition, no GPU request,
    and the first status check (sacct) after 5 s instead of 40 (smoke jobs take seconds)."""
    prof = yaml.safe_load((repo / PROFILE).read_text())
    prof["default-resources"].update(slurm_account=ACCOUNT, slurm_partition=PARTITION)
    for key in ("gpu", "slurm_partition"):
        del prof["set-resources"]["train"][key]
    prof["slurm-init-seconds-before-status-checks"] = 5
    dst.mkdir(parents=True)
    (dst / "config.yaml").write_text(yaml.safe_dump(prof, sort_keys=False))
    return dst


def test_smoke_dag_through_slurm(cluster, repo, tmp_path):
    def edit(p):
        p["tables"]["table1"].update(experiments=[EXPERIMENT], methods=METHODS)
        p["experiments"][EXPERIMENT]["methods"] = {m: p["experiments"][EXPERIMENT]["methods"][m]   # its sweep
                                                   for m in ("fedavg", "bayesadmm")}              # report: these two

    work = copy_repo(repo, tmp_path / "repo", edit)
    profile = cluster_profile(repo, tmp_path / "profile")
    since = (datetime.now() - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S")
    t0 = time.monotonic()
    out = sh(f"snakemake --profile {profile} reports/smoke/table1.csv reports/smoke/sweeps/{EXPERIMENT}.csv mlflow_table1", work, timeout=2400)
    print(f"[test_slurm] snakemake through Slurm: {time.monotonic() - t0:.0f} s")
    run_id = re.search(r"SLURM run ID: (\S+)", out).group(1)

    # the table: one experiment, the three methods, both smoke seeds
    p = read_params(work)
    study = load_params(work / "params.yaml")
    seeds = p["smoke"]["seeds"]
    df = pd.read_csv(work / "reports/smoke/table1.csv")
    assert set(df.experiment) == {EXPERIMENT} and set(df.method) == set(METHODS)
    assert (df.status == "ok").all() and (df.n_seeds == len(seeds)).all() and (df.scale == "smoke").all()
    assert set(df.metric) == set(p["tables"]["table1"]["metrics"])
    acc = df[df.metric == "test/acc"].ours_mean
    assert len(acc) == len(METHODS) and ((acc > 10) & (acc <= 100)).all()

    # the runs: each method's grid (its first sweep_limit points) on the first seed, the selected
    # point on every seed
    sweep = pd.read_csv(work / f"reports/smoke/sweeps/{EXPERIMENT}.csv")
    expected_runs = set()
    for m in ("fedavg", "bayesadmm"):
        s = sweep[sweep.method == m]
        assert list(s.point) == list(sweep_points(study, EXPERIMENT, m))   # the grid's first sweep_limit points
        chosen = s[s.selected].point.iloc[0]
        expected_runs |= {(m, pt, seeds[0]) for pt in s.point} | {(m, chosen, sd) for sd in seeds}

    # Slurm: every job of this run (job name = the run's UUID) COMPLETED, in the account and partition
    # given, its rule in the comment; as many per rule as Snakemake ran
    acct = sh(f"sacct -X -P -n --name {run_id} -S {since} -E now "
              "-o JobID,JobName,Comment,State,Account,Partition,Start,End", work)
    jobs = pd.DataFrame([line.split("|") for line in acct.splitlines() if line.strip()],
                        columns=["id", "name", "comment", "state", "account", "partition", "start", "end"])
    print(f"[test_slurm] sacct: {len(jobs)} jobs of run {run_id}\n{acct}")
    assert (jobs.state == "COMPLETED").all() and (jobs.account == ACCOUNT).all() and (jobs.partition == PARTITION).all()
    jobs["rule"] = jobs.comment.str.extract(r"^rule_(.+?)(?:_wildcards_.*)?$", expand=False)
    ran = Counter(re.findall(r"^(?:rule|checkpoint) (\w+):$", out, flags=re.MULTILINE))
    assert Counter(jobs.rule) == ran, f"sacct {Counter(jobs.rule)} vs Snakemake {ran}"
    assert f"{len(jobs)} of {len(jobs)} steps (100%) done" in out
    n = len(expected_runs)
    assert ran["train"] == ran["evaluate"] == n and ran["select"] == 2 and ran["table_table1"] == 1
    imports = [r for r in ran if r.startswith("mlflow")]
    assert imports == ["mlflow_table1"] and ran["mlflow_table1"] == 1  # one job: all the table's runs
    # the mlflow_db resource holds under Slurm: the MLflow import jobs ran one after another
    log = jobs[jobs.rule.str.startswith("mlflow")].sort_values("start")
    assert (log.start.iloc[1:].to_numpy() >= log.end.iloc[:-1].to_numpy()).all(), log

    # MLflow: one FINISHED run per (method, point, seed)
    con = sqlite3.connect(work / "mlflow.db")
    runs = con.execute("select e.name, r.name, r.status from runs r join experiments e using (experiment_id) "
                       "where r.lifecycle_stage = 'active'").fetchall()
    # … and one per prediction variant the run evaluated (bayesadmm@mean: a run of its own, as in MLflow's
    # import since prediction variants became findable runs)
    variants = lambda m, pt, s: sorted(json.loads(  # noqa: E731
        (work / f"results/runs/smoke/{EXPERIMENT}/{m}/{pt}/seed{s}/metrics.json").read_text()).get("variants", {}))
    labels = {(f"{m}@{v}" if v else m, pt, s) for m, pt, s in expected_runs for v in ["", *variants(m, pt, s)]}
    assert any("@" in m for m, _, _ in labels)
    names = {f"{m} s{s}" + (f" {pt}" if pt != "default" else "") for m, pt, s in labels}
    assert sorted(runs) == sorted((f"smoke-{EXPERIMENT}", nm, "FINISHED") for nm in names)

    # complete metadata from the jobs: nothing left to do, nothing submitted
    again = sh(f"snakemake --profile {profile} reports/smoke/table1.csv reports/smoke/sweeps/{EXPERIMENT}.csv mlflow_table1", work)
    assert "Nothing to be done" in again and "submitted with SLURM jobid" not in again
