"""FOLA: federated online Laplace (Liu, Jiang et al., TPAMI 2023, arXiv 2102.01936; spec 004 §2–§3).

Every client returns a diagonal Gaussian N(θ_n, Ω_n⁻¹); the server multiplies them (Eq. 11–12) and
sends the product back as the next round's prior (Eq. 14–16). Precisions are kept as the authors'
code keeps them, **cumulative over rounds** (spec §3.2, D4): Ω = r·Λ, where Λ is the paper's
running-average precision Σ⁻¹ of Eq. 24–25. The factor r cancels in the aggregate (Eq. 12).

client n, round r (receives μ_S = ``w`` and Ω_S = ``omega`` of round r−1; Ω_S,0 = 0):
    θ ← μ_S
    each step t of E epochs of minibatches b_t (from a fresh permutation each epoch):
        g_t   = ∇ mean_{i∈b_t} CE(θ_t; x_i, y_i)                                    (L_Task)
        F    += (|b_t| / N_n) g_t²                          fisher_norm=code (the authors' estimator, D2)
             or (1/T) mean_{i∈b_t} (∇ CE_i(θ_t))²           fisher_norm=paper (Eq. 22, one minibatch per step)
        θ    ← θ − lr · clip(g_t + ∇ L_Prior(θ_t))                                 (Eq. 16, SGD)
    L_Prior(θ) = (λ/2) Σ_j (Ω_S,j / r) (θ_j − μ_S,j)²                               (Eq. 15 × λ)
          Ω_S/r = ((r−1)/r) Λ_S,r−1, the prior term of Eq. 24; zero in round 1 (D6)
    sends θ_n and Ω_n = Ω_S + F_n                          (= r × Eq. 24: (1/r) F̄_n + ((r−1)/r) Σ_S*⁻¹)
server (Eq. 12, diagonal; π_n = N_n / Σ_{m sampled} N_m):
    Ω_S ← Σ_n π_n Ω_n                                      (= r × Eq. 25 without γ: the running sum of Fishers)
    μ_S ← Σ_n π_n Ω_n θ_n / (Ω_S + γ)                      (γ: the "+γI" of Eq. 25, the code's eps; D4–D5)

``prior_loss: released`` evaluates L_Prior on a detached θ, as the authors' code did (it read θ from
``state_dict()``): the same value, no gradient, so local training is plain SGD (spec §3.2, D3).
Prediction: the plug-in network at μ_S (the paper never samples N(μ_S, Σ_S)).
Model initialisation is the engine's (the authors used Xavier-uniform weights and zero biases).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from fedbayes.methods.core import kernels
from fedbayes.methods.core.base import ClientData, Method
from fedbayes.methods.core.curvature import per_example_grads, prior_grad_fn, stacked_prior_grad_fn
from fedbayes.methods.core.batched import StackedFisher, train_local_batched
from fedbayes.methods.core.local import make_optimizer, train_local


def product_aggregate(thetas: torch.Tensor, precisions: torch.Tensor, weights: torch.Tensor,
                      gamma: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Mode and precision of Π_n N(θ_n, diag Ω_n⁻¹)^{π_n} · N(0, γ⁻¹I) (Eq. 11–12, 25), π = weights/Σ weights.

    thetas, precisions: (K, P); weights: (K,). Returns (μ_S, Ω_S) with Ω_S = Σ π_n Ω_n (without γ, as
    stored and broadcast) and μ_S = Σ π_n Ω_n θ_n / (Ω_S + γ)."""
    pi = weights / weights.sum()
    omega = torch.einsum("k,kp->p", pi, precisions)
    mu = torch.einsum("k,kp->p", pi, precisions * thetas) / (omega + gamma)
    return mu, omega


def sgd_accumulating_fisher(fm, p, w_start: torch.Tensor, data: ClientData, rng: np.random.Generator,
                            penalty_grad: Callable[[torch.Tensor], torch.Tensor | None] | None = None
                            ) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Algorithm 1's ClientUpdate loop: ``local_epochs`` passes of minibatches (a fresh permutation of
    the data from ``rng`` each epoch, as ``Method.local_train``), each step adding the squared CE
    gradient at θ_t to the Fisher (before clipping and the step), then stepping on CE + a penalty whose
    gradient at θ_t is ``penalty_grad(θ_t)`` (None: no gradient).

    ``p``: the method's typed hyperparameters (optimizer, lr, local_epochs, batch_size, grad_clip,
    fisher_norm). Returns (θ after the last step, F_n, mean CE over the steps)."""
    w = w_start.detach().clone().requires_grad_(True)
    opt = make_optimizer(p.optimizer, [w], p.lr)
    n = len(data)
    fisher, sq = torch.zeros_like(w_start), torch.empty_like(w_start)

    def squared_batch_gradient(g, size):          # fisher += (|b|/N) g², in place (fisher_norm code)
        kernels.add_scaled_square_(fisher, g, size / n, scratch=sq)

    def per_example(x, y):                        # Eq. 22's per-example squared gradients (fisher_norm paper)
        grads, losses = per_example_grads(fm, w, x, y)
        fisher.add_(grads.square().mean(0))
        return losses.mean(), grads.mean(0)

    paper = p.fisher_norm == "paper"
    mean_loss, steps = train_local(fm, opt, data, rng, epochs=int(p.local_epochs), batch_size=int(p.batch_size),
                                   on_grad=None if paper else squared_batch_gradient,
                                   gradient=per_example if paper else None,
                                   extra_grad=penalty_grad, clip=p.grad_clip)
    if paper:
        fisher /= max(steps, 1)  # Eq. 22: the average over the T local steps
    return w.detach(), fisher, mean_loss


def sgd_accumulating_fisher_batched(fm, p, w_start: torch.Tensor, datas: list[ClientData], rngs: list,
                                    penalty_grad: Callable[[torch.Tensor], torch.Tensor] | None = None
                                    ) -> list[tuple[torch.Tensor, torch.Tensor, float]] | None:
    """``sgd_accumulating_fisher`` for C clients together, all from ``w_start``: the one batched loop
    (``train_local_batched``) with ``penalty_grad`` of the stacked weights (C, P) and the Fisher sum on its
    stacked data gradients (``code``: ``StackedFisher``) or on the per-example gradients that make each
    step's gradient (``paper``: ``StackedPlan.example_gradients``, then divided by each client's number of
    steps). Each client's (θ, F, mean CE), up to float round-off; None for a model that draws (dropout)."""
    if not fm.row_wise:
        return None
    paper = p.fisher_norm == "paper"
    fisher = StackedFisher(w_start, [len(d) for d in datas], int(p.batch_size), int(p.local_epochs))

    def per_example(plan, W, s):                  # Eq. 22: F += mean_i (∇ CE_i)² of the clients taking step s
        def add(G2, index):
            if index is None:
                fisher.fisher.add_(G2)
            else:
                fisher.fisher[index] += G2
        return plan.example_gradients(W, s, add)

    W, losses, steps = train_local_batched(fm, w_start, datas, rngs, epochs=int(p.local_epochs),
                                           batch_size=int(p.batch_size), lr=float(p.lr), optimizer=p.optimizer,
                                           clip=p.grad_clip, extra_grad=penalty_grad,
                                           on_grad=None if paper else fisher, gradient=per_example if paper else None)
    if paper:
        for c, n in enumerate(steps):
            fisher.fisher[c] /= max(n, 1)
    return [(W[c], fisher.fisher[c], losses[c]) for c in range(len(datas))]


class FOLA(Method):
    """FOLA (spec 004 §3.3). Hyperparameters:

    lambda_prior : float ≥ 0 — λ, the prior-loss weight (Eq. 16). No value in the paper; grid
                   {1, 10, 10², 10³, 10⁴} (spec D15), on the authors' Fisher scale.
    gamma        : float > 0, default 1e-5 — γ, the precision floor of the aggregate (Eq. 25; the
                   authors' eps, added to the denominator of μ_S only; spec D4–D5).
    fisher_norm  : ``code`` (default) — F_n = Σ_t (|b_t|/N_n) g_t², squared minibatch-mean gradients
                   summed over all steps (≈ (E/B) × Eq. 22; the λ grid is tuned to it, spec D2);
                   ``paper`` — Eq. 22, per-example squared gradients averaged over the steps.
    prior_loss   : ``paper`` (default) — differentiable Eq. 15; ``released`` — no gradient, as the
                   authors' released code (spec D3).
    Local training: ``optimizer`` (the paper: SGD), ``lr``, ``batch_size``, ``local_epochs``, ``grad_clip``.
    """

    def local_weights(self, message, down):
        return message["w"]

    def init_state(self, w0):
        return {"w": w0.clone(), "omega": torch.zeros_like(w0)}, [{} for _ in range(self.n_clients)]

    def broadcast(self, server, rnd):
        return {"w": server["w"], "omega": server["omega"]}

    def client_update(self, k, down, state, data, rng, rnd):
        mu, omega = down["w"], down["omega"]
        lam, mode = float(self.p.lambda_prior), self.p.prior_loss
        precision = omega / rnd  # Eq. 24's ((r−1)/r) Σ_S*⁻¹ in cumulative units
        w, fisher, loss = sgd_accumulating_fisher(
            self.fm, self.p, mu, data, rng, penalty_grad=prior_grad_fn(mu, precision, lam, mode))
        return {"w": w, "omega": omega + fisher}, state, loss

    def client_updates(self, ks, down, states, datas, rngs, rnd, generators=None):
        """The round's clients trained together (``sgd_accumulating_fisher_batched``): the prior's gradient
        λ·(Ω_S/r)∘(W − μ_S) on the stacked weights, as ``prior_grad_fn`` rounds it for one."""
        mu, omega = down["w"], down["omega"]
        grad = stacked_prior_grad_fn(mu, omega / rnd, float(self.p.lambda_prior), self.p.prior_loss)
        out = sgd_accumulating_fisher_batched(self.fm, self.p, mu, datas, rngs, penalty_grad=grad)
        if out is None:
            return None
        return [({"w": w, "omega": omega + fisher}, st, loss) for (w, fisher, loss), st in zip(out, states)]

    def server_update(self, server, messages, rnd):
        ks = sorted(messages)
        thetas = torch.stack([messages[k]["w"] for k in ks])
        weights = torch.tensor(self.client_sizes[ks], dtype=thetas.dtype, device=thetas.device)
        mu, omega = product_aggregate(thetas, torch.stack([messages[k]["omega"] for k in ks]), weights,
                                      float(self.p.gamma))
        return {**server, "w": mu, "omega": omega}
