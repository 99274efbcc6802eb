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

import hashlib
import json
import math
import re
from pathlib import Path

import numpy as np
from scipy.special import log_softmax

from fedbayes.eval.metrics import calibration, metric_values
from fedbayes.eval.registry import EVALUATED
from fedbayes.fileio import write_text_atomic
from fedbayes.runfiles import open_predictions, read_history_rows, read_run_info

TRAINING_ONLY = ("local/",)     # measured in training on models that are not kept (the clients' own models)


def metrics_fingerprint() -> str:
    """What the metric code makes of a fixed set of predictions (seeded: 300 test points of 10 classes,
    300 OOD points): a digest of every metric the registry has evaluation compute and of the reliability bins. The same digest, the same metric
    definitions; a definition change changes it and a refactor does not (re-evaluation follows numbers, as
    retraining does). Recorded in metrics.json (``metric_code``) and compared by the workflow's evaluate rule,
    which needs no record of Snakemake's for it (a fresh clone, runs committed)."""
    rng = np.random.default_rng(20261127)
    logits, ood = rng.normal(scale=3.0, size=(300, 10)), rng.normal(scale=1.0, size=(300, 10))
    logp, logp_ood = (log_softmax(a, axis=1).astype(np.float32) for a in (logits, ood))
    y = rng.integers(0, 10, size=300)
    values = [metric_values(logp, y, logp_ood), calibration(logp, y)["bins"]]
    # 9 significant digits: a machine's own vector exp/log (numpy's SIMD paths) moves the last bits only
    text = json.dumps(values, sort_keys=True, default=float)
    text = re.sub(r"-?\d+\.\d+(?:[eE][-+]?\d+)?", lambda m: f"{float(m.group()):.9g}", text)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# the metric definitions of every metrics.json written before they recorded ``metric_code``
FROZEN_METRIC_CODE = "2b02eee37f47086e"


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


def evaluate_run(run_dir: str | Path) -> dict:
    run_dir = Path(run_dir)
    pred = open_predictions(run_dir)
    info = read_run_info(run_dir)
    y = pred["y_test"]
    rounds = [int(r) for r in pred["rounds"]]

    def per_round(suffix: str = "") -> dict:
        out = {}
        for i, r in enumerate(rounds):  # (a run that diverged before its first saved round has none)
            test = pred[f"test_logp{suffix}"][i]
            if np.isnan(test).all():  # not evaluated at this round (engine: ``mc_every``, ``mc_window: false``)
                continue
            ood = pred[f"ood_logp{suffix}"][i] if f"ood_logp{suffix}" in pred else None
            out[str(r)] = metric_values(test, y, ood)
        return out

    main = per_round()
    # prediction variants (e.g. test_logp@mean: BayesADMM's point prediction at the posterior mean)
    variants = {k.split("@", 1)[1]: per_round("@" + k.split("@", 1)[1]) for k in pred.files if k.startswith("test_logp@")}
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
        "reliability": [{k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in b.items()}
                        for b in calibration(pred["test_logp"][rounds.index(final)], y)["bins"]] if final is not None else [],
        "wall_s": info.get("wall_s"), "device": info.get("device"), "metric_code": metrics_fingerprint(),
    }
    out = complete_rounds(run_dir, out, info)
    write_text_atomic(run_dir / "metrics.json", json.dumps(out, indent=1))
    return out
