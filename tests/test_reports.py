"""Tables (ours vs published), published-number lookup, figures and MLflow import."""

import copy
import json
import shutil

import numpy as np
import pandas as pd
import pytest
import yaml

from fedbayes.published import load_paper, published_value
from fedbayes.reports.selection import select, sweep_frame, write_selection
from fedbayes.reports.cells import cell_value
from fedbayes.reports.tables import build_table
from fedbayes.reports.verdicts import VERDICTS
from fedbayes.study.model import Study
from dagutil import read_params


def build(p: dict, name: str, out):
    """``build_table`` of the table ``name`` of the study of ``p`` (a fixture's params, edited in place)."""
    study = Study.resolve(p)
    return build_table(study, study.tables[name], out)


def fake_metrics(exp, method, seed, accs: dict, nlls: dict):
    rounds = {str(r): {"test/acc": accs[r], "test/nll": nlls[r]} for r in accs}
    return {"experiment": exp, "method": method, "seed": seed, "rounds": rounds, "config_hash": f"{exp}-{seed}",
            "final_round": max(accs), "final": rounds[str(max(accs))]}


def test_cell_value_statistics():
    m = fake_metrics("e", "m", 0, {8: 0.70, 9: 0.74, 10: 0.72}, {8: 0.9, 9: 0.8, 10: 0.7})
    assert cell_value(m, "test/acc", 10, "mean_last3") == pytest.approx(72.0)
    assert cell_value(m, "test/acc", 10, "max_last3") == pytest.approx(74.0)
    assert cell_value(m, "test/nll", 10, "final") == pytest.approx(0.7)
    with pytest.raises(KeyError, match=r"rounds \[23, 24, 25\] not evaluated"):
        cell_value(m, "test/acc", 25, "mean_last3")


def test_published_lookup_matches_the_papers():
    assert published_value(["bayesadmm:table1"], "fmnist10-iid-k10", "fedavg", "test/acc", 10)[:2] == (72.3, 0.4)
    assert published_value(["bayesadmm:table1"], "fmnist10-dir-k10", "fedavg", "test/nll", 50)[:2] == (0.67, 0.04)
    assert published_value(["fedlap:table1"], "fmnist10-dir-k10", "fedlap_cov", "test/acc", 50)[:2] == (80.5, 0.6)
    assert published_value(["fedlap:table1"], "fmnist10-iid-k10", "fedavg", "test/nll", 10) is None
    # the FMNIST baselines of BayesADMM Table 1 are FedLap's Table 1 (the paper copies them); the papers
    # differ in one std: FMNIST-100 FedProx round 10 is 73.3 ± 0.4 there and 73.3 (0.7) in FedLap's
    b, f = load_paper("bayesadmm")["tables"]["table1"]["rows"], load_paper("fedlap")["tables"]["table1"]["rows"]
    for exp in ("fmnist10-iid-k10", "fmnist10-dir-k10", "fmnist-dir-k100"):
        for m in ("fedavg", "fedprox", "feddyn", "fedlap", "fedlap_cov"):
            assert [c[0] for c in b[exp][m]["test/acc"]] == [c[0] for c in f[exp][m]["test/acc"]]
            stds = [(c[1], d[1]) for c, d in zip(b[exp][m]["test/acc"], f[exp][m]["test/acc"]) if c[1] != d[1]]
            assert stds == ([(0.4, 0.7)] if (exp, m) == ("fmnist-dir-k100", "fedprox") else [])


def write_run(d, exp, seed, acc, nll):
    """A finished run's three files as the engine writes them: every round 0..R in the history (rounds
    not given: not evaluated), run.json with the configuration metrics.json was computed from."""
    d.mkdir(parents=True)
    last = max(acc)
    method = d.parent.parent.name   # <runs>/<experiment>/<method>/<point>/seed<seed>: the run its folder names
    m = fake_metrics(exp, method, seed, acc, nll)
    for r in m["rounds"].values():
        r.update({"test/ece": 0.05, "test/brier": 0.3, "ood/auroc_entropy": 0.8})
    (d / "metrics.json").write_text(json.dumps(m))
    (d / "run.json").write_text(json.dumps({"config": {"experiment": exp, "method": method, "seed": seed, "rounds": last},
                                            "config_hash": m["config_hash"]}))
    pd.DataFrame({"round": range(last + 1), "test/acc": [acc.get(r, float("nan")) for r in range(last + 1)],
                  "test/nll": [nll.get(r, float("nan")) for r in range(last + 1)]}).to_csv(d / "history.csv", index=False)


@pytest.fixture
def table_params(repo, tmp_path):
    """Fake finished runs: a 3-point local_epochs sweep on seed 0 (E=5 best), E=5 on every seed."""
    p = read_params(repo)
    p["paths"] = {**p["paths"], "runs": str(tmp_path / "runs"), "reports": str(tmp_path / "reports"),
                  "work": str(tmp_path / "work")}
    (tmp_path / "work" / "data").mkdir(parents=True)
    for d in ("fmnist", "mnist5k"):  # the data checkpoint's record: obtained on this machine
        (tmp_path / "work" / "data" / f"{d}.json").write_text(json.dumps({"dataset": d, "available": True}))
    p["methods"]["fedavg"] = {"sweep": {"local_epochs": [1, 5, 10]}}
    p["tables"]["table1"]["methods"] = ["fedavg"]
    for exp in p["tables"]["table1"]["experiments"]:
        p["experiments"][exp]["methods"] = {"fedavg": None}
        p["experiments"][exp].pop("selection", None)  # select on the first seed (the grid ran there only)
    rng = np.random.default_rng(0)
    rounds = list(range(0, 51))
    for exp in p["tables"]["table1"]["experiments"]:
        for e, gain, nll in ((1, 0.004, 0.5), (10, 0.005, 1.0)):
            write_run(tmp_path / "runs" / exp / "fedavg" / f"local_epochs={e}" / "seed0", exp, 0,
                      {r: 0.5 + gain * r for r in rounds}, {r: nll for r in rounds})
        for s in p["seeds"]:
            d = tmp_path / "runs" / exp / "fedavg" / "local_epochs=5" / f"seed{s}"
            acc = {r: 0.5 + 0.006 * r + 0.002 * rng.standard_normal() for r in rounds}
            write_run(d, exp, s, acc, {r: 1.2 - 0.01 * r for r in rounds})
        write_selection(p, exp, "fedavg")
    return p


def test_selection_picks_best_point_on_first_seed(table_params, tmp_path):
    sel = json.loads((tmp_path / "runs" / "fmnist10-iid-k10" / "fedavg" / "selected.json").read_text())
    assert sel["point"] == "local_epochs=5" and sel["hparams"] == {"local_epochs": 5}
    assert [c["point"] for c in sel["candidates"]] == ["local_epochs=1", "local_epochs=5", "local_epochs=10"]
    assert sel["criterion"] == {"metric": "test/acc", "statistic": "mean_last3", "mode": "max", "round": 50, "seed": 0}
    assert sel["candidates"][0]["value"] == pytest.approx(100 * (0.5 + 0.004 * 49))
    # min mode (e.g. NLL) flips the choice; a tie goes to the earlier grid point
    p = copy.deepcopy(table_params)
    p["selection"] = {"metric": "test/nll", "statistic": "mean_last3", "mode": "min"}
    assert select(p, "fmnist10-iid-k10", "fedavg")["point"] == "local_epochs=1"
    df = sweep_frame(table_params, "fmnist10-iid-k10", ["fedavg"])
    assert df.selected.tolist() == [False, True, False] and df.local_epochs.tolist() == [1, 5, 10]


def test_build_table(table_params, tmp_path):
    p = table_params
    df = build(p, "table1", tmp_path / "reports" / "table1.csv")
    n_exp, n_rounds, n_metrics = 2, 3, len(p["tables"]["table1"]["metrics"])
    assert len(df) == n_exp * n_rounds * n_metrics
    row = df[(df.experiment == "fmnist10-iid-k10") & (df["round"] == 10) & (df.metric == "test/acc")].iloc[0]
    assert row.n_seeds == 3 and row.published_mean == 72.3
    assert row.ours_mean == pytest.approx(100 * (0.5 + 0.006 * 9), abs=0.5)  # mean over rounds 8, 9, 10
    assert row["diff"] == pytest.approx(row.ours_mean - 72.3)
    assert bool(row.within_tol) == (abs(row["diff"]) <= 1.5)
    nll = df[(df.metric == "test/nll") & (df["round"] == 50) & (df.experiment == "fmnist10-dir-k10")].iloc[0]
    assert nll.published_mean == 0.67 and nll.ours_mean == pytest.approx(1.2 - 0.49)
    ece = df[df.metric == "test/ece"].iloc[0]
    assert np.isnan(ece.published_mean) and ece.within_tol is None
    md = (tmp_path / "reports" / "table1.md").read_text()
    assert "| fmnist10-iid-k10 | fedavg | local_epochs=5 | 10 |" in md and "72.3 ± 0.4" in md
    # the authors' released code's cell beside the published one (papers/authors_code.yaml)
    theirs = df[(df.experiment == "fmnist10-dir-k10") & (df["round"] == 50) & (df.metric == "test/acc")].iloc[0]
    assert theirs.authors_code_mean == pytest.approx((76.4 + 76.1 + 75.8) / 3) and theirs.authors_code_n == 3
    assert theirs.authors_code_std == pytest.approx(np.std([76.4, 76.1, 75.8], ddof=1))  # std_ddof: 1 and "bd80f94" in theirs.authors_code_source
    assert "test/acc authors' code" in md and "76.1 ± 0.3 (n=3)" in md and "team-approx-bayes/bayes-admm@bd80f94" in md
    assert np.isnan(df[df.metric == "test/ece"].authors_code_mean).all()
    assert set(df.point) == {"local_epochs=5"}
    assert (tmp_path / "reports" / "figures" / "table1_curves.png").stat().st_size > 10_000
    assert (tmp_path / "reports" / "figures" / "table1_reliability.png").stat().st_size > 10_000  # ECE is a metric
    # the csv round-trips
    assert len(pd.read_csv(tmp_path / "reports" / "table1.csv")) == len(df)


def test_a_metric_a_run_could_not_gain_shows_as_not_evaluated(table_params, tmp_path):
    """A metric added after a run's predictions were gone (a committed run) is recorded as not evaluated in
    its metrics.json (eval.evaluate): the table's cells of that metric say so, naming the seed and the
    remedy; the run's other metrics are read as before."""
    f = tmp_path / "runs" / "fmnist10-iid-k10" / "fedavg" / "local_epochs=5" / "seed1" / "metrics.json"
    m = json.loads(f.read_text())
    for r in m["rounds"].values():
        del r["test/ece"]
    m["not_evaluated"] = {"test/ece": "0123456789abcdef"}
    f.write_text(json.dumps(m))
    df = build(table_params, "table1", tmp_path / "reports" / "table1.csv")
    iid = df[df.experiment == "fmnist10-iid-k10"]
    ece = iid[iid.metric == "test/ece"]
    assert len(ece) == 3 and ece.ours_mean.isna().all() and (ece.n_seeds == 0).all()
    assert set(ece.status) == {"not evaluated (seed 1: no predictions were kept when test/ece was added; "
                               "retrain the run to compute it)"}
    assert (iid[iid.metric != "test/ece"].status == "ok").all() and iid[iid.metric == "test/acc"].ours_mean.notna().all()
    assert (df[df.experiment != "fmnist10-iid-k10"].status == "ok").all()


def test_smoke_table_has_no_published_column(table_params, tmp_path):
    p = copy.deepcopy(table_params)
    p["scale"] = "smoke"
    p["paths"]["runs"] = str(tmp_path / "runs" / "..")  # smoke paths get a /smoke suffix
    p["smoke"]["seeds"] = [0]
    p["smoke"]["experiment"]["report_rounds"] = [3]
    p["smoke"]["experiment"]["rounds"] = 3
    p["smoke"]["sweep_limit"] = 1
    for exp in p["tables"]["table1"]["experiments"]:
        src = tmp_path / "runs" / exp / "fedavg" / "local_epochs=1" / "seed0"
        dst = tmp_path / "runs" / ".." / "smoke" / exp / "fedavg" / "local_epochs=1" / "seed0"
        dst.mkdir(parents=True)
        for f in ("metrics.json", "history.csv", "run.json"):
            (dst / f).write_text((src / f).read_text())
        write_selection(p, exp, "fedavg")
    df = build(p, "table1", tmp_path / "smoke_table1.csv")
    assert df.published_source.eq("").all() and (df.scale == "smoke").all()


def test_published_targets_nulls_and_row_rounds():
    # Table 3 is addressed by target; a "—" cell (not reached) is a null
    assert published_value(["fedlap:table3"], "fmnist10-iid-k10", "fedavg", "test/acc", target=75)[:2] == (15, 1)
    assert published_value(["fedlap:table3"], "fmnist10-dir-k10", "fedavg", "test/acc", target=78)[:2] == (None, None)
    assert published_value(["fedlap:table3"], "fmnist10-dir-k10", "fedlap_cov", "test/acc", target=78)[:2] == (22, 6)
    # Table 5: MNIST homogeneous is reported at round 20, the others at 50
    assert published_value(["fedlap:table5"], "mnist-iid-k10", "fedavg", "test/nll", 20)[:2] == (0.11, 0.01)
    assert published_value(["fedlap:table5"], "mnist-iid-k10", "fedavg", "test/nll", 50) is None
    assert published_value(["fedlap:table5"], "fmnist-dir-k100", "fedlap_cov", "test/nll", 50)[:2] == (0.49, 0.01)
    assert published_value(["fedlap:table2"], "fmnist10-dir-k10", "fedlap_cov", "test/acc", 50)[:2] == (80.9, 0.5)


def test_rounds_to_target_uses_the_first_unsmoothed_round():
    from fedbayes.reports.cells import rounds_to_target

    h = pd.DataFrame({"round": [0, 1, 2, 3, 4], "test/acc": [0.9, 0.5, 0.76, 0.74, 0.8]})
    assert rounds_to_target(h, 75) == 2  # round 0 (before training) never counts
    assert rounds_to_target(h, 79) == 4 and np.isnan(rounds_to_target(h, 81))


@pytest.fixture
def fedlap_params(table_params, tmp_path):
    """A paper-layout rounds-to-target table over one experiment that ran (fmnist10-iid-k10: FedAvg
    reaches 75 % on every seed; the fake FedProx runs miss 78 % on one seed) and one whose data is
    unavailable (mnist-iid-k10)."""
    p = copy.deepcopy(table_params)
    (tmp_path / "work" / "data" / "mnist.json").write_text(json.dumps(
        {"dataset": "mnist", "available": False, "reason": "file train-images: no source gave a verified copy:\n..."}))
    p["methods"]["fedprox"] = {"sweep": {"alpha": [0.1]}}
    exp = "fmnist10-iid-k10"
    p["experiments"][exp]["methods"] = {"fedavg": p["experiments"][exp]["methods"].get("fedavg"), "fedprox": None}
    for s in p["seeds"]:
        top = 0.80 if s != 1 else 0.77
        write_run(tmp_path / "runs" / exp / "fedprox" / "alpha=0.1" / f"seed{s}", exp, s,
                  {r: min(top, 0.5 + 0.01 * r) for r in range(51)}, {r: 1.0 for r in range(51)})
    write_selection(p, exp, "fedprox")
    p["tables"]["fedlap/table3"] = {
        "title": "rounds to target", "experiments": ["mnist-iid-k10", exp], "methods": ["fedavg", "fedprox"],
        "statistic": "rounds_to_target", "targets": {"mnist-iid-k10": [97.5], exp: [75, 78]},
        "metrics": ["test/acc"], "tolerance": {"test/acc": 3}, "published": ["fedlap:table3"], "layout": "paper"}
    return p


def test_rounds_to_target_table_with_unavailable_data(fedlap_params, tmp_path):
    df = build(fedlap_params, "fedlap/table3", tmp_path / "reports" / "fedlap" / "table3.csv")
    mnist = df[df.experiment == "mnist-iid-k10"]
    assert len(mnist) == 2 and mnist.status.str.startswith("not run (data unavailable: file train-images").all()
    assert mnist.ours_mean.isna().all() and (mnist.n_seeds == 0).all() and mnist.published_mean.tolist() == [6, 6]
    ran = df[df.experiment == "fmnist10-iid-k10"].set_index(["method", "target"])
    # fake FedAvg E=5 runs: acc = 0.5 + 0.006 r (+ noise) first reaches 75 % at round 42
    assert ran.loc[("fedavg", 75.0)].ours_mean == pytest.approx(42, abs=1) and ran.loc[("fedavg", 75.0)].n_seeds == 3
    assert ran.loc[("fedavg", 75.0)].published_mean == 15 and ran.loc[("fedavg", 75.0)]["diff"] > 20
    assert ran.loc[("fedprox", 75.0)].ours_mean == 25 and ran.loc[("fedprox", 75.0)].ours_std == 0
    miss = ran.loc[("fedprox", 78.0)]
    assert np.isnan(miss.ours_mean) and miss.note.startswith("target not reached by 1 of 3 seeds")
    md = (tmp_path / "reports" / "fedlap" / "table3.md").read_text()
    assert "| mnist-iid-k10 | 97.5 % | not run / 6.0 ± 1.0 | not run / 6.0 ± 1.0 |" in md
    assert "— (target not reached by 1 of 3 seeds" in md and "Not run on the machine" in md
    assert (tmp_path / "reports" / "figures" / "fedlap_table3_curves.png").exists()


def test_method_missing_from_an_experiment_is_not_run(fedlap_params, tmp_path):
    p = fedlap_params
    p["tables"]["fedlap/table3"]["methods"] = ["fedavg", "fedprox", "fedlap"]
    df = build(p, "fedlap/table3", tmp_path / "t3.csv")
    row = df[(df.experiment == "fmnist10-iid-k10") & (df.method == "fedlap")].iloc[0]
    assert row.status == "not run (fedlap is not in experiments.fmnist10-iid-k10.methods)"


def test_running_average_statistics_match_pandas_rolling():
    """The FedEP paper's statistics: best 100-round running average by round R, and the first round
    whose 10-round running average reaches a threshold (here with windows 3 and 2)."""
    from fedbayes.reports.cells import best_over_rounds, rounds_to_target
    acc = [0.10, 0.50, 0.20, 0.60, 0.70, 0.30, 0.90]
    h = pd.DataFrame({"round": range(0, 8), "test/acc": [0.0] + acc})
    assert best_over_rounds(h, "test/acc", 7) == pytest.approx(90.0)
    assert best_over_rounds(h, "test/acc", 6) == pytest.approx(70.0)
    roll3 = pd.Series(acc).rolling(3).mean() * 100                 # NaN, NaN, 26.7, 43.3, 50, 53.3, 63.3
    assert best_over_rounds(h, "test/acc", 7, running=3) == pytest.approx(roll3.max())
    assert best_over_rounds(h, "test/acc", 5, running=3) == pytest.approx(roll3[:5].max())
    assert rounds_to_target(h, 55.0) == 4                         # 0.6 at round 4
    assert rounds_to_target(h, 55.0, running=2) == 5              # 2-round means: .3 .35 .4 .65 → round 5
    assert np.isnan(rounds_to_target(h, 95.0))


def test_not_comparable_table_prints_the_published_numbers_only(repo, tmp_path):
    """FedEP Table 3 (StackOverflow, no faithful substitute): every cell reads "not comparable" beside
    the paper's number, the reason is stated, and no learning-curve figure is drawn."""
    p = read_params(repo)
    p["paths"] = {**p["paths"], "reports": str(tmp_path / "reports"), "work": str(tmp_path / "work")}
    out = tmp_path / "reports" / "fedep" / "table3.csv"
    df = build(p, "fedep/table3", out)
    spec = p["tables"]["fedep/table3"]
    assert len(df) == len(spec["methods"]) * len(spec["metrics"])   # one round (1500) of the paper
    assert (df["round"] == 1500).all() and df.ours_mean.isna().all() and (df.n_seeds == 0).all()
    assert df.status.str.startswith("not comparable (no faithful substitute").all()
    pub = df.set_index(["method", "metric"]).published_mean
    assert pub[("fedsep_v", "test/micro_f1")] == 39.78 and pub[("fedavgm", "test/precision")] == 75.20
    assert pub[("fedpa", "test/macro_f1")] == 11.63 and np.isnan(df.set_index(["method", "metric"])
                                                                .published_std[("fedpa", "test/macro_f1")])
    # the paper's micro-F1 is close to 2PR/(P+R) in every row (how the spec assigned the columns)
    for m in spec["methods"]:
        pr, rc, f1 = (pub[(m, k)] for k in ("test/precision", "test/recall", "test/micro_f1"))
        assert abs(2 * pr * rc / (pr + rc) - f1) < 1.0
    md = out.with_suffix(".md").read_text()
    assert "| stackoverflow-tff | test/micro_f1 | 1500 | not comparable / 30.78 | not comparable / 23.32 ± 0.41 |" in md
    assert "**Not comparable" in md and "Not run on the machine" not in md
    assert not (tmp_path / "reports" / "figures" / "fedep_table3_curves.png").exists()


def test_selection_on_the_mean_over_seeds(table_params, tmp_path):
    """``selection: {seeds: all}`` (the FedLap paper's best 3-seed mean): every grid point on every seed,
    the point with the best mean wins even where another point is best on the first seed."""
    p = copy.deepcopy(table_params)
    exp = "fmnist10-iid-k10"
    p["experiments"][exp]["selection"] = {"seeds": "all"}
    base = tmp_path / "runs" / exp / "fedavg"
    for e, accs in ((1, (0.90, 0.50, 0.50)), (10, (0.80, 0.80, 0.80))):   # E=1 best on seed 0, E=10 on average
        shutil.rmtree(base / f"local_epochs={e}")
        for s, a in zip(p["seeds"], accs):
            write_run(base / f"local_epochs={e}" / f"seed{s}", exp, s, {r: a for r in range(51)}, {r: 1.0 for r in range(51)})
    sel = write_selection(p, exp, "fedavg")
    assert sel["point"] == "local_epochs=10" and sel["criterion"]["seeds"] == "all"
    by = {c["point"]: c for c in sel["candidates"]}
    assert by["local_epochs=1"]["per_seed"] == pytest.approx([90.0, 50.0, 50.0])
    assert by["local_epochs=1"]["value"] == pytest.approx(190 / 3)
    df = sweep_frame(p, exp, ["fedavg"])
    assert "mean over 3 seeds" in df.criterion.iloc[0]     # the seeds read, counted
    assert df[df.selected].pick.iloc[0].startswith("ahead of local_epochs=5 by ")


# The figures' family and colour of every built-in method, as reports/figures.py listed them before each
# method's spec declared its own: the committed figures are drawn with these.
FAMILIES_BEFORE = {
    "FedLap paper (Adam baselines and FedLap)": ["fedavg", "fedprox", "fedadmm", "feddyn", "fedlap", "fedlap_cov",
                                                 "fedlap_func"],
    "variational (IVON)": ["bayesadmm", "fedivon"],
    "expectation propagation (SGD-M)": ["fedavgm", "fedpa", "fedep", "fedsep", "fedep_i", "fedep_m", "fedep_l",
                                        "fedep_v", "fedsep_i", "fedsep_m", "fedsep_l", "fedsep_v"],
    "online Laplace and FOLA's baselines (SGD)": ["fola", "fedcurv", "scaffold", "fednova", "fedbe"],
}
COLOURS_BEFORE = {
    "fedavg": "#1f77b4", "fedprox": "#ff7f0e", "feddyn": "#2ca02c", "fedlap": "#d62728", "fedlap_cov": "#9467bd",
    "fedlap_func": "#8c564b", "fedadmm": "#393b79",
    "bayesadmm": "#e7298a", "fedivon": "#1b9e77",
    "fedavgm": "#666666", "fedpa": "#bcbd22", "fedep": "#08519c", "fedsep": "#54278f",
    "fedep_i": "#17becf", "fedep_m": "#9edae5", "fedep_l": "#0e6f7a", "fedep_v": "#6baed6",
    "fedsep_i": "#7570b3", "fedsep_m": "#c5b0d5", "fedsep_l": "#3f3a7a", "fedsep_v": "#b07aa1",
    "fola": "#d95f02", "fedcurv": "#e6ab02", "scaffold": "#66a61e", "fednova": "#a6761d", "fedbe": "#7f7f7f",
}


def test_every_method_has_one_colour_distinct_within_its_family():
    """One colour per method across the project's figures, its spec's; the methods drawn in one row of panels
    (a family, its spec's) are told apart; a variant keeps its method's colour, dashed. The built-in methods
    keep the families and colours the committed figures were drawn with."""
    from fedbayes.reports.figures import SPARE, family_of, method_style, rows_of
    from fedbayes.study import METHOD_SPECS

    colours = [method_style(m)["color"] for m in METHOD_SPECS]     # no two methods alike (fedadmm was fedpa's)
    assert len(set(colours)) == len(colours) and not set(SPARE) & set(colours)
    assert {m: method_style(m)["color"] for m in METHOD_SPECS} == COLOURS_BEFORE
    assert {m: family_of(m) for m in METHOD_SPECS} == {m: f for f, ms in FAMILIES_BEFORE.items() for m in ms}
    # a method from outside the project declaring no family is drawn in a row of its own, in a spare colour
    assert family_of("my_new_method") == "my_new_method" != family_of("fedavg")
    assert method_style("my_new_method")["color"] in SPARE

    assert set(rows_of(["fedavg", "fedivon@mean", "fedivon"]).values()) == {family_of("fedivon")}
    assert rows_of(["fedavg", "fedprox", "fola"])["fedavg"] == family_of("fedavg")
    assert method_style("bayesadmm@mean") == {**method_style("bayesadmm"), "ls": "--"}
    assert method_style("my_new_method")["color"] == method_style("my_new_method")["color"]  # stable for outsiders


def test_published_as_compares_a_prediction_with_another_methods_published_cell(table_params, tmp_path):
    """``tables.<t>.published_as``: which published method a table method's cells stand beside (e.g.
    ``feddyn@avg`` beside the paper's FedDyn); validation names a mapping to an unknown method."""
    from fedbayes.study import ConfigError, check_semantics

    p = copy.deepcopy(table_params)
    p["tables"]["table1"]["published_as"] = {"fedavg": "fedprox"}
    df = build(p, "table1", tmp_path / "reports" / "t.csv")
    row = df[(df.experiment == "fmnist10-iid-k10") & (df["round"] == 10) & (df.metric == "test/acc")].iloc[0]
    assert row.published_mean == published_value(["bayesadmm:table1"], "fmnist10-iid-k10", "fedprox", "test/acc", 10)[0]
    p["tables"]["table1"]["published_as"] = {"fedavg": "fedavgg"}
    with pytest.raises(ConfigError, match="published_as.fedavg: unknown method 'fedavgg'"):
        check_semantics(p)


def test_table_command_prints_a_summary_not_the_frame(table_params, tmp_path, capsys, monkeypatch):
    """`fedbayes table` (what `make table1` shows) says what it built, how many published cells are
    within tolerance / outside / not run, and where the files are; it does not print the table."""
    from fedbayes import cli
    from fedbayes.cli import reports

    monkeypatch.setattr(reports, "_study", lambda args: Study.resolve(table_params))  # the fixture's fake runs
    out_csv = tmp_path / "reports" / "table1.csv"
    cli.main(["table", "table1", "--out", str(out_csv)])
    text = capsys.readouterr().out
    df = pd.read_csv(out_csv)
    lines = text.strip().splitlines()
    assert len(lines) <= 8, text
    assert "ours_mean" not in text and "published_mean" not in text  # no pandas dump
    pub = df[df.published_mean.notna()]
    within, outside = int((pub.within_tol == True).sum()), int((pub.within_tol == False).sum())  # noqa: E712
    assert f"{len(df)} cells" in text and f"{len(pub)} published" in text
    assert f"{within} within," in text and f"{outside} outside" in text and "0 not run" in text
    for f in (out_csv, out_csv.with_suffix(".md"), tmp_path / "reports" / "figures" / "table1_curves.png"):
        assert str(f) in text


def test_headline_metrics_and_curves_for_dvc(table_params, tmp_path):
    """reports/metrics/<experiment>/<method>.json (`dvc metrics show`: a row per experiment × method, per
    metric the columns ours, published, verdict): our last-round numbers beside the published value and
    whether they reproduce it, from the table's own cells; reports/plots/*.csv (`dvc plots show`): per
    round and method, the mean over seeds (long format)."""
    from fedbayes.reports.headline import plot_files, write_headline

    p = table_params
    p["headline"] = {"table": "table1", "metrics": ["test/acc", "test/nll", "test/ece"], "curves": ["test/acc"]}
    df = build(p, "table1", tmp_path / "reports" / "table1.csv")
    out = tmp_path / "reports" / "metrics"
    (out / "gone").mkdir(parents=True)
    (out / "gone" / "fedold.json").write_text("{}")  # a method no longer in the table: removed
    files = write_headline(Study.resolve(p), tmp_path / "reports" / "table1.csv", out)
    exps = p["tables"]["table1"]["experiments"]
    assert sorted(out.rglob("*.json")) == sorted(out / e / "fedavg.json" for e in exps)
    m = json.loads((out / exps[0] / "fedavg.json").read_text())
    assert list(m) == ["test/acc", "test/nll", "test/ece"]
    for metric, v in m.items():
        cell = df[(df.experiment == exps[0]) & (df["round"] == 50) & (df.metric == metric)].iloc[0]
        assert isinstance(v["ours"], float) and v["ours"] == pytest.approx(cell.ours_mean), metric
        if pd.isna(cell.published_mean):
            assert "verdict" not in v and "published" not in v, metric
        elif pd.isna(cell.within_tol):
            assert v["verdict"] == "no tolerance", metric
        else:
            assert v["published"] == pytest.approx(cell.published_mean), metric
            assert v["verdict"] == ("within" if cell.within_tol else "outside"), metric
    verdicts = {v["verdict"] for f in out.rglob("*.json") for v in json.loads(f.read_text()).values() if "verdict" in v}
    assert verdicts <= set(VERDICTS) and len(verdicts) > 1
    plots = [f for f in files if f.suffix == ".csv"]
    assert plots == plot_files(p) and [f.name for f in plots] == [f"table1_{e}_test_acc.csv" for e in exps]
    c = pd.read_csv(plots[0])  # long format: a row per round × method that was evaluated, no empty cell
    assert list(c.columns) == ["round", "method", "test_acc"] and c["round"].tolist() == list(range(51))
    assert (c.method == "fedavg").all() and not c.isna().any().any()
    seeds_acc = [pd.read_csv(tmp_path / "runs" / exps[0] / "fedavg" / "local_epochs=5" / f"seed{s}" / "history.csv")
                 .set_index("round")["test/acc"][50] for s in p["seeds"]]
    assert c.set_index("round").test_acc[50] == pytest.approx(100 * np.mean(seeds_acc), rel=1e-5)


def _coloured_pixels(png) -> int:
    """Pixels of a PNG in a colour (not white, grey or black): the data of the project's figures (every
    method has a colour); empty axes, grid lines and titles have none."""
    from PIL import Image

    a = np.asarray(Image.open(png).convert("RGB")).astype(int)
    return int(((a.max(-1) - a.min(-1)) > 60).sum())


def test_no_committed_figure_is_an_empty_plot_area(repo):
    """Every committed figure under reports/figures/ draws data (a table with no runs here shows its
    published values, not empty axes)."""
    figures = sorted((repo / "reports" / "figures").rglob("*.png"))
    assert figures
    empty = [str(f.relative_to(repo)) for f in figures if _coloured_pixels(f) < 100]
    assert not empty, f"figures without data: {empty}"


def test_a_table_with_no_runs_draws_its_published_values_alone(repo, tmp_path):
    """FedEP Table 5 with its data unavailable: the curves figure shows the published accuracy and ECE,
    the reliability figure the published ECE against the published accuracy (no bins to draw), the .md
    says why; an empty panel is never saved."""
    from matplotlib.figure import Figure

    from fedbayes.reports.figures import save_with_data

    p = read_params(repo)
    p["paths"] = {**p["paths"], "reports": str(tmp_path / "reports"), "work": str(tmp_path / "work"),
                  "raw": str(tmp_path / "raw")}
    out = tmp_path / "reports" / "fedep" / "table5.csv"
    df = build(p, "fedep/table5", out)
    assert df.status.str.startswith("not run (data unavailable").all()
    for f in ("fedep_table5_curves.png", "fedep_table5_reliability.png"):
        assert _coloured_pixels(tmp_path / "reports" / "figures" / f) > 100, f
    md = out.with_suffix(".md").read_text()
    assert "**Figures:** no experiment of this table ran here" in md and "published ECE against the published accuracy" in md
    fig = Figure()
    ax = fig.subplots()
    ax.axhline(50, gid="reference")
    ax.set_title("cifar100 · accuracy")
    with pytest.raises(ValueError, match="panels without data: cifar100 · accuracy"):
        save_with_data(fig, tmp_path / "empty.png")
    assert not (tmp_path / "empty.png").exists()


def test_dvc_plots_draw_no_false_zeros(repo):
    """reports/plots/*.csv are long format (round, method, value) with no empty cell — DVC plots an empty
    cell as 0 (BayesADMM's and FedIVON's sampled predictive, evaluated every 5th round, fell to 0 % every
    few rounds) — and every dvc.yaml plot reads its field through the project's template (a colour per
    method, titled axes); `dvc plots show` embeds Vega instead of loading it from a CDN."""
    import configparser

    files = sorted((repo / "reports" / "plots").glob("*.csv"))
    assert files
    for f in files:
        c = pd.read_csv(f)
        assert list(c.columns[:2]) == ["round", "method"] and len(c.columns) == 3, f
        assert not c.isna().any().any(), f"{f.name}: empty cells"
        assert not c.duplicated(["round", "method"]).any(), f
    plots = yaml.safe_load((repo / "dvc.yaml").read_text())["plots"]
    assert len(plots) == len(files)
    for entry in plots:
        (title, d), = entry.items()
        assert (repo / ".dvc" / "plots" / f"{d['template']}.json").exists(), title
        assert d["x"] == "round" and d["x_label"] and d["y_label"] and d["title"], title
        (csv, field), = d["y"].items()
        assert field in pd.read_csv(repo / csv.replace("${reports_dir}", "reports")).columns, title
    cfg = configparser.ConfigParser()
    cfg.read(repo / ".dvc" / "config")
    page = (repo / ".dvc" / cfg['plots']['html_template'].strip()).read_text()
    assert "{plot_divs}" in page and "{scripts}" not in page and "<script src=" not in page
    assert "vegaEmbed" in page


def test_selection_says_when_its_pick_is_within_noise():
    """A pick by 0.03 points on one seed, or by less than the spread over seeds, is called within noise;
    the criterion names the seeds it read ("mean over seeds" was written for one seed)."""
    from fedbayes.reports.selection import pick_note

    crit = {"metric": "test/acc", "statistic": "mean_last3", "round": 50, "mode": "max"}
    one = {"point": "b", "criterion": crit, "candidates": [{"point": "a", "value": 80.00}, {"point": "b", "value": 80.03}]}
    assert pick_note(one, 1, 0.4) == ("within noise: ahead of a by 0.03 on one seed, less than the median spread "
                                      "over seeds measured in this experiment (std 0.40)")
    assert pick_note(one, 1, None) == "ahead of a by 0.03 on one seed (no spread over seeds measured in this experiment)"
    big = {**one, "candidates": [{"point": "a", "value": 74.0}, {"point": "b", "value": 80.0}]}
    assert pick_note(big, 1, 0.4) == "ahead of a by 6.00 on one seed"
    three = {"point": "b", "criterion": crit, "candidates": [{"point": "a", "value": 79.9, "per_seed": [79, 80, 80.7]},
                                                             {"point": "b", "value": 80.0, "per_seed": [79, 80, 81]}]}
    assert pick_note(three, 3, None).startswith("within noise: ahead of a by 0.10, less than its spread over 3 seeds")
    assert pick_note({**three, "criterion": {**crit, "mode": "min"}, "point": "a"}, 3, None).startswith(
        "within noise: ahead of b by 0.10")
    assert pick_note({**one, "candidates": one["candidates"][1:]}, 1, None) == "only candidate"


def test_a_one_point_line_without_a_marker_is_an_empty_plot_area():
    """A curve evaluated at one round only (FedIVON's sampled predictive at round 2000) drew an invisible
    one-point line, listed in the legend and never seen; empty_axes counts it as no data."""
    from matplotlib.figure import Figure

    from fedbayes.reports.figures import empty_axes

    fig = Figure()
    a, b, c, d = fig.subplots(1, 4)
    a.plot([2000], [0.9])
    b.plot([2000], [0.9], marker="D")
    c.plot([1998, 2000], [0.9, 0.88])       # two points 2 rounds apart on a 2000-round axis: not seen
    c.plot([0, 2000], [0.5, 0.5], gid="reference")
    d.plot([0, 1000, 2000], [0.5, 0.7, 0.8])
    assert empty_axes(fig) == ["axes 0", "axes 2"]


def test_figures_draw_their_tables_metrics_from_the_metric_registry(repo):
    """FedIVON Table 2's figure draws its table's OOD AUROC (it drew accuracy and NLL); a table of one
    metric gets accuracy and NLL; the units and directions are the registry's."""
    from fedbayes.eval.registry import PERCENT, metric
    from fedbayes.reports.figures import curve_metrics
    from fedbayes.reports.claims import higher_is_better

    tables = Study.resolve(read_params(repo)).tables
    assert curve_metrics(tables["fedivon/table2"]) == ["ood/auroc_entropy", "ood/auroc_maxprob"]
    assert curve_metrics(tables["fedlap/table1"]) == ["test/acc", "test/nll"]
    assert curve_metrics(tables["table1"]) == ["test/acc", "test/nll", "test/ece"]
    assert curve_metrics(tables["fola/table2"]) == ["test/acc", "local/acc"]
    assert PERCENT == {"test/acc", "local/acc", "test/precision", "test/recall", "test/micro_f1", "test/macro_f1"}
    assert metric("final/mean/test/acc").axis_label == "accuracy (%)" and metric("test/nll").unit == "nats"
    assert not higher_is_better("test/brier", "final") and higher_is_better("ood/auroc_entropy", "final")
    assert not higher_is_better("test/acc", "rounds_to_target")
    with pytest.raises(KeyError, match="test/f2"):
        metric("test/f2")


def _cli(args, capsys, monkeypatch, p) -> tuple[int, str]:
    from fedbayes import cli
    from fedbayes.cli import reports

    monkeypatch.setattr(reports, "_params", lambda a: p)  # the fixture's fake runs (not params.yaml)
    monkeypatch.setattr(reports, "_study", lambda a: Study.resolve(p))
    with pytest.raises(SystemExit) as ex:
        cli.main(args)
        raise SystemExit(0)
    return ex.value.code, capsys.readouterr().err


def _tree(root) -> dict:
    return {f: f.read_bytes() for f in root.rglob("*") if f.is_file()}


@pytest.mark.parametrize("name", ["history.csv", "run.json", "metrics.json"])
@pytest.mark.parametrize("cmd", [["table", "table1"], ["sweep-report", "--experiment", "fmnist10-iid-k10"],
                                 ["select", "--experiment", "fmnist10-iid-k10", "--method", "fedavg"],
                                 ["toy", "fedep/table4"]],
                         ids=["table", "sweep-report", "select", "toy"])
def test_a_report_command_never_writes_a_run_file(table_params, tmp_path, capsys, monkeypatch, cmd, name):
    """`--out` naming a run's file (or anything under paths.runs) is refused in one line before any work:
    the run's files are its training job's."""
    run = tmp_path / "runs" / "fmnist10-iid-k10" / "fedavg" / "local_epochs=5" / "seed0"
    before = _tree(tmp_path)
    code, err = _cli([*cmd, "--out", str(run / name)], capsys, monkeypatch, table_params)
    assert code == 2 and err.count("\n") == 1 and f"--out {run / name}" in err, err
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("cmd, out", [
    (["table", "table1"], "reports/sweeps/fmnist10-iid-k10.csv"),                     # the sweep report's
    (["sweep-report", "--experiment", "fmnist10-iid-k10"], "reports/table1.csv"),      # a table's
    (["select", "--experiment", "fmnist10-iid-k10", "--method", "fedavg"],
     "runs/fmnist10-dir-k10/fedavg/selected.json"),                                    # another pair's selection
    (["table", "table1"], "work/data/fmnist.csv"),
    (["toy", "fedep/table4"], "reports/table1.csv"),                                  # a table's
    (["toy", "fedep/table4"], "reports/bayesadmm/figures.csv"),                       # another toy's
], ids=["table", "sweep-report", "select", "work", "toy", "other-toy"])
def test_a_report_command_never_writes_another_rules_file(table_params, tmp_path, capsys, monkeypatch, cmd, out):
    target = tmp_path / out
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("another rule's\n")
    before = _tree(tmp_path)
    code, err = _cli([*cmd, "--out", str(target)], capsys, monkeypatch, table_params)
    assert code == 2 and err.count("\n") == 1 and "belongs to a workflow rule" in err, err
    assert _tree(tmp_path) == before


def test_a_table_built_elsewhere_leaves_the_workflows_figures_alone(table_params, tmp_path, capsys, monkeypatch):
    """`table --out <elsewhere>` writes its CSV, .md and figures there, never under <reports>/figures."""
    (tmp_path / "reports" / "figures").mkdir(parents=True)
    ours = tmp_path / "reports" / "figures" / "table1_curves.png"
    ours.write_bytes(b"the workflow's figure")
    out = tmp_path / "elsewhere" / "t.csv"
    code, err = _cli(["table", "table1", "--out", str(out)], capsys, monkeypatch, table_params)
    assert code == 0, err
    assert ours.read_bytes() == b"the workflow's figure"
    assert (out.parent / "table1_curves.png").stat().st_size > 10_000 and out.with_suffix(".md").exists()


def test_a_toy_built_elsewhere_leaves_the_workflows_figures_alone(table_params, tmp_path, capsys, monkeypatch):
    """`toy --out <elsewhere>` wrote its CSV and .md there but its figures into <reports>/figures, over the
    workflow's: they go beside --out now; its own CSV still writes the workflow's figures."""
    figures = tmp_path / "reports" / "figures"
    figures.mkdir(parents=True)
    ours = figures / "fedep_fig1.png"
    ours.write_bytes(b"the workflow's figure")
    out = tmp_path / "elsewhere" / "t4.csv"
    code, err = _cli(["toy", "fedep/table4", "--out", str(out)], capsys, monkeypatch, table_params)
    assert code == 0, err
    assert ours.read_bytes() == b"the workflow's figure"
    assert (out.parent / "fedep_fig1.png").stat().st_size > 1_000 and (out.parent / "fedep_fig4_left.png").exists()
    assert out.with_suffix(".md").exists()
    code, err = _cli(["toy", "fedep/table4", "--out", str(tmp_path / "reports" / "fedep" / "table4.csv")],
                     capsys, monkeypatch, table_params)
    assert code == 0, err
    assert ours.read_bytes() != b"the workflow's figure"


def test_a_toy_missing_from_params_is_one_line(table_params, tmp_path, capsys, monkeypatch):
    p = copy.deepcopy(table_params)
    p["toys"].pop("fedep/table4")
    code, err = _cli(["toy", "fedep/table4", "--out", str(tmp_path / "t.csv")], capsys, monkeypatch, p)
    assert code == 2 and err.count("\n") == 1 and "toys.fedep/table4" in err and "Traceback" not in err, err


def test_a_table_never_overwrites_a_markdown_file_of_its_own(table_params, tmp_path, capsys, monkeypatch):
    readme = tmp_path / "elsewhere" / "README.md"
    readme.parent.mkdir()
    readme.write_text("# mine\n")
    code, err = _cli(["table", "table1", "--out", str(readme.with_suffix(".csv"))], capsys, monkeypatch, table_params)
    assert code == 2 and f"{readme} exists without" in err, err
    assert readme.read_text() == "# mine\n" and not readme.with_suffix(".csv").exists()


SCRIPT = "<script>alert(1)</script>"


def test_a_script_title_note_and_status_are_text_in_the_tables_markdown(table_params, tmp_path):
    """The table's .md (shown as HTML by `snakemake --report` and by Git hosts) prints every user-supplied
    string as text: a `<script>` title, raw HTML in its notes file, a data status's reason."""
    p = copy.deepcopy(table_params)
    notes = tmp_path / "notes.md"
    notes.write_text("Keep `<experiment>` as code.\n\n<img src=x onerror=alert(2)>\n\n```\n<kept>\n```\n")
    p["tables"]["table1"].update(title=f"T1 {SCRIPT}\n\n<b>x</b> [link](javascript:alert(3))", notes=str(notes))
    exp = p["tables"]["table1"]["experiments"][0]
    dataset = p["experiments"][exp]["dataset"]
    (tmp_path / "work" / "data" / f"{dataset}.json").write_text(
        json.dumps({"dataset": dataset, "available": False, "reason": f"server said {SCRIPT}"}))
    out = tmp_path / "reports" / "table1.csv"
    build(p, "table1", out)
    md = out.with_suffix(".md").read_text()
    assert "<script" not in md and "<img" not in md and "<b>" not in md and "](javascript:" not in md, md
    assert md.startswith("# table1: T1 &lt;script&gt;alert(1)&lt;/script&gt; ")      # one line, printed as text
    assert "server said &lt;script&gt;" in md
    assert "Keep `<experiment>` as code." in md and "```\n<kept>\n```" in md        # code stays code


def test_the_report_caption_of_a_script_title_is_text(table_params, repo):
    """workflow/report/table.rst renders a table's title into the report's HTML (reStructuredText): a title
    with newlines could start a `.. raw:: html` directive there."""
    import jinja2
    from docutils.core import publish_parts

    p = copy.deepcopy(table_params)
    p["tables"]["table1"]["title"] = f"T\n\n.. raw:: html\n\n   {SCRIPT}\n\nx"
    snakemake = type("S", (), {"config": p, "params": type("P", (), {"name": "table1"})})
    rst = jinja2.Template((repo / "workflow/report/table.rst").read_text()).render(snakemake=snakemake)
    html = publish_parts(rst, writer_name="html", settings_overrides={"report_level": 5})["body"]
    assert "<script" not in html and "&lt;script&gt;" in html, html


def test_a_notes_code_span_across_a_line_break_is_printed_as_written():
    """A code span may wrap (reports/notes/table1.md's `fedbayes train --params <params.yaml …>` does): its
    `<` stays as written, while a `<` outside code, and one after a paragraph break, is escaped."""
    from fedbayes.reports.escape import md_document

    text = "run `fedbayes train --params <p.yaml>\n--seed 0` then <script>\n\n`open <x\n\nshut` <y>"
    assert md_document(text) == ("run `fedbayes train --params <p.yaml>\n--seed 0` then &lt;script>\n\n`open &lt;x"
                                 "\n\nshut` &lt;y>")


def _rehearsal(p: dict) -> dict:
    p = copy.deepcopy(p)
    p["scale"] = "rehearsal"
    return p


@pytest.mark.parametrize("cmd, scale", [(["scorecard"], None), (["rehearsal-summary"], _rehearsal)],
                         ids=["scorecard", "rehearsal-summary"])
@pytest.mark.parametrize("target", ["runs/fmnist10-iid-k10/fedavg/local_epochs=5/seed0/metrics.md",
                                    "reports/table1.md", "elsewhere/README.md", "elsewhere/metrics.json"],
                         ids=["under-runs", "a-tables", "a-readme", "a-run-file"])
def test_the_scorecard_and_summary_never_overwrite_a_file_they_do_not_own(table_params, tmp_path, capsys, monkeypatch,
                                                                           cmd, scale, target):
    """`scorecard --out` and `rehearsal-summary --out` wrote any path they were given (a run's file, a
    table's Markdown, the project's README) with exit 0: refused in one line before any work now."""
    p = scale(table_params) if scale else table_params
    target = tmp_path / target
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("# mine\n")
    before = _tree(tmp_path)
    code, err = _cli([*cmd, "--out", str(target)], capsys, monkeypatch, p)
    assert code == 2 and err.count("\n") == 1 and f"--out {target}" in err, err
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("out", ["runs/fmnist10-iid-k10", "reports", "."], ids=["runs", "reports", "repo"])
def test_the_headline_never_writes_or_deletes_under_another_rules_folder(table_params, tmp_path, capsys, monkeypatch,
                                                                         out):
    """`headline --out results/runs/<experiment>` emptied the folder's */*.json first: every selection of the
    experiment (and wrote its JSONs into the runs): refused in one line before any work now."""
    monkeypatch.chdir(tmp_path)
    table = tmp_path / "t1.csv"
    table.write_text("experiment,method,metric,round,ours_mean\n")
    before = _tree(tmp_path)
    code, err = _cli(["headline", str(table), "--out", str(tmp_path / out)], capsys, monkeypatch, table_params)
    assert code == 2 and err.count("\n") == 1 and "--out" in err, err
    assert _tree(tmp_path) == before


def test_a_headline_elsewhere_deletes_only_its_own_files_and_leaves_the_workflows_curves(
        table_params, tmp_path, capsys, monkeypatch):
    """`headline --out <a folder of yours>` deleted every */*.json in it (a project's package.json) and
    rewrote <reports>/plots in the repository: now it removes only earlier headline JSONs there and writes
    its curves beside --out."""
    from fedbayes.reports.headline import plot_files

    table = tmp_path / "t1.csv"
    code, err = _cli(["table", "table1", "--out", str(table)], capsys, monkeypatch, table_params)
    assert code == 0, err
    ours = plot_files(table_params)
    for f in ours:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("the workflow's curve\n")
    home = tmp_path / "home"
    (home / "project").mkdir(parents=True)
    (home / "project" / "package.json").write_text("{}\n")
    (home / "fmnist10-iid-k10").mkdir()
    (home / "fmnist10-iid-k10" / "gone.json").write_text("{}\n")   # an earlier headline's method
    code, err = _cli(["headline", str(table), "--out", str(home)], capsys, monkeypatch, table_params)
    assert code == 0, err
    assert (home / "project" / "package.json").read_text() == "{}\n"
    assert not (home / "fmnist10-iid-k10" / "gone.json").exists() and (home / "fmnist10-iid-k10" / "fedavg.json").exists()
    assert all(f.read_text() == "the workflow's curve\n" for f in ours)
    assert all((home.parent / "plots" / f.name).exists() for f in ours)


@pytest.mark.parametrize("text", ["a,b\n1,2,3,4\n5,6\n", "a,b\n1,2\n", "\xff\xfe\x00garbage"], ids=["ragged", "columns", "binary"])
def test_a_headline_from_a_file_that_is_not_a_table_is_one_line(table_params, tmp_path, capsys, monkeypatch, text):
    table = tmp_path / "t1.csv"
    table.write_bytes(text.encode("latin-1"))
    code, err = _cli(["headline", str(table), "--out", str(tmp_path / "m")], capsys, monkeypatch, table_params)
    assert code == 2 and err.count("\n") == 1 and str(table) in err and "Traceback" not in err, err
    assert not (tmp_path / "m").exists()


RUN = "runs/fmnist10-iid-k10/fedavg/local_epochs=5/seed0"


def _main(args, capsys) -> tuple[int, str]:
    from fedbayes import cli

    with pytest.raises(SystemExit) as ex:
        cli.main(args)
        raise SystemExit(0)
    return ex.value.code, capsys.readouterr().err


@pytest.mark.parametrize("target", [f"{RUN}/metrics.json", "elsewhere/notes.json"], ids=["run-file", "another-json"])
def test_a_data_status_never_overwrites_a_file_of_another_kind(table_params, tmp_path, capsys, target):
    """`data --status <a run's metrics.json>` wrote the data record over it (exit 0): refused now, as is
    any existing file that is not a data status; the workflow's own status files are rewritten as before."""
    target = tmp_path / target
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text('{"mine": 1}\n')
    before = _tree(tmp_path)
    code, err = _main(["data", "mnist", "--no-download", "--root", str(tmp_path / "raw"), "--status", str(target)], capsys)
    assert code == 2 and err.count("\n") == 1 and f"--status {target}" in err, err
    assert _tree(tmp_path) == before
    own = tmp_path / "work" / "data" / "mnist.json"
    own.write_text('{"dataset": "mnist", "available": true}\n')
    code, err = _main(["data", "mnist", "--no-download", "--root", str(tmp_path / "raw"), "--status", str(own)], capsys)
    assert code == 0 and json.loads(own.read_text())["available"] is False, err


@pytest.mark.parametrize("option, target", [("--record", f"{RUN}/run.json"), ("--record", "elsewhere/notes.json"),
                                            ("--work", "elsewhere")], ids=["run-file", "another-json", "work"])
def test_a_numerics_record_never_overwrites_a_file_of_another_kind(tmp_path, capsys, option, target):
    """`numerics-check fedavg --record <a run's run.json>` wrote its record over the run's (exit 0)."""
    target = tmp_path / target
    mine = target / "numerics" / "fedavg.json" if option == "--work" else target
    mine.parent.mkdir(parents=True, exist_ok=True)
    mine.write_text('{"mine": 1}\n')
    before = _tree(tmp_path)
    code, err = _main(["numerics-check", "fedavg", option, str(target)], capsys)
    assert code == 2 and err.count("\n") == 1 and str(mine) in err, err
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("figure", [f"{RUN}/history.csv", "reports/figures/table1_curves.png",
                                    "reports/figures/partitions/fmnist10-iid-k10_seed1.png"],
                         ids=["run-file", "a-tables-figure", "another-seeds"])
def test_a_partition_figure_never_overwrites_another_rules_file(table_params, tmp_path, capsys, monkeypatch, figure):
    """`partition --figure <a run's history.csv>` drew the PNG over it (exit 0)."""
    from fedbayes.cli import data

    monkeypatch.setattr(data, "_params", lambda a: table_params)
    target = tmp_path / figure
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("another rule's\n")
    before = _tree(tmp_path)
    code, err = _main(["partition", "--experiment", "fmnist10-iid-k10", "--seed", "0", "--out",
                       str(tmp_path / "partitions" / "fmnist10-iid-k10" / "seed0.npz"), "--figure", str(target)], capsys)
    assert code == 2 and err.count("\n") == 1 and f"--figure {target}" in err, err
    assert _tree(tmp_path) == before


def test_a_numerics_record_cut_short_in_the_work_folder_is_written_again(tmp_path, capsys):
    """A record of the workflow's folder (--work) that is no JSON at all (cut short) is the check's own, due
    anyway: written again, not refused (a JSON object of another kind there still is)."""
    mine = tmp_path / "work" / "numerics" / "fedavg.json"
    mine.parent.mkdir(parents=True)
    mine.write_text('{"method": "fed')
    code, err = _main(["numerics-check", "fedavg", "--work", str(tmp_path / "work")], capsys)
    assert code == 0 and json.loads(mine.read_text())["method"] == "fedavg", err


@pytest.mark.parametrize("cmd, name, text", [
    (["table", "table1"], "data.csv", "a,b\n1,2\n"),
    (["sweep-report", "--experiment", "fmnist10-iid-k10"], "data.csv", "a,b\n1,2\n"),
    (["select", "--experiment", "fmnist10-iid-k10", "--method", "fedavg"], "package.json", '{"name": "mine"}\n'),
], ids=["table", "sweep-report", "select"])
def test_a_report_elsewhere_never_overwrites_a_users_file_of_another_kind(table_params, tmp_path, capsys, monkeypatch,
                                                                         cmd, name, text):
    """Outside the workflow's folders `--out` may name a new file or an earlier one of the command's kind;
    a CSV or JSON of the user's (data.csv, package.json) was overwritten, exit 0."""
    target = tmp_path / "elsewhere" / name
    target.parent.mkdir()
    target.write_text(text)
    before = _tree(tmp_path)
    code, err = _cli([*cmd, "--out", str(target)], capsys, monkeypatch, table_params)
    assert code == 2 and err.count("\n") == 1 and "exists and is not" in err, err
    assert _tree(tmp_path) == before
    code, err = _cli([*cmd, "--out", str(target.with_name("new" + target.suffix))], capsys, monkeypatch, table_params)
    assert code == 0, err
    code, err = _cli([*cmd, "--out", str(target.with_name("new" + target.suffix))], capsys, monkeypatch, table_params)
    assert code == 0, err   # an earlier one of its own kind is written again
