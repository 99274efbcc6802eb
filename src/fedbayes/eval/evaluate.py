"""metrics.json from a run's saved predictive log-probabilities, so a metric change never retrains."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fedbayes.eval.metrics import calibration, classification_metrics
from fedbayes.fileio import write_text_atomic
from fedbayes.runfiles import open_predictions, read_run_info


def prefixed(m: dict) -> dict:
    return {(f"ood/{k}" if k.startswith("auroc") else f"test/{k}"): v for k, v in m.items()}


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
            if np.isnan(test).all():  # not evaluated at this round (engine: ``mc_window: false``)
                continue
            ood = pred[f"ood_logp{suffix}"][i] if f"ood_logp{suffix}" in pred else None
            out[str(r)] = prefixed(classification_metrics(test, y, ood))
        return out

    main = per_round()
    # prediction variants (e.g. test_logp@mean: BayesADMM's point prediction at the posterior mean)
    variants = {k.split("@", 1)[1]: per_round("@" + k.split("@", 1)[1]) for k in pred.files if k.startswith("test_logp@")}
    cfg = info["config"]
    # a diverged run (run.json "diverged") has the rounds saved before it diverged, possibly none
    final = rounds[-1] if rounds else None
    last = (lambda r: r[str(final)]) if rounds else (lambda r: {})
    out = {
        "experiment": cfg["experiment"], "method": cfg["method"], "seed": cfg["seed"],
        "scale": cfg["scale"], "config_hash": info["config_hash"], "final_round": final,
        **({"diverged": info["diverged"]} if "diverged" in info else {}),
        "final": last(main), "rounds": main,
        **({"variants": {v: {"final": last(r), "rounds": r} for v, r in variants.items()}} if variants else {}),
        "reliability": [{k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in b.items()}
                        for b in calibration(pred["test_logp"][-1], y)["bins"]] if rounds else [],
        "wall_s": info.get("wall_s"), "device": info.get("device"),
    }
    write_text_atomic(run_dir / "metrics.json", json.dumps(out, indent=1))
    return out
