"""IVON on flat vectors: step for step against the PyPI package ivon-opt, plus the parts ivon-opt has no
counterpart for (general prior mean, Lagrange terms, schedules)."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedbayes.methods.core.base import ClientData
from fedbayes.methods.core.ivon import IVONState, gaussian_samples_logits, ivon_step, ivon_train, lr_schedule
from fedbayes.methods.hyperparameters import Hyperparameters
from fedbayes.models import FlatModel

ivon = pytest.importorskip("ivon")


def _net(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3))


def _batches(n_steps=25, bs=8, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(bs, 6, generator=g), torch.randint(0, 3, (bs,), generator=g)) for _ in range(n_steps)]


@pytest.mark.parametrize("kw", [
    dict(mc_samples=1, rescale_lr=True, debias=True, clip_radius=math.inf, beta2=0.99999),
    dict(mc_samples=3, rescale_lr=False, debias=False, clip_radius=0.05, beta2=0.99),
])
def test_ivon_matches_ivon_opt_step_for_step(kw):
    lr, ess, wd, h0, b1 = 0.05, 500.0, 1e-3, 0.3, 0.9
    net = _net()
    fm = FlatModel(_net())
    opt = ivon.IVON(net.parameters(), lr=lr, ess=ess, hess_init=h0, weight_decay=wd, beta1=b1, **kw)
    st = IVONState.start(fm.flat_params(), h0)
    scale = (h0 + wd) if kw["rescale_lr"] else 1.0
    for step, (x, y) in enumerate(_batches()):
        torch.manual_seed(100 + step)
        for _ in range(kw["mc_samples"]):
            with opt.sampled_params(train=True):
                opt.zero_grad()
                F.cross_entropy(net(x), y).backward()
        opt.step()

        torch.manual_seed(100 + step)
        std = (ess * (st.h + wd)).rsqrt()
        grads, nxgs = [], []
        for _ in range(kw["mc_samples"]):
            noise = torch.randn(st.m.shape) * std
            theta = (st.m + noise).requires_grad_(True)
            (gs,) = torch.autograd.grad(F.cross_entropy(fm(theta, x), y), theta)
            grads.append(gs)
            nxgs.append(noise * gs)
        st = ivon_step(st, torch.stack(grads).mean(0), torch.stack(nxgs).mean(0), lr=lr * scale, ess=ess,
                       delta=wd, beta1=b1, beta2=kw["beta2"], clip_radius=kw["clip_radius"], debias=kw["debias"])
        ref_m = torch.cat([p.detach().flatten() for p in net.parameters()])
        torch.testing.assert_close(st.m, ref_m, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(st.h, opt.param_groups[0]["hess"], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(st.g, opt.param_groups[0]["momentum"], rtol=1e-5, atol=1e-7)


def test_ivon_train_loop_matches_ivon_opt():
    """The minibatch loop itself (permutation, last short batch, MC noise from the global generator)."""
    g = torch.Generator().manual_seed(3)
    data = ClientData(torch.randn(21, 6, generator=g), torch.randint(0, 3, (21,), generator=g))
    lr, ess, wd, h0 = 0.02, 200.0, 1e-2, 0.5
    net, fm = _net(4), FlatModel(_net(4))
    opt = ivon.IVON(net.parameters(), lr=lr, ess=ess, hess_init=h0, weight_decay=wd, beta2=0.999)
    torch.manual_seed(7)
    rng = np.random.default_rng(0)
    for _ in range(2):
        for idx in np.array_split(rng.permutation(21), [8, 16]):
            with opt.sampled_params(train=True):
                opt.zero_grad()
                F.cross_entropy(net(data.x[idx]), data.y[idx]).backward()
            opt.step()
    torch.manual_seed(7)
    st, _, steps = ivon_train(fm, IVONState.start(fm.flat_params(), h0), data, np.random.default_rng(0),
                              epochs=2, batch_size=8, lr=lambda i, n: lr * (h0 + wd), ess=ess, delta=wd,
                              beta2=0.999)
    assert steps == 6
    torch.testing.assert_close(st.m, torch.cat([p.detach().flatten() for p in net.parameters()]))
    torch.testing.assert_close(st.h, opt.param_groups[0]["hess"])


def test_prior_mean_and_lagrange_terms_enter_as_in_alg2():
    """Alg. 2 with a prior mean and duals: h tracks ĥ − u; the m step adds v − u∘m + δ(m − m_p)."""
    torch.manual_seed(0)
    P = 7
    st = IVONState(torch.randn(P), torch.rand(P) + 0.5, torch.randn(P), 4)
    grad, nxg, v, u, mp = (torch.randn(P) for _ in range(5))
    delta = torch.rand(P) + 0.1
    lr, ess, b1, b2 = 0.1, 30.0, 0.8, 0.95
    new = ivon_step(st, grad, nxg, lr=lr, ess=ess, delta=delta, beta1=b1, beta2=b2, prior_mean=mp, v=v, u=u)
    h_hat = nxg * (st.h + delta) * ess - u
    h = b2 * st.h + (1 - b2) * h_hat + 0.5 * (1 - b2) ** 2 * (st.h - h_hat) ** 2 / (st.h + delta)
    g = b1 * st.g + (1 - b1) * grad
    m = st.m - lr * (g / (1 - b1 ** 5) + v - u * st.m + delta * (st.m - mp)) / (h + delta)
    torch.testing.assert_close(new.h, h)
    torch.testing.assert_close(new.g, g)
    torch.testing.assert_close(new.m, m)
    assert new.t == 5


def test_h_plus_delta_stays_positive_for_any_estimate():
    st = IVONState(torch.zeros(1000), torch.rand(1000), torch.zeros(1000))
    nxg = torch.randn(1000) * 1e3
    new = ivon_step(st, torch.zeros(1000), nxg, lr=0.1, ess=10.0, delta=1e-3, beta2=0.5)
    assert bool(((new.h + 1e-3) >= (st.h + 1e-3) / 2 - 1e-6).all())


def test_ivon_finds_the_gaussian_posterior_of_a_quadratic():
    """ℓ̄(θ) = ½ a (θ − b)² per coordinate (400 independent coordinates): the IVON fixed point is the exact
    posterior N((a b + δ m_p)/(a + δ), 1/(λ(a + δ))), so m → that mean and h → a."""
    a, b, ess, delta, mp, P = 2.0, 1.5, 50.0, 0.5, -1.0, 400
    st = IVONState.start(torch.zeros(P), 1.0)
    torch.manual_seed(0)
    hs = []
    for i in range(6000):
        noise = torch.randn(P) * (ess * (st.h + delta)).rsqrt()
        grad = a * (st.m + noise - b)
        st = ivon_step(st, grad, noise * grad, lr=0.05, ess=ess, delta=delta, beta2=0.999, prior_mean=mp)
        if i >= 3000:
            hs.append(st.h.mean().item())
    assert abs(st.m.mean().item() - (a * b + delta * mp) / (a + delta)) < 0.01
    assert abs(np.mean(hs) - a) < 0.03


def test_lr_schedules():
    hp = Hyperparameters(lr=0.1, lr_final=0.01, lr_schedule="linear_local")
    f = lr_schedule(hp, 1, 10, scale=2.0)
    assert f(0, 6) == pytest.approx(0.2) and f(3, 6) == pytest.approx(2 * 0.055)
    c = Hyperparameters(lr=1.0, lr_schedule="cosine_rounds")
    assert lr_schedule(c, 1, 50)(5, 9) == pytest.approx(1.0)
    assert lr_schedule(c, 26, 50)(0, 9) == pytest.approx(0.5)
    assert lr_schedule(Hyperparameters(lr=0.3), 7, 50)(0, 1) == 0.3
    with pytest.raises(ValueError, match="lr_schedule"):
        lr_schedule(Hyperparameters(lr=1, lr_schedule="step"), 1, 2)


def test_gaussian_samples_are_the_same_networks_for_every_chunk():
    fm = FlatModel(_net())
    m = fm.flat_params()
    std = torch.full_like(m, 0.3)
    x = torch.randn(10, 6)
    whole = gaussian_samples_logits(fm, m, std, x, 4, seed=5)
    parts = torch.cat([gaussian_samples_logits(fm, m, std, x[:6], 4, seed=5),
                       gaussian_samples_logits(fm, m, std, x[6:], 4, seed=5)], dim=1)
    torch.testing.assert_close(whole, parts)
    zero = gaussian_samples_logits(fm, m, torch.zeros_like(m), x, 3, seed=1)
    torch.testing.assert_close(zero, fm(m, x).expand(3, -1, -1))


def _reference_ivon_train(fm, st, data, rng, *, epochs, batch_size, lr, ess, delta, prior_mean=0.0, v=None, u=None,
                          beta1=0.9, beta2=0.99999, mc_samples=1, clip_radius=math.inf, debias=True):
    """ivon_train as first written: a fresh tensor for every intermediate and the functional ``ivon_step``."""
    n, bs = len(data), batch_size
    total_steps, i = epochs * math.ceil(n / bs), 0
    for _ in range(epochs):
        perm = torch.from_numpy(rng.permutation(n))
        for start in range(0, n, bs):
            idx = perm[start:start + bs]
            x, y = data.x[idx], data.y[idx]
            std = (ess * (st.h + delta)).rsqrt()
            grad = nxg = None
            for s in range(mc_samples):
                noise = torch.randn(st.m.shape, dtype=st.m.dtype) * std
                theta = (st.m + noise).requires_grad_(True)
                (gs,) = torch.autograd.grad(F.cross_entropy(fm(theta, x), y), theta)
                grad = gs if grad is None else grad + (gs - grad) / (s + 1)
                nxg = noise * gs if nxg is None else nxg + (noise * gs - nxg) / (s + 1)
            with torch.no_grad():
                st = ivon_step(st, grad, nxg, lr=lr(i, total_steps), ess=ess, delta=delta, beta1=beta1, beta2=beta2,
                               prior_mean=prior_mean, v=v, u=u, clip_radius=clip_radius, debias=debias)
            i += 1
    return st


@pytest.mark.parametrize("kw", [
    dict(mc_samples=1, tensors=True, clip_radius=math.inf, debias=True),     # BayesADMM: δ, m_p, v, u vectors
    dict(mc_samples=1, tensors=False, clip_radius=math.inf, debias=True),    # FedIVON: scalar δ, no prior mean
    dict(mc_samples=3, tensors=True, clip_radius=1e-3, debias=False),
])
def test_in_place_ivon_train_is_bit_identical_to_the_functional_step(kw):
    """ivon_train updates its state in place (no per-step temporaries); its iterates are the functional
    ``ivon_step``'s bit for bit, and the caller's state tensors are left untouched."""
    kw = dict(kw)
    fm = FlatModel(_net())
    P = fm.n_params
    g = torch.Generator().manual_seed(3)
    m0 = fm.flat_params()
    st = IVONState(m0.clone(), torch.rand(P, generator=g) * 1e-2, torch.randn(P, generator=g) * 1e-2, 4)
    extra = {}
    if kw.pop("tensors"):
        extra = dict(delta=torch.rand(P, generator=g) * 1e-3 + 1e-4, prior_mean=torch.randn(P, generator=g),
                     v=torch.randn(P, generator=g) * 1e-3, u=torch.rand(P, generator=g) * 1e-3)
    else:
        extra = dict(delta=2e-4)
    xs, ys = zip(*_batches(n_steps=6, bs=7))
    data = ClientData(torch.cat(xs), torch.cat(ys))
    common = dict(epochs=3, batch_size=8, lr=lambda i, n: 0.05 * (1 - i / n), ess=300.0, beta1=0.9, beta2=0.999,
                  **extra, **kw)
    before = [t.clone() for t in (st.m, st.h, st.g)]
    torch.manual_seed(7)
    ref = _reference_ivon_train(fm, st, data, np.random.default_rng(5), **common)
    torch.manual_seed(7)
    got, _, steps = ivon_train(fm, st, data, np.random.default_rng(5), **common)
    assert steps == ref.t - st.t == 18
    for name in ("m", "h", "g"):
        assert torch.equal(getattr(got, name), getattr(ref, name)), name
    assert got.t == ref.t
    assert all(torch.equal(a, b) for a, b in zip(before, (st.m, st.h, st.g)))


@pytest.mark.full
@pytest.mark.parametrize("with_duals,clip,vector_delta", [(True, math.inf, True), (False, 0.5, False), (True, 0.05, True)])
@pytest.mark.parametrize("cpu_kernels", [True, False])
def test_compiled_ivon_step_is_the_eager_step_bit_for_bit(with_duals, clip, vector_delta, cpu_kernels, monkeypatch):
    """From COMPILE_MIN_PARAMS parameters up IVON steps with a compiled kernel of ``_ivon_step_`` (on the
    CPU ``kernels.cpp``'s loop; without it, as on a GPU, torch.compile's): the state it leaves (m, h, g,
    h + δ, t) equals the eager step's bit for bit, over several steps."""
    from fedbayes.methods.core import ivon, kernels

    if not cpu_kernels:
        monkeypatch.setattr(kernels, "_kernel", False)

    n = ivon.COMPILE_MIN_PARAMS + 17
    gen = torch.Generator().manual_seed(3)
    r = lambda: torch.randn(n, generator=gen)  # noqa: E731
    m, h, g = r(), r().abs() * 1e-3, r() * 1e-2
    delta = r().abs() * 1e-2 + 1e-4 if vector_delta else 1e-3
    kw = dict(ess=3000.0, delta=delta, beta1=0.9, beta2=0.99999, prior_mean=r() * 0.1 if with_duals else 0.0,
              v=r() * 1e-3 if with_duals else None, u=r().abs() * 1e-4 if with_duals else None,
              clip_radius=clip, debias=True)
    steps = [(r() * 0.1, r() * 1e-3, 0.01 * (1 - i / 5)) for i in range(4)]
    states = []
    for fn in (ivon._ivon_step_, ivon.ivon_step_):
        mm, hh, gg = m.clone(), h.clone(), g.clone()
        hd, a, b, t = hh + delta, torch.empty(n), torch.empty(n), 0
        for grad, nxg, lr in steps:
            t = fn(mm, hh, gg, t, grad, nxg, hd, a, b, lr=lr, **kw)
        states.append((mm, hh, gg, hd, t))
    assert ivon._step_fn(n) is not ivon._ivon_step_ or ivon._compiled is False   # the compiled path ran (or fell back)
    (m1, h1, g1, hd1, t1), (m2, h2, g2, hd2, t2) = states
    assert t1 == t2 == 4
    for x, y in ((m1, m2), (h1, h2), (g1, g2), (hd1, hd2)):
        assert torch.equal(x, y)
