"""IVON (Shen et al. 2024) on one flat parameter vector, with a general diagonal Gaussian prior and the
Lagrange terms BayesADMM adds (BayesADMM spec Alg. 2; FedIVON spec Alg. 2).

It solves, for a data term ℓ̄ (minibatch-mean loss) and an effective sample size λ,

    min_q  λ E_q[ ℓ̄(θ) + vᵀθ − ½ θᵀ(u∘θ) ] + KL(q ‖ N(m_p, diag(1/(λδ)))),    q = N(m, diag(1/(λ(h + δ))))

where δ (a vector or a scalar) is the prior precision per unit of λ (IVON's "weight decay"). State:
mean m, Hessian estimate h, momentum g, step count t. One step with S Monte-Carlo samples:

    θ_s = m + ε_s / sqrt(λ(h + δ)),  ε_s ~ N(0, I)
    ĝ = mean_s ∇ℓ̄(θ_s);   ĥ = mean_s ∇ℓ̄(θ_s)∘(θ_s − m) · λ(h + δ) − u       (reparameterisation estimate)
    g ← β1 g + (1 − β1) ĝ
    h ← β2 h + (1 − β2) ĥ + ½(1 − β2)² (h − ĥ)² / (h + δ)                       (h before the update on the right)
    m ← m − lr_t · clip( (g/(1 − β1^t) + v − u∘m + δ∘(m − m_p)) / (h + δ), ±r )   (the new h)

With u = v = 0, m_p = 0 and a scalar δ this is ivon-opt's ``IVON`` step for step (same seed, same
iterates: ``tests/test_ivon.py``); ivon-opt's ``rescale_lr`` is ``lr_t = lr·(h0 + δ)`` here.
The posterior precision is ``λ(h + δ)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F


@dataclass
class IVONState:
    m: torch.Tensor
    h: torch.Tensor
    g: torch.Tensor
    t: int = 0

    @classmethod
    def start(cls, m: torch.Tensor, h0) -> "IVONState":
        h = torch.as_tensor(h0, dtype=m.dtype, device=m.device).expand_as(m).clone()
        return cls(m.detach().clone(), h, torch.zeros_like(m), 0)

    def precision(self, ess: float, delta) -> torch.Tensor:
        """λ(h + δ), the diagonal precision of q."""
        return ess * (self.h + delta)


def ivon_step(st: IVONState, grad: torch.Tensor, nxg: torch.Tensor, *, lr: float, ess: float, delta,
              beta1: float = 0.9, beta2: float = 0.99999, prior_mean=0.0, v=None, u=None,
              clip_radius: float = math.inf, debias: bool = True) -> IVONState:
    """One update from the MC-averaged gradient ``grad`` and ``nxg`` = mean_s ∇ℓ̄(θ_s)∘(θ_s − m)."""
    t = st.t + 1
    g = beta1 * st.g + (1.0 - beta1) * grad
    hd = st.h + delta
    h_hat = nxg * hd * ess
    if u is not None:
        h_hat = h_hat - u
    h = beta2 * st.h + (1.0 - beta2) * h_hat + 0.5 * (1.0 - beta2) ** 2 * (st.h - h_hat).square() / hd
    step = g / (1.0 - beta1 ** t if debias else 1.0) + delta * (st.m - prior_mean)
    if v is not None:
        step = step + v
    if u is not None:
        step = step - u * st.m
    step = step / (h + delta)
    if math.isfinite(clip_radius):
        step = step.clamp(-clip_radius, clip_radius)
    return IVONState(st.m - lr * step, h, g, t)


def ivon_train(fm, st: IVONState, data, rng: np.random.Generator, *, epochs: int, batch_size: int,
               lr: Callable[[int, int], float], ess: float, delta, prior_mean=0.0, v=None, u=None,
               beta1: float = 0.9, beta2: float = 0.99999, mc_samples: int = 1,
               clip_radius: float = math.inf, debias: bool = True,
               loss_fn=F.cross_entropy) -> tuple[IVONState, float, int]:
    """``epochs`` passes of IVON over ``data`` (a fresh permutation from ``rng`` each epoch; the last
    batch may be smaller); ``loss_fn(outputs, y)`` is the minibatch-mean loss ℓ̄. ``lr(i, n)`` is the learning rate of local step i (0-based) of n.
    Noise comes from torch's global generator (the engine seeds it per round and client).
    Returns the new state, the mean minibatch loss at the samples, and the number of steps."""
    n, bs = len(data), int(batch_size)
    per_epoch = math.ceil(n / bs)
    total_steps = epochs * per_epoch
    total, i = 0.0, 0
    for _ in range(epochs):
        perm = torch.from_numpy(rng.permutation(n)).to(data.x.device)
        for start in range(0, n, bs):
            idx = perm[start:start + bs]
            x, y = data.x[idx], data.y[idx]
            std = (ess * (st.h + delta)).rsqrt()
            grad = nxg = None
            for s in range(mc_samples):
                noise = torch.randn(st.m.shape, dtype=st.m.dtype, device=st.m.device) * std
                theta = (st.m + noise).requires_grad_(True)
                loss = loss_fn(fm(theta, x), y)
                (gs,) = torch.autograd.grad(loss, theta)
                total += loss.item() / mc_samples
                grad = gs if grad is None else grad + (gs - grad) / (s + 1)       # running means
                nxg = noise * gs if nxg is None else nxg + (noise * gs - nxg) / (s + 1)
            with torch.no_grad():
                st = ivon_step(st, grad, nxg, lr=lr(i, total_steps), ess=ess, delta=delta, beta1=beta1,
                               beta2=beta2, prior_mean=prior_mean, v=v, u=u, clip_radius=clip_radius,
                               debias=debias)
            i += 1
    return st, total / max(i, 1), i


def lr_schedule(hp: dict, rnd: int, rounds: int) -> Callable[[int, int], float]:
    """The local learning rate as a function of (local step i, local steps n):

    * ``constant``: ``lr``;
    * ``cosine_rounds``: ``lr·(1 + cos(π (r−1)/R))/2`` in round r of R, constant within a round
      (BayesADMM, PyTorch's CosineAnnealingLR stepped once per round, η_min = 0);
    * ``linear_local``: from ``lr`` to ``lr_final`` linearly over the n local steps of each client
      update (FedIVON App. B "linearly decaying", spec ambiguity A3: step i gets lr + (lr_final − lr)·i/n).
    Multiplied by ``lr_scale`` (IVON's rescale_lr factor h0 + δ where a method uses it)."""
    kind, lr0 = hp.get("lr_schedule", "constant"), float(hp["lr"])
    scale = float(hp.get("lr_scale", 1.0))
    if kind == "constant":
        return lambda i, n: lr0 * scale
    if kind == "cosine_rounds":
        val = lr0 * 0.5 * (1.0 + math.cos(math.pi * (rnd - 1) / rounds))
        return lambda i, n: val * scale
    if kind == "linear_local":
        lr1 = float(hp["lr_final"])
        return lambda i, n: (lr0 + (lr1 - lr0) * i / n) * scale
    raise ValueError(f"unknown lr_schedule {kind!r}; choose constant, cosine_rounds or linear_local")


@torch.no_grad()
def gaussian_samples_logits(fm, mean: torch.Tensor, std: torch.Tensor, x: torch.Tensor, n_samples: int,
                            seed: int) -> torch.Tensor:
    """(S, N, C) logits at S draws θ_s = mean + std∘ε_s. The draws depend only on ``seed`` (not on x),
    so calling this chunk by chunk over a test set uses the same S networks for every chunk."""
    gen = torch.Generator(device=mean.device).manual_seed(int(seed))
    out = []
    for _ in range(int(n_samples)):
        eps = torch.randn(mean.shape, generator=gen, dtype=mean.dtype, device=mean.device)
        out.append(fm(mean + std * eps, x))
    return torch.stack(out)
