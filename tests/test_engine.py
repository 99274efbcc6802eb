"""Engine, model and FedAvg: aggregation, determinism, resume after a kill, outputs."""

import json

import numpy as np
import pandas as pd
import pytest
import torch

from fedbayes.study import config_hash
from fedbayes.engine import preprocess, run_federated
from fedbayes.study.model import RunSpec
from fedbayes.engine.loop import CHECKPOINT
from fedbayes.methods import build_method
from fedbayes.methods.core.base import ClientData
from fedbayes.models import FlatModel, build_model

METRIC_COLS = ["test/acc", "test/nll", "test/ece", "test/brier", "ood/auroc_entropy", "train/loss"]


def quiet(_msg):
    pass


def test_flat_model_matches_module():
    torch.manual_seed(0)
    module = build_model("mlp", (28, 28), 10, hidden=[20, 7], activation="sigmoid")
    fm = FlatModel(module)
    assert fm.n_params == 784 * 20 + 20 + 20 * 7 + 7 + 7 * 10 + 10
    w = fm.flat_params()
    x = torch.randn(5, 28, 28)
    assert fm.ops is not None  # the direct path is taken for the MLP …
    torch.testing.assert_close(fm(w, x), module(x))
    # … and is bit-identical to functional_call, forward and backward
    from torch.func import functional_call
    w1, w2 = w.clone().requires_grad_(True), w.clone().requires_grad_(True)
    a, b = fm(w1, x), functional_call(module, fm.unflatten(w2), (x,))
    assert torch.equal(a, b)
    a.square().sum().backward()
    b.square().sum().backward()
    assert torch.equal(w1.grad, w2.grad)
    # gradients reach the flat vector
    w.requires_grad_(True)
    fm(w, x).sum().backward()
    assert w.grad is not None and w.grad.abs().sum() > 0


def test_mlp_paper_size():
    assert FlatModel(build_model("mlp", (28, 28), 10, hidden=[200, 100])).n_params == 178_110


def test_fedavg_aggregation_is_data_weighted_mean():
    fm = FlatModel(build_model("mlp", (4,), 3, hidden=[5]))
    sizes = np.array([10, 30, 60])
    m = build_method("fedavg", fm, {"lr": 1e-3, "batch_size": 4, "local_epochs": 1}, sizes)
    server, _ = m.init_state(fm.flat_params())
    g = torch.Generator().manual_seed(0)
    msgs = {k: {"w": torch.randn(fm.n_params, generator=g)} for k in range(3)}
    new = m.server_update(server, msgs, rnd=1)
    brute = sum(sizes[k] / sizes.sum() * msgs[k]["w"] for k in range(3))
    torch.testing.assert_close(new["w"], brute)
    # partial participation renormalises over the participants
    part = m.server_update(server, {0: msgs[0], 2: msgs[2]}, rnd=1)
    torch.testing.assert_close(part["w"], (10 * msgs[0]["w"] + 60 * msgs[2]["w"]) / 70)


def test_local_training_lowers_the_loss(synthetic_run_data):
    d = synthetic_run_data
    torch.manual_seed(0)
    fm = FlatModel(build_model("mlp", (28, 28), 10, hidden=[32], activation="relu"))
    m = build_method("fedavg", fm, {"lr": 3e-3, "batch_size": 32, "local_epochs": 5}, np.array([400]))
    data = ClientData(d.x_train[:400], d.y_train[:400])
    w0 = fm.flat_params()
    before = torch.nn.functional.cross_entropy(fm(w0, data.x), data.y).item()
    res = m.local_train(w0, data, np.random.default_rng(0))
    after = torch.nn.functional.cross_entropy(fm(res.w, data.x), data.y).item()
    assert res.steps == 5 * 13
    assert after < 0.5 * before


def test_preprocess_scales():
    x = np.array([[0, 255]], dtype=np.uint8)
    assert preprocess(x, "raw").tolist() == [[0.0, 255.0]]
    assert preprocess(x, "unit").tolist() == [[0.0, 1.0]]
    torch.testing.assert_close(preprocess(x, "standardize", (0.5, 0.5)), torch.tensor([[-1.0, 1.0]]))
    with pytest.raises(ValueError, match="input_scale"):
        preprocess(x, "bogus")


def test_run_writes_outputs_and_learns(tmp_path, synthetic_run_data, cfg_factory):
    cfg = cfg_factory()
    hist = run_federated(RunSpec.from_config(cfg), synthetic_run_data, tmp_path, torch.device("cpu"), log=quiet)
    df = pd.read_csv(tmp_path / "history.csv")
    assert list(df["round"]) == [0, 1, 2, 3, 4] and len(hist) == 5
    assert df["test/acc"].iloc[-1] > 0.5 > df["test/acc"].iloc[0]
    assert (df["bytes_up"].iloc[1:] == 4 * 4 * FlatModel(build_model("mlp", (28, 28), 10, hidden=[32, 16])).n_params).all()
    pred = np.load(tmp_path / "predictions.npz")
    assert pred["rounds"].tolist() == [0, 1, 2, 3, 4]   # every evaluated round (keep_predictions: every_round)
    assert pred["test_logp"].shape == (5, 200, 10)
    np.testing.assert_allclose(np.exp(pred["test_logp"]).sum(-1), 1.0, atol=1e-5)
    info = json.loads((tmp_path / "run.json").read_text())
    assert info["client_sizes"] == [len(p) for p in synthetic_run_data.parts]
    assert info["config"] == cfg and info["config_hash"] == config_hash(cfg)
    assert not (tmp_path / CHECKPOINT).exists()


def test_same_seed_same_numbers_other_seed_differs(tmp_path, synthetic_run_data, cfg_factory):
    a = run_federated(RunSpec.from_config(cfg_factory()), synthetic_run_data, tmp_path / "a", torch.device("cpu"), log=quiet)
    b = run_federated(RunSpec.from_config(cfg_factory()), synthetic_run_data, tmp_path / "b", torch.device("cpu"), log=quiet)
    c = run_federated(RunSpec.from_config(cfg_factory(seed=4)),
                      synthetic_run_data, tmp_path / "c", torch.device("cpu"), log=quiet)
    pick = lambda h: [[r[k] for k in METRIC_COLS if k in r] for r in h]  # noqa: E731
    assert pick(a) == pick(b)
    assert pick(a) != pick(c)


@pytest.mark.parametrize("client_optimizer", ["fresh", "persistent"])
def test_resume_after_kill_gives_same_history(tmp_path, synthetic_run_data, cfg_factory, client_optimizer):
    """A killed run resumes to the uninterrupted run's numbers, also with each client's Adam state
    carried across rounds (it lives in the checkpoint's client states)."""
    cfg = cfg_factory(hparams={**cfg_factory()["hparams"], "client_optimizer": client_optimizer})
    full = run_federated(RunSpec.from_config(cfg), synthetic_run_data, tmp_path / "full", torch.device("cpu"), log=quiet)
    out = tmp_path / "killed"
    run_federated(RunSpec.from_config(cfg), synthetic_run_data, out, torch.device("cpu"), log=quiet, stop_after=2)
    assert (out / CHECKPOINT).exists() and not (out / "history.csv").exists()
    if client_optimizer == "persistent":
        ckpt = torch.load(out / CHECKPOINT, weights_only=True)
        assert all(int(c["opt/t"]) == 2 * -(-len(p) // 32) for c, p in zip(ckpt["clients"], synthetic_run_data.parts))
    logs = []
    resumed = run_federated(RunSpec.from_config(cfg), synthetic_run_data, out, torch.device("cpu"), log=logs.append)
    assert any("resuming from round 2" in m for m in logs)
    assert not any("round   1/" in m for m in logs)  # rounds 1-2 were not recomputed
    a = pd.read_csv(tmp_path / "full" / "history.csv")[["round"] + METRIC_COLS]
    b = pd.read_csv(out / "history.csv")[["round"] + METRIC_COLS]
    pd.testing.assert_frame_equal(a, b)
    np.testing.assert_array_equal(np.load(tmp_path / "full" / "predictions.npz")["test_logp"],
                                  np.load(out / "predictions.npz")["test_logp"])
    assert len(resumed) == len(full)


def test_a_kill_while_a_rounds_predictions_were_written_leaves_a_run_that_resumes(tmp_path, synthetic_run_data, cfg_factory):
    """A SIGKILL while a round's predictions were being written leaves their temporary file
    (``00003.<pid>.tmp.npz``) beside the kept rounds: the resumed run failed at its end on that name
    (ValueError: invalid literal for int(), seen in CI's kill test). It is now not a round: the run resumes
    to the uninterrupted run's numbers and leaves no such file."""
    from fedbayes.engine.loop import ROUNDS_DIR

    cfg = cfg_factory()
    run_federated(RunSpec.from_config(cfg), synthetic_run_data, tmp_path / "full", torch.device("cpu"), log=quiet)
    out = tmp_path / "killed"
    run_federated(RunSpec.from_config(cfg), synthetic_run_data, out, torch.device("cpu"), log=quiet, stop_after=2)
    (out / ROUNDS_DIR / "00003.4242.tmp.npz").write_bytes(b"PK\x03\x04 cut short")
    run_federated(RunSpec.from_config(cfg), synthetic_run_data, out, torch.device("cpu"), log=quiet)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "full" / "history.csv")[["round"] + METRIC_COLS],
                                  pd.read_csv(out / "history.csv")[["round"] + METRIC_COLS])
    np.testing.assert_array_equal(np.load(tmp_path / "full" / "predictions.npz")["test_logp"],
                                  np.load(out / "predictions.npz")["test_logp"])
    assert not (out / ROUNDS_DIR).exists()


def test_checkpoint_of_other_config_is_ignored(tmp_path, synthetic_run_data, cfg_factory):
    run_federated(RunSpec.from_config(cfg_factory()), synthetic_run_data, tmp_path, torch.device("cpu"), log=quiet, stop_after=2)
    logs = []
    run_federated(RunSpec.from_config(cfg_factory(hparams={**cfg_factory()["hparams"], "lr": 0.01})),
                  synthetic_run_data, tmp_path,
                  torch.device("cpu"), log=logs.append)
    assert any("another configuration" in m and "set aside" in m for m in logs)
    assert pd.read_csv(tmp_path / "history.csv")["round"].tolist() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("damage", ["other code", "truncated", "garbage"])
def test_checkpoint_not_written_by_this_code_is_set_aside(tmp_path, synthetic_run_data, cfg_factory, monkeypatch, damage):
    """A checkpoint is resumed only by the code (sources, torch, numpy) that wrote it: one written by
    other code, or damaged, is set aside with one line saying why and the run restarts from round 0,
    giving the uninterrupted run's numbers (never a mix of two versions, never a traceback)."""
    import fedbayes.engine.loop as loop

    full = run_federated(RunSpec.from_config(cfg_factory()),
                         synthetic_run_data, tmp_path / "full", torch.device("cpu"), log=quiet)
    out = tmp_path / "run"
    if damage == "other code":
        monkeypatch.setattr(loop, "resume_key", lambda method=None: "0123456789abcdef/torch 0.0/numpy 0.0")
    run_federated(RunSpec.from_config(cfg_factory()), synthetic_run_data, out, torch.device("cpu"), log=quiet, stop_after=2)
    monkeypatch.undo()
    ckpt = out / CHECKPOINT
    if damage == "truncated":
        ckpt.write_bytes(ckpt.read_bytes()[:100])
    elif damage == "garbage":
        ckpt.write_bytes(b"not a checkpoint" * 10)
    logs = []
    resumed = run_federated(RunSpec.from_config(cfg_factory()), synthetic_run_data, out, torch.device("cpu"), log=logs.append)
    said = [m for m in logs if "set aside" in m]
    assert len(said) == 1 and str(ckpt) in said[0], logs
    assert ("other code" in said[0]) if damage == "other code" else ("unreadable" in said[0])
    assert not any("resuming" in m for m in logs) and (out / (CHECKPOINT + ".set-aside")).exists()
    assert [[r[k] for k in METRIC_COLS if k in r] for r in resumed] == [[r[k] for k in METRIC_COLS if k in r] for r in full]


def test_run_json_records_code_identity_and_numerics(tmp_path, synthetic_run_data, cfg_factory):
    from fedbayes.study import numerics
    from fedbayes.provenance import code_identity

    run_federated(RunSpec.from_config(cfg_factory()), synthetic_run_data, tmp_path, torch.device("cpu"), log=quiet)
    info = json.loads((tmp_path / "run.json").read_text())
    assert info["numerics"] == numerics("fedavg")
    # the defaults it read from its spec (weight_decay 0.0, mc_round0 ...), none of what its config sets
    assert info["defaults"]["weight_decay"] == 0.0 and not set(info["defaults"]) & set(info["config"]["hparams"])
    assert info["code"] == code_identity() and len(info["code"]["source"]) == 16
    assert info["code"]["torch"] == torch.__version__.split("+")[0] or info["code"]["torch"] == torch.__version__


def test_partial_participation_samples_clients(tmp_path, synthetic_run_data, cfg_factory):
    hist = run_federated(RunSpec.from_config(cfg_factory(participation=0.5)),
                         synthetic_run_data, tmp_path, torch.device("cpu"), log=quiet)
    assert [r["clients"] for r in hist[1:]] == [2, 2, 2, 2]


def test_diverging_run_stops_and_is_recorded(tmp_path, synthetic_run_data, cfg_factory):
    cfg = cfg_factory(hparams={"optimizer": "sgd", "lr": 1e8, "batch_size": 32, "local_epochs": 1})
    logs = []
    hist = run_federated(RunSpec.from_config(cfg), synthetic_run_data, tmp_path, torch.device("cpu"), log=logs.append)
    info = json.loads((tmp_path / "run.json").read_text())
    r = info["diverged"]["round"]
    assert 1 <= r <= 4 and info["diverged"]["reason"].startswith("non-finite")
    assert [row["round"] for row in hist] == list(range(r + 1)) and any("DIVERGED" in m for m in logs)
    df = pd.read_csv(tmp_path / "history.csv")
    assert df["test/acc"].iloc[:r].notna().all() and np.isnan(df["test/acc"].iloc[r])
    pred = np.load(tmp_path / "predictions.npz")
    assert all(s < r for s in pred["rounds"])  # only predictions of rounds before the divergence
    assert not (tmp_path / CHECKPOINT).exists()


def test_replayed_client_stream_makes_identical_clients_agree(tmp_path, synthetic_run_data, cfg_factory):
    """``client_stream: replay`` (the BayesADMM authors' reseeding): every client in every round draws the
    same minibatch order, so 4 clients holding the same data return the same model and FedAvg's average
    equals one client's; with independent streams (the default) they differ."""
    from dataclasses import replace

    same = replace(synthetic_run_data, parts=[synthetic_run_data.parts[0]] * 4)
    one = replace(synthetic_run_data, parts=[synthetic_run_data.parts[0]])
    post = {}
    for name, data, stream in [("four", same, "replay"), ("one", one, "replay"), ("indep", same, "independent")]:
        hp = {**cfg_factory()["hparams"], "client_stream": stream}
        cfg = cfg_factory(rounds=2, save_rounds=[2], clients=len(data.parts), hparams=hp)
        run_federated(RunSpec.from_config(cfg), data, tmp_path / name, torch.device("cpu"), log=quiet)
        post[name] = torch.load(tmp_path / name / "posterior.pt")
    for k in post["one"]:
        torch.testing.assert_close(post["four"][k], post["one"][k], rtol=1e-5, atol=1e-6)
    assert any((post["indep"][k] - post["one"][k]).abs().max() > 1e-4 for k in post["one"])


def test_sampled_predictive_only_at_the_last_round_when_mc_window_is_off(tmp_path, synthetic_run_data, cfg_factory):
    """``mc_window: false``: the sampled predictive at the last round only (NaN in predictions.npz at the
    window's other rounds, left out of metrics.json), the point prediction at every saved round."""
    from fedbayes.eval.evaluate import evaluate_run

    hp = {"lr": 0.1, "lr_final": 0.01, "batch_size": 32, "local_epochs": 1, "ess": 400, "h0": 1.0, "delta": 1e-3,
          "pred_samples": 3, "mc_every": 100, "mc_round0": False, "mc_window": False}
    cfg = cfg_factory(method="fedivon", hparams=hp)
    run_federated(RunSpec.from_config(cfg), synthetic_run_data, tmp_path, torch.device("cpu"), log=quiet)
    hist = pd.read_csv(tmp_path / "history.csv").set_index("round")
    assert hist["test/acc"].notna().tolist() == [False, False, False, False, True]
    assert hist["mean/test/acc"].notna().all()  # eval_every 1
    pred = np.load(tmp_path / "predictions.npz")
    assert pred["rounds"].tolist() == [0, 1, 2, 3, 4]
    assert np.isnan(pred["test_logp"][:4]).all() and np.isfinite(pred["test_logp"][4]).all()
    assert np.isfinite(pred["test_logp@mean"]).all()
    m = evaluate_run(tmp_path)
    assert list(m["rounds"]) == ["4"] and list(m["variants"]["mean"]["rounds"]) == ["0", "1", "2", "3", "4"]
    assert m["final"]["test/acc"] == hist.loc[4, "test/acc"]


@pytest.mark.parametrize("name,momentum", [("adam", 0.0), ("sgd", 0.0), ("sgd", 0.9)])
def test_flat_optimisers_match_torch_optim_bit_for_bit(name, momentum):
    """FlatAdam / FlatSGD against torch.optim.Adam(fused=True) / torch.optim.SGD: identical iterates
    (torch.equal) over 25 steps with a changing learning rate, so runs made with either agree exactly."""
    from fedbayes.methods.core.local import FlatSGD, make_optimizer

    gen = torch.Generator().manual_seed(0)
    target = torch.randn(1000, generator=gen)
    w0 = torch.randn(1000, generator=gen)
    ours_w, ref_w = w0.clone().requires_grad_(True), w0.clone().requires_grad_(True)
    ours = make_optimizer(name, [ours_w], 0.01) if not momentum else FlatSGD(ours_w, 0.01, momentum=momentum)
    ref = (torch.optim.Adam([ref_w], lr=0.01, fused=True) if name == "adam"
           else torch.optim.SGD([ref_w], lr=0.01, momentum=momentum))
    for step in range(25):
        lr = 0.01 * (1 - step / 50)
        ours.lr = lr
        ref.param_groups[0]["lr"] = lr
        for w, opt in ((ours_w, ours), (ref_w, ref)):
            opt.zero_grad(set_to_none=True)
            ((w - target).pow(2) * torch.linspace(0.1, 3, 1000)).sum().backward()
            opt.step()
        assert torch.equal(ours_w, ref_w), f"step {step}: max |Δ| {(ours_w - ref_w).abs().max():.3g}"
    assert (ours_w - w0).abs().max() > 1e-3  # it moved


def test_persistent_client_adam_equals_one_torch_adam_per_client(tmp_path, synthetic_run_data, cfg_factory):
    """``client_optimizer: persistent``: a 2-client FedAvg run equals a hand-written loop that builds one
    torch.optim.Adam per client once and, every round, only overwrites its weights with w_g (the FedLap /
    BayesADMM authors' code); ``fresh`` (a new Adam every round) gives other weights."""
    from dataclasses import replace

    from fedbayes.engine import seeds
    from fedbayes.methods.core.base import weighted_mean

    data = replace(synthetic_run_data, parts=synthetic_run_data.parts[:2])
    rounds, seed, lr, bs = 3, 3, 0.003, 32
    post = {}
    for mode in ("persistent", "fresh"):
        hp = {"optimizer": "adam", "lr": lr, "batch_size": bs, "local_epochs": 2, "client_optimizer": mode}
        cfg = cfg_factory(clients=2, rounds=rounds, save_rounds=[rounds], hparams=hp)
        run_federated(RunSpec.from_config(cfg), data, tmp_path / mode, torch.device("cpu"), log=quiet)
        post[mode] = torch.load(tmp_path / mode / "posterior.pt")["w"]

    torch.manual_seed(seeds.torch_seed(seed, seeds.INIT))
    fm = FlatModel(build_model("mlp", (28, 28), 10, hidden=[32, 16], activation="relu"))
    w_g = fm.flat_params().detach().clone()
    clients = [(data.x_train[torch.from_numpy(p)], data.y_train[torch.from_numpy(p)]) for p in data.parts]
    weights = [torch.zeros_like(w_g, requires_grad=True) for _ in clients]
    adams = [torch.optim.Adam([w], lr=lr, fused=True) for w in weights]   # built once per client
    for rnd in range(1, rounds + 1):
        new = {}
        for k, ((x, y), w, adam) in enumerate(zip(clients, weights, adams)):
            with torch.no_grad():
                w.copy_(w_g)                                               # only the weights are reset
            rng = seeds.rng(seed, seeds.TRAIN, rnd, k)
            for _ in range(2):
                perm = torch.from_numpy(rng.permutation(len(y)))
                for start in range(0, len(y), bs):
                    idx = perm[start:start + bs]
                    adam.zero_grad(set_to_none=True)
                    torch.nn.functional.cross_entropy(fm(w, x[idx]), y[idx]).backward()
                    adam.step()
            new[k] = w.detach().clone()
        w_g = weighted_mean(new, np.array([len(p) for p in data.parts], dtype=float))
    assert torch.equal(post["persistent"], w_g)
    assert not torch.allclose(post["fresh"], w_g, atol=1e-5)


def test_client_rows_by_label_aligns_the_replayed_clients_label_mix(tmp_path, synthetic_run_data, cfg_factory, monkeypatch):
    """``client_rows: by_label`` groups each client's rows by class (stably); with ``client_stream:
    replay`` every client's minibatch t then holds the labels at the same sorted positions (the
    BayesADMM authors' iid layout). The default keeps the partition's order."""
    from fedbayes.methods.fedavg import algorithm as fedavg_mod

    seen = {}
    real = fedavg_mod.FedAvg.client_update

    def spy(self, k, down, state, data, rng, rnd):
        seen.setdefault(k, data.y.clone())
        return real(self, k, down, state, data, rng, rnd)

    monkeypatch.setattr(fedavg_mod.FedAvg, "client_update", spy)
    for rows in ("partition", "by_label"):
        seen.clear()
        hp = {**cfg_factory()["hparams"], "client_rows": rows, "client_stream": "replay"}
        run_federated(RunSpec.from_config(cfg_factory(rounds=1, save_rounds=[1], hparams=hp)),
                      synthetic_run_data, tmp_path / rows,
                      torch.device("cpu"), log=quiet)
        for k, p in enumerate(synthetic_run_data.parts):
            y = synthetic_run_data.y_train[torch.from_numpy(p)]
            want = torch.sort(y, stable=True).values if rows == "by_label" else y
            assert torch.equal(seen[k], want)


def test_run_json_records_training_start_and_end_and_a_resumed_run_keeps_its_start(tmp_path, synthetic_run_data,
                                                                                   cfg_factory):
    """MLflow's start/end times come from here (a run's true times, not the import's); times are not numerics, the rerun key
    (config + numerics) ignores them."""
    from datetime import datetime, timezone

    before = datetime.now(timezone.utc)
    run_federated(RunSpec.from_config(cfg_factory()), synthetic_run_data, tmp_path / "a", torch.device("cpu"), log=quiet)
    after = datetime.now(timezone.utc)
    info = json.loads((tmp_path / "a" / "run.json").read_text())
    started, finished = datetime.fromisoformat(info["started"]), datetime.fromisoformat(info["finished"])
    assert started.tzinfo is not None and before <= started <= finished <= after
    # a killed and resumed run: the start is the first process's, the end the last one's
    run_federated(RunSpec.from_config(cfg_factory()),
                  synthetic_run_data, tmp_path / "b", torch.device("cpu"), log=quiet, stop_after=2)
    middle = datetime.now(timezone.utc)
    run_federated(RunSpec.from_config(cfg_factory()), synthetic_run_data, tmp_path / "b", torch.device("cpu"), log=quiet)
    info = json.loads((tmp_path / "b" / "run.json").read_text())
    assert datetime.fromisoformat(info["started"]) < middle < datetime.fromisoformat(info["finished"])


@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e3, float("nan"), float("inf")])
def test_clip_grad_is_clip_grad_norm_bit_for_bit(scale):
    """The local loops' ``clip_grad_`` skips clip_grad_norm_'s multiplication by a coefficient of exactly
    1: the same gradient bits whether the norm is within the bound or not (NaN and inf included)."""
    from fedbayes.methods.core.local import clip_grad_

    g = torch.randn(10_000, generator=torch.Generator().manual_seed(0)) * scale
    g[3] = scale
    ours, ref = g.clone(), torch.zeros(10_000, requires_grad=True)
    ref.grad = g.clone()
    clip_grad_(ours, 10.0)
    torch.nn.utils.clip_grad_norm_([ref], 10.0)
    assert torch.equal(ours.nan_to_num(7.0), ref.grad.nan_to_num(7.0))


def test_the_resume_key_covers_the_compiled_kernels_source(tmp_path, monkeypatch):
    """An edit of kernels.cpp (the C++ that computes IVON's noise and update) resumed a checkpoint onto
    other code: the source hash read only .py and .yaml files."""
    from fedbayes import provenance

    pkg = tmp_path / "fedbayes"
    (pkg / "methods").mkdir(parents=True)
    (pkg / "a.py").write_text("x = 1\n")
    (pkg / "methods/kernels.cpp").write_text("int f() { return 1; }\n")
    monkeypatch.setattr(provenance, "PACKAGE", pkg)
    provenance.source_hash.cache_clear()
    before = provenance.source_hash()
    (pkg / "methods/kernels.cpp").write_text("int f() { return 2; }\n")
    provenance.source_hash.cache_clear()
    try:
        assert provenance.source_hash() != before
    finally:
        provenance.source_hash.cache_clear()


def test_code_identity_says_when_the_package_sources_differ_from_the_commit(tmp_path):
    """run.json ``code.dirty`` (MLflow tag ``git_dirty``, tests/test_tracking.py) is true for a run trained
    from a tree whose package sources differ from its commit — an edited file or a new one — and false
    for a clean one; a change outside the package (params.yaml, docs) decides no number and leaves it
    clean. In a git checkout of its own, so the test does not depend on this worktree's state."""
    import os
    import shutil
    import subprocess
    import sys

    from fedbayes.provenance import PACKAGE

    root = tmp_path / "clone"
    shutil.copytree(PACKAGE, root / "src" / "fedbayes", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    (root / "params.yaml").write_text("seeds: [0]\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    for cmd in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "clean"]):
        subprocess.run(git + cmd, cwd=root, check=True, capture_output=True)

    def identity() -> dict:
        out = subprocess.run([sys.executable, "-c", "import json; from fedbayes.provenance import code_identity; "
                              "print(json.dumps(code_identity()))"], cwd=root, capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": str(root / "src")})
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.strip().splitlines()[-1])

    clean = identity()
    assert clean["commit"] and clean["dirty"] is False
    (root / "params.yaml").write_text("seeds: [0, 1]\n")
    assert identity()["dirty"] is False
    loop_py = root / "src/fedbayes/engine/loop.py"
    loop_py.write_text(loop_py.read_text() + "\n# modified\n")
    edited = identity()
    assert edited["dirty"] is True and edited["commit"] == clean["commit"] and edited["source"] != clean["source"]
    subprocess.run(["git", "checkout", "--", "src"], cwd=root, check=True)
    (root / "src/fedbayes/methods/extra.py").write_text("X = 1\n")
    assert identity()["dirty"] is True


def test_a_blown_up_model_with_finite_weights_is_recorded_as_diverged(tmp_path, synthetic_run_data, cfg_factory,
                                                                      monkeypatch):
    """A model that blows up without a non-finite weight (FedProx at lr 1e8 at smoke scale: losses near 1e30)
    gave logits past float range and NaN log-probabilities, and the training job crashed ("logp contains
    NaN"). Its first such round is now recorded as diverged, like a non-finite loss."""
    from fedbayes.methods import method_specs

    cls = method_specs()["fedavg"].load()
    plain = cls.server_update
    monkeypatch.setattr(cls, "server_update", lambda self, server, messages, rnd: (
        lambda out: {**out, "w": out["w"] * 1e30} if rnd == 2 else out)(plain(self, server, messages, rnd)))
    logs = []
    hist = run_federated(RunSpec.from_config(cfg_factory()), synthetic_run_data, tmp_path, torch.device("cpu"), log=logs.append)
    info = json.loads((tmp_path / "run.json").read_text())
    assert info["diverged"] == {"round": 2, "reason": "non-finite predictions (test log-probabilities are NaN)"}
    assert [row["round"] for row in hist] == [0, 1, 2] and any("DIVERGED" in m for m in logs)
    assert list(np.load(tmp_path / "predictions.npz")["rounds"]) == [0, 1]   # every evaluated round before it
    from fedbayes.eval.evaluate import evaluate_run

    evaluate_run(tmp_path)   # the saved rounds evaluate
