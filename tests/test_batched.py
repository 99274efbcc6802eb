"""Clients trained together (``batch_clients``): the same minibatches and, up to float round-off, the same
numbers as training them one by one. Every test runs twice: with the loop that leaves finished clients
out (``subset``, the CPU's) and with the recordable step a GPU captures as a CUDA graph (``static``, run
eagerly here: ``methods.core.graphs``)."""

import json

import numpy as np
import pytest
import torch

from fedbayes.engine import run_federated
from fedbayes.study.model import RunSpec
from fedbayes.methods.core.local import minibatch_plan, minibatches

CPU = torch.device("cpu")


@pytest.fixture(autouse=True, params=["subset", "static"])
def loop_mode(request, monkeypatch):
    monkeypatch.setenv("FEDBAYES_CUDA_GRAPHS", "static" if request.param == "static" else "1")
    return request.param


@pytest.mark.parametrize("n,bs,epochs", [(100, 32, 3), (64, 32, 2), (5, 32, 1), (33, 8, 4)])
def test_minibatch_plan_is_minibatches_order(n, bs, epochs):
    plan = minibatch_plan(n, bs, epochs, np.random.default_rng(7))
    rng = np.random.default_rng(7)
    expected = [b.numpy() for _ in range(epochs) for b in minibatches(n, bs, rng)]
    assert len(plan) == len(expected)
    for row, batch in zip(plan, expected):
        assert np.array_equal(row[:len(batch)], batch) and (row[len(batch):] == -1).all()


@pytest.mark.parametrize("client_optimizer", ["fresh", "persistent"])
def test_batched_run_matches_sequential(tmp_path, synthetic_run_data, cfg_factory, client_optimizer):
    """Unequal clients (Dirichlet sizes: the shorter ones stop early inside the batched loop), two local
    epochs, four rounds: the histories agree to float tolerance and the batched run says it batched."""
    hp = {"optimizer": "adam", "lr": 0.003, "batch_size": 16, "local_epochs": 2, "client_optimizer": client_optimizer}
    cfg = cfg_factory(hparams=hp)
    assert len({len(p) for p in synthetic_run_data.parts}) > 1          # the clients' step counts differ
    seq = run_federated(RunSpec.from_config(cfg),
                        synthetic_run_data, tmp_path / "seq", CPU, log=lambda m: None, batch_clients=False)
    bat = run_federated(RunSpec.from_config(cfg),
                        synthetic_run_data, tmp_path / "bat", CPU, log=lambda m: None, batch_clients=True)
    for a, b in zip(seq, bat):
        for key in ("test/acc", "test/nll", "train/loss"):
            if key in a:
                assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-4), (a["round"], key)
    ws = [torch.load(tmp_path / r / "posterior.pt")["w"] for r in ("seq", "bat")]
    assert torch.allclose(ws[0], ws[1], rtol=1e-4, atol=1e-4)       # round-off grows through Adam: 6e-7 after a round, 2e-5 after four
    assert json.loads((tmp_path / "bat" / "run.json").read_text())["batched_rounds"] == cfg["rounds"]
    assert "batched_rounds" not in json.loads((tmp_path / "seq" / "run.json").read_text())


def test_fedprox_batches_its_proximal_term(tmp_path, synthetic_run_data, cfg_factory):
    """FedProx's squared proximal gradient α (W − w_g) applied to the stacked clients: the sequential run's
    numbers up to round-off, every round batched."""
    cfg = cfg_factory(method="fedprox", rounds=3, save_rounds=[3],
                      hparams={**cfg_factory()["hparams"], "alpha": 0.5, "local_epochs": 2})
    seq = run_federated(RunSpec.from_config(cfg),
                        synthetic_run_data, tmp_path / "seq", CPU, log=lambda m: None, batch_clients=False)
    bat = run_federated(RunSpec.from_config(cfg),
                        synthetic_run_data, tmp_path / "bat", CPU, log=lambda m: None, batch_clients=True)
    for a, b in zip(seq, bat):
        assert b["test/nll"] == pytest.approx(a["test/nll"], rel=1e-4, abs=1e-4)
    ws = [torch.load(tmp_path / r / "posterior.pt")["w"] for r in ("seq", "bat")]
    assert torch.allclose(ws[0], ws[1], rtol=1e-4, atol=1e-4)
    assert json.loads((tmp_path / "bat" / "run.json").read_text())["batched_rounds"] == 3


def test_a_term_without_a_batched_form_trains_one_by_one(tmp_path, synthetic_run_data, cfg_factory):
    """FedProx with the unsquared norm (a norm per client): the batched switch leaves it to the sequential
    loop, bit for bit."""
    cfg = cfg_factory(method="fedprox", rounds=2, save_rounds=[2],
                      hparams={**cfg_factory()["hparams"], "alpha": 0.1, "prox_norm": "unsquared"})
    a = run_federated(RunSpec.from_config(cfg), synthetic_run_data, tmp_path / "a", CPU, log=lambda m: None, batch_clients=True)
    b = run_federated(RunSpec.from_config(cfg), synthetic_run_data, tmp_path / "b", CPU, log=lambda m: None, batch_clients=False)
    assert [r.get("test/acc") for r in a] == [r.get("test/acc") for r in b]
    assert "batched_rounds" not in json.loads((tmp_path / "a" / "run.json").read_text())


def test_unbatchable_hyperparameters_fall_back(tmp_path, synthetic_run_data, cfg_factory):
    """A learning-rate schedule over each client's own steps (no batched loop for it): the batched switch
    trains one by one, bit for bit the sequential run."""
    cfg = cfg_factory(rounds=2, save_rounds=[2], hparams={**cfg_factory()["hparams"], "lr_schedule": "linear_local",
                                                          "lr_final": 0.0001})
    a = run_federated(RunSpec.from_config(cfg), synthetic_run_data, tmp_path / "a", CPU, log=lambda m: None, batch_clients=True)
    b = run_federated(RunSpec.from_config(cfg), synthetic_run_data, tmp_path / "b", CPU, log=lambda m: None, batch_clients=False)
    assert [r.get("test/nll") for r in a] == [r.get("test/nll") for r in b]


def assert_batched_is_sequential(cfg, data, tmp_path, *, nll_tol: float, state_tol: float, batched_rounds: int):
    """Train ``cfg`` one by one and together: every round's test NLL within ``nll_tol`` (relative and
    absolute), every floating tensor of the final server state within ``state_tol`` of its largest
    magnitude (at least 1), and ``batched_rounds`` rounds recorded as batched."""
    seq = run_federated(RunSpec.from_config(cfg), data, tmp_path / "seq", CPU, log=lambda m: None, batch_clients=False)
    bat = run_federated(RunSpec.from_config(cfg), data, tmp_path / "bat", CPU, log=lambda m: None, batch_clients=True)
    for a, b in zip(seq, bat):
        assert b["test/nll"] == pytest.approx(a["test/nll"], rel=nll_tol, abs=nll_tol), a["round"]
    post = [torch.load(tmp_path / r / "posterior.pt") for r in ("seq", "bat")]
    for key, v in post[0].items():
        if torch.is_tensor(v) and v.is_floating_point():
            scale = max(float(v.abs().max()), 1.0)
            assert float((v - post[1][key]).abs().max()) <= state_tol * scale, (key, float((v - post[1][key]).abs().max()) / scale)
    assert json.loads((tmp_path / "bat" / "run.json").read_text())["batched_rounds"] == batched_rounds


IVON_METHODS = [
    # BayesADMM: persistent duals, momentum and step counts; per-client λ and δ; the authors' round-1 start
    ("bayesadmm", {"lr": 0.1, "local_epochs": 2, "rho": 0.5, "tau": 0.01, "delta": 1.0, "dual_damping": 1.0,
                   "h0": 1.0, "beta2": 0.999, "pred_samples": 4}),
    ("bayesadmm", {"lr": 0.1, "local_epochs": 2, "rho": 0.5, "tau": 0.01, "delta": 1.0, "dual_damping": 1.0,
                   "h0": 1.0, "beta2": 0.999, "pred_samples": 4, "ivon_reset": "paper", "lr_schedule": "cosine_rounds",
                   "clip_radius": 0.5}),
    ("bayesadmm", {"lr": 0.1, "local_epochs": 2, "rho": 0.5, "tau": 0.01, "delta": 1.0, "dual_damping": 1.0,
                   "h0": 1.0, "beta2": 0.999, "pred_samples": 4, "client_stream": "replay"}),
    # FedIVON: a rate decaying over each client's own number of steps, fresh clients, partial participation
    ("fedivon", {"lr": 0.1, "lr_final": 0.01, "local_epochs": 2, "lr_schedule": "linear_local", "ess": 20000.0,
                 "delta": 1e-4, "h0": 1.0, "beta2": 0.999, "pred_samples": 4}),
]


@pytest.mark.parametrize("name,extra", IVON_METHODS, ids=["bayesadmm", "bayesadmm-paper-clip", "bayesadmm-replay",
                                                           "fedivon"])
def test_ivon_methods_batch_to_the_sequential_numbers(name, extra, tmp_path, synthetic_run_data, cfg_factory):
    """IVON's clients trained together (``ivon.ivon_train_batched``): each client's noise from its own
    generator seeded as the sequential loop seeds torch's, its own minibatch order, rate and step count —
    so four rounds over unequal clients (the shorter ones stop early) give the sequential run's
    posterior and metrics up to float round-off, every round batched."""
    hp = {"optimizer": "adam", "lr": 0.003, "batch_size": 16, "local_epochs": 1, **extra}
    over = {"participation": 0.5} if name == "fedivon" else {}
    cfg = cfg_factory(method=name, hparams=hp, **over)
    assert len({len(p) for p in synthetic_run_data.parts}) > 1
    seq = run_federated(RunSpec.from_config(cfg),
                        synthetic_run_data, tmp_path / "seq", CPU, log=lambda m: None, batch_clients=False)
    bat = run_federated(RunSpec.from_config(cfg),
                        synthetic_run_data, tmp_path / "bat", CPU, log=lambda m: None, batch_clients=True)
    for a, b in zip(seq, bat):
        for key in ("test/acc", "test/nll", "train/loss", "mean/test/nll"):
            if key in a:
                assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-4), (a["round"], key)
    post = [torch.load(tmp_path / r / "posterior.pt") for r in ("seq", "bat")]
    for key in post[0]:
        if torch.is_tensor(post[0][key]) and post[0][key].is_floating_point():
            a, b = post[0][key], post[1][key]
            # torch.allclose's measure at rtol 2e-3, atol 2e-4: four rounds of IVON's noisy steps amplify round-off
            # machine by machine (BayesADMM's replayed stream on an Intel Xeon with AVX2: its weights 8.4× and its
            # precisions 10× the old rtol 1e-4 / atol 1e-5; within those on AMD); a client given another's noise or
            # minibatches is off by O(1)
            worst = float(((a - b).abs() / (2e-4 + 2e-3 * b.abs())).max())
            assert worst <= 1, (key, worst)
    assert json.loads((tmp_path / "bat" / "run.json").read_text())["batched_rounds"] == cfg["rounds"]


def test_ivon_batched_step_is_the_sequential_step_on_one_client():
    """One client, equal data: ``ivon_train_batched`` is ``ivon_train`` (the same noise, rows, rates), so
    the states agree to round-off of the vmapped product alone (max |Δm| printed by the benchmark)."""
    from fedbayes.methods.core.base import ClientData
    from fedbayes.methods.core.ivon import IVONState, ivon_train, ivon_train_batched, lr_schedule
    from fedbayes.methods.hyperparameters import Hyperparameters
    from fedbayes.models import FlatModel, build_model

    torch.manual_seed(0)
    fm = FlatModel(build_model("mlp", (1, 8, 8), 3, hidden=[16], activation="relu"))
    x, y = torch.randn(40, 1, 8, 8), torch.randint(0, 3, (40,))
    data = ClientData(x, y)
    w0 = torch.randn(fm.n_params) * 0.1
    hp = Hyperparameters(lr=0.05, lr_final=0.01, lr_schedule="linear_local")
    common = dict(epochs=2, batch_size=16, beta1=0.9, beta2=0.999)
    torch.manual_seed(123)
    seq, loss_s, n_s = ivon_train(fm, IVONState.start(w0, 0.5), data, np.random.default_rng(5),
                                  lr=lr_schedule(hp, 1, 1), ess=100.0, delta=0.1, **common)
    (bat,), (loss_b,), (n_b,) = ivon_train_batched(
        fm, [IVONState.start(w0, 0.5)], [data], [np.random.default_rng(5)], [torch.Generator().manual_seed(123)],
        lrs=[lr_schedule(hp, 1, 1)], esss=[100.0], deltas=[0.1], prior_means=[0.0], **common)
    assert n_s == n_b == 6 and seq.t == bat.t == 6
    assert loss_b == pytest.approx(loss_s, rel=1e-5)
    for a, b in ((seq.m, bat.m), (seq.h, bat.h), (seq.g, bat.g)):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.full
@pytest.mark.parametrize("method", ["fedavg", "fedivon"])
def test_a_model_that_draws_trains_one_by_one(method, tmp_path, synthetic_run_data, cfg_factory):
    """A model with dropout (the EMNIST-62 CNN) draws its masks from torch's generator between the noise
    draws of the sequential loop, and under vmap it cannot draw at all ("randomness error mode": every
    FedAvg-family run of a dropout CNN crashed on a GPU, where batching is the default): such a model
    trains its clients one by one, bit for bit the sequential run."""
    extra = {"fedivon": {"lr": 0.1, "lr_final": 0.01, "lr_schedule": "linear_local", "ess": 20000.0, "delta": 1e-4,
                         "h0": 1.0, "pred_samples": 2}}.get(method, {})
    cfg = cfg_factory(method=method, rounds=2, save_rounds=[2], model={"name": "cnn_dropout"},
                      hparams={**cfg_factory()["hparams"], **extra})
    a = run_federated(RunSpec.from_config(cfg), synthetic_run_data, tmp_path / "a", CPU, log=lambda m: None, batch_clients=True)
    b = run_federated(RunSpec.from_config(cfg), synthetic_run_data, tmp_path / "b", CPU, log=lambda m: None, batch_clients=False)
    assert [r.get("test/nll") for r in a] == [r.get("test/nll") for r in b]
    assert "batched_rounds" not in json.loads((tmp_path / "a" / "run.json").read_text())


DECLARED = [("fedlap", {"delta": 0.1, "rho": "data"}), ("fedlap_cov", {"delta": 0.1, "rho": "uniform"}),
            ("fedadmm", {"alpha": 0.01}), ("feddyn", {"alpha": 0.001, "weight_decay": 1e-4})]


@pytest.mark.parametrize("name,extra", DECLARED, ids=[n for n, _ in DECLARED])
@pytest.mark.parametrize("client_optimizer", ["fresh", "persistent"])
def test_declared_local_problems_batch_to_the_sequential_numbers(name, extra, client_optimizer, tmp_path,
                                                                 synthetic_run_data, cfg_factory):
    """A method that declares its client's terms (``Method.local_problem``: FedLap's dual and proximal pull,
    FedLap-Cov's diagonal quadratic, FedADMM's and FedDyn's duals) trains its round's clients together
    through ``vmap`` of the same gradient function, with no loop of its own: the sequential run's numbers up
    to round-off over three rounds of unequal clients, every round batched (FedLap-Cov's weights: 6e-8
    apart after one round; Adam's normalised steps grow that round by round, 3e-4 after four)."""
    hp = {"optimizer": "adam", "lr": 0.003, "batch_size": 16, "local_epochs": 2, "client_optimizer": client_optimizer,
          **extra}
    cfg = cfg_factory(method=name, hparams=hp, rounds=3, save_rounds=[3])
    # 2e-4: FedLap-Cov's weights 1.1e-4 apart after three rounds on an Intel Xeon (AVX2), 1e-4 on AMD
    assert_batched_is_sequential(cfg, synthetic_run_data, tmp_path, nll_tol=1e-4, state_tol=2e-4, batched_rounds=3)


def test_an_unsquared_proximal_term_trains_one_by_one(tmp_path, synthetic_run_data, cfg_factory):
    """``prox_norm: unsquared`` branches on each client's norm (no vmapped form): FedLap then trains one by
    one under the batched switch, bit for bit the sequential run."""
    cfg = cfg_factory(method="fedlap", rounds=2, save_rounds=[2],
                      hparams={**cfg_factory()["hparams"], "delta": 0.1, "rho": "data", "prox_norm": "unsquared"})
    a = run_federated(RunSpec.from_config(cfg), synthetic_run_data, tmp_path / "a", CPU, log=lambda m: None, batch_clients=True)
    b = run_federated(RunSpec.from_config(cfg), synthetic_run_data, tmp_path / "b", CPU, log=lambda m: None, batch_clients=False)
    assert [r.get("test/nll") for r in a] == [r.get("test/nll") for r in b]
    assert "batched_rounds" not in json.loads((tmp_path / "a" / "run.json").read_text())


SGD_CLIPPED = {"optimizer": "sgd", "lr": 0.05, "batch_size": 16, "local_epochs": 2, "grad_clip": 1.0}


@pytest.mark.parametrize("name,extra", [("fedavg", {}), ("scaffold", {}), ("fednova", {}),
                                        ("fedlap", {"delta": 0.1, "rho": "data"})])
def test_sgd_with_clipping_batches_to_the_sequential_numbers(name, extra, tmp_path, synthetic_run_data, cfg_factory):
    """The FOLA paper's protocol (plain SGD, gradients clipped to norm 10; here 1.0 so that clipping bites):
    each client's gradient clipped by its own norm, SGD's foreach step; SCAFFOLD's control-variate
    correction and FedNova's step counts through their declared problems. Three rounds of unequal clients
    agree with the sequential run to round-off, every round batched."""
    cfg = cfg_factory(method=name, rounds=3, save_rounds=[3], hparams={**SGD_CLIPPED, **extra})
    assert_batched_is_sequential(cfg, synthetic_run_data, tmp_path, nll_tol=1e-5, state_tol=1e-4, batched_rounds=3)


def test_clip_rows_is_clip_grad_row_by_row():
    """``clip_rows_`` = ``clip_grad_`` on each row: rows over the bound scaled, rows under it unchanged."""
    from fedbayes.methods.core.batched import clip_rows_
    from fedbayes.methods.core.local import clip_grad_

    G = torch.randn(5, 300) * torch.tensor([0.01, 0.1, 1.0, 10.0, 100.0])[:, None]
    rows = [g.clone() for g in G]
    for r in rows:
        clip_grad_(r, 1.0)
    clip_rows_(G, 1.0)
    assert torch.allclose(G, torch.stack(rows), rtol=1e-6, atol=0)
    assert torch.equal(G[:2], torch.stack(rows[:2]))           # under the bound: untouched, bit for bit


FEDAVGM = {"optimizer": "sgd", "lr": 0.05, "batch_size": 16, "local_epochs": 2, "momentum": 0.9,
           "weight_decay": 1e-3, "server_lr": 0.5, "server_momentum": 0.9}


@pytest.mark.parametrize("name,extra", [("fedavgm", {}), ("fedpa", {"burn_in": 1, "shrinkage": 0.01}),
                                        ("fedep_i", {"burn_in": 1}), ("fedep_m", {"burn_in": 1}),
                                        ("fedep_l", {"burn_in": 1, "laplace_epochs": 1}),
                                        ("fedep_v", {"burn_in": 1, "ngvi_epochs": 1}),
                                        ("fedsep_i", {"burn_in": 1}), ("fedsep_m", {"burn_in": 0}),
                                        ("fedep_m", {"burn_in": 1, "participation": 0.5})])
def test_fedavgm_family_batches_every_round(name, extra, tmp_path, synthetic_run_data, cfg_factory):
    """FedAvg-M's clients (SGD-M, weight decay in ``sgd_epochs``' form) trained together in its own rounds
    and in the burn-in; after it FedPA's and FedEP/FedSEP's sampling rounds too: the iterate samples of each
    client from the one batched loop (``StackedIterates``), the tilted objective's extra gradient with the
    clients' stacked cavities, then each client's tilted precision (I, M, L, V) from its own stream. Three
    rounds of unequal clients agree with the sequential run to round-off, every round batched (with half the
    clients a round, FedEP's sites first visited after the burn-in start from μ0)."""
    extra = dict(extra)
    over = {"participation": extra.pop("participation")} if "participation" in extra else {}
    cfg = cfg_factory(method=name, rounds=3, save_rounds=[3], hparams={**FEDAVGM, **extra}, **over)
    assert_batched_is_sequential(cfg, synthetic_run_data, tmp_path, nll_tol=1e-5, state_tol=1e-4, batched_rounds=3)


FISHER_SUMS = [("fola", {"lambda_prior": 10.0}), ("fola", {"lambda_prior": 10.0, "prior_loss": "released"}),
               ("fola", {"lambda_prior": 10.0, "optimizer": "adam", "lr": 0.003}),
               ("fola", {"lambda_prior": 10.0, "fisher_norm": "paper"}),
               ("fedcurv", {"lambda_prior": 1.0}), ("fedcurv", {"lambda_prior": 10.0, "anchor": "global"}),
               ("fedcurv", {"lambda_prior": 1.0, "fisher_norm": "paper"}),
               ("fedcurv", {"lambda_prior": 1.0, "fisher_norm": "ggn", "anchor": "global"}),
               ("fedcurv", {"lambda_prior": 1.0, "prior_loss": "released"})]


@pytest.mark.parametrize("name,extra", FISHER_SUMS, ids=["fola", "fola-released", "fola-adam", "fola-paper", "fedcurv-clients",
                                                          "fedcurv-global", "fedcurv-paper", "fedcurv-ggn",
                                                          "fedcurv-released"])
def test_fisher_sums_batch_to_the_sequential_numbers(name, extra, tmp_path, synthetic_run_data, cfg_factory):
    """FOLA's Fisher sum (Σ_t (|b_t|/N_n) g_t² of each client's data gradients, ``StackedFisher`` on the
    batched loop's stacked gradients, the short last minibatch of an epoch weighted by its own size) and
    its prior's gradient on the stacked weights; with ``fisher_norm: paper`` the per-example gradients that
    make each step's gradient (``StackedPlan.example_gradients``), their mean squares summed; FedCurv's penalty (the others' Fishers, each client's own
    removed; or the global anchor) in closed form on the stacked weights and its offline Fisher pass over
    the stacked clients (``code``) or client by client (``paper``, ``ggn``): three rounds of unequal
    clients give the sequential run's precisions and weights to round-off, every round batched."""
    cfg = cfg_factory(method=name, rounds=3, save_rounds=[3], hparams={**SGD_CLIPPED, **extra})
    assert_batched_is_sequential(cfg, synthetic_run_data, tmp_path, nll_tol=1e-5, state_tol=1e-4, batched_rounds=3)


@pytest.mark.parametrize("name,extra", [("fedbe", {"server_unlabeled": 0.2, "teacher_samples": 2, "server_epochs": 1}),
                                        ("fedavg", {"weight_decay": 1e-3}),
                                        ("fedavg", {"weight_decay": 1e-3, "optimizer": "adam", "lr": 0.003,
                                                    "client_optimizer": "persistent"})],
                         ids=["fedbe", "fedavg-weight-decay", "fedavg-weight-decay-persistent-adam"])
def test_fedavg_clients_with_weight_decay_batch(name, extra, tmp_path, synthetic_run_data, cfg_factory):
    """FedAvg's client with weight decay (its gradient (2θ)·(½ λ_wd) on the stacked weights, autograd's
    rounding of the term) and FedBE's FedAvg clients (its server distils from the messages): three rounds
    of unequal clients give the sequential run's numbers to round-off, every round batched."""
    cfg = cfg_factory(method=name, rounds=3, save_rounds=[3], hparams={**SGD_CLIPPED, **extra})
    assert_batched_is_sequential(cfg, synthetic_run_data, tmp_path, nll_tol=1e-5, state_tol=1e-4, batched_rounds=3)


@pytest.mark.parametrize("client_optimizer,participation", [("fresh", 1.0), ("persistent", 1.0), ("fresh", 0.5)])
def test_function_space_terms_batch_to_the_sequential_numbers(client_optimizer, participation, tmp_path,
                                                              synthetic_run_data, cfg_factory):
    """FedLap-Func's function-space terms (soft CE of the network on every memory point against the global
    model's predictions, minus its own previous contribution) as one ``vmap(grad)`` over the stacked
    clients, their own memory points padded (unequal class counts). Three rounds of unequal clients (round 1
    without the terms) agree with the sequential run to round-off, every round batched. With half the
    clients a round, a client first sampled after round 1 sends its memory then (it crashed the server
    before) and trains without the terms beside clients that have them."""
    hp = {"optimizer": "adam", "lr": 0.003, "batch_size": 16, "local_epochs": 2, "client_optimizer": client_optimizer,
          "delta": 0.1, "rho": "data", "tau": 0.5, "memory_per_class": 3, "server_iters": 5, "server_lr": 0.001}
    cfg = cfg_factory(method="fedlap_func", hparams=hp, rounds=3, save_rounds=[3], participation=participation)
    assert_batched_is_sequential(cfg, synthetic_run_data, tmp_path, nll_tol=1e-4, state_tol=1e-4, batched_rounds=3)


@pytest.mark.parametrize("model", [{"name": "mlp", "hidden": [32, 16], "activation": "relu"}, {"name": "lenet5"}])
def test_sampled_predictive_in_chunks_is_one_by_one(model):
    """A sampled predictive's networks through one vmapped forward per chunk (a GPU's default) give the
    logits of the one-by-one loop (a CPU's default) up to round-off: the same draws, in the same order,
    whatever the chunk (one that does not divide S included)."""
    from fedbayes.methods.core.ivon import gaussian_samples_logits
    from fedbayes.models import FlatModel, build_model

    torch.manual_seed(0)
    fm = FlatModel(build_model(model["name"], (1, 28, 28), 10, **{k: v for k, v in model.items() if k != "name"}))
    mean = fm.flat_params()
    std = torch.full_like(mean, 0.05)
    x = torch.randn(37, 1, 28, 28)
    one = gaussian_samples_logits(fm, mean, std, x, 7, seed=11)
    assert torch.equal(one, gaussian_samples_logits(fm, mean, std, x, 7, seed=11, chunk=1))   # the CPU default
    for chunk in (3, 7, 16):
        assert torch.allclose(gaussian_samples_logits(fm, mean, std, x, 7, seed=11, chunk=chunk), one,
                              rtol=1e-5, atol=1e-5)


def test_local_accuracies_in_chunks_are_one_by_one(synthetic_run_data):
    """The clients' local models (FOLA's local accuracy) evaluated in chunks through one vmapped forward:
    each model's test accuracy as evaluated one by one, the test set cut in batches too."""
    from fedbayes.engine.loop import local_accuracies, local_accuracy
    from fedbayes.methods.core.base import RunContext
    from fedbayes.methods import build_method
    from fedbayes.models import FlatModel, build_model

    torch.manual_seed(0)
    fm = FlatModel(build_model("mlp", (1, 28, 28), 10, hidden=[32, 16], activation="relu"))
    method = build_method("fedavg", fm, {"optimizer": "adam", "lr": 0.003, "batch_size": 16, "local_epochs": 1},
                          np.array([100, 100]), RunContext())
    ws = [fm.flat_params() + 0.3 * torch.randn(fm.n_params) for _ in range(5)]
    one = [local_accuracy(method, w, synthetic_run_data, batch=64) for w in ws]
    assert local_accuracies(method, ws, synthetic_run_data, batch=64) == one          # the CPU default
    assert len(set(one)) > 1
    for chunk in (2, 5):
        assert local_accuracies(method, ws, synthetic_run_data, batch=64, chunk=chunk) == one


def test_chunk_size_is_one_network_on_a_cpu():
    """On a CPU the chunk is one network (the numbers stay the one-by-one loop's bit for bit); the
    activation count a GPU's chunk is sized by is the leaf modules' outputs for one row."""
    from fedbayes.methods.core.chunks import networks_per_chunk, row_floats
    from fedbayes.models import FlatModel, build_model

    fm = FlatModel(build_model("mlp", (1, 28, 28), 10, hidden=[32, 16], activation="relu"))
    x = torch.randn(50, 1, 28, 28)
    assert networks_per_chunk(fm, x, 100) == 1
    assert row_floats(fm, x) == 784 + 32 + 32 + 16 + 16 + 10


def test_graph_mode_is_named_and_checked(monkeypatch):
    from fedbayes.methods.core import graphs

    monkeypatch.setenv("FEDBAYES_CUDA_GRAPHS", "1")
    assert graphs.mode(CPU) == "subset" and graphs.mode(torch.device("cuda")) == "graph"
    monkeypatch.setenv("FEDBAYES_CUDA_GRAPHS", "0")
    assert graphs.mode(torch.device("cuda")) == "subset"
    monkeypatch.setenv("FEDBAYES_CUDA_GRAPHS", "yes")
    with pytest.raises(ValueError, match="FEDBAYES_CUDA_GRAPHS"):
        graphs.mode(CPU)


def test_static_step_keeps_finished_clients_and_counts_steps():
    """``run_steps`` hands the step its index as a device counter; ``keep_finished`` puts back the rows
    of clients that are not live."""
    from fedbayes.methods.core import graphs

    seen = []
    assert graphs.run_steps(lambda s_t: seen.append(int(s_t)), 5, device=CPU, capture=False) == "eager"
    assert seen == [0, 1, 2, 3, 4]
    new, old = torch.arange(6.0).reshape(3, 2), -torch.ones(3, 2)
    graphs.keep_finished(torch.tensor([True, False, True]), [(new, old)])
    assert new.tolist() == [[0.0, 1.0], [-1.0, -1.0], [4.0, 5.0]]
