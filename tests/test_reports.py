"""Tables (ours vs published), published-number lookup, figures and MLflow import."""

import copy
import json

import numpy as np
import pandas as pd
import pytest
import yaml

from fedbayes.reports.published import load_paper, published_value
from fedbayes.reports.selection import select, sweep_frame, write_selection
from fedbayes.reports.tables import build_table, cell_value


def fake_metrics(exp, method, seed, accs: dict, nlls: dict):
    rounds = {str(r): {"test/acc": accs[r], "test/nll": nlls[r]} for r in accs}
    return {"experiment": exp, "method": method, "seed": seed, "rounds": rounds}


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
    # the FMNIST baselines of BayesADMM Table 1 are FedLap's Table 1 (the paper copies them)
    b, f = load_paper("bayesadmm")["tables"]["table1"]["rows"], load_paper("fedlap")["tables"]["table1"]["rows"]
    for exp in f:
        for m in ("fedavg", "fedprox", "feddyn", "fedlap", "fedlap_cov"):
            assert b[exp][m]["test/acc"] == f[exp][m]["test/acc"]


def write_run(d, exp, seed, acc, nll):
    d.mkdir(parents=True)
    rounds = sorted(acc)
    m = fake_metrics(exp, "fedavg", seed, acc, nll)
    for r in m["rounds"].values():
        r.update({"test/ece": 0.05, "test/brier": 0.3, "ood/auroc_entropy": 0.8})
    (d / "metrics.json").write_text(json.dumps(m))
    pd.DataFrame({"round": rounds, "test/acc": [acc[r] for r in rounds],
                  "test/nll": [nll[r] for r in rounds]}).to_csv(d / "history.csv", index=False)


@pytest.fixture
def table_params(repo, tmp_path):
    """Fake finished runs: a 3-point local_epochs sweep on seed 0 (E=5 best), E=5 on every seed."""
    p = yaml.safe_load((repo / "params.yaml").read_text())
    p["paths"] = {**p["paths"], "runs": str(tmp_path / "runs"), "reports": str(tmp_path / "reports")}
    p["methods"]["fedavg"] = {"sweep": {"local_epochs": [1, 5, 10]}}
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
    df = build_table(p, "table1", tmp_path / "reports" / "table1.csv")
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
    assert set(df.point) == {"local_epochs=5"}
    assert (tmp_path / "reports" / "figures" / "table1_curves.png").stat().st_size > 10_000
    # the csv round-trips
    assert len(pd.read_csv(tmp_path / "reports" / "table1.csv")) == len(df)


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
        for f in ("metrics.json", "history.csv"):
            (dst / f).write_text((src / f).read_text())
        write_selection(p, exp, "fedavg")
    df = build_table(p, "table1", tmp_path / "smoke_table1.csv")
    assert df.published_source.eq("").all() and (df.scale == "smoke").all()
