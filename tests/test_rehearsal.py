"""The rehearsal: every experiment of the five papers through the real DAG on stand-in data (scale
rehearsal), and the walls that keep its numbers from ever passing for results."""

import json

import pytest

from fedbayes.study import ConfigError, load_params, paths, run_config
from fedbayes.reports.tables import check_data_source
from fedbayes.runfiles import DamagedFile
from dagutil import copy_repo, read_params, sh


@pytest.fixture
def params(repo):
    return read_params(repo)


def run_json(d, cfg):
    d.mkdir(parents=True, exist_ok=True)
    (d / "run.json").write_text(json.dumps({"config": cfg, "config_hash": "x"}))
    return d


def test_rehearsal_scale_runs_on_stand_ins_in_its_own_folders(repo):
    p = load_params(repo / "params.yaml", scale="rehearsal")
    got = paths(p)
    assert got["raw"] == "data/raw-stand-in/tiny"
    assert got["runs"] == "results/runs/rehearsal" and got["reports"] == "reports/rehearsal"
    assert got["work"] == "work/rehearsal" and got["partitions"] == "data/partitions/rehearsal"
    assert run_config(p, "cifar10-dir-k10", "fedavg", 0, "local_epochs=2")["data"] == "stand-in (tiny)"
    # the real data's runs keep their configuration (no key added: no committed run reruns)
    paper = load_params(repo / "params.yaml", scale="paper")
    assert "data" not in run_config(paper, "fmnist10-iid-k10", "fedavg", 0, "local_epochs=5")
    assert paths(paper)["raw"] == "data/raw"


def test_a_stand_in_run_never_enters_a_table_of_real_results(repo, tmp_path):
    paper = load_params(repo / "params.yaml", scale="paper")
    rehearsal = load_params(repo / "params.yaml", scale="rehearsal")
    fake = run_json(tmp_path / "fake", {"experiment": "e", "method": "m", "seed": 0, "rounds": 2,
                                        "data": "stand-in (tiny)"})
    real = run_json(tmp_path / "real", {"experiment": "e", "method": "m", "seed": 0, "rounds": 2})
    with pytest.raises(DamagedFile, match=r"fake/run\.json.*stand-in \(tiny\) data.*never enters a table"):
        check_data_source(paper, fake)
    check_data_source(paper, real)
    with pytest.raises(DamagedFile, match=r"real/run\.json.*not on the rehearsal's stand-in \(tiny\) data"):
        check_data_source(rehearsal, real)
    check_data_source(rehearsal, fake)


def test_a_stand_in_run_copied_into_the_real_runs_fails_the_table(repo, tmp_path):
    """The real table command refuses rehearsal runs put where real runs belong: one line naming the
    run.json, exit 2, no table written."""
    from fedbayes.study import experiment_config, paths, sweep_points
    from fedbayes.runpaths import run_dir

    p = load_params(repo / "params.yaml", scale="paper")
    d = copy_repo(repo, tmp_path / "repo", scale="paper")
    exp = "credit-iid-k10"   # fedlap/table4's one experiment
    for method in experiment_config(p, exp)["methods"]:
        point = next(iter(sweep_points(p, exp, method)))
        for seed in (0, 1, 2):
            run_json(d / run_dir(paths(p), exp, method, point, seed), {**run_config(p, exp, method, seed, point),
                                                                "data": "stand-in (tiny)"})
        (d / run_dir(paths(p), exp, method, point, 0)).parent.parent.joinpath("selected.json").write_text(
            json.dumps({"point": point, "hparams": {}, "criterion": {}, "candidates": []}))
    (d / "work/data").mkdir(parents=True)
    (d / "work/data/uci_credit.json").write_text(json.dumps({"dataset": "uci_credit", "available": True}))
    out = sh("fedbayes table fedlap/table4 --out t.csv", d, check=False)
    assert "fedbayes table: error:" in out and "run.json" in out, out
    assert "never enters a table of results on the real data" in out
    assert not (d / "t.csv").exists()


def test_the_scorecard_refuses_a_rehearsal(repo, tmp_path):
    from fedbayes.reports.scorecard import build_scorecard
    from fedbayes.study.model import load_study

    with pytest.raises(ConfigError, match="scorecard scores results on the real data"):
        build_scorecard(load_study(repo / "params.yaml", scale="rehearsal"), tmp_path / "README.md")


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory, repo):
    """The rehearsal as `make rehearsal` runs it (the default target at scale rehearsal), in a copy of the
    repository committed to git first; its output and how long it took."""
    import time

    d = copy_repo(repo, tmp_path_factory.mktemp("rehearsal"), scale="paper")
    git = "git -c user.email=ci@example.org -c user.name=ci"
    sh(f"git init -q && {git} add -A >/dev/null && {git} commit -qm checkout", d)
    t0 = time.time()
    out = sh("snakemake --cores 2 --config scale=rehearsal", d, timeout=3000)
    return d, out, time.time() - t0


@pytest.mark.integration
def test_the_rehearsal_runs_every_experiment_of_the_five_papers(rehearsal, repo):
    """Every experiment × method of params.yaml trains (at least two rounds) on stand-in data, evaluates
    every prediction variant, is imported into MLflow and reaches every table it belongs to; the tables
    say "stand-in rehearsal"; nothing outside the git-ignored rehearsal folders is written."""
    import pandas as pd

    from fedbayes.study import experiment_config
    from fedbayes.study.model import Study
    from fedbayes.reports.rehearsal import pair_summary

    d, out, seconds = rehearsal
    print(f"rehearsal: {seconds:.0f} s")
    # rehearsal bug: the refusal of paper-scale paths at another scale was tried on that scale's own
    # outputs (reports/rehearsal/fedlap/sweep_x.csv matched reports/{folder}/sweep_{e}.csv): a screenful
    # of WorkflowErrors in a run that then went on
    assert "is a paper-scale output" not in out and "InputFunctionException" not in out
    assert sh("git status --porcelain --untracked-files=all", d).strip() == ""
    p = load_params(d / "params.yaml", scale="rehearsal")
    summary = (d / "reports/rehearsal/summary.md").read_text()
    n_pairs = sum(len(experiment_config(p, e)["methods"]) for e in p["experiments"])
    assert f"{len(p['experiments'])} experiments, {n_pairs} experiment × method pairs: all {n_pairs} ran." in summary
    import os

    cwd = os.getcwd()
    os.chdir(d)
    try:
        st = Study.resolve(p)
        rows = [pair_summary(st, e, m) for e, x in st.experiments.items() for m in x.methods]
    finally:
        os.chdir(cwd)
    assert all(r["ok"] for r in rows)
    assert {r["experiment"] for r in rows} == set(p["experiments"]) and len(p["experiments"]) == 23
    # every prediction variant evaluated: BayesADMM's posterior mean, FedEP's MC predictive, FedDyn's average
    variants = {(r["experiment"], r["method"]): r["variants"] for r in rows}
    assert "mean" in variants[("cifar10-dir-k10-acar", "bayesadmm")]
    assert "mc" in variants[("cifar100-pachinko-k500", "fedep_l")]
    assert "avg" in variants[("cifar100-dir-k10-resnet20", "feddyn")]
    for t in p["tables"]:
        md = (d / f"reports/rehearsal/{t}.md").read_text()
        assert "STAND-IN REHEARSAL" in md, t
        df = pd.read_csv(d / f"reports/rehearsal/{t}.csv")
        assert (df["scale"] == "rehearsal").all() and df["within_tol"].isna().all(), t
        assert df.loc[df.status == "ok", "note"].str.contains("stand-in rehearsal").all(), t
    assert "Nothing to be done" in sh("snakemake --cores 2 --config scale=rehearsal", d)


def test_mlflow_says_a_rehearsal_is_stand_in(repo):
    from fedbayes.tracking import experiment_description

    text = experiment_description(load_params(repo / "params.yaml", scale="rehearsal"), "cifar100-pachinko-k500")
    assert "STAND-IN REHEARSAL" in text and "never a result" in text
    assert "STAND-IN" not in experiment_description(load_params(repo / "params.yaml"), "fmnist10-iid-k10")
