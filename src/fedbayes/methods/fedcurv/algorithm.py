"""FedCurv (Shoham et al. 2019, arXiv 1910.07796), the FOLA paper's baseline (spec 004 §4.3, D22).

Local training is FedAvg's plus an anisotropic penalty whose stiffness is a diagonal Fisher computed
**offline**: one extra pass over the client's data at its final weights θ_n. The server averages
weights as FedAvg (Σ_n π_n θ_n) and collects the Fishers.

``anchor: clients`` (default; Shoham et al., the method the FOLA paper describes): client n in round r
minimises
    mean CE + λ Σ_{j≠n} Σ_k F_j,k (θ_k − θ_j,k)²
over the clients j of round r−1. The server broadcasts U = Σ_j F_j and V = Σ_j F_j ∘ θ_j; the client
subtracts its own terms (kept from its last message if it took part in round r−1), so
    penalty(θ) = λ Σ_k [U_n,k θ_k² − 2 V_n,k θ_k],   U_n = U − F_n,  V_n = V − F_n ∘ θ_n,
equal to the sum above up to a constant in θ. Up: θ_n, F_n (2P); down: w, U, V (3P).

``anchor: global`` (the FOLA authors' code, ``cnn_curv.py``): centre μ_S = FedAvg mean, stiffness
Ω_S = Σ_n π_n F_n of round r−1 (the client's own Fisher included; not cumulative), weight λ/(2r):
    penalty(θ) = (λ/2) Σ_k (Ω_S,k / r) (θ_k − μ_S,k)²                       (FOLA's ``prior_loss``)
Down: w, Ω_S (2P). The λ grid {1, 10, 10², 10³, 10⁴} of the FOLA paper is on this scale; the
``clients`` penalty sums K−1 Fishers without the ½ and the 1/r, so it is about 2r(K−1)× stiffer at
the same λ.

Hyperparameters:
    lambda_prior : λ ≥ 0, the penalty weight (the FOLA paper's λ, also written μ).
    anchor       : ``clients`` (default) | ``global``.
    fisher_norm  : the offline Fisher at θ_n — ``code`` (default): Σ_b (|b|/N_n) (∇ mean CE_b)² over one
                   pass of minibatches of ``batch_size`` in a fresh order (the authors' estimator);
                   ``paper``: mean_i (∇ CE_i)², the per-example empirical Fisher (FOLA Eq. 21);
                   ``ggn``: the exact Fisher diag(Jᵀ(diag p − ppᵀ)J) averaged over the data
                   (curvature.diag_ggn), which needs no labels.
    prior_loss   : ``paper`` (default, differentiable) | ``released`` (no gradient, as the authors'
                   code: FedCurv then trains as FedAvg; spec D3).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fedbayes.methods.core.base import ClientData, Method, local_train_batched, weighted_mean
from fedbayes.methods.core.curvature import (diag_ggn, evaluation_mode, per_example_grads, prior_has_gradient,
                                             prior_loss, stacked_prior_grad_fn)
from fedbayes.methods.core.batched import StackedFisher, StackedPlan
from fedbayes.methods.core.local import minibatches


def offline_fisher(fm, w: torch.Tensor, data: ClientData, rng, batch_size: int, norm: str = "code") -> torch.Tensor:
    """Diagonal Fisher of client data at ``w`` after local training (one extra pass; spec §4.3), of the
    model as it predicts (dropout off)."""
    n = len(data)
    if n == 0:  # a client without data (weight 0) contributes no stiffness
        return torch.zeros_like(w)
    with evaluation_mode(fm):
        return _offline_fisher(fm, w, data, rng, batch_size, norm)


def _offline_fisher(fm, w: torch.Tensor, data: ClientData, rng, batch_size: int, norm: str) -> torch.Tensor:
    n = len(data)
    if norm == "ggn":
        return diag_ggn(fm, w, data.x) / n
    out = torch.zeros_like(w)
    w = w.detach()
    if norm == "paper":
        for start in range(0, n, batch_size):
            grads, _ = per_example_grads(fm, w, data.x[start:start + batch_size], data.y[start:start + batch_size])
            out += grads.square().sum(0)
        return out / n
    w = w.clone().requires_grad_(True)
    for idx in minibatches(n, batch_size, rng, data.x.device):
        (g,) = torch.autograd.grad(F.cross_entropy(fm(w, data.x[idx]), data.y[idx]), w)
        out += (len(idx) / n) * g.square()
    return out


def offline_fishers(fm, W: torch.Tensor, datas: list[ClientData], rngs, batch_size: int, norm: str = "code"
                    ) -> list[torch.Tensor]:
    """``offline_fisher`` of C clients at their stacked weights W (C, P). ``code``: one pass of each client's
    minibatches (drawn from its ``rng`` as ``minibatches`` does) as one vmapped gradient a step over the
    clients (``StackedPlan``) summed by ``StackedFisher``; the same numbers up to float round-off. The other
    norms (and a client without data) client by client."""
    if norm != "code" or any(len(d) == 0 for d in datas):
        return [offline_fisher(fm, W[c], d, r, batch_size, norm) for c, (d, r) in enumerate(zip(datas, rngs))]
    with evaluation_mode(fm):
        plan = StackedPlan(fm, datas, rngs, batch_size=batch_size, epochs=1, device=W.device, dtype=W.dtype)
        fisher = StackedFisher(W[0], [len(d) for d in datas], batch_size)
        W = W.detach()
        for s in range(plan.n_steps):
            active = plan.active(s)
            fisher(plan.gradient(W, s), s, active)
    return list(fisher.fisher)


def others_penalty(w: torch.Tensor, U: torch.Tensor, V: torch.Tensor, lam: float, mode: str = "paper") -> torch.Tensor:
    """λ Σ_k (U_k w_k² − 2 V_k w_k) = λ Σ_{j≠n} Σ_k F_j,k (w_k − θ_j,k)² − const (gradient 2λ(U∘w − V)),
    for U = Σ_{j≠n} F_j and V = Σ_{j≠n} F_j∘θ_j. ``released``: from ``w.detach()``, no gradient."""
    if not prior_has_gradient(mode):
        w = w.detach()
    return lam * (U * w.square() - 2.0 * V * w).sum()


class FedCurv(Method):
    @property
    def anchor(self) -> str:
        return self.p.anchor

    def local_weights(self, message, down):
        return message["w"]

    def init_state(self, w0):
        zeros = torch.zeros_like(w0)
        if self.anchor == "global":
            return {"w": w0.clone(), "omega": zeros.clone()}, [{} for _ in range(self.n_clients)]
        server = {"w": w0.clone(), "U": zeros.clone(), "V": zeros.clone()}
        # a client's last message (F_n, F_n∘θ_n) and its round, to remove its own terms from U, V
        clients = [{"F": zeros.clone(), "Fw": zeros.clone(), "round": torch.zeros((), dtype=torch.long)}
                   for _ in range(self.n_clients)]
        return server, clients

    def broadcast(self, server, rnd):
        return {k: v for k, v in server.items() if k in ("w", "U", "V", "omega")}

    def penalty(self, down, state, rnd):
        """The local penalty as a function of θ for this client and round."""
        lam, mode = float(self.p.lambda_prior), self.p.prior_loss
        if self.anchor == "global":
            mu, precision = down["w"], down["omega"] / rnd
            return lambda w: prior_loss(w, mu, precision, lam, mode)
        U, V = down["U"], down["V"]
        if int(state["round"]) == rnd - 1:  # this client's terms are in U, V: remove them
            U, V = (U - state["F"]).clamp_min(0.0), V - state["Fw"]
        return lambda w: others_penalty(w, U, V, lam, mode)

    def penalty_grad(self, down, states, rnd):
        """The gradient of ``penalty`` on the stacked weights W (C, P) of the clients with ``states``, in
        closed form; None where the penalty has none (``released``)."""
        lam, mode = float(self.p.lambda_prior), self.p.prior_loss
        if self.anchor == "global":
            return stacked_prior_grad_fn(down["w"], down["omega"] / rnd, lam, mode)
        if not prior_has_gradient(mode):
            return None
        own = [int(st["round"]) == rnd - 1 for st in states]
        U = torch.stack([(down["U"] - st["F"]).clamp_min(0.0) if o else down["U"] for st, o in zip(states, own)])
        V = torch.stack([down["V"] - st["Fw"] if o else down["V"] for st, o in zip(states, own)])
        return lambda W: (U * (W * 2.0) - 2.0 * V).mul_(lam)     # ∇ λ Σ_k (U_k w_k² − 2 V_k w_k)

    def client_update(self, k, down, state, data, rng, rnd):
        res = self.local_train(down["w"], data, rng, extra_loss=self.penalty(down, state, rnd))
        fisher = offline_fisher(self.fm, res.w, data, rng, int(self.p.batch_size), self.p.fisher_norm)
        return self.client_message(res.w, fisher, state, res.mean_loss, rnd)

    def client_updates(self, ks, down, states, datas, rngs, rnd, generators=None):
        """The round's clients trained together: the penalty's closed-form gradient on the stacked weights
        (``penalty_grad``) in the one batched loop, then the offline Fishers (``offline_fishers``)."""
        if self.p.client_optimizer != "fresh":   # FedCurv keeps no optimiser state: client_update says so
            return None
        results = local_train_batched(self, down["w"], datas, rngs, states, self.penalty_grad(down, states, rnd))
        if results is None:
            return None
        W = torch.stack([res.w for res in results])
        fishers = offline_fishers(self.fm, W, datas, rngs, int(self.p.batch_size), self.p.fisher_norm)
        return [self.client_message(res.w, f, st, res.mean_loss, rnd) for res, f, st in zip(results, fishers, states)]

    def client_message(self, w, fisher, state, loss, rnd):
        if self.anchor == "global":
            return {"w": w, "F": fisher}, state, loss
        return {"w": w, "F": fisher}, {"F": fisher, "Fw": fisher * w, "round": torch.tensor(rnd)}, loss

    def server_update(self, server, messages, rnd):
        sizes = self.client_sizes.astype(float)
        new = {**server, "w": weighted_mean({k: m["w"] for k, m in messages.items()}, sizes)}
        if self.anchor == "global":
            new["omega"] = weighted_mean({k: m["F"] for k, m in messages.items()}, sizes)
        else:
            new["U"] = torch.stack([m["F"] for m in messages.values()]).sum(0)
            new["V"] = torch.stack([m["F"] * m["w"] for m in messages.values()]).sum(0)
        return new
