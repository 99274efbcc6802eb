"""FOLA and FedCurv (spec 004) against the paper's equations, brute-force oracles and the engine."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedbayes.engine import run_federated
from fedbayes.study.model import RunSpec
from fedbayes.methods import build_method
from fedbayes.methods.core.base import ClientData
from fedbayes.methods.fedcurv.algorithm import offline_fisher
from fedbayes.methods.core.curvature import prior_grad, prior_loss
from fedbayes.methods.fola.algorithm import product_aggregate
from fedbayes.models import FlatModel, build_model


@pytest.fixture(autouse=True)
def float64():
    """Exact algebra in float64; engine-based tests switch back to float32 themselves."""
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(torch.float32)


def tiny_model():
    torch.manual_seed(0)
    return FlatModel(build_model("mlp", (3,), 3, hidden=[4], activation="tanh"))


def client_data(sizes=(5, 9, 14), seed=0):
    g = torch.Generator().manual_seed(seed)
    return [ClientData(torch.randn(n, 3, generator=g), torch.randint(0, 3, (n,), generator=g)) for n in sizes]


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


FOLA_HP = {"optimizer": "sgd", "lr": 0.1, "batch_size": 4, "local_epochs": 2, "lambda_prior": 3.0}


# ---------------------------------------------------------------------------------------- FOLA


def test_product_aggregation_is_the_precision_weighted_mean():
    """Eq. 12 (+ γ of Eq. 25): μ_S = Σ π_n Ω_n θ_n / (Σ π_n Ω_n + γ), Ω_S = Σ π_n Ω_n, π_n = N_n/N; and μ_S
    is the mode of Π_n N(θ_n, Ω_n⁻¹)^{π_n} · N(0, γ⁻¹) (zero gradient of its log-density there)."""
    fm = tiny_model()
    P, sizes, gamma = fm.n_params, np.array([10, 30, 60]), 0.05
    m = build_method("fola", fm, {**FOLA_HP, "gamma": gamma}, sizes)
    server, _ = m.init_state(fm.flat_params())
    thetas = [randn(P, seed=k) for k in range(3)]
    omegas = [torch.rand(P, generator=torch.Generator().manual_seed(10 + k)) * 3 for k in range(3)]
    new = m.server_update(server, {k: {"w": thetas[k], "omega": omegas[k]} for k in range(3)}, rnd=2)
    pi = sizes / sizes.sum()
    omega_S = sum(pi[k] * omegas[k] for k in range(3))
    torch.testing.assert_close(new["omega"], omega_S)
    torch.testing.assert_close(new["w"], sum(pi[k] * omegas[k] * thetas[k] for k in range(3)) / (omega_S + gamma))

    mu = new["w"].clone().requires_grad_(True)
    normal = torch.distributions.Normal
    log_density = sum(pi[k] * normal(thetas[k], omegas[k].rsqrt()).log_prob(mu).sum() for k in range(3)) \
        + normal(0.0, gamma ** -0.5).log_prob(mu).sum()
    (grad,) = torch.autograd.grad(log_density, mu)
    assert grad.abs().max() < 1e-10
    # equal precisions and γ = 0: the FedAvg mean; partial participation renormalises over the participants
    same = torch.ones(3, P)
    fedavg, _ = product_aggregate(torch.stack(thetas), same, torch.tensor(sizes, dtype=torch.float64), 0.0)
    torch.testing.assert_close(fedavg, sum(pi[k] * thetas[k] for k in range(3)))
    part = m.server_update(server, {0: {"w": thetas[0], "omega": omegas[0]}, 2: {"w": thetas[2], "omega": omegas[2]}}, 2)
    torch.testing.assert_close(part["omega"], (10 * omegas[0] + 60 * omegas[2]) / 70)


def test_prior_loss_gradient_is_the_closed_form_and_released_has_none():
    """Eq. 15–16: ∇ (λ/2)(θ − μ)ᵀ diag(Ω)(θ − μ) = λ Ω ∘ (θ − μ). The authors' released code built the
    loss from detached tensors: same value, no gradient."""
    theta, mu, omega, lam = randn(7, seed=1), randn(7, seed=2), torch.rand(7) * 2, 4.0
    w = theta.clone().requires_grad_(True)
    loss = prior_loss(w, mu, omega, lam, "paper")
    (g,) = torch.autograd.grad(loss, w)
    torch.testing.assert_close(g, lam * omega * (theta - mu))
    torch.testing.assert_close(loss, 0.5 * lam * (omega * (theta - mu) ** 2).sum())
    released = prior_loss(w, mu, omega, lam, "released")
    torch.testing.assert_close(released, loss)
    assert not released.requires_grad
    with pytest.raises(ValueError, match="prior_loss"):
        prior_loss(w, mu, omega, lam, "detached")


@pytest.mark.parametrize("lam", [1.0, 3.0, 10.0, 100.0, 1e4, 0.37])
def test_closed_form_prior_gradient_is_autograds_bit_for_bit(lam):
    """FOLA's local step adds ``prior_grad`` (no graph) where it added autograd's gradient of
    ``prior_loss``: the same bits, so committed runs replay unchanged (tests/test_replay.py)."""
    theta, mu = randn(50_000, seed=3), randn(50_000, seed=4)
    omega = torch.rand(50_000, generator=torch.Generator().manual_seed(5)) * 1e3
    w = theta.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(prior_loss(w, mu, omega, lam, "paper"), w)
    assert torch.equal(prior_grad(w, mu, omega, lam, "paper"), g)
    assert prior_grad(w, mu, omega, lam, "released") is None
    assert torch.equal(w.detach(), theta)          # the closed form writes no input


def test_released_prior_trains_as_lambda_zero_and_fedavg():
    """Client level, round 2 (non-zero prior): ``released`` with λ = 3 gives exactly λ = 0's weights,
    which are FedAvg's local SGD (same minibatches); the paper's prior moves them towards μ_S."""
    fm = tiny_model()
    data = client_data()[2]
    sizes = np.array([14])
    down = {"w": fm.flat_params(), "omega": torch.rand(fm.n_params) * 4}

    def local(hp, name="fola"):
        m = build_method(name, fm, hp, sizes)
        if name == "fedavg":
            return m.client_update(0, {"w": down["w"]}, {}, data, np.random.default_rng(5), 2)[0]["w"]
        return m.client_update(0, down, {}, data, np.random.default_rng(5), 2)[0]["w"]

    released = local({**FOLA_HP, "prior_loss": "released"})
    assert torch.equal(released, local({**FOLA_HP, "lambda_prior": 0.0}))
    assert torch.equal(released, local(FOLA_HP, "fedavg"))
    paper = local(FOLA_HP)
    assert (paper - down["w"]).norm() < 0.9 * (released - down["w"]).norm()


@pytest.mark.parametrize("fisher_norm", ["code", "paper"])
def test_accumulated_fisher_matches_per_example_brute_force(fisher_norm):
    """Algorithm 1 / Eq. 22, replayed by hand: per-example gradients in a Python loop, SGD with the
    prior gradient λ(Ω_S/r)(θ − μ_S) and norm clipping. code: F = Σ_t (|b_t|/N) (mean_i g_i)²;
    paper: F = (1/T) Σ_t mean_i g_i². The client sends Ω_S + F and its last θ."""
    fm = tiny_model()
    data = client_data()[2]
    rnd, lam, clip = 2, 3.0, 1.0
    hp = {**FOLA_HP, "grad_clip": clip, "fisher_norm": fisher_norm}
    m = build_method("fola", fm, hp, np.array([14]))
    mu, omega = fm.flat_params(), torch.rand(fm.n_params) * 2
    msg, _, _ = m.client_update(0, {"w": mu, "omega": omega}, {}, data, np.random.default_rng(3), rnd)

    rng, theta, fisher, steps, clipped = np.random.default_rng(3), mu.clone(), torch.zeros_like(mu), 0, 0
    for _ in range(hp["local_epochs"]):
        perm = rng.permutation(len(data))
        for start in range(0, len(data), hp["batch_size"]):
            idx = perm[start:start + hp["batch_size"]]
            grads = []
            for i in idx:
                p = theta.clone().requires_grad_(True)
                loss = F.cross_entropy(fm(p, data.x[i:i + 1]), data.y[i:i + 1])
                grads.append(torch.autograd.grad(loss, p)[0])
            grads = torch.stack(grads)
            g = grads.mean(0)
            fisher += (len(idx) / len(data)) * g ** 2 if fisher_norm == "code" else (grads ** 2).mean(0)
            step = g + lam * (omega / rnd) * (theta - mu)
            if step.norm() > clip:
                step, clipped = step * clip / (step.norm() + 1e-6), clipped + 1
            theta = theta - hp["lr"] * step
            steps += 1
    if fisher_norm == "paper":
        fisher /= steps
    assert 0 < clipped < steps == 2 * 4  # the replay exercised clipping (and steps without it)
    torch.testing.assert_close(msg["omega"] - omega, fisher)
    torch.testing.assert_close(msg["w"], theta)


def test_precision_bookkeeping_is_r_times_the_running_average():
    """Eq. 24–25 with full participation: the broadcast Ω_S after round R is R × the paper's
    Λ_S,R = (1/R) Σ_r Σ_n π_n F̄_n,r (client Fishers scripted)."""
    fm = tiny_model()
    datas = client_data()
    sizes = np.array([len(d) for d in datas])
    m = build_method("fola", fm, FOLA_HP, sizes)
    fishers = {}

    def scripted(fm_, hp, w_start, data, rng, penalty_grad=None, fisher_norm="code"):
        f = torch.rand(fm.n_params, generator=torch.Generator().manual_seed(len(fishers)))
        fishers[len(fishers)] = f
        return w_start + f, f, 0.0

    import fedbayes.methods.fola.algorithm as fola_mod
    original, fola_mod.sgd_accumulating_fisher = fola_mod.sgd_accumulating_fisher, scripted
    try:
        server, states = m.init_state(fm.flat_params())
        pi, running = sizes / sizes.sum(), torch.zeros(fm.n_params)
        for rnd in (1, 2, 3):
            down = m.broadcast(server, rnd)
            msgs = {k: m.client_update(k, down, states[k], d, np.random.default_rng(k), rnd)[0] for k, d in enumerate(datas)}
            server = m.server_update(server, msgs, rnd)
            f_r = sum(pi[k] * fishers[len(fishers) - 3 + k] for k in range(3))
            running = (rnd - 1) / rnd * running + f_r / rnd     # Λ_S,r = ((r−1)/r) Λ_S,r−1 + (1/r) Σ π F
            torch.testing.assert_close(server["omega"], rnd * running)
    finally:
        fola_mod.sgd_accumulating_fisher = original


# ---------------------------------------------------------------------------------------- FedCurv


def test_fedcurv_penalty_is_the_others_fisher_sum():
    """Shoham et al.: client n's penalty λ Σ_{j≠n} Σ_k F_j,k (θ_k − θ_j,k)², from the broadcast sums
    U = Σ_j F_j, V = Σ_j F_j∘θ_j minus its own terms: same gradient, same value up to a constant."""
    fm = tiny_model()
    P, lam = fm.n_params, 2.5
    m = build_method("fedcurv", fm, {**FOLA_HP, "lambda_prior": lam}, np.array([5, 9, 14]))
    server, states = m.init_state(fm.flat_params())
    thetas = [randn(P, seed=k) for k in range(3)]
    fishers = [torch.rand(P, generator=torch.Generator().manual_seed(20 + k)) for k in range(3)]
    # client 1 trains for real in round 1 and keeps its message's terms; clients 0 and 2 are scripted
    msg1, states[1], _ = m.client_update(1, m.broadcast(server, 1), states[1], client_data()[1], np.random.default_rng(1), 1)
    thetas[1], fishers[1] = msg1["w"], msg1["F"]
    server = m.server_update(server, {k: {"w": thetas[k], "F": fishers[k]} for k in range(3)}, rnd=1)
    torch.testing.assert_close(server["w"], sum(n / 28 * t for n, t in zip((5, 9, 14), thetas)))  # FedAvg mean
    down = m.broadcast(server, 2)

    def direct(w, others):
        return lam * sum((fishers[j] * (w - thetas[j]) ** 2).sum() for j in others)

    for state, others in ((states[1], (0, 2)), (states[0], (0, 1, 2))):  # client 0 did not take part in round 1
        pen = m.penalty(down, state, 2)
        a, b = randn(P, seed=7).requires_grad_(True), randn(P, seed=8)
        ga = torch.autograd.grad(pen(a), a)[0]
        torch.testing.assert_close(ga, torch.autograd.grad(direct(a, others), a)[0])
        torch.testing.assert_close(pen(a) - pen(b), direct(a, others) - direct(b, others))
    released = build_method("fedcurv", fm, {**FOLA_HP, "prior_loss": "released"}, np.array([5, 9, 14]))
    assert not released.penalty(down, states[1], 2)(randn(P).requires_grad_(True)).requires_grad


def test_fedcurv_global_anchor_is_the_authors_code_penalty():
    """FOLA authors' cnn_curv.py: (λ/(2r)) Σ Ω_S (θ − μ_S)², Ω_S = Σ π_n F_n of the last round."""
    fm = tiny_model()
    P, lam, sizes = fm.n_params, 2.5, np.array([5, 9, 14])
    m = build_method("fedcurv", fm, {**FOLA_HP, "lambda_prior": lam, "anchor": "global"}, sizes)
    server, states = m.init_state(fm.flat_params())
    thetas = [randn(P, seed=k) for k in range(3)]
    fishers = [torch.rand(P, generator=torch.Generator().manual_seed(20 + k)) for k in range(3)]
    server = m.server_update(server, {k: {"w": thetas[k], "F": fishers[k]} for k in range(3)}, rnd=1)
    pi = sizes / sizes.sum()
    omega, mu = sum(pi[k] * fishers[k] for k in range(3)), sum(pi[k] * thetas[k] for k in range(3))
    torch.testing.assert_close(server["omega"], omega)
    a = randn(P, seed=7).requires_grad_(True)
    pen = m.penalty(m.broadcast(server, 3), states[0], 3)(a)
    torch.testing.assert_close(pen, lam / (2 * 3) * (omega * (a - mu) ** 2).sum())
    torch.testing.assert_close(torch.autograd.grad(pen, a)[0], lam / 3 * omega * (a - mu))


@pytest.mark.parametrize("norm", ["code", "paper", "ggn"])
def test_fedcurv_offline_fisher_matches_brute_force(norm):
    """One extra pass at the final weights. code: Σ_b (|b|/N)(mean_{i∈b} g_i)² over a fresh order;
    paper: mean_i g_i² (FOLA Eq. 21); ggn: the exact Fisher mean_i Σ_c p_ic (∇ log p_c(x_i))²."""
    fm = tiny_model()
    data, bs = client_data()[2], 4
    w = fm.flat_params() + 0.3 * randn(fm.n_params, seed=4)
    got = offline_fisher(fm, w, data, np.random.default_rng(9), bs, norm)

    def grad_of(i, label):
        p = w.clone().requires_grad_(True)
        return torch.autograd.grad(F.cross_entropy(fm(p, data.x[i:i + 1]), torch.tensor([label])), p)[0]

    n = len(data)
    if norm == "code":
        perm = np.random.default_rng(9).permutation(n)
        want = sum(len(b) / n * torch.stack([grad_of(i, int(data.y[i])) for i in b]).mean(0) ** 2
                   for b in (perm[s:s + bs] for s in range(0, n, bs)))
    elif norm == "paper":
        want = sum(grad_of(i, int(data.y[i])) ** 2 for i in range(n)) / n
    else:
        probs = torch.softmax(fm(w, data.x), -1)
        want = sum(probs[i, c] * grad_of(i, c) ** 2 for i in range(n) for c in range(3)) / n
    torch.testing.assert_close(got, want)


def test_fedcurv_released_trains_as_fedavg():
    """With the released (detached) penalty the local weights are FedAvg's, even with a stiff λ."""
    fm = tiny_model()
    datas = client_data()
    sizes = np.array([len(d) for d in datas])
    hp = {**FOLA_HP, "lambda_prior": 1e3}
    fedavg = build_method("fedavg", fm, hp, sizes)
    curv = build_method("fedcurv", fm, {**hp, "prior_loss": "released"}, sizes)
    paper = build_method("fedcurv", fm, hp, sizes)
    (sa, _), (sc, cs), (sp, ps) = fedavg.init_state(fm.flat_params()), curv.init_state(fm.flat_params()), \
        paper.init_state(fm.flat_params())
    for rnd in (1, 2):
        ma = {k: fedavg.client_update(k, fedavg.broadcast(sa, rnd), {}, d, np.random.default_rng(k), rnd)[0]
              for k, d in enumerate(datas)}
        mc, mp = {}, {}
        for k, d in enumerate(datas):
            mc[k], cs[k], _ = curv.client_update(k, curv.broadcast(sc, rnd), cs[k], d, np.random.default_rng(k), rnd)
            mp[k], ps[k], _ = paper.client_update(k, paper.broadcast(sp, rnd), ps[k], d, np.random.default_rng(k), rnd)
        assert all(torch.equal(ma[k]["w"], mc[k]["w"]) for k in ma)
        sa, sc, sp = fedavg.server_update(sa, ma, rnd), curv.server_update(sc, mc, rnd), paper.server_update(sp, mp, rnd)
    assert not torch.allclose(mp[0]["w"], mc[0]["w"])  # round 2: the differentiable penalty acts


@pytest.mark.parametrize("name, hp, match", [
    ("fola", {}, "lambda_prior"), ("fola", {"lambda_prior": -1.0}, "lambda_prior"),
    ("fola", {"lambda_prior": 1.0, "gamma": 0.0}, "gamma"),
    ("fola", {"lambda_prior": 1.0, "fisher_norm": "ggn"}, "fisher_norm"),
    ("fola", {"lambda_prior": 1.0, "prior_loss": "detached"}, "prior_loss"),
    ("fedcurv", {}, "lambda_prior"), ("fedcurv", {"lambda_prior": 1.0, "anchor": "server"}, "anchor"),
    ("fedcurv", {"lambda_prior": 1.0, "fisher_norm": "true"}, "fisher_norm"),
    ("fedcurv", {"lambda_prior": 1.0, "prior_loss": "none"}, "prior_loss"),
])
def test_bad_hyperparameters_are_refused_at_construction(name, hp, match):
    with pytest.raises(ValueError, match=match):
        build_method(name, tiny_model(), hp, np.array([5]))


# ---------------------------------------------------------------------------------------- engine


@pytest.mark.parametrize("name, extra, up, down", [
    ("fola", {}, 2, 2),
    ("fola", {"fisher_norm": "paper"}, 2, 2),
    ("fedcurv", {}, 2, 3),
    ("fedcurv", {"anchor": "global", "fisher_norm": "ggn"}, 2, 2),
])
def test_learns_on_the_synthetic_task_and_resumes(name, extra, up, down, synthetic_run_data, cfg_factory, tmp_path):
    """The FOLA protocol's local training (SGD, clip 10) in the real engine: accuracy well above chance
    (10 classes), messages of the stated size, and a killed run resumes to the same numbers."""
    torch.set_default_dtype(torch.float32)
    hp = {"optimizer": "sgd", "lr": 0.1, "batch_size": 32, "local_epochs": 3, "grad_clip": 10.0,
          "lambda_prior": 10.0, **extra}
    cfg = cfg_factory(method=name, hparams=hp)
    full = run_federated(RunSpec.from_config(cfg), synthetic_run_data, tmp_path / "full", torch.device("cpu"), log=lambda m: None)
    assert full[0]["test/acc"] < 0.3 and full[-1]["test/acc"] > 0.8  # measured: 0.97–1.0 after 4 rounds
    P = FlatModel(build_model("mlp", (28, 28), 10, hidden=[32, 16])).n_params
    assert all(r["bytes_up"] == 4 * up * 4 * P and r["bytes_down"] == 4 * down * 4 * P for r in full[1:])
    run_federated(RunSpec.from_config(cfg),
                  synthetic_run_data, tmp_path / "cut", torch.device("cpu"), log=lambda m: None, stop_after=2)
    resumed = run_federated(RunSpec.from_config(cfg),
                            synthetic_run_data, tmp_path / "cut", torch.device("cpu"), log=lambda m: None)
    assert [r["test/nll"] for r in full] == [r["test/nll"] for r in resumed]
