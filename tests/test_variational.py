"""BayesADMM and FedIVON: server algebra, conjugate-Gaussian convergence, prediction variants."""

import numpy as np
import pytest
import torch

from fedbayes.engine import seeds
from fedbayes.engine.loop import evaluated_variants, predict
from fedbayes.methods import build_method
from fedbayes.methods.core.base import ClientData
from fedbayes.study import split_variant
from fedbayes.methods.core.base import RunContext
from fedbayes.models import FlatModel


class Linear:
    """f(θ, x) = x θ (one output), for Gaussian-likelihood tests."""

    n_params = 3

    def __call__(self, w, x):
        return x @ w


def gaussian_loss(out, y):
    return 0.5 * (out - y).square().mean()


def diagonal_regression(seed=0, sizes=(20, 30, 50), P=3):
    """Clients whose design rows each have one non-zero feature, so every X_kᵀX_k is diagonal and the
    diagonal Gaussian family holds the exact posterior."""
    g = torch.Generator().manual_seed(seed)
    theta = torch.tensor([1.0, -2.0, 0.5])
    clients = []
    for k, n in enumerate(sizes):
        feat = torch.randint(0, P, (n,), generator=g)
        x = torch.zeros(n, P)
        x[torch.arange(n), feat] = 0.5 + torch.rand(n, generator=g) * (1 + k)
        y = x @ theta + 0.3 * torch.randn(n, generator=g)
        clients.append(ClientData(x, y))
    return clients


def exact_posterior(clients, prior_prec, tau=1.0):
    A = sum(c.x.T @ c.x for c in clients) / tau
    b = sum(c.x.T @ c.y for c in clients) / tau
    Lam = torch.diag(torch.full((A.shape[0],), prior_prec)) + A
    return torch.linalg.solve(Lam, b), torch.diagonal(Lam)


def run_rounds(method, clients, rounds):
    w0 = torch.zeros(3)
    server, states = method.init_state(w0)
    for rnd in range(1, rounds + 1):
        down = method.broadcast(server, rnd)
        msgs = {}
        for k, data in enumerate(clients):
            torch.manual_seed(seeds.torch_seed(0, seeds.TRAIN, rnd, k))
            msgs[k], states[k], _ = method.client_update(k, down, states[k], data, seeds.rng(0, seeds.TRAIN, rnd, k), rnd)
        server = method.server_update(server, msgs, rnd)
    return server


def test_bayesadmm_server_step_is_alg1_lines_9_to_11():
    torch.manual_seed(0)
    K, P = 4, 6
    hp = {"rho": 0.3, "delta": 0.7, "tau": 1.0, "dual_damping": 1.0, "h0": 1.0}
    method = build_method("bayesadmm", FlatModel(torch.nn.Linear(2, 2)), hp, np.array([5, 6, 7, 8]))
    m = torch.randn(K, P)
    s = torch.rand(K, P) + 0.5
    v = torch.randn(K, P)
    u = torch.rand(K, P)
    a = 1 / (1 + K * 0.3)
    msgs = {k: {"a": (1 - a) / K * s[k] * m[k] + a * v[k], "b": (1 - a) / K * s[k] + a * u[k]} for k in range(K)}
    out = method.server_update({"w": torch.zeros(P), "s": torch.ones(P)}, msgs, 2)
    s_bar = (1 - a) * s.mean(0) + a * (0.7 + u.sum(0))           # line 10
    m_bar = ((1 - a) * (s * m).mean(0) + a * v.sum(0)) / s_bar    # lines 9 and 11
    torch.testing.assert_close(out["s"], s_bar)
    torch.testing.assert_close(out["w"], m_bar)


@pytest.mark.parametrize("rho,c,reset,rounds", [(1 / 3, 1.0, "code", 3), (0.5, 1.0, "paper", 6)])
def test_bayesadmm_reaches_the_exact_posterior_of_federated_linear_regression(rho, c, reset, rounds):
    """Bayesian linear regression over 3 clients (diagonal designs): the server's (m̄, s̄) approach the
    exact posterior N(Λ⁻¹Σ b_k/τ, Λ⁻¹), Λ = δI + Σ A_k/τ (spec §3.1.1 conjugate check)."""
    clients = diagonal_regression()
    delta, tau = 2.0, 0.5
    hp = {"rho": rho, "dual_damping": c, "delta": delta, "tau": tau, "h0": 1.0, "ivon_reset": reset,
          "lr": 0.05, "local_epochs": 300, "batch_size": 100, "beta2": 0.99, "mc_samples": 16}
    # ρ = 1/K, γ = ρ: exact after one round (Prop. 3.2); else s̄'s error shrinks by 1 − α a round
    method = build_method("bayesadmm", Linear(), hp, np.array([len(d) for d in clients]), RunContext(rounds=rounds))
    method.loss_fn = gaussian_loss
    server = run_rounds(method, clients, rounds)
    mean, prec = exact_posterior(clients, delta, tau)
    torch.testing.assert_close(server["w"], mean, rtol=0.02, atol=0.02)
    torch.testing.assert_close(server["s"], prec, rtol=0.08, atol=0.0)


def test_fedivon_reaches_the_exact_posterior_when_ess_is_the_data_size():
    """With λ = N and converged clients, the precision-weighted average is the exact posterior of
    Σ_k ℓ_k + (λδ/2)‖θ‖² for diagonal designs (the weights N_k/N turn mean losses into the sum)."""
    clients = diagonal_regression(seed=1)
    N = sum(len(c) for c in clients)
    delta = 0.02
    hp = {"ess": float(N), "delta": delta, "h0": 1.0, "lr": 0.05, "lr_final": 0.05, "lr_schedule": "linear_local",
          "local_epochs": 400, "batch_size": 100, "beta2": 0.99, "mc_samples": 16}
    method = build_method("fedivon", Linear(), hp, np.array([len(c) for c in clients]), RunContext(rounds=2))
    method.loss_fn = gaussian_loss
    server = run_rounds(method, clients, 2)
    mean, prec = exact_posterior(clients, N * delta)
    torch.testing.assert_close(server["w"], mean, rtol=0.02, atol=0.02)
    torch.testing.assert_close(N * (server["h"] + delta), prec, rtol=0.08, atol=0.0)


def test_fedivon_server_is_a_precision_weighted_mean():
    method = build_method("fedivon", Linear(), {"delta": 0.1, "h0": 1.0, "ess": 10.0}, np.array([10, 30, 60]))
    m = {k: torch.full((3,), float(k)) for k in range(3)}
    h = {0: torch.ones(3), 1: torch.full((3,), 3.0), 2: torch.full((3,), -0.05)}
    out = method.server_update({}, {k: {"w": m[k], "h": h[k]} for k in (0, 2)}, 1)  # clients 0 and 2 sampled
    w = np.array([10, 60]) / 70
    p = np.array([1.1, 0.05])
    assert out["w"][0].item() == pytest.approx((w * p * np.array([0, 2])).sum() / (w * p).sum(), rel=1e-6)
    assert out["h"][0].item() == pytest.approx(w[0] * 1 + w[1] * -0.05, rel=1e-6)
    same = method.server_update({}, {k: {"w": m[1], "h": h[1]} for k in range(3)}, 1)
    torch.testing.assert_close(same["w"], m[1])
    torch.testing.assert_close(same["h"], h[1])


def test_mc_predictive_with_one_zero_variance_sample_is_the_point_prediction():
    torch.manual_seed(0)
    fm = FlatModel(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)))
    w = fm.flat_params()
    x = torch.randn(50, 4)
    b = build_method("bayesadmm", fm, {"rho": 1.0, "tau": 1.0, "delta": 1.0, "h0": 1.0, "pred_samples": 1},
                     np.array([1, 1]))
    server = {"w": w, "s": torch.full_like(w, float("inf"))}
    np.testing.assert_allclose(predict(b, server, x, variant=""), predict(b, server, x, variant="mean"), atol=1e-6)
    f = build_method("fedivon", fm, {"ess": float("inf"), "delta": 1.0, "h0": 1.0, "pred_samples": 1}, np.array([1]))
    np.testing.assert_allclose(predict(f, {"w": w, "h": torch.zeros_like(w)}, x),
                               predict(f, {"w": w, "h": torch.zeros_like(w)}, x, variant="mean"), atol=1e-6)
    # real variance: many samples differ from the point prediction and are reproducible by seed
    server = {"w": w, "s": torch.full_like(w, 4.0)}
    b = build_method("bayesadmm", fm, {"rho": 1.0, "tau": 1.0, "delta": 1.0, "h0": 1.0, "pred_samples": 16},
                     np.array([1, 1]))
    mc = predict(b, server, x, seed=3)
    assert np.abs(mc - predict(b, server, x, variant="mean")).max() > 1e-2
    np.testing.assert_array_equal(mc, predict(b, server, x, seed=3))
    # the draws evaluated 7 at a time: the same draws, rows computed in other blocks (bit for bit where the
    # matrix product rounds a row alike whatever the row count; within float32 round-off everywhere)
    np.testing.assert_allclose(mc, predict(b, server, x, seed=3, batch=7), rtol=1e-6, atol=1e-7)


def test_variants_and_evaluation_cadence():
    assert split_variant("bayesadmm@mean") == ("bayesadmm", "mean")
    assert split_variant("fedavg") == ("fedavg", "")
    b = build_method("bayesadmm", Linear(), {"rho": 1.0}, np.array([1]))
    cfg = {"rounds": 100, "save_rounds": [48, 49, 50, 100], "eval_every": 5, "mc_every": 20}
    assert evaluated_variants(b, 0, cfg) == ["", "mean"]
    assert evaluated_variants(b, 5, cfg) == ["mean"]
    assert evaluated_variants(b, 7, cfg) == []
    assert evaluated_variants(b, 40, cfg) == ["", "mean"]
    assert evaluated_variants(b, 49, cfg) == ["", "mean"]
    no0 = {**cfg, "hparams": {"mc_round0": False}}  # the initialisation: point prediction only
    assert evaluated_variants(b, 0, no0) == ["mean"] and evaluated_variants(b, 40, no0) == ["", "mean"]
    assert evaluated_variants(b, 100, {**no0, "hparams": {"mc_round0": False, "mc_every": 1000}}) == ["", "mean"]
    # mc_window: false — the sampled predictive at the last round (and every mc_every), not in the
    # windows before it; the point prediction still at every saved round
    nowin = {**cfg, "hparams": {"mc_window": False, "mc_every": 1000}}
    assert [evaluated_variants(b, r, nowin) for r in (48, 49, 50, 100)] == [["mean"]] * 3 + [["", "mean"]]
    assert evaluated_variants(b, 40, {**cfg, "hparams": {"mc_window": False}}) == ["", "mean"]
    f = build_method("fedavg", Linear(), {}, np.array([1]))
    assert evaluated_variants(f, 3, {"rounds": 9, "save_rounds": [9]}) == [""]
