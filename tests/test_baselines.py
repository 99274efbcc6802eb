"""The FOLA paper's Table II baselines (methods/scaffold/, fednova/, fedbe/) against hand-written
updates, the engine's unlabeled hold-out for FedBE and the local accuracy (LA) of ``local_eval``."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedbayes.engine import run_federated
from fedbayes.study.model import RunSpec
from fedbayes.engine.loop import hold_out
from fedbayes.methods import build_method
from fedbayes.methods.core.base import ClientData
from fedbayes.methods.core.base import RunContext
from fedbayes.models import FlatModel, build_model

SGD = {"optimizer": "sgd", "lr": 0.1, "local_epochs": 3}


def problem(sizes=(12, 20, 28), d=5, c=3, seed=0, identical=False):
    g = torch.Generator().manual_seed(seed)
    fm = FlatModel(build_model("mlp", (d,), c, hidden=[4], activation="tanh"))
    if identical:
        x, y = torch.randn(sizes[0], d, generator=g), torch.randint(0, c, (sizes[0],), generator=g)
        data = [ClientData(x.clone(), y.clone()) for _ in sizes]
    else:
        data = [ClientData(torch.randn(n, d, generator=g), torch.randint(0, c, (n,), generator=g)) for n in sizes]
    return fm, data, 0.5 * torch.randn(fm.n_params, generator=g)


def method(name, fm, data, **hp):
    return build_method(name, fm, {**SGD, "batch_size": max(len(d) for d in data), **hp},
                        np.array([len(d) for d in data]))


def run_rounds(m, data, w0, rounds, picked=None):
    server, states = m.init_state(w0)
    trace = []
    for rnd in range(1, rounds + 1):
        down = m.broadcast(server, rnd)
        msgs = {}
        for k in (range(len(data)) if picked is None else picked[rnd - 1]):
            msgs[k], states[k], _ = m.client_update(k, down, states[k], data[k], np.random.default_rng(rnd), rnd)
        server = m.server_update(server, msgs, rnd)
        trace.append((server, [dict(s) for s in states]))
    return trace


def full_batch_sgd(fm, w, data, lr, steps, correction=None):
    w = w.clone()
    for _ in range(steps):
        wr = w.clone().requires_grad_(True)
        g, = torch.autograd.grad(F.cross_entropy(fm(wr, data.x), data.y), wr)
        w = w - lr * (g + (0 if correction is None else correction))
    return w


def test_scaffold_client_step_is_corrected_sgd_and_option_two():
    fm, data, w0 = problem()
    m = method("scaffold", fm, data)
    g = torch.Generator().manual_seed(3)
    c, c_k = torch.randn(fm.n_params, generator=g), torch.randn(fm.n_params, generator=g)
    msg, state, _ = m.client_update(1, {"w": w0, "c": c}, {"c": c_k}, data[1], np.random.default_rng(0), 2)
    y = full_batch_sgd(fm, w0, data[1], 0.1, 3, correction=c - c_k)
    torch.testing.assert_close(msg["dy"], y - w0)
    c_new = c_k - c + (w0 - y) / (3 * 0.1)                       # option II, K = 3 steps of η_l = 0.1
    torch.testing.assert_close(state["c"], c_new)
    torch.testing.assert_close(msg["dc"], c_new - c_k)
    torch.testing.assert_close(m.local_weights(msg, {"w": w0, "c": c}), y)


def test_scaffold_corrections_sum_to_zero_and_vanish_on_identical_clients():
    fm, data, w0 = problem()
    for server, states in run_rounds(method("scaffold", fm, data), data, w0, 4):   # full participation
        cs = torch.stack([s["c"] for s in states])
        torch.testing.assert_close(server["c"], cs.mean(0), atol=1e-6, rtol=1e-5)   # Σ_n (c − c_n) = 0
    fm, data, w0 = problem(identical=True)
    scaffold = run_rounds(method("scaffold", fm, data), data, w0, 4)
    fedavg = run_rounds(method("fedavg", fm, data), data, w0, 4)
    for (s, states), (a, _) in zip(scaffold, fedavg):
        for st in states:   # every client's variate is the server's: zero drift correction
            torch.testing.assert_close(st["c"], s["c"], atol=1e-6, rtol=1e-5)
        torch.testing.assert_close(s["w"], a["w"], atol=1e-6, rtol=1e-5)   # ... and SCAFFOLD is FedAvg


def test_scaffold_partial_participation_scales_the_variate_update():
    fm, data, w0 = problem()
    (server, states), = run_rounds(method("scaffold", fm, data), data, w0, 1, picked=[[0, 2]])
    torch.testing.assert_close(server["c"], (2 / 3) * (states[0]["c"] + states[2]["c"]) / 2)
    assert torch.equal(states[1]["c"], torch.zeros_like(w0))


def test_fednova_normalises_by_local_steps():
    fm, data, w0 = problem(sizes=(8, 16, 40))
    m = method("fednova", fm, data, batch_size=8)     # τ = 3·⌈N_n/8⌉ = 3, 6, 15 steps
    msgs = {k: m.client_update(k, {"w": w0}, {}, data[k], np.random.default_rng(k), 1)[0] for k in range(3)}
    assert [int(msgs[k]["tau"]) for k in range(3)] == [3, 6, 15]
    pi = np.array([8, 16, 40]) / 64
    tau_eff = float(pi @ np.array([3, 6, 15]))
    expected = w0 - tau_eff * sum(float(pi[k]) * msgs[k]["d"] for k in range(3))
    torch.testing.assert_close(m.server_update({"w": w0}, msgs, 1)["w"], expected)
    fm, data, w0 = problem(sizes=(16, 16, 16))          # equal steps: FedNova is FedAvg
    nova = run_rounds(method("fednova", fm, data), data, w0, 3)
    avg = run_rounds(method("fedavg", fm, data), data, w0, 3)
    for (n, _), (a, _) in zip(nova, avg):
        torch.testing.assert_close(n["w"], a["w"], atol=1e-6, rtol=1e-5)


def test_baselines_refuse_adam():
    fm, data, _ = problem()
    for name in ("scaffold", "fednova"):
        with pytest.raises(ValueError, match="sgd"):
            method(name, fm, data, optimizer="adam")
    with pytest.raises(ValueError, match="server_unlabeled"):
        method("fedbe", fm, data)


def test_fedbe_ensemble_pseudo_labels_and_distillation():
    fm, data, w0 = problem()
    m = method("fedbe", fm, data, server_unlabeled=0.2, teacher_samples=4000, var_scale=0.1, server_epochs=0)
    g = torch.Generator().manual_seed(2)
    ws = {k: w0 + torch.randn(fm.n_params, generator=g) for k in range(3)}
    teachers = m.teachers(ws, torch.Generator().manual_seed(0))
    pi = torch.tensor([12, 20, 28.]) / 60
    mean = sum(pi[k] * ws[k] for k in range(3))
    var = sum(pi[k] * (ws[k] - mean).square() for k in range(3))
    assert len(teachers) == 1 + 4000            # the authors' run: mean + samples, no client models
    torch.testing.assert_close(teachers[0], mean)
    samples = torch.stack(teachers[1:])
    paper = method("fedbe", fm, data, server_unlabeled=0.2, teacher_samples=4000, var_scale=0.1, server_epochs=0,
                   teacher_clients=True)        # the FedBE paper's ensemble also holds the client models
    with_clients = paper.teachers(ws, torch.Generator().manual_seed(0))
    assert len(with_clients) == 1 + 4000 + 3 and all(torch.equal(with_clients[-3 + k], ws[k]) for k in range(3))
    teachers = with_clients[:1] + with_clients[-3:] + with_clients[1:-3]
    torch.testing.assert_close(samples.var(0) / (0.1 * var), torch.ones_like(var), atol=0.15, rtol=0)
    x = torch.randn(7, 5, generator=g)
    brute = torch.stack([F.softmax(fm(w, x), -1) for w in teachers[:6]]).mean(0)
    torch.testing.assert_close(m.pseudo_labels(teachers[:6], x, batch=3), brute)
    m.context = RunContext(server_x=x)
    # no distillation epochs: the server keeps the ensemble mean (FedAvg's aggregate)
    out = m.server_update({"w": w0}, {k: {"w": w} for k, w in ws.items()}, 1)
    torch.testing.assert_close(out["w"], mean)
    # distillation moves the student (no temperature) towards the teachers' sharpened mean p̄^(1/T)
    # (hyperparameters are fixed for a method's life: each setting is a method of its own)
    m = method("fedbe", fm, data, server_unlabeled=0.2, teacher_samples=4000, var_scale=0.1, server_epochs=30,
               server_lr=1.0, temperature=0.5, server_weight_decay=0.0)
    p_bar = m.pseudo_labels(teachers[:6], x)
    target = p_bar.square() / p_bar.square().sum(-1, keepdim=True)
    kl = lambda w: float(F.kl_div(F.log_softmax(fm(w, x), -1), target, reduction="batchmean"))  # noqa: E731
    w = m.distil(mean, x, p_bar, torch.Generator().manual_seed(0))
    assert kl(w) < 0.5 * kl(mean)
    # one step is SGD on KL / C (the authors' mean over batch × classes) with weight decay
    m = method("fedbe", fm, data, server_unlabeled=0.2, teacher_samples=4000, var_scale=0.1, server_epochs=1,
               server_batch_size=7, server_lr=0.3, temperature=0.5, server_weight_decay=0.01)
    w1 = m.distil(mean, x, p_bar, torch.Generator().manual_seed(0))
    v = mean.clone().requires_grad_(True)
    (F.kl_div(F.log_softmax(fm(v, x), -1), target, reduction="batchmean") / target.shape[-1]).backward()
    torch.testing.assert_close(w1, mean - 0.3 * (v.grad + 0.01 * mean))


def test_hold_out_takes_a_share_of_every_client():
    parts = [np.arange(0, 30), np.arange(30, 50), np.arange(50, 100), np.array([100])]
    kept, held = hold_out(parts, 0.25, np.random.default_rng(0))
    assert [len(p) for p in kept] == [23, 15, 38, 1]          # N_k − ⌊0.25 N_k⌋: no client is emptied
    assert len(held) == 7 + 5 + 12 and not np.intersect1d(np.concatenate(kept), held).size
    assert set(np.concatenate([*kept, held])) == set(range(101))
    assert all(np.isin(k, p).all() for k, p in zip(kept, parts))
    assert hold_out(parts, 0, np.random.default_rng(0))[0] is parts
    with pytest.raises(ValueError, match="below 1"):
        hold_out(parts, 1.0, np.random.default_rng(0))


@pytest.mark.parametrize("name,hp", [("scaffold", {}), ("fednova", {}),
                                     ("fedbe", {"server_unlabeled": 0.2, "server_epochs": 2, "teacher_samples": 3})])
def test_baselines_learn_through_the_engine_with_local_accuracy(name, hp, synthetic_run_data, cfg_factory, tmp_path):
    cfg = cfg_factory(method=name, rounds=5, local_eval=True,
                      hparams={"optimizer": "sgd", "lr": 0.05, "batch_size": 16, "local_epochs": 2, **hp})
    hist = run_federated(RunSpec.from_config(cfg), synthetic_run_data, tmp_path, torch.device("cpu"), log=lambda *_: None)
    assert hist[-1]["test/acc"] > hist[0]["test/acc"] + 0.1
    assert all(0 <= h["local/acc"] <= 1 for h in hist[1:])
    sizes = __import__("json").loads((tmp_path / "run.json").read_text())["client_sizes"]
    share = hp.get("server_unlabeled", 0)
    assert sizes == [len(p) - int(share * len(p)) for p in synthetic_run_data.parts]


def test_local_accuracy_of_one_client_is_the_global_accuracy(synthetic_run_data, cfg_factory, tmp_path):
    data = synthetic_run_data
    data.parts = [np.concatenate(data.parts)]
    cfg = cfg_factory(method="fedavg", rounds=2, clients=1, local_eval=True)
    hist = run_federated(RunSpec.from_config(cfg), data, tmp_path, torch.device("cpu"), log=lambda *_: None)
    assert [h["local/acc"] for h in hist[1:]] == pytest.approx([h["test/acc"] for h in hist[1:]])
