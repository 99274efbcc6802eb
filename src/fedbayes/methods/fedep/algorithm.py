"""FedEP and FedSEP (Guo et al., "Federated Learning as Variational Inference: A Scalable
Expectation Propagation Approach"; FedEP spec 002 §2), and FedAvg with server momentum, their baseline.

Gaussians are diagonal and stored in natural form (η, Λ), μ = η / Λ. Every method starts with
``burn_in`` rounds of FedAvg-M (spec §2.10, §2.14):

    client:  E epochs of SGD (momentum 0.9, fresh each visit) on  mean CE + ½ λ_wd ‖θ‖²,  from θ_g;
             sends Δ_k = θ_g − θ_k
    server:  Δ̄ = Σ_k n_k Δ_k / Σ_k n_k;   m ← β m + Δ̄;   θ_g ← θ_g − lr_s m

At the switch (spec §2.10) μ0 = θ_g, Λ_g = α_cov N, η_g = Λ_g μ0 and, for FedEP, every site
Λ_k = α_cov n_k, η_k = Λ_k μ0 (so Π_k q_k = q_g); optimiser states start at zero. α_cov = c (a + λ_wd)
is a precision *per data point* (spec §2.8). Then each round (spec §2.15):

    cavity     FedEP:  η_−k = η_g − η_k,  Λ_−k = Λ_g − Λ_k;   FedSEP:  (1 − n_k/N)·(η_g, Λ_g)
    samples    E epochs of SGD-M from μ_g on  mean CE + ½ λ_wd ‖θ‖² + (½ θᵀΛ_−k θ − η_−kᵀθ)/n_k,
               one sample per epoch; μ_\\k = their mean (every variant)
    precision  I:  Λ_\\k = Λ_−k + α_cov n_k
               M:  Λ̃ = 1/(ρ + (1−ρ) var(S)), clipped to mean ± 2 std, rescaled to ‖Λ_−k + α_cov n_k‖
               L:  F = n_k · mean of per-example squared gradients at μ_\\k, labels drawn from the
                   model (T_L passes), clipped;  Λ_\\k = Λ_−k + c (F + λ_wd n_k)
               V:  NGVI, one step per minibatch over T_V passes: s ← β s + (1−β) clip(F̄), F̄ at
                   N_V draws θ ~ N(μ_\\k, 1/(n_k s + Λ_−k + λ_wd n_k));  Λ_\\k = Λ_−k + c (n_k s + λ_wd n_k)
    delta      (Δη, ΔΛ) = (Λ_\\k μ_\\k − η_g, Λ_\\k − Λ_g), clipped to global norm C, times δ = 1/M
    client     FedEP only: m_k ← β m_k + Δ_k;  (η_k, Λ_k) += lr_s m_k
    server     g = Σ_k Δ_k;  m ← β m + g;  (η_g, Λ_g) += lr_s m     (or optax-style Adagrad, eps inside √)

Prediction: "" = the network at μ_g (the paper's per-round metric); "mc" = the mean of softmax over
``pred_samples`` (10) networks θ ~ N(μ_g, 1/Λ_g) (Table 5).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.func import grad, vmap

from fedbayes.methods.core import kernels
from fedbayes.methods.core.curvature import evaluation_mode
from fedbayes.methods.core.ivon import gaussian_samples_logits
from fedbayes.methods.core.local import minibatches
from fedbayes.methods.fedavgm.algorithm import FedAvgM


def clip_mean_std(x: torch.Tensor, k: float = 2.0) -> torch.Tensor:
    """Clip elementwise to [mean − k·std, mean + k·std] (population std), as the FedEP code."""
    m, s = x.mean(), x.std(unbiased=False)
    return x.clamp(m - k * s, m + k * s)


def sampled_fisher(fm, w: torch.Tensor, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Σ over the rows of ``x`` of the squared per-example gradient of −log p(ŷ | x, w), with ŷ drawn
    from the model's own predictive at w (the "true" Fisher, spec §2.8 L; Kunstner et al.)."""
    w = w.detach()
    with evaluation_mode(fm):   # the predictive's curvature: dropout off
        with torch.no_grad():
            probs = torch.softmax(fm(w, x), -1)
        y_hat = torch.multinomial(probs, 1, generator=gen).squeeze(-1)

        def nll(p, xi, yi):
            return F.cross_entropy(fm(p, xi.unsqueeze(0)), yi.unsqueeze(0))

        g = vmap(grad(nll), in_dims=(None, 0, 0))(w, x, y_hat)
    return g.square().sum(0)


class FedEP(FedAvgM):
    """Stateful EP (``stateful = True``); FedSEP is the stateless subclass."""

    stateful = True

    def alpha_cov(self) -> float:
        return float(self.p.cov_scale) * (float(self.p.init_scale) + float(self.p.weight_decay))

    def switch(self, server):
        mu0 = server["w"]
        lam = torch.full_like(mu0, self.alpha_cov() * float(self.client_sizes.sum()))
        z = torch.zeros_like(mu0)
        return {"w": mu0.clone(), "mu0": mu0.clone(), "eta": lam * mu0, "lam": lam, "mom_eta": z.clone(),
                "mom_lam": z.clone(), "acc_eta": z.clone(), "acc_lam": z.clone()}

    def broadcast(self, server, rnd):
        if rnd <= self.burn_in():
            return {"w": server["w"]}
        down = {"eta": server["eta"], "lam": server["lam"]}
        if self.stateful and 0 < self.clients_per_round < self.n_clients:
            down["mu0"] = server["mu0"]  # a site first visited after the switch initialises from μ0
        return down

    def site(self, k, down, state, n_k):
        """Client k's site (η_k, Λ_k, momenta); at its first EP visit Λ_k = α_cov n_k, η_k = Λ_k μ0."""
        if "eta" in state:
            return state
        mu0 = down.get("mu0", down["eta"] / down["lam"])
        lam = torch.full_like(mu0, self.alpha_cov() * n_k)
        z = torch.zeros_like(mu0)
        return {"eta": lam * mu0, "lam": lam, "mom_eta": z.clone(), "mom_lam": z.clone()}

    def cavity(self, down, site, n_k):
        if self.stateful:
            return down["eta"] - site["eta"], down["lam"] - site["lam"]
        p = 1.0 - n_k / float(self.client_sizes.sum())
        return p * down["eta"], p * down["lam"]

    def damping(self) -> float:
        d = self.p.damping
        return float(d) if d is not None else 1.0 / (self.clients_per_round or self.n_clients)

    def tilted_precision(self, samples, mu_t, cav_lam, data, n_k, rng):
        variant = self.p.variant
        alpha, wd, c = self.alpha_cov(), float(self.p.weight_decay), float(self.p.cov_scale)
        gen = torch.Generator(device=mu_t.device).manual_seed(int(rng.integers(2**62)))
        if variant == "I":
            return cav_lam + alpha * n_k
        if variant == "M":
            rho = float(self.p.shrinkage)
            lam_tmp = clip_mean_std(1.0 / (rho + (1 - rho) * samples.var(0, unbiased=True)))
            ref = cav_lam + alpha * n_k
            return lam_tmp * ref.norm() / lam_tmp.norm()
        bs = min(int(self.p.batch_size), n_k)
        if variant == "L":
            total, count = torch.zeros_like(mu_t), 0
            for _ in range(int(self.p.laplace_epochs)):
                for idx in minibatches(n_k, bs, rng, data.x.device):
                    xb = data.x[idx]
                    total += sampled_fisher(self.fm, mu_t, xb, gen) / len(xb)  # batch mean
                    count += 1
            fisher = clip_mean_std(n_k * total / count)
            return cav_lam + c * (fisher + wd * n_k)
        if variant == "V":
            beta, n_samples = float(self.p.ngvi_beta), int(self.p.ngvi_samples)
            s = torch.full_like(mu_t, float(self.p.init_scale))
            for _ in range(int(self.p.ngvi_epochs)):
                for idx in minibatches(n_k, bs, rng, data.x.device):
                    xb = data.x[idx]
                    std = (n_k * s + cav_lam + wd * n_k).clamp_min(1e-12).rsqrt()
                    fbar = sum(sampled_fisher(self.fm, mu_t + std * kernels.randn(mu_t.shape, generator=gen, device=mu_t.device),
                                              xb, gen)
                               for _ in range(n_samples)) / (n_samples * len(xb))
                    s = beta * s + (1 - beta) * clip_mean_std(fbar)
            return cav_lam + c * (n_k * s + wd * n_k)
        raise ValueError(f"unknown FedEP variant {variant!r}; choose I, M, L or V")

    def tilt(self, k, down, state, n_k):
        """Client k's site, cavity and the gradient operands of its tilted objective's extra term:
        ∇ (½ θᵀΛ_−k θ − η_−kᵀθ) / n_k = ((½/n_k) Λ_−k)(2θ) + (−1/n_k) η_−k, in autograd's operations."""
        site = self.site(k, down, state, n_k) if self.stateful else {}
        cav_eta, cav_lam = self.cavity(down, site, n_k)
        inv_n = torch.ones((), dtype=cav_eta.dtype, device=cav_eta.device) / n_k
        return site, cav_lam, cav_lam * (inv_n * 0.5), cav_eta * -inv_n

    def client_update(self, k, down, state, data, rng, rnd):
        if rnd <= self.burn_in():
            return super().client_update(k, down, state, data, rng, rnd)
        site, cav_lam, lam_half, eta_neg = self.tilt(k, down, state, len(data))

        def tilt_grad(w):
            return (w * 2.0).mul_(lam_half).add_(eta_neg)

        samples, loss = self.sgd_epochs(down["eta"] / down["lam"], data, rng, int(self.p.local_epochs),
                                        extra_grad=tilt_grad)
        return self.site_update(samples, loss, site, cav_lam, down, state, data, rng)

    def client_updates_after_burn_in(self, ks, down, states, datas, rngs, rnd):
        """The EP rounds trained together: every client's tilted objective in one batched loop
        (``sgd_epochs_batched``, the extra term's gradient on the stacked weights with the clients' stacked
        cavities), then each client's tilted precision (its own ``rng``, continued as one by one) and
        site update."""
        tilts = [self.tilt(k, down, st, len(d)) for k, st, d in zip(ks, states, datas)]
        lam_half, eta_neg = torch.stack([t[2] for t in tilts]), torch.stack([t[3] for t in tilts])
        out = self.sgd_epochs_batched(down["eta"] / down["lam"], datas, rngs, int(self.p.local_epochs),
                                      extra_grad=lambda W: (W * 2.0).mul_(lam_half).add_(eta_neg))
        if out is None:
            return None
        return [self.site_update(samples, loss, site, cav_lam, down, st, d, rng)
                for (samples, loss), (site, cav_lam, _, _), st, d, rng in zip(out, tilts, states, datas, rngs)]

    def site_update(self, samples, loss, site, cav_lam, down, state, data, rng):
        """(message, client state, loss) from the client's iterate samples: the tilted mean and precision,
        the clipped and damped delta, and (FedEP) the site's momentum step."""
        n_k = len(data)
        mu_t = samples.mean(0)
        lam_t = self.tilted_precision(samples, mu_t, cav_lam, data, n_k, rng)
        d_eta, d_lam = lam_t * mu_t - down["eta"], lam_t - down["lam"]
        clip = self.p.clip
        if clip is not None:
            norm = torch.sqrt(d_eta.square().sum() + d_lam.square().sum())
            scale = min(1.0, float(clip) / max(norm.item(), 1e-30))
            d_eta, d_lam = d_eta * scale, d_lam * scale
        d_eta, d_lam = self.damping() * d_eta, self.damping() * d_lam
        if self.stateful:
            b, lr = float(self.p.server_momentum), float(self.p.server_lr)
            m_eta, m_lam = b * site["mom_eta"] + d_eta, b * site["mom_lam"] + d_lam
            state = {"eta": site["eta"] + lr * m_eta, "lam": site["lam"] + lr * m_lam, "mom_eta": m_eta, "mom_lam": m_lam}
        return {"d_eta": d_eta, "d_lam": d_lam}, state, loss

    def server_update(self, server, messages, rnd):
        if rnd < self.burn_in():
            return self.fedavg_server(server, messages)
        if rnd == self.burn_in():
            return self.switch(self.fedavg_server(server, messages))
        g_eta = sum(m["d_eta"] for m in messages.values())
        g_lam = sum(m["d_lam"] for m in messages.values())
        lr = float(self.p.server_lr)
        if self.p.server_optimizer == "adagrad":  # optax: A += g²; step g/√(A + eps), 0 where A = 0
            eps = float(self.p.adagrad_eps)
            a_eta, a_lam = server["acc_eta"] + g_eta.square(), server["acc_lam"] + g_lam.square()
            step_eta = torch.where(a_eta > 0, g_eta / (a_eta + eps).sqrt(), torch.zeros_like(g_eta))
            step_lam = torch.where(a_lam > 0, g_lam / (a_lam + eps).sqrt(), torch.zeros_like(g_lam))
            new = {"acc_eta": a_eta, "acc_lam": a_lam}
        else:
            b = float(self.p.server_momentum)
            step_eta, step_lam = b * server["mom_eta"] + g_eta, b * server["mom_lam"] + g_lam
            new = {"mom_eta": step_eta, "mom_lam": step_lam}
        eta, lam = server["eta"] + lr * step_eta, server["lam"] + lr * step_lam
        return {**server, **new, "eta": eta, "lam": lam, "w": eta / lam}

    def predict_logits(self, server, x, variant="", seed=0):
        if variant != "mc":
            return self.fm(server["w"], x)
        if "lam" not in server:  # still in burn-in: no posterior, the point prediction
            return self.fm(server["w"], x).unsqueeze(0)
        std = server["lam"].clamp_min(1e-12).rsqrt()  # nothing enforces Λ_g > 0 (spec §2.9)
        return gaussian_samples_logits(self.fm, server["w"], std, x, int(self.p.pred_samples), seed)
