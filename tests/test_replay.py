"""The rerun rule's guard: a change that alters any number a method computes must bump its numerics
version (``fedbayes.catalog``), because finished runs are adopted by new code on their configuration
and numerics versions alone (never on source hashes).

Two checks, both bit for bit:

- every method, on a tiny synthetic problem (3 rounds, 4 clients, the hyperparameters stored in its
  golden): its history against ``tests/golden/numerics/<method>.v<core>.<method version>.json``;
- one committed paper-scale run per method (``REPLAYED``): its first round retrained from its run.json
  (``fedbayes replay``) against its committed history.csv.

After a deliberate numerics change: bump the method spec's ``numerics`` (fedbayes/methods/builtin.py)
or CORE_NUMERICS (fedbayes/catalog.py), write the new golden with
``python tests/test_replay.py METHOD …``, and rerun the method's runs (Snakemake plans exactly those).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "golden" / "numerics"
TIMING = ("time_s", "wall_s", "eval_s")

# One committed run per method whose first round this machine class retrains bit for bit: its cheapest
# run trained on an AVX2 CPU (runs trained elsewhere before the AVX2 cap in fedbayes/__init__.py differ
# by round-off; reports/notes/rerun-rule.md lists them).
REPLAYED = {
    "fedavg": "fmnist10-dir-k10/fedavg/local_epochs=5/seed0",
    "fedprox": "fmnist10-dir-k10/fedprox/alpha=0.01+local_epochs=5/seed0",
    "feddyn": "fmnist10-dir-k10/feddyn/alpha=0.01+local_epochs=5+weight_decay=1e-05/seed0",
    "fedlap": "fmnist10-dir-k10/fedlap/delta=0.0001+local_epochs=5/seed1",
    "fedlap_cov": "fmnist10-dir-k10/fedlap_cov/delta=0.01+local_epochs=10/seed0",
    "fedlap_func": "fmnist10-iid-k10/fedlap_func/delta=0.01+local_epochs=10+tau=0.0001/seed2",
    "bayesadmm": "fmnist10-dir-k10/bayesadmm/default/seed2",
    "fedivon": "fmnist-shards-k200/fedivon/default/seed0",
    "fedcurv": "fmnist10-labeldir0.01-k20-r20/fedcurv/lambda_prior=1.0/seed0",
    "fola": "fmnist10-labeldir0.01-k20-r20/fola/lambda_prior=1.0/seed0",
    "scaffold": "fmnist10-labeldir0.01-k20-r20/scaffold/default/seed0",
    "fednova": "fmnist10-labeldir0.01-k20-r20/fednova/default/seed0",
    "fedbe": "fmnist10-labeldir0.01-k20-r20/fedbe/default/seed0",
}


def _method_names() -> list[str]:
    from fedbayes.catalog import METHOD_VARIANTS

    return sorted(METHOD_VARIANTS)


def golden_path(method: str) -> Path:
    from fedbayes.catalog import numerics

    v = numerics(method)
    return GOLDEN / f"{method}.v{v['core']}.{v['method']}.json"


def _experiment_for(params: dict, method: str) -> str:
    """Where a new golden's hyperparameters are taken from: the first experiment that runs the method
    (or its I variant), else the headline Dirichlet experiment."""
    for name in (method, f"{method}_i"):
        for e, spec in params["experiments"].items():
            if name in spec["methods"]:
                return e
    return "fmnist10-dir-k10"


def golden_hparams(method: str) -> dict:
    """A new golden's hyperparameters: params.yaml's at smoke scale, shrunk to seconds. They are stored
    in the golden, so that a later params.yaml edit changes no golden."""
    from fedbayes.config import load_params, method_hparams, sweep_points

    params = load_params(REPO / "params.yaml", scale="smoke")
    experiment = _experiment_for(params, method)
    hp = method_hparams(params, experiment, method, next(iter(sweep_points(params, experiment, method))))
    hp.update(local_epochs=2, batch_size=32, server_iters=20, pred_samples=3, mc_every=1, burn_in=1,
              laplace_epochs=1, ngvi_epochs=1, ngvi_samples=2)
    if "variant" in hp:  # fedep / fedsep (no experiment runs them): the FedEP family's clients run SGD-M
        hp["optimizer"] = "sgd"
    return hp


def golden_history(method: str, hp: dict, tmp: Path) -> list[dict]:
    """The method on a tiny synthetic problem: 4 Dirichlet clients, a 32-16 ReLU MLP, 3 rounds."""
    import numpy as np

    from fedbayes.data import make_synthetic
    from fedbayes.engine import RunData, preprocess, run_federated
    from fedbayes.partition import make_partition

    a = make_synthetic()
    idx = np.arange(400)
    parts = [idx[p] for p in make_partition(a["y_train"][idx], 4, "dirichlet", np.random.default_rng(0), min_size=8)]
    noise = np.random.default_rng(1).integers(0, 256, size=(50, 28, 28), dtype=np.uint8)
    data = RunData(x_train=preprocess(a["x_train"], "unit"), y_train=torch.from_numpy(a["y_train"]).long(),
                   x_test=preprocess(a["x_test"][:100], "unit"), y_test=torch.from_numpy(a["y_test"][:100]).long(),
                   x_ood=preprocess(noise, "unit"), n_classes=10, parts=parts)
    cfg = {"experiment": "numerics-golden", "method": method, "point": "default", "seed": 0, "scale": "smoke",
           "dataset": "synthetic", "ood": "noise", "subsample": 1.0, "clients": 4, "partition": {"scheme": "dirichlet"},
           "participation": 1.0, "rounds": 3, "model": {"name": "mlp", "hidden": [32, 16], "activation": "relu"},
           "input_scale": "unit", "hparams": hp, "save_rounds": [1, 2, 3]}
    torch.set_num_threads(1)
    return run_federated(cfg, data, tmp, torch.device("cpu"), log=lambda m: None)


def _as_text(history: list[dict]) -> list[dict]:
    """History rows as the CSV writer writes them (``str`` of each value), timing columns left out."""
    return [{k: ("" if v is None else str(v)) for k, v in row.items() if k not in TIMING} for row in history]


def write_golden(method: str, tmp: Path) -> Path:
    hp = golden_hparams(method)
    path = golden_path(method)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"method": method, "hparams": hp, "history": _as_text(golden_history(method, hp, tmp))},
                               indent=1) + "\n")
    return path


@pytest.mark.parametrize("method", _method_names())
def test_method_numerics_match_their_golden(method, tmp_path):
    path = golden_path(method)
    assert path.exists(), (f"{method}: no golden for numerics version {path.name}; after a deliberate numerics "
                           f"change write it with `python tests/test_replay.py {method}`")
    golden = json.loads(path.read_text())
    want, got = golden["history"], _as_text(golden_history(method, golden["hparams"], tmp_path))
    diffs = [f"round {w['round']}: {k} {w[k]} != {g.get(k, '<absent>')}"
             for w, g in zip(want, got) for k in w if w[k] != g.get(k, "")]
    assert len(want) == len(got) and not diffs, (
        f"{method}'s numbers changed without a numerics version bump (its spec's numerics, "
        f"fedbayes/methods/builtin.py, or CORE_NUMERICS, fedbayes/catalog.py): {diffs[:4]}")


@pytest.mark.parametrize("method", sorted(REPLAYED))
def test_committed_run_replays_bit_for_bit(method):
    from dagutil import require_fmnist

    from fedbayes.cli import fetch_dataset
    from fedbayes.engine.replay import replay_run

    from fedbayes.catalog import numerics

    require_fmnist(pytest)
    run = REPO / "results" / "runs" / REPLAYED[method]
    trained = json.loads((run / "run.json").read_text()).get("numerics") or {"core": 1, "method": 1}
    assert trained == numerics(method), (f"{REPLAYED[method]} was trained at numerics {trained}, the code is at "
                                         f"{numerics(method)}: name a run of the current version in REPLAYED")
    raw = REPO / "data" / "raw"
    for d in ("fmnist", "mnist5k"):
        fetch_dataset(d, str(raw), download=False)
    diffs = replay_run(run, rounds=1, raw=str(raw))
    assert not diffs, (f"{method}: the committed run {REPLAYED[method]} no longer replays: {diffs[:4]}; a change "
                       f"that alters numbers bumps {method}'s spec's numerics (fedbayes/methods/builtin.py) or CORE_NUMERICS")


def test_every_method_with_committed_runs_is_replayed():
    """A method that gets committed paper-scale runs also gets a replayed one here."""
    have = {p.parent.parent.name for p in (REPO / "results" / "runs").glob("*/*/*/seed*") if "smoke" not in p.parts}
    assert have - set(REPLAYED) <= {"fedep_i", "fedsep_i", "fedpa"}, sorted(have - set(REPLAYED))


if __name__ == "__main__":  # python tests/test_replay.py METHOD ...  (or: all)
    import tempfile

    names = _method_names() if sys.argv[1:] == ["all"] else sys.argv[1:]
    for m in names:
        with tempfile.TemporaryDirectory() as d:
            print(write_golden(m, Path(d)))


def test_numpy_kernels_are_capped_at_avx2_like_torchs():
    """NumPy's SIMD dispatch is capped at X86_V3 (AVX2) once fedbayes is imported first, as the CLI and the
    tests do: on an AVX-512 machine its AVX-512 reductions changed ECE/Brier in the last bit and the
    goldens failed (checked on an AMD EPYC Zen 4). Nothing to check on a machine without AVX-512."""
    import os
    import subprocess

    code = ("import fedbayes, numpy; from numpy._core._multiarray_umath import __cpu_features__ as f; "
            "print(int(bool(f.get('X86_V4') or f.get('AVX512_ICL'))))")
    env = {k: v for k, v in os.environ.items() if k != "NPY_DISABLE_CPU_FEATURES"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "0", out.stdout + out.stderr
