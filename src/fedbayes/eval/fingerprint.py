"""Per-metric fingerprints: which metric definitions a metrics.json was computed with, one code a metric.

A metric's code is what its function makes of a fixed set of predictions (seeded: 300 test points of 10
classes, 300 OOD points; ``metric_codes``), digested: the same code, the same definition; a definition change changes it and
a refactor does not (re-evaluation follows numbers, as retraining does). The reliability bins
(``RELIABILITY``, from ``calibration``) have a code of their own. metrics.json records the codes of the
metrics it holds (``metric_codes``), and the metrics it could not compute (``not_evaluated``: a metric
added after the run's predictions were gone) with the code they had; the workflow's evaluate rule
compares them with the code's (``changes``), metric by metric, so a new or changed metric re-evaluates
only itself, and no record of Snakemake's is needed (a fresh clone, runs committed).

A metrics.json written before codes were recorded per metric holds one code for all its metrics
(``metric_code``; none at all before that: ``FROZEN_METRIC_CODE``): its per-metric codes are those that
code stood for (``LEGACY``). Reading them costs no numpy: only ``metric_codes`` computes."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from fedbayes.eval.registry import Metric, evaluated

RELIABILITY = "reliability"   # the reliability bins of the final round (metrics.json ``reliability``)

# the metric definitions of every metrics.json written before they recorded ``metric_code``
FROZEN_METRIC_CODE = "2b02eee37f47086e"
# one code for every metric (``metric_code``, recorded until codes were recorded per metric) → the code of
# each metric it stood for (tests/test_evaluate.py checks them against the metric code's)
LEGACY = {
    FROZEN_METRIC_CODE: {
        "test/acc": "54044b5301864c1b", "test/nll": "e4909d14648f2d5f", "test/ece": "24d1e846a33d7bfe",
        "test/mce": "7cbb866ba70e1eff", "test/brier": "fe9e2881ee15d1c0", "ood/auroc_entropy": "9bb6222ff6ee7373",
        "ood/auroc_maxprob": "30c748dd85c9b30a", RELIABILITY: "d0cbff5c4becbba9",
    },
}


def _digest(value) -> str:
    # 9 significant digits: a machine's own vector exp/log (numpy's SIMD paths) moves the last bits only
    text = json.dumps(value, sort_keys=True, default=float)
    text = re.sub(r"-?\d+\.\d+(?:[eE][-+]?\d+)?", lambda m: f"{float(m.group()):.9g}", text)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def metric_codes(metrics: list[Metric] | None = None) -> dict[str, str]:
    """Metric name → its code (the registry's evaluated metrics, or ``metrics``), and ``RELIABILITY``'s."""
    import numpy as np
    from scipy.special import log_softmax

    from fedbayes.eval.metrics import calibration, metric_values

    rng = np.random.default_rng(20261127)
    # confidences of every level (each point's logits at its own scale) and labels that mostly follow the
    # prediction: the low-confidence points are under-confident, the high ones over-confident, so that a
    # calibration metric's binning shows (with labels at random every bin is over-confident, and ECE is
    # mean confidence - accuracy whatever the bins)
    logits = rng.normal(size=(300, 10)) * rng.uniform(0.2, 5.0, size=(300, 1))
    ood = rng.normal(scale=1.0, size=(300, 10))
    logp, logp_ood = (log_softmax(a, axis=1).astype(np.float32) for a in (logits, ood))
    y = np.where(rng.random(300) < 0.7, logits.argmax(axis=1), rng.integers(0, 10, size=300))
    out = {m.name: _digest(metric_values(logp, y, logp_ood, [m])[m.name])
           for m in (evaluated() if metrics is None else metrics)}
    out[RELIABILITY] = _digest(calibration(logp, y)["bins"])
    return out


def recorded(m: dict) -> dict[str, str] | None:
    """The code of each metric a metrics.json (read) was computed with; None where it records one code for
    all that stands for no known codes (every metric is then to be computed again)."""
    if "metric_codes" in m:
        return dict(m["metric_codes"])
    return dict(LEGACY[code]) if (code := m.get("metric_code", FROZEN_METRIC_CODE)) in LEGACY else None


def changes(m: dict, now: dict[str, str], predictions: bool) -> dict[str, str]:
    """The metrics of a metrics.json (read) to compute again, name → why (in the code's order): one it does
    not hold (a new metric), one computed with another code (a changed definition), and one it records as
    not evaluated under another code, or under this code where the run's predictions are now there
    (``predictions``). {} where all are the code's; ``{"*": why}`` where its one code is unknown."""
    have = recorded(m)
    if have is None:
        return {"*": f"the metric definitions changed ({m.get('metric_code')} -> per-metric codes)"}
    skipped = m.get("not_evaluated") or {}
    out = {}
    for name, code in now.items():
        if name in have:
            if have[name] != code:
                out[name] = f"the definition of {name} changed ({have[name]} -> {code})"
        elif name in skipped:
            if skipped[name] != code:
                out[name] = f"the definition of {name} changed ({skipped[name]} -> {code})"
            elif predictions:
                out[name] = f"{name} not evaluated, and the run's predictions are there now"
        else:
            out[name] = f"{name} not evaluated (a new metric)"
    return out


def has_predictions(run_dir) -> bool:
    return (Path(run_dir) / "predictions.npz").exists()
