"""metrics.json is the one source of metric values (fedbayes.eval.evaluate): a run keeps the predictions of
every evaluated round and evaluation computes every round from them; a run that kept its table rounds only
gets its other rounds from training's own evaluation, and only while the metric code still gives what
training gave there."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch

from fedbayes.engine import run_federated
from fedbayes.study.model import RunSpec
from fedbayes.eval import evaluate as ev
from fedbayes.eval import metrics
from fedbayes.eval.evaluate import MetricsChanged, evaluate_run, with_training_rounds
from fedbayes.eval.registry import METRICS
from fedbayes.runfiles import read_curves


def quiet(_msg):
    pass


def rows(*vals):
    """history.csv rows (text) of rounds 0, 1, …: test/acc, local/acc ('' = not measured)."""
    return [{"round": str(r), "test/acc": a, "local/acc": l, "train/loss": "0.5"} for r, (a, l) in enumerate(vals)]


def test_rounds_without_kept_predictions_come_from_training_once_the_kept_ones_agree(tmp_path):
    evaluated = {"2": {"test/acc": 0.75}}
    out, taken = with_training_rounds(tmp_path, evaluated, rows(("0.1", ""), ("0.5", "0.2"), ("0.75", "0.3")))
    assert out == {"0": {"test/acc": 0.1}, "1": {"test/acc": 0.5, "local/acc": 0.2},
                   "2": {"test/acc": 0.75, "local/acc": 0.3}}   # training-only metrics at every round
    assert taken == [0, 1] and evaluated == {"2": {"test/acc": 0.75}}   # (the argument is left as it was)


def test_a_changed_metric_stops_evaluation_naming_the_run_the_metric_and_the_remedy(tmp_path):
    with pytest.raises(MetricsChanged) as e:
        with_training_rounds(tmp_path, {"2": {"test/acc": 0.7}}, rows(("0.1", ""), ("0.5", ""), ("0.75", "")))
    said = str(e.value)
    assert str(tmp_path) in said and "test/acc of round 2 is 0.7" in said and "training computed 0.75" in said
    assert "rounds 0–1 kept no predictions" in said and f"delete {tmp_path}/history.csv" in said


def test_every_kept_round_evaluated_equals_training_at_every_round(tmp_path, synthetic_run_data, cfg_factory):
    """Every evaluated round is kept (default ``keep_predictions: every_round``) and evaluated from its
    predictions: metrics.json's curves are training's own numbers, round for round, none taken from it."""
    run_federated(RunSpec.from_config(cfg_factory()), synthetic_run_data, tmp_path, torch.device("cpu"), log=quiet)
    assert np.load(tmp_path / "predictions.npz")["rounds"].tolist() == [0, 1, 2, 3, 4]
    assert not (tmp_path / "predictions.rounds").exists()   # gathered into predictions.npz, then removed
    m = evaluate_run(tmp_path)
    assert list(m["rounds"]) == ["0", "1", "2", "3", "4"] and "from_training" not in m
    hist = pd.read_csv(tmp_path / "history.csv", float_precision="round_trip")   # (pandas' default parser can be 1 ulp off)
    curves = read_curves(tmp_path)
    cols = [c for c in hist if c.startswith(("test/", "ood/"))]
    assert set(cols) == set(curves.columns) - {"round"}
    pd.testing.assert_frame_equal(curves[["round", *cols]], hist[["round", *cols]])


def ece_over(n_bins: int, monkeypatch) -> None:
    """A metric definition change, as the registry entry of ECE computing over ``n_bins`` bins."""
    monkeypatch.setitem(METRICS, "test/ece", replace(METRICS["test/ece"],
                                                     fn=lambda lp, y: metrics.calibration(lp, y, n_bins=n_bins)["ece"]))


def test_a_run_keeping_its_table_rounds_follows_no_metric_change(tmp_path, synthetic_run_data, cfg_factory, monkeypatch):
    cfg = cfg_factory(keep_predictions="table_rounds")
    run_federated(RunSpec.from_config(cfg), synthetic_run_data, tmp_path, torch.device("cpu"), log=quiet)
    assert np.load(tmp_path / "predictions.npz")["rounds"].tolist() == [2, 3, 4]   # the save_rounds
    m = evaluate_run(tmp_path)
    assert list(m["rounds"]) == ["0", "1", "2", "3", "4"] and m["from_training"] == [0, 1]
    hist = pd.read_csv(tmp_path / "history.csv", float_precision="round_trip")   # (pandas' default parser can be 1 ulp off)
    assert read_curves(tmp_path)["test/nll"].tolist() == hist["test/nll"].tolist()
    before = (tmp_path / "metrics.json").read_text()
    ece_over(10, monkeypatch)   # a metric definition change: ECE over 10 bins instead of 15
    with pytest.raises(MetricsChanged, match=r"test/ece of round \d .* rounds 0–1 kept no predictions"):
        evaluate_run(tmp_path)
    assert (tmp_path / "metrics.json").read_text() == before   # nothing half-written


def test_a_metric_change_re_evaluates_every_round_of_a_run_keeping_them_all(tmp_path, synthetic_run_data, cfg_factory,
                                                                            monkeypatch):
    run_federated(RunSpec.from_config(cfg_factory()), synthetic_run_data, tmp_path, torch.device("cpu"), log=quiet)
    old = evaluate_run(tmp_path)
    ece_over(10, monkeypatch)
    new = evaluate_run(tmp_path)
    pred = np.load(tmp_path / "predictions.npz")
    y = pred["y_test"]
    assert [new["rounds"][str(r)]["test/ece"] for r in pred["rounds"]] == [
        ev.calibration(lp, y, n_bins=10)["ece"] for lp in pred["test_logp"]]   # every round, from its predictions
    assert any(new["rounds"][r]["test/ece"] != old["rounds"][r]["test/ece"] for r in old["rounds"])
    assert all(new["rounds"][r]["test/acc"] == old["rounds"][r]["test/acc"] for r in old["rounds"])
    assert json.loads((tmp_path / "metrics.json").read_text())["rounds"] == new["rounds"]


def test_the_metric_fingerprint_follows_definitions_not_code(monkeypatch):
    """eval.evaluate.metrics_fingerprint: what the metric code makes of fixed predictions, so the workflow
    re-evaluates every run after a definition change (NLL in bits) and after no refactor."""
    a = ev.metrics_fingerprint()
    assert ev.metrics_fingerprint() == a and len(a) == 16
    nll = METRICS["test/nll"]
    monkeypatch.setitem(METRICS, "test/nll", replace(nll, fn=lambda lp, y: metrics.nll(lp, y) / np.log(2)))   # in bits
    assert ev.metrics_fingerprint() != a
    monkeypatch.setitem(METRICS, "test/nll", replace(nll, fn=lambda lp, y: -np.mean(lp[np.arange(len(y)), y])))   # a refactor
    assert ev.metrics_fingerprint() == a


def test_every_committed_metrics_json_has_the_codes_metric_definitions():
    """The committed tables rest on metrics.json computed with the metric definitions of the code at hand
    (their ``metric_code``, or for those written before it was recorded ``FROZEN_METRIC_CODE``). A metric
    definition change fails this test on purpose: the workflow then re-evaluates every run (the committed ones
    need retraining: their every round's predictions were not kept) and the new metrics.json are committed.
    It also checks that the fingerprint is this machine's as much as the one that wrote it (rounded digits)."""
    from pathlib import Path

    now = ev.metrics_fingerprint()
    files = sorted(Path(__file__).resolve().parents[1].glob("results/runs/*/*/*/seed*/metrics.json"))
    files = [f for f in files if f.parts[-5] not in ("smoke", "rehearsal")]
    assert len(files) >= 150
    stale = [str(f) for f in files if json.loads(f.read_text()).get("metric_code", ev.FROZEN_METRIC_CODE) != now]
    assert not stale, f"{len(stale)} metrics.json computed with other metric definitions, e.g. {stale[0]}"
