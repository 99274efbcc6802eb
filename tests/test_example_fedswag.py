"""The example plug-in examples/fedswag (FedSWAG-diag: SWAG-diagonal moments on each client, their
precision-weighted product on the server, a sampled and a point predictive), out of tree, made visible as
`pip install -e examples/fedswag` would (tests/pluginutil.py): registered, its math, a run evaluated with
both predictives; and (full tier) a smoke table beside FedAvg on Fashion-MNIST and a stand-in CIFAR-10 CNN
experiment, where editing one of its hyperparameters reruns only its runs."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pandas as pd
import pytest
import yaml
from dagutil import copy_repo, read_params, require_fmnist, sh
from pluginutil import REPO, fedbayes, installed, synthetic_params

EXAMPLE = REPO / "examples" / "fedswag"


@pytest.fixture
def env(tmp_path):
    return installed(EXAMPLE, tmp_path / "site")


def test_fedswag_is_registered_as_an_outside_method_with_its_hyperparameters(env, tmp_path):
    r = fedbayes(env, "methods", cwd=tmp_path)
    line = next(l for l in r.stdout.splitlines() if l.startswith("fedswag "))
    assert "outside method, package fedbayes-fedswag 0.1.0" in line, line
    r = fedbayes(env, "methods", "fedswag", cwd=tmp_path)
    assert r.returncode == 0 and all(k in r.stdout for k in ("swag_epochs", "var_floor", "pred_samples")), r.stdout


MATH = r'''
import numpy as np, torch
from fedbayes.methods import build_method
from fedbayes.methods.core.base import ClientData
from fedbayes.models import FlatModel

torch.manual_seed(0)
fm = FlatModel(torch.nn.Linear(4, 3))
m = build_method("fedswag", fm, {"lr": 0.05, "batch_size": 8, "local_epochs": 1, "swag_epochs": 2,
                                 "var_floor": 1e-4, "pred_samples": 5}, np.array([20, 20]))
assert m.variants == {"": "samples", "mean": "point"}
# the server: the product of two Gaussians per weight
P = fm.flat_params().numel()
msgs = {0: {"w": torch.zeros(P), "prec": torch.ones(P)}, 1: {"w": torch.full((P,), 4.0), "prec": torch.full((P,), 3.0)}}
s = m.server_update({"w": torch.zeros(P)}, msgs, 1)
assert torch.allclose(s["w"], torch.full((P,), 3.0)) and torch.allclose(s["prec"], torch.full((P,), 4.0))
# a client: SWAG moments of its iterates, every variance at least the floor
server, clients = m.init_state(fm.flat_params())
x, y = torch.randn(20, 4), torch.randint(0, 3, (20,))
msg, _, loss = m.client_update(0, m.broadcast(server, 1), clients[0], ClientData(x, y), np.random.default_rng(0), 1)
var = msg["prec"].reciprocal()
assert np.isfinite(loss) and (var >= 1e-4 * (1 - 1e-5)).all() and (var > 1.01e-4).any()
assert not torch.equal(msg["w"], server["w"])
# the predictives: S sampled networks drawn from the seed alone; the point one at the mean
s = m.server_update(server, {0: msg, 1: msg}, 1)
a, b = m.predict_logits(s, x, "", seed=7), m.predict_logits(s, x, "", seed=7)
assert a.shape == (5, 20, 3) and torch.equal(a, b) and not torch.equal(a, m.predict_logits(s, x, "", seed=8))
assert torch.equal(m.predict_logits(s, x, "mean"), fm(s["w"], x))
print("ok")
'''


def test_fedswag_math(env, tmp_path):
    r = subprocess.run([sys.executable, "-c", MATH], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


def test_a_fedswag_run_is_evaluated_with_both_predictives(env, tmp_path):
    params = synthetic_params(tmp_path, {"fedavg": None, "fedswag": None})
    out = tmp_path / "runs/smoke/synth/fedswag/default/seed0"
    r = fedbayes(env, "train", "--params", str(params), "--scale", "smoke", "--experiment", "synth", "--method",
                 "fedswag", "--seed", "0", "--partition", str(tmp_path / "partitions/smoke/synth/seed0.npz"),
                 "--out", str(out), "--threads", "1", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    r = fedbayes(env, "evaluate", str(out), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    m = json.loads((out / "metrics.json").read_text())
    assert set(m["final"]) >= {"test/acc", "test/nll", "test/ece"} and set(m["variants"]) == {"mean"}
    assert set(m["variants"]["mean"]["final"]) == set(m["final"])
    info = json.loads((out / "run.json").read_text())
    assert info["plugin"]["distribution"] == "fedbayes-fedswag"
    assert info["config"]["hparams"].get("pred_samples") == 4   # smoke's shared value: a key its spec declares


def swag_tables(p: dict) -> None:
    """Two experiments, each running FedAvg and FedSWAG-diag: Fashion-MNIST's MLP (smoke scale) and
    CIFAR-10's CNN (run on stand-in data at rehearsal scale), and a table for each."""
    fm, cnn = p["experiments"]["fmnist10-iid-k10"], p["experiments"]["cifar10-dir-k10"]
    p["methods"]["fedswag"] = {"swag_epochs": 1, "sweep": {"var_floor": [1.0e-6, 1.0e-5]}}
    p["experiments"] = {"fmnist10-iid-k10": {**fm, "methods": {"fedavg": fm["methods"]["fedavg"], "fedswag": None}},
                        "cifar10-dir-k10": {**cnn, "methods": {"fedavg": None, "fedswag": {"sweep": {"var_floor": [1.0e-6]}}}}}
    table = {"statistic": "final", "metrics": ["test/acc", "test/nll", "test/ece"], "methods": ["fedavg", "fedswag", "fedswag@mean"]}
    p["tables"] = {"swag": {**table, "title": "FedSWAG-diag beside FedAvg", "experiments": ["fmnist10-iid-k10"]},
                   "swag_cnn": {**table, "title": "FedSWAG-diag, CIFAR-10 CNN", "experiments": ["cifar10-dir-k10"]}}
    p["headline"] = {"table": "swag", "metrics": ["test/acc", "test/nll"], "curves": ["test/acc"]}


def planned_trains(plan: str) -> list[str]:
    """The run directories of the train jobs a dry run plans."""
    return sorted(set(re.findall(r"output: (\S+)/history\.csv", plan)))


@pytest.mark.full
@pytest.mark.full
def test_fedswag_table_beside_fedavg_and_a_stand_in_cnn_experiment(tmp_path, repo):
    require_fmnist(pytest)
    work = copy_repo(repo, tmp_path / "repo", swag_tables)
    pp = installed(EXAMPLE, tmp_path / "site")["PYTHONPATH"]
    sh("snakemake --cores 2 reports/smoke/swag.csv", work, timeout=3000, PYTHONPATH=pp)
    df = pd.read_csv(work / "reports/smoke/swag.csv")
    assert set(df.method) == {"fedavg", "fedswag", "fedswag@mean"} and (df.status == "ok").all(), df
    acc = df[df.metric == "test/acc"].set_index("method").ours_mean
    assert ((acc > 10) & (acc <= 100)).all(), acc
    # only the table's methods trained: nothing else of the experiment
    runs = {p.parent.parent.parent.name for p in (work / "results/runs/smoke").rglob("run.json")}
    assert runs == {"fedavg", "fedswag"}, runs

    # the stand-in CNN experiment (rehearsal scale: CIFAR-10 in its real format, generated here)
    sh("snakemake --cores 2 reports/rehearsal/swag_cnn.csv --config scale=rehearsal", work, timeout=3000, PYTHONPATH=pp)
    cnn = pd.read_csv(work / "reports/rehearsal/swag_cnn.csv")
    assert set(cnn.method) == {"fedavg", "fedswag", "fedswag@mean"}, cnn
    assert "stand-in" in (work / "reports/rehearsal/swag_cnn.md").read_text()

    # editing one of its hyperparameters reruns exactly its runs
    p = read_params(work)
    p["methods"]["fedswag"]["swag_epochs"] = 2
    (work / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    plan = sh("snakemake -n reports/smoke/swag.csv", work, PYTHONPATH=pp)
    trains = planned_trains(plan)
    assert trains and all("/fedswag/" in t for t in trains), plan[-3000:]
    had = {str(d.relative_to(work)) for d in (work / "results/runs/smoke").glob("fmnist10-iid-k10/fedswag/*/seed*")}
    # every sweep point's selection seed; the selected point's other seeds follow its new selection
    assert {d for d in had if d.endswith("/seed0")} <= set(trains) <= had, (trains, had)

    # a shared smoke value only FedSWAG-diag reads (of the two): its runs again, FedAvg's not
    p["methods"]["fedswag"]["swag_epochs"] = 1
    p["smoke"]["hparams"]["pred_samples"] = 6
    (work / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    plan = sh("snakemake -n reports/smoke/swag.csv", work, PYTHONPATH=pp)
    assert "changed since this run: hparams.pred_samples 4 -> 6" in plan, plan[-3000:]
    trains = planned_trains(plan)
    assert trains and all("/fedswag/" in t for t in trains), plan[-3000:]
