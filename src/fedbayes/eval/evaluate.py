"""metrics.json from a run's kept predictive log-probabilities, so a metric change never retrains.

metrics.json is the one source of metric values: tables, curves, figures, the headline and MLflow read its
``rounds`` (every evaluated round), never history.csv's columns. A run keeps the predictions of every
evaluated round (``keep_predictions: every_round``, engine.loop._keep), and evaluation computes every round
from them. A run that kept only its table rounds (``table_rounds``; or trained before every round was kept)
has its other rounds from training's own evaluation (history.csv, computed by the same metric code), taken
only after the kept rounds show that the metric code still gives what training gave; where it does not (a
metric definition changed), evaluation stops and names the run, the metric and both values
(``MetricsChanged``): those rounds cannot follow the new definition without retraining."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np

from fedbayes.eval import fingerprint
from fedbayes.eval.fingerprint import RELIABILITY, metric_codes
from fedbayes.eval.metrics import calibration, metric_values
from fedbayes.eval.registry import EVALUATED, METRICS
from fedbayes.fileio import write_text_atomic
from fedbayes.runfiles import DamagedFile, open_predictions, read_history_rows, read_metrics, read_run_info

TRAINING_ONLY = ("local/",)     # measured in training on models that are not kept (the clients' own models)


class MetricsChanged(RuntimeError):
    """A round without kept predictions cannot follow a changed metric definition."""


def with_training_rounds(run_dir: Path, evaluated: dict[str, dict], rows: list[dict[str, str]],
                         variant: str = "") -> tuple[dict[str, dict], list[int]]:
    """``evaluated`` (round → metrics from kept predictions) completed from history.csv's ``rows``: the
    training-only metrics of every round, and the evaluated metrics of the rounds without kept predictions
    (returned second). Those are taken only when every kept round's values equal training's: else
    MetricsChanged (the metric code changed since training)."""
    pre = f"{variant}/" if variant else ""
    values = {int(row["round"]): {k[len(pre):]: float(v) for k, v in row.items()
                                  if v != "" and k.startswith(pre) and k[len(pre):].startswith(EVALUATED + TRAINING_ONLY)}
              for row in rows}
    out = {r: dict(m) for r, m in evaluated.items()}
    missing = [r for r, m in sorted(values.items()) if str(r) not in out and any(k.startswith(EVALUATED) for k in m)]
    for r, m in sorted(values.items()) if missing else ():   # (every round kept: nothing to take, nothing to check)
        for k, then in m.items():
            now = out.get(str(r), {}).get(k)
            if now is not None and k.startswith(EVALUATED) and not (
                    math.isclose(now, then, rel_tol=1e-9, abs_tol=1e-12) or math.isnan(now) and math.isnan(then)):
                raise MetricsChanged(
                    f"{run_dir}: {pre}{k} of round {r} is {now!r} from the kept predictions, but training computed "
                    f"{then!r}: the metric code changed since this run trained, and rounds {_ranges(missing)} kept no "
                    "predictions to re-evaluate (keep_predictions: table_rounds, or trained before every round was "
                    f"kept). Retrain it (delete {run_dir}/history.csv) or restore the metric code.")
    for r, m in values.items():
        if str(r) in out:
            out[str(r)].update({k: v for k, v in m.items() if k.startswith(TRAINING_ONLY)})
    out.update({str(r): values[r] for r in missing})
    return dict(sorted(out.items(), key=lambda kv: int(kv[0]))), missing


def _ranges(rounds: list[int]) -> str:
    """[0, 1, 2, 5] → '0–2, 5'."""
    out, start = [], None
    for i, r in enumerate(rounds):
        start = r if start is None else start
        if i + 1 == len(rounds) or rounds[i + 1] != r + 1:
            out.append(f"{start}–{r}" if r > start else f"{r}")
            start = None
    return ", ".join(out) or "none"


def complete_rounds(run_dir: str | Path, m: dict, info: dict) -> dict:
    """A metrics dict (``rounds`` and each variant's) completed from the run's history.csv
    (``with_training_rounds``); ``from_training`` lists the rounds taken from training's evaluation."""
    run_dir = Path(run_dir)
    rows = read_history_rows(run_dir, info)
    m["rounds"], taken = with_training_rounds(run_dir, m["rounds"], rows)
    for name, v in m.get("variants", {}).items():
        v["rounds"], t = with_training_rounds(run_dir, v["rounds"], rows, name)
        taken = sorted(set(taken) | set(t))
    if taken:
        m["from_training"] = taken
    else:
        m.pop("from_training", None)
    return m


NO_PREDICTIONS = ("{run}/predictions.npz is missing (predictions are not committed, e.g. in a fresh clone): retrain "
                  "the run to recompute {what}, e.g. `snakemake -R train <target>` or delete {run}/history.csv")


def evaluate_run(run_dir: str | Path) -> dict:
    """The run's metrics.json, written: where one of this training is there (it is deleted when the run
    trains), only the metrics whose code differs from the code's (``fingerprint.changes``) are computed,
    every other value kept byte for byte; else every metric. A new metric of a run without predictions
    is recorded as not evaluated (``not_evaluated``); a changed one stops evaluation (MetricsChanged)."""
    run_dir = Path(run_dir)
    info = read_run_info(run_dir)
    now = metric_codes()
    try:
        old = read_metrics(run_dir, info) if (run_dir / "metrics.json").exists() else None
    except DamagedFile:
        old = None
    todo = fingerprint.changes(old, now, fingerprint.has_predictions(run_dir)) if old is not None else {"*": ""}
    if "*" in todo:
        if not fingerprint.has_predictions(run_dir):
            raise FileNotFoundError(NO_PREDICTIONS.format(run=run_dir, what="its metrics"))
        return _evaluate_all(run_dir, info, now)
    if not todo:   # every metric the code's: nothing to compute (the file is touched: its job has run)
        os.utime(run_dir / "metrics.json")
        return old
    return _evaluate_some(run_dir, info, old, now, list(todo))


def _kept(pred, suffix: str = "") -> list[tuple[int, int]]:
    """(index, round) of each round whose predictions were kept and evaluated (``suffix``: a prediction
    variant's, ``@mean``); a run that diverged before its first saved round has none."""
    return [(i, int(r)) for i, r in enumerate(pred["rounds"])
            # (all NaN: not evaluated at this round; engine: ``mc_every``, ``mc_window: false``)
            if not np.isnan(pred[f"test_logp{suffix}"][i]).all()]


def _kept_rounds(pred, metrics, suffix: str = "") -> dict[str, dict]:
    """Round → the values of ``metrics`` (None: every metric evaluation computes) from the kept predictions
    of each evaluated round."""
    y = pred["y_test"]
    return {str(r): metric_values(pred[f"test_logp{suffix}"][i], y,
                                  pred[f"ood_logp{suffix}"][i] if f"ood_logp{suffix}" in pred else None, metrics)
            for i, r in _kept(pred, suffix)}


def _variants(pred) -> list[str]:
    """The prediction variants (e.g. test_logp@mean: BayesADMM's point prediction at the posterior mean)."""
    return [k.split("@", 1)[1] for k in pred.files if k.startswith("test_logp@")]


def _reliability(pred, final: int | None) -> list[dict]:
    """The reliability bins of the final round's predictions (NaN, of an empty bin, as null)."""
    if final is None:
        return []
    rounds = [int(r) for r in pred["rounds"]]
    return [{k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in b.items()}
            for b in calibration(pred["test_logp"][rounds.index(final)], pred["y_test"])["bins"]]


def _evaluate_all(run_dir: Path, info: dict, codes: dict[str, str]) -> dict:
    pred = open_predictions(run_dir)
    rounds = [int(r) for r in pred["rounds"]]
    main = _kept_rounds(pred, None)
    variants = {v: _kept_rounds(pred, None, "@" + v) for v in _variants(pred)}
    cfg = info["config"]
    # the final round: the last table round kept (``save_rounds``, the last round among them); a diverged
    # run (run.json "diverged") has the rounds kept before it diverged, possibly no table round
    final = max((r for r in rounds if r in set(cfg["save_rounds"])), default=None)
    last = (lambda r: r.get(str(final), {})) if final is not None else (lambda r: {})
    out = {
        "experiment": cfg["experiment"], "method": cfg["method"], "seed": cfg["seed"],
        "scale": cfg["scale"], "config_hash": info["config_hash"], "final_round": final,
        **({"diverged": info["diverged"]} if "diverged" in info else {}),
        "final": last(main), "rounds": main,
        **({"variants": {v: {"final": last(r), "rounds": r} for v, r in variants.items()}} if variants else {}),
        "reliability": _reliability(pred, final),
        "wall_s": info.get("wall_s"), "device": info.get("device"), "metric_codes": codes,
    }
    out = complete_rounds(run_dir, out, info)
    write_text_atomic(run_dir / "metrics.json", json.dumps(out, indent=1))
    return out


def _evaluate_some(run_dir: Path, info: dict, old: dict, now: dict[str, str], names: list[str]) -> dict:
    """``old`` (this training's metrics.json) with the metrics ``names`` computed again (or, without the
    run's predictions, those it never held recorded as not evaluated), every other value as it was."""
    have = fingerprint.recorded(old) or {}
    out = json.loads(json.dumps(old))   # (a copy: ``old`` is left as it was)
    out.pop("metric_code", None)
    if not fingerprint.has_predictions(run_dir):
        if changed := [n for n in names if n in have]:   # its values are the old definition's
            raise MetricsChanged(NO_PREDICTIONS.format(run=run_dir, what=", ".join(changed)).replace(
                "predictions.npz is missing", f"the definition of {', '.join(changed)} changed since it was "
                "evaluated, and predictions.npz is missing", 1) + " (or restore the metric code)")
        # a metric the run never held: it cannot gain it without retraining, and says so
        out["not_evaluated"] = {**out.get("not_evaluated", {}), **{n: now[n] for n in names}}
        out["metric_codes"] = have
        write_text_atomic(run_dir / "metrics.json", json.dumps(out, indent=1))
        return out
    pred = open_predictions(run_dir)
    metrics = [METRICS[n] for n in names if n != RELIABILITY]
    final = old["final_round"]

    def merged(table: dict, suffix: str = "") -> tuple[dict, dict]:
        """(the kept rounds with the recomputed values, the final round's values) of ``table`` (the main
        predictions' or a variant's)."""
        computed = _kept_rounds(pred, metrics, suffix) if metrics else {}
        rounds = {str(r): {**table["rounds"].get(str(r), {}), **computed.get(str(r), {})} for _, r in _kept(pred, suffix)}
        return rounds, {**table.get("final", {}), **computed.get(str(final), {})}

    out["rounds"], out["final"] = merged(old)
    for v in _variants(pred):
        t = out.setdefault("variants", {}).setdefault(v, {"final": {}, "rounds": {}})
        t["rounds"], t["final"] = merged(old.get("variants", {}).get(v, {"rounds": {}}), "@" + v)
    if RELIABILITY in names:
        out["reliability"] = _reliability(pred, final)
    out["metric_codes"] = {**have, **{n: now[n] for n in names}}
    for n in names:
        out.get("not_evaluated", {}).pop(n, None)
    if out.get("not_evaluated") == {}:
        del out["not_evaluated"]
    out = complete_rounds(run_dir, out, info)   # the rounds kept no predictions of: training's, checked again
    write_text_atomic(run_dir / "metrics.json", json.dumps(out, indent=1))
    return out
