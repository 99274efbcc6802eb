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
from fedbayes.eval import fingerprint as fp
from fedbayes.eval.fingerprint import RELIABILITY, metric_codes
from fedbayes.eval.registry import METRICS, Metric, evaluated
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


def test_a_metric_code_follows_its_definition_not_its_code_nor_the_others(monkeypatch):
    """eval.fingerprint.metric_codes: what each metric's function makes of fixed predictions, so the
    workflow re-evaluates a metric after its definition changes (NLL in bits), only it, and after no
    refactor."""
    a = metric_codes()
    assert metric_codes() == a and set(a) == {m.name for m in evaluated()} | {RELIABILITY}
    assert all(len(c) == 16 for c in a.values())
    nll = METRICS["test/nll"]
    monkeypatch.setitem(METRICS, "test/nll", replace(nll, fn=lambda lp, y: metrics.nll(lp, y) / np.log(2)))   # in bits
    b = metric_codes()
    assert b["test/nll"] != a["test/nll"] and {k: v for k, v in b.items() if k != "test/nll"} == \
        {k: v for k, v in a.items() if k != "test/nll"}
    monkeypatch.setitem(METRICS, "test/nll", replace(nll, fn=lambda lp, y: -np.mean(lp[np.arange(len(y)), y])))   # a refactor
    assert metric_codes() == a


def test_a_metrics_json_of_one_code_reads_as_every_metric_of_that_code():
    """A metrics.json written before codes were recorded per metric: its ``metric_code`` (none: the frozen
    code) stands for each metric's code then; an unknown one for none (every metric computed again)."""
    now = metric_codes()
    assert fp.recorded({}) == fp.recorded({"metric_code": fp.FROZEN_METRIC_CODE}) == fp.LEGACY[fp.FROZEN_METRIC_CODE]
    assert fp.changes({}, now, predictions=False) == {}
    assert fp.changes({"metric_code": "0123456789abcdef"}, now, predictions=True) == \
        {"*": "the metric definitions changed (0123456789abcdef -> per-metric codes)"}
    top2 = {**now, "test/top2": "c0de"}
    assert fp.changes({}, top2, predictions=False) == {"test/top2": "test/top2 not evaluated (a new metric)"}
    assert fp.changes({"not_evaluated": {"test/top2": "c0de"}}, top2, predictions=False) == {}
    assert fp.changes({"not_evaluated": {"test/top2": "c0de"}}, top2, predictions=True) == \
        {"test/top2": "test/top2 not evaluated, and the run's predictions are there now"}
    assert fp.changes({"metric_codes": {**now, "test/ece": "0ld"}}, now, predictions=False) == \
        {"test/ece": f"the definition of test/ece changed (0ld -> {now['test/ece']})"}


def test_every_committed_metrics_json_has_the_codes_metric_definitions():
    """The committed tables rest on metrics.json computed with the metric definitions of the code at hand
    (their ``metric_codes``; for those written before codes were recorded per metric, the codes their one
    ``metric_code`` stands for, ``fingerprint.LEGACY``). A metric definition change fails this test on
    purpose: the workflow then re-evaluates that metric of every run (the committed ones need retraining:
    their predictions were not kept) and the new metrics.json are committed. It also checks that the codes
    are this machine's as much as the ones that wrote them (rounded digits)."""
    from pathlib import Path

    now = metric_codes()
    files = sorted(Path(__file__).resolve().parents[1].glob("results/runs/*/*/*/seed*/metrics.json"))
    files = [f for f in files if f.parts[-5] not in ("smoke", "rehearsal")]
    assert len(files) >= 150
    stale = {str(f): why for f in files if (why := fp.changes(json.loads(f.read_text()), now, predictions=False))}
    assert not stale, f"{len(stale)} metrics.json computed with other metric definitions, e.g. {next(iter(stale.items()))}"


TOP2 = Metric("test/top2", "top-2 accuracy", "%", True, scale=100.0, digits=1,
              fn=lambda lp, y: float(np.mean((np.argsort(-lp, axis=1)[:, :2] == y[:, None]).any(axis=1))))


def computed(monkeypatch) -> list:
    """The metrics evaluation computes from a run's predictions, call by call (and ``reliability`` for
    each calibration of the final round's bins)."""
    calls = []
    values, calibration = ev.metric_values, ev.calibration

    def spy(logp, y, logp_ood=None, metrics=None):
        calls.append([m.name for m in (evaluated() if metrics is None else metrics)])
        return values(logp, y, logp_ood, metrics)

    def spy_bins(logp, y, *a, **k):
        calls.append([RELIABILITY])
        return calibration(logp, y, *a, **k)

    monkeypatch.setattr(ev, "metric_values", spy)
    monkeypatch.setattr(ev, "calibration", spy_bins)
    return calls


def others(m: dict, names) -> str:
    """metrics.json's values but those of ``names`` and its record of codes, as text (byte for byte)."""
    def strip(t):
        return {k: v for k, v in t.items() if k not in names}

    out = {k: v for k, v in m.items() if k not in ("metric_code", "metric_codes", "not_evaluated")}
    out["final"], out["rounds"] = strip(m["final"]), {r: strip(t) for r, t in m["rounds"].items()}
    out["variants"] = {v: {"final": strip(t["final"]), "rounds": {r: strip(x) for r, x in t["rounds"].items()}}
                       for v, t in m.get("variants", {}).items()}
    return json.dumps(out, indent=1)


@pytest.mark.parametrize("recorded", ["per metric", "one code"])
def test_an_added_metric_is_evaluated_alone_and_the_others_stay_byte_identical(
        recorded, tmp_path, synthetic_run_data, cfg_factory, monkeypatch):
    """A metric added to the registry is computed from the kept predictions of a run already evaluated, and
    only it: every other value stays as it was, byte for byte; also where the metrics.json records one code
    for all its metrics (written before codes were recorded per metric)."""
    run_federated(RunSpec.from_config(cfg_factory()), synthetic_run_data, tmp_path, torch.device("cpu"), log=quiet)
    evaluate_run(tmp_path)
    f = tmp_path / "metrics.json"
    if recorded == "one code":
        m = json.loads(f.read_text())
        m.pop("metric_codes")
        f.write_text(json.dumps(m, indent=1))
    before = json.loads(f.read_text())
    monkeypatch.setitem(METRICS, TOP2.name, TOP2)
    calls = computed(monkeypatch)
    after = evaluate_run(tmp_path)
    assert calls and all(c == ["test/top2"] for c in calls)           # each kept round: the new metric alone
    assert json.loads(f.read_text()) == after and others(after, ["test/top2"]) == others(before, [])
    pred = np.load(tmp_path / "predictions.npz")
    assert [after["rounds"][str(r)]["test/top2"] for r in pred["rounds"]] == \
        [TOP2.fn(lp, pred["y_test"]) for lp in pred["test_logp"]]
    assert after["metric_codes"] == metric_codes() and "metric_code" not in after
    calls.clear()
    assert evaluate_run(tmp_path) == after and calls == []             # nothing stale: nothing computed


def test_an_edited_metric_is_evaluated_alone(tmp_path, synthetic_run_data, cfg_factory, monkeypatch):
    run_federated(RunSpec.from_config(cfg_factory()), synthetic_run_data, tmp_path, torch.device("cpu"), log=quiet)
    before = evaluate_run(tmp_path)
    ece_over(10, monkeypatch)
    calls = computed(monkeypatch)
    after = evaluate_run(tmp_path)
    assert calls and all(c == ["test/ece"] for c in calls)
    assert others(after, ["test/ece"]) == others(before, ["test/ece"])
    pred = np.load(tmp_path / "predictions.npz")
    assert [after["rounds"][str(r)]["test/ece"] for r in pred["rounds"]] == \
        [metrics.calibration(lp, pred["y_test"], n_bins=10)["ece"] for lp in pred["test_logp"]]
    assert after["metric_codes"] == {**before["metric_codes"], "test/ece": metric_codes()["test/ece"]}


def test_a_run_without_predictions_records_a_new_metric_as_not_evaluated(tmp_path, synthetic_run_data, cfg_factory,
                                                                          monkeypatch):
    """A committed run keeps no predictions: a metric added later cannot be computed for it without
    retraining. Its metrics.json says so (``not_evaluated``: the metric and its code, so the workflow does
    not ask again), its other values byte for byte as they were; the table shows the metric as not
    evaluated for the run (tests/test_reports.py)."""
    run_federated(RunSpec.from_config(cfg_factory()), synthetic_run_data, tmp_path, torch.device("cpu"), log=quiet)
    before = evaluate_run(tmp_path)
    (tmp_path / "predictions.npz").unlink()
    monkeypatch.setitem(METRICS, TOP2.name, TOP2)
    after = evaluate_run(tmp_path)
    assert after["not_evaluated"] == {"test/top2": metric_codes([TOP2])["test/top2"]}
    assert others(after, []) == others(before, []) and after["metric_codes"] == before["metric_codes"]
    assert fp.changes(after, metric_codes(), predictions=False) == {}


def test_a_run_without_predictions_stops_on_an_edited_metric_naming_it_and_the_remedy(
        tmp_path, synthetic_run_data, cfg_factory, monkeypatch):
    run_federated(RunSpec.from_config(cfg_factory()), synthetic_run_data, tmp_path, torch.device("cpu"), log=quiet)
    evaluate_run(tmp_path)
    (tmp_path / "predictions.npz").unlink()
    before = (tmp_path / "metrics.json").read_text()
    ece_over(10, monkeypatch)
    with pytest.raises(MetricsChanged, match=r"test/ece .*predictions\.npz is missing.*retrain"):
        evaluate_run(tmp_path)
    assert (tmp_path / "metrics.json").read_text() == before
