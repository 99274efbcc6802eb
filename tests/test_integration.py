"""The real DAG at scale: smoke, in a temporary copy of the repository: Snakemake builds the headline
table, the FedLap paper's tables (rows whose data this offline machine cannot fetch read "not run") and
the MLflow store; then DVC, after a FedAvg hyperparameter edit, reruns only that experiment's FedAvg runs and the
tables (not the raw data, not the partitions, not the other methods' runs)."""

import json
import re
import sqlite3

import pandas as pd
import pytest
import yaml
from dagutil import copy_repo, mtimes, require_fmnist, sh

from fedbayes.study import load_params, selection_seeds, sweep_points
from dagutil import read_params

pytestmark = pytest.mark.integration

# smoke-scale outputs live under reports/smoke/ (never over the committed paper-scale reports)
TABLES = (["reports/smoke/table1.csv"] + [f"reports/smoke/fedlap/table{i}.csv" for i in range(1, 6)]
          + ["reports/smoke/bayesadmm/table1.csv", "reports/smoke/bayesadmm/table2.csv", "reports/smoke/fedivon/table1.csv",
             "reports/smoke/fedivon/table2.csv", "reports/smoke/fedep/table4.csv"])
# the sweep reports read below: their own targets (a table asks for its methods' runs only)
SWEEPS = ["reports/smoke/sweeps/fmnist10-iid-k10.csv", "reports/smoke/sweeps/fmnist10-dir-k10.csv",
          "reports/smoke/fedlap/sweep_fmnist-dir-k100.csv", "reports/smoke/sweeps/fmnist-shards-k200.csv"]
TARGETS = TABLES + SWEEPS + ["reports/smoke/metrics"]  # + the headline numbers and curves (DVC's table1 stage)
# each table's MLflow import (rule mlflow_<table>: that table's runs only; FedEP's Table 4 is a data-free toy)
IMPORTS = " ".join("mlflow_" + t[len("reports/smoke/"):-len(".csv")].replace("/", "_") for t in TABLES
                   if t != "reports/smoke/fedep/table4.csv")
GIT = "git -c user.email=ci@example.org -c user.name=ci"
# the DVC stages those tables belong to. fola_tables is left out for CI time (its smoke DAG adds 52 jobs);
# its methods run through the engine in tests/test_baselines.py and tests/test_fola.py.
STAGES = "data table1 fedlap_tables bayesadmm_tables fedivon_tables fedep_toy"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, repo):
    require_fmnist(pytest)
    return copy_repo(repo, tmp_path_factory.mktemp("repo"))


def test_snakemake_smoke_dag_builds_table_and_mlflow(workdir):
    # a clean checkout: the smoke DAG must leave `git status` clean (its outputs are git-ignored and live
    # apart from the paper-scale files, which it never writes)
    sh(f"git init -q && {GIT} add -A >/dev/null && {GIT} commit -qm checkout", workdir)
    out = sh(f"snakemake --cores 2 {IMPORTS} " + " ".join(TARGETS), workdir)
    assert sh("git status --porcelain --untracked-files=all", workdir).strip() == ""
    assert not (workdir / "reports/table1.csv").exists() and not (workdir / "reports/figures").exists()
    assert "round   3/3" in out  # per-round progress reaches the console
    p = read_params(workdir)
    study = load_params(workdir / "params.yaml")
    seeds, exps = p["smoke"]["seeds"], p["tables"]["table1"]["experiments"]
    methods = p["tables"]["table1"]["methods"]
    df = pd.read_csv(workdir / "reports/smoke/table1.csv")
    assert set(df.experiment) == set(exps) and set(df.method) == set(methods)
    assert (df.n_seeds == len(seeds)).all() and (df.scale == "smoke").all()
    acc = df[df.metric == "test/acc"].set_index(["experiment", "method"]).ours_mean
    assert ((acc >= 0) & (acc <= 100)).all()
    # above chance after 3 smoke rounds — for FedAvg; BayesADMM's authors' lr (5e-5) moves its network
    # by about one step a smoke round (12 points a client), so its smoke accuracy is chance level
    assert (acc.xs("fedavg", level="method") > 20).all()
    assert (workdir / "reports/smoke/table1.md").exists() and (workdir / "reports/smoke/figures/table1_curves.png").exists()
    # DVC's view: a metrics JSON per experiment × method, the headline curves
    ran = df[df.ours_mean.notna()][["experiment", "method"]].drop_duplicates()
    assert sorted((workdir / "reports/smoke/metrics").rglob("*.json")) == sorted(
        workdir / "reports/smoke/metrics" / r.experiment / f"{r.method}.json" for r in ran.itertuples())
    curves = pd.read_csv(workdir / f"reports/smoke/plots/table1_{exps[0]}_test_acc.csv")
    assert list(curves.columns) == ["round", "method", "test_acc"] and set(curves.method) == set(methods)
    assert not curves.isna().any().any() and curves["round"].max() == p["smoke"]["experiment"]["rounds"]
    expected_runs = set()
    for e in exps:
        sweep = pd.read_csv(workdir / f"reports/smoke/sweeps/{e}.csv")
        for m in dict.fromkeys(m.split("@")[0] for m in methods):  # bayesadmm@mean is bayesadmm's run
            s = sweep[sweep.method == m]
            assert list(s.point) == list(sweep_points(study, e, m))   # the grid's first sweep_limit points
            assert s.selected.sum() == 1 and s.value.max() == s[s.selected].value.iloc[0]
            chosen = s[s.selected].point.iloc[0]
            assert set(df[(df.experiment == e) & (df.method == m)].point) == {chosen}
            # every grid point on the selection's seeds (the first; all where it is the mean over seeds)
            on = selection_seeds(p, e, m)
            expected_runs |= {(e, m, pt, sd) for pt in s.point for sd in on} | {(e, m, chosen, sd) for sd in seeds}
            for sd in seeds:
                run = workdir / "results/runs/smoke" / e / m / chosen / f"seed{sd}"
                assert {"history.csv", "metrics.json", "predictions.npz", "run.json"} <= {f.name for f in run.iterdir()}
                assert not (run / "checkpoint.pt").exists()
    # the FedLap tables: FMNIST rows ran, rows whose data is unavailable here say so
    t1 = pd.read_csv(workdir / "reports/smoke/fedlap/table1.csv")
    ran = t1[t1.experiment.isin(["fmnist10-iid-k10", "fmnist10-dir-k10", "fmnist-dir-k100"])]
    listed = [(r.experiment, r.method) for r in ran.itertuples() if r.method in p["experiments"][r.experiment]["methods"]]
    assert len(listed) == (ran.status == "ok").sum() and ran[ran.status == "ok"].ours_mean.notna().all()
    not_listed = ran[ran.status != "ok"]  # methods an experiment does not list (FedLap-Func at 100 clients)
    assert not_listed.status.str.contains("is not in experiments").all() and "fedlap_func" in set(not_listed.method)
    k100 = pd.read_csv(workdir / "reports/smoke/fedlap/sweep_fmnist-dir-k100.csv")
    assert (k100.criterion == "selected on fmnist10-dir-k10").all()
    for m in k100.method:
        src = pd.read_csv(workdir / "reports/smoke/sweeps/fmnist10-dir-k10.csv")
        assert k100[k100.method == m].point.iloc[0] == src[(src.method == m) & src.selected].point.iloc[0]
        expected_runs |= {("fmnist-dir-k100", m, k100[k100.method == m].point.iloc[0], sd) for sd in seeds}
    missing = t1[t1.experiment.isin(["mnist-iid-k10", "cifar10-dir-k10", "credit-het-k10", "flamby-heart-k4"])]
    assert missing.status.str.startswith("not run (data unavailable").all() and missing.ours_mean.isna().all()
    assert "not run" in (workdir / "reports/smoke/fedlap/table1.md").read_text()
    t3 = pd.read_csv(workdir / "reports/smoke/fedlap/table3.csv")
    assert set(t3[t3.experiment == "fmnist10-iid-k10"].target) == {75, 78}
    t5 = pd.read_csv(workdir / "reports/smoke/fedlap/table5.csv")
    assert set(t5[t5.status == "ok"]["round"]) == {3} and set(t5.metric) == {"test/nll"}
    # BayesADMM Table 1: the posterior predictive and @mean come from the same runs, and differ
    ba = pd.read_csv(workdir / "reports/smoke/bayesadmm/table1.csv")
    fm = ba[ba.experiment.isin(["fmnist10-iid-k10", "fmnist10-dir-k10"]) & ba.method.str.startswith("bayesadmm")]
    assert set(fm.method) == {"bayesadmm", "bayesadmm@mean"} and (fm.status == "ok").all() and fm.ours_mean.notna().all()
    nll = fm[fm.metric == "test/nll"].set_index(["experiment", "method"]).ours_mean
    assert (nll.xs("bayesadmm", level="method") != nll.xs("bayesadmm@mean", level="method")).all()
    assert ba[ba.experiment == "cifar10-dir-k10"].status.str.startswith("not run (data unavailable").all()
    hist = pd.read_csv(next((workdir / "results/runs/smoke/fmnist10-iid-k10/bayesadmm").glob("*/seed0/history.csv")))
    assert {"test/acc", "mean/test/acc", "mean/ood/auroc_entropy"} <= set(hist.columns)
    fi = pd.read_csv(workdir / "reports/smoke/fedivon/table1.csv")  # FedIVON's protocol on the FMNIST substitute
    sub = fi[fi.experiment == "fmnist-shards-k200"]
    assert set(sub.method) == {"fedavg", "fedivon@mean", "fedivon"} and (sub.status == "ok").all()
    assert sub.ours_mean.notna().all() and set(sub.metric) == {"test/acc", "test/ece", "test/nll", "test/brier"}
    real = fi[fi.experiment != "fmnist-shards-k200"]  # EMNIST, CIFAR-10, SVHN: not downloadable here
    assert len(real) and real.status.str.startswith("not run (data unavailable").all()
    sweep = pd.read_csv(workdir / "reports/smoke/sweeps/fmnist-shards-k200.csv")
    for r in sweep.itertuples():   # every point on the selection's seeds, the selected one on every seed
        on = seeds if r.selected else selection_seeds(p, "fmnist-shards-k200", r.method)
        expected_runs |= {("fmnist-shards-k200", r.method, r.point, sd) for sd in on}
    toy = pd.read_csv(workdir / "reports/smoke/fedep/table4.csv")  # data-free: the published toy reproduces
    assert list(toy.method) == ["fedavg", "fedpa", "fedep"] and toy.within_range.all()
    # MLflow: one experiment per experiment, one finished run per (method, seed), per-round metrics with step = round
    con = sqlite3.connect(workdir / "mlflow.db")
    runs = con.execute("select e.name, r.name, r.status from runs r join experiments e using (experiment_id) "
                       "where r.lifecycle_stage = 'active'").fetchall()
    name = lambda m, pt, s: f"{m} s{s}" + (f" {pt}" if pt != "default" else "")  # noqa: E731  (method first: the runs table)
    # and one run per prediction variant the run evaluated (fedivon@mean …), found by tags.method
    variants = lambda e, m, pt, s: sorted(json.loads(  # noqa: E731
        (workdir / f"results/runs/smoke/{e}/{m}/{pt}/seed{s}/metrics.json").read_text()).get("variants", {}))
    expected = [(e, f"{m}@{v}" if v else m, pt, s) for e, m, pt, s in expected_runs for v in ["", *variants(e, m, pt, s)]]
    assert any("@" in m for _, m, _, _ in expected)
    assert sorted(runs) == sorted((f"smoke-{e}", name(m, pt, s), "FINISHED") for e, m, pt, s in expected)
    steps = con.execute("select distinct step from metrics where key = 'test/acc' order by step").fetchall()
    assert [s for (s,) in steps] == [0, 1, 2, 3]
    tags = {k for (k,) in con.execute("select distinct key from tags")}
    assert {"git_sha", "partition_hash", "device", "config_hash", "run_key", "selected"} <= tags
    # a second invocation has nothing to do
    assert "Nothing to be done" in sh(f"snakemake --cores 2 {IMPORTS} " + " ".join(TARGETS), workdir)


def test_dvc_repro_after_a_fedavg_edit_reruns_only_those_runs(workdir):
    """FedAvg's learning rate edited on one experiment: `dvc repro` reruns exactly the stages whose params
    hold that key, and in them exactly that experiment's FedAvg runs (not the data, the partitions, the other
    methods' runs, nor FedAvg's runs on the other experiments)."""
    sh(f"{GIT} add -A >/dev/null && {GIT} commit -q --allow-empty -m init && dvc init -q && dvc commit -f -q "
       + STAGES, workdir)
    assert "Data and pipelines are up to date" in sh("dvc status " + STAGES, workdir)
    before_data = mtimes(workdir, "data/raw/*/*")
    before_parts = mtimes(workdir, "data/partitions/smoke/*/*.npz")
    edited = "fmnist10-iid-k10"
    before_runs = mtimes(workdir, f"results/runs/smoke/{edited}/fedavg/*/*/history.csv")
    before_other = {k: v for k, v in mtimes(workdir, "results/runs/smoke/*/*/*/*/history.csv").items()
                    if k not in before_runs}
    assert any("/fedavg/" in k for k in before_other)   # FedAvg's runs on the other experiments: left alone
    table_before = (workdir / "reports/smoke/table1.csv").read_text()

    p = read_params(workdir)
    p["experiments"][edited]["methods"]["fedavg"]["lr"] = 0.003   # FedAvg's lr on this experiment alone
    (workdir / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    out = sh("dvc repro " + STAGES, workdir)
    assert "Stage 'data' didn't change, skipping" in out
    # the stages whose params name experiments.fmnist10-iid-k10 (dvc.yaml), and only those
    assert "Running stage 'table1'" in out and "Running stage 'fedlap_tables'" in out
    assert "Running stage 'bayesadmm_tables'" in out
    assert "Stage 'fedivon_tables' didn't change, skipping" in out
    assert mtimes(workdir, "data/raw/*/*") == before_data
    assert mtimes(workdir, "data/partitions/smoke/*/*.npz") == before_parts
    after_runs = mtimes(workdir, f"results/runs/smoke/{edited}/fedavg/*/*/history.csv")
    # every FedAvg run of the experiment retrained, except where the edit moved a selection to another sweep
    # point: then that point's other seeds train instead, and the old point's are no longer asked for (the
    # selection at smoke scale is a near-tie that round-off decides per machine class)
    assert before_runs.keys() <= after_runs.keys()
    retrained = {k for k in before_runs if after_runs[k] > before_runs[k]}

    def where(k):   # (point, seed) of results/runs/smoke/<e>/fedavg/<point>/seed<s>/history.csv
        return tuple(k.split("/")[5:7])

    for k in before_runs.keys() - retrained:
        point, seed = where(k)
        assert seed != "seed0", k   # the sweep's own seed: every point of it retrains
        assert any(where(n)[1] == seed and where(n)[0] != point
                   for n in after_runs.keys() - before_runs.keys()), k   # its seed now trains the newly selected point
    assert retrained
    assert {k: v for k, v in mtimes(workdir, "results/runs/smoke/*/*/*/*/history.csv").items()
            if k in before_other} == before_other
    assert (workdir / "reports/smoke/table1.csv").read_text() != table_before
    assert "Data and pipelines are up to date" in sh("dvc status " + STAGES, workdir)


def test_dvc_remote_fresh_clone_pulls_and_adopts_without_recomputing(workdir, tmp_path):
    """The README's hand-over: push data to a DVC remote and results to git; a fresh clone pulls and
    Snakemake adopts what it got — it trains, evaluates and selects nothing, only imports the runs into
    the clone's (new) MLflow store, and the tables it rebuilds are byte-identical."""
    remote, clone = tmp_path / "dvc-remote", tmp_path / "clone"
    git = "git -c user.email=ci@example.org -c user.name=ci"
    sh(f"dvc remote add -d store {remote} && dvc push -q", workdir)
    # results/runs/smoke/ and reports/smoke/ are git-ignored in the project (smoke runs are not results): forced in here,
    # where the smoke runs stand in for a paper-scale hand-over
    sh(f"{git} add -A >/dev/null && {git} add -f results/runs/smoke reports/smoke >/dev/null && "
       f"{git} commit -qm 'results and DVC remote'", workdir)
    sh(f"git clone -q {workdir} {clone}", tmp_path)
    assert not (clone / "data/raw/fmnist").exists()  # data is not in git
    sh("dvc pull -q", clone)
    assert (clone / "data/raw/fmnist/manifest.json").read_text() == (workdir / "data/raw/fmnist/manifest.json").read_text()
    assert "Data and pipelines are up to date" in sh("dvc status " + STAGES, clone)
    tables = {t: (workdir / t).read_text() for t in TABLES}
    plan = sh("snakemake -n --cores 2 " + " ".join(TABLES), clone)
    # (partition jobs may run: at scale smoke the partition heat maps MLflow logs live beside the
    # uncommitted partitions; at paper scale they are committed under reports/figures/partitions/; data
    # jobs may run: they record whether each dataset is available here, work/ is not committed)
    for rule in ("train", "evaluate", "select"):
        assert f"rule {rule}:" not in plan and f"checkpoint {rule}:" not in plan, f"a fresh clone reruns {rule}"
    sh(f"snakemake --cores 2 {IMPORTS} " + " ".join(TABLES), clone)
    assert {t: (clone / t).read_text() for t in TABLES} == tables
    runs = sqlite3.connect(clone / "mlflow.db").execute("select count(*) from runs").fetchone()[0]
    assert runs == sqlite3.connect(workdir / "mlflow.db").execute(
        "select count(*) from runs where lifecycle_stage = 'active'").fetchone()[0]
    assert "Data and pipelines are up to date" in sh("dvc status " + STAGES, clone)
    # the clone has no record of the params its runs were made with: an edit still reaches them, through
    # the configuration each run.json records (the train rule's `changed` marker)
    p = read_params(clone)
    p["experiments"]["fmnist10-iid-k10"]["train"]["lr"] *= 2
    (clone / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    plan = sh("snakemake -n --cores 2 reports/smoke/table1.csv", clone)
    reruns = set(re.findall(r"updated by another job: work/smoke/changed/([\w-]+)/(\w+)/", plan))
    assert reruns and {e for e, _ in reruns} == {"fmnist10-iid-k10"}, plan[-3000:]
    own = p["experiments"]["fmnist10-iid-k10"]["methods"]   # methods with their own lr keep it (FedAvg's, set
    assert {m for _, m in reruns} == {m for m in own         # on this experiment by the DVC test above)
                                      if "lr" not in p["methods"][m] and "lr" not in (own[m] or {})}
    assert "changed since this run: " in plan and "hparams.lr" in plan   # the marker job's message
