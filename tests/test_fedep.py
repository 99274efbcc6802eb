"""FedEP / FedSEP / FedPA / FedAvg-M (methods/fedep/, fedsep/, fedpa/, fedavgm/) against direct computations of spec 002 §2.

The toy-level identities (EP's first step from uniform sites is FedPA; EP converges to the exact global
posterior of a conjugate Gaussian problem) are in tests/test_toy_gaussian2d.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedbayes.engine import run_federated
from fedbayes.study.model import RunSpec
from fedbayes.methods import build_method
from fedbayes.methods.core.base import ClientData
from fedbayes.methods.core.base import RunContext
from fedbayes.methods.fedep.algorithm import clip_mean_std, sampled_fisher
from fedbayes.methods.fedpa.algorithm import shrinkage_solve
from fedbayes.models import FlatModel, build_model

torch.set_default_dtype(torch.float32)


def small_problem(n_clients=3, n=24, d=6, c=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    fm = FlatModel(build_model("mlp", (d,), c, hidden=[5], activation="tanh"))
    data = [ClientData(torch.randn(n + 4 * k, d, generator=g), torch.randint(0, c, (n + 4 * k,), generator=g))
            for k in range(n_clients)]
    w0 = 0.3 * torch.randn(fm.n_params, generator=g)
    return fm, data, w0


HP = {"lr": 0.05, "batch_size": 8, "local_epochs": 3, "momentum": 0.9, "weight_decay": 1e-3, "cov_scale": 50.0,
      "init_scale": 0.0, "server_lr": 0.5, "server_momentum": 0.9, "burn_in": 0}


def method(name, fm, data, **hp):
    return build_method(name, fm, {**HP, **hp}, np.array([len(d) for d in data]),
                        RunContext(rounds=10, clients_per_round=len(data)))


def test_shrinkage_solve_equals_the_dense_inverse():
    g = torch.Generator().manual_seed(1)
    for ell, rho in [(2, 0.01), (5, 0.1), (7, 1.0)]:
        s = torch.randn(ell, 9, generator=g, dtype=torch.float64)
        v = torch.randn(9, generator=g, dtype=torch.float64)
        rho_hat = 1 / (1 + (ell - 1) * rho)
        sigma = rho_hat * torch.eye(9, dtype=torch.float64) + (1 - rho_hat) * torch.cov(s.T)
        torch.testing.assert_close(shrinkage_solve(s, v, rho), torch.linalg.solve(sigma, v))
    v = torch.randn(9, generator=g)
    assert torch.equal(shrinkage_solve(v[None], v, 0.01), v)  # one sample: Σ̂ = I (FedAvg's delta)


def test_sampled_fisher_equals_a_per_example_loop():
    fm, data, w = small_problem()
    x = data[0].x
    fisher = sampled_fisher(fm, w, x, torch.Generator().manual_seed(5))
    with torch.no_grad():
        y_hat = torch.multinomial(torch.softmax(fm(w, x), -1), 1, generator=torch.Generator().manual_seed(5)).squeeze(-1)
    brute = torch.zeros_like(w)
    for xi, yi in zip(x, y_hat):
        wi = w.clone().requires_grad_(True)
        (gi,) = torch.autograd.grad(F.cross_entropy(fm(wi, xi[None]), yi[None]), wi)
        brute += gi.square()
    torch.testing.assert_close(fisher, brute, rtol=1e-4, atol=1e-7)


def test_clip_mean_std():
    x = torch.tensor([0.0] * 9 + [10.0])  # mean 1, std 3: the outlier is clipped to 7
    m, s = x.mean(), x.std(unbiased=False)
    assert torch.equal(clip_mean_std(x), x.clamp(m - 2 * s, m + 2 * s)) and clip_mean_std(x).max() == 7


def test_fedsep_i_is_fedprox_with_iterate_averaging_and_server_momentum():
    """Spec §2.13: FedSEP-I's client minimises mean CE + ½λ_wd‖θ‖² + ½ α_cov (N − n_k)/n_k ‖θ − μ_g‖²,
    returns the mean of its epoch-end iterates μ_\\k; Δη_k = Λ_g(μ_\\k − μ_g), ΔΛ_k = 0; the server moves
    μ_g by lr_s · SGD-M(δ Σ_k (μ_\\k − μ_g))."""
    fm, data, w0 = small_problem()
    m = method("fedsep", fm, data, variant="I")
    server, states = m.init_state(w0)
    N, alpha = sum(len(d) for d in data), m.alpha_cov()
    down = m.broadcast(server, 1)
    msgs = {}
    for k, d in enumerate(data):
        msg, _, _ = m.client_update(k, down, states[k], d, np.random.default_rng(k), 1)
        msgs[k] = msg
        # the FedProx form, written out
        w = w0.clone().requires_grad_(True)
        opt = torch.optim.SGD([w], lr=HP["lr"], momentum=0.9)
        rng, ends, n_k = np.random.default_rng(k), [], len(d)
        for _ in range(HP["local_epochs"]):
            perm = torch.from_numpy(rng.permutation(n_k))
            for i in range(0, n_k, HP["batch_size"]):
                idx = perm[i:i + HP["batch_size"]]
                loss = (F.cross_entropy(fm(w, d.x[idx]), d.y[idx]) + 0.5 * HP["weight_decay"] * w.square().sum()
                        + 0.5 * alpha * (N - n_k) / n_k * (w - w0).square().sum())
                opt.zero_grad()
                loss.backward()
                opt.step()
            ends.append(w.detach().clone())
        mu_k = torch.stack(ends).mean(0)
        lam_g = torch.full_like(w0, alpha * N)
        torch.testing.assert_close(msg["d_eta"], (lam_g * (mu_k - w0)) / len(data), rtol=2e-4, atol=2e-3)
        assert msg["d_lam"].abs().max() < 1e-2 * alpha * N / len(data) * 1e-3  # ΔΛ ≡ 0 up to round-off
    new = m.server_update(server, msgs, 1)
    step = sum(msg["d_eta"] for msg in msgs.values()) / (alpha * N)
    torch.testing.assert_close(new["w"], w0 + HP["server_lr"] * step, rtol=1e-4, atol=1e-5)


def test_damped_site_update_is_the_closed_form():
    """Spec §2.5: with δ and a plain step (no momentum, lr 1), q_k^new = q_k^(1−δ) (q̂_\\k / q_−k)^δ, i.e.
    η_k ← (1 − δ) η_k + δ (η_\\k − η_−k) (and Λ alike)."""
    fm, data, w0 = small_problem()
    for variant in ("I", "M", "L"):
        m = method("fedep", fm, data, variant=variant, damping=0.3, server_momentum=0.0, server_lr=1.0,
                   laplace_epochs=1, shrinkage=1e-3)
        server, states = m.init_state(w0)
        down = m.broadcast(server, 1)
        k, d = 1, data[1]
        site = m.site(k, down, states[k], len(d))
        cav_eta, cav_lam = m.cavity(down, site, len(d))
        msg, new, _ = m.client_update(k, down, states[k], d, np.random.default_rng(3), 1)
        # recover the tilted (η_\k, Λ_\k) from the undamped delta: Δ/δ + global
        eta_t, lam_t = msg["d_eta"] / 0.3 + down["eta"], msg["d_lam"] / 0.3 + down["lam"]
        torch.testing.assert_close(new["eta"], 0.7 * site["eta"] + 0.3 * (eta_t - cav_eta), rtol=1e-5, atol=1e-3)
        torch.testing.assert_close(new["lam"], 0.7 * site["lam"] + 0.3 * (lam_t - cav_lam), rtol=1e-5, atol=1e-3)
        if variant == "I":  # the identity variant never moves a precision
            torch.testing.assert_close(new["lam"], site["lam"])


def test_first_ep_sites_multiply_to_the_global():
    fm, data, w0 = small_problem()
    m = method("fedep", fm, data, variant="I")
    server, states = m.init_state(w0)
    down = m.broadcast(server, 1)
    sites = [m.site(k, down, states[k], len(d)) for k, d in enumerate(data)]
    torch.testing.assert_close(sum(s["eta"] for s in sites), server["eta"])
    torch.testing.assert_close(sum(s["lam"] for s in sites), server["lam"])


@pytest.mark.parametrize("name", ["fedavgm", "fedpa", "fedep_i", "fedsep_m"])
def test_the_family_refuses_an_optimizer_it_would_not_use(name):
    fm, data, _ = small_problem()
    method(name, fm, data, optimizer="sgd")                    # the clients' own optimiser: accepted
    with pytest.raises(ValueError, match="optimizer: sgd"):
        method(name, fm, data, optimizer="adam")


def test_fedpa_with_one_sample_is_fedavg():
    fm, data, w0 = small_problem()
    pa = method("fedpa", fm, data, local_epochs=2, mixin_epochs=1, shrinkage=0.01)
    avg = method("fedavgm", fm, data, local_epochs=2)
    s, _ = pa.init_state(w0)
    # FedPA's one sample is the average iterate of epoch 2; FedAvg sends θ_g − θ_end
    msg, _, _ = pa.client_update(0, pa.broadcast(s, 1), {}, data[0], np.random.default_rng(0), 1)
    samples, _ = avg.sgd_epochs(w0, data[0], np.random.default_rng(0), 2, average=True)
    torch.testing.assert_close(msg["delta"], w0 - samples[-1])


@pytest.mark.parametrize("name,hp", [("fedavgm", {}), ("fedpa", {"burn_in": 1, "shrinkage": 0.01}),
                                     ("fedep", {"variant": "I", "burn_in": 1}), ("fedep", {"variant": "M", "burn_in": 1}),
                                     ("fedep", {"variant": "L", "burn_in": 1, "laplace_epochs": 1}),
                                     ("fedep", {"variant": "V", "burn_in": 1, "ngvi_epochs": 1}),
                                     ("fedsep", {"variant": "I", "burn_in": 0, "clip": 100.0})])
def test_runs_through_the_engine_and_learns(tmp_path, synthetic_run_data, cfg_factory, name, hp):
    cfg = cfg_factory(method=name, rounds=4, save_rounds=[4], hparams={
        "lr": 0.05, "batch_size": 32, "local_epochs": 2, "momentum": 0.9, "weight_decay": 1e-4, "cov_scale": 500.0,
        "server_lr": 0.5, "server_momentum": 0.9, "pred_samples": 3, **hp})
    hist = run_federated(RunSpec.from_config(cfg), synthetic_run_data, tmp_path, torch.device("cpu"), log=lambda _: None)
    assert hist[-1]["test/acc"] > 0.3 and np.isfinite(hist[-1]["test/nll"])
    if name in ("fedep", "fedsep"):
        assert np.isfinite(hist[-1]["mc/test/nll"])
