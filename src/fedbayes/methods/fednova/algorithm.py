"""FedNova (Wang et al., NeurIPS 2020) with vanilla local SGD; a baseline of the FOLA paper's Table II
(spec 004 §4.4).

client n (receives w): τ_n = E·⌈N_n / B⌉ steps of minibatch SGD from w to θ_n, and sends the normalised
    update  d_n = (w − θ_n) / τ_n  and τ_n                                 (for SGD, a_n = [1, …, 1], ‖a_n‖₁ = τ_n)
server (π_n = N_n / Σ_{m∈S} N_m over the sampled clients S):
    τ_eff = Σ_n π_n τ_n;   w ← w − η_g τ_eff Σ_n π_n d_n                     (η_g = ``server_lr``, default 1)

With equal τ_n it is FedAvg; with unequal ones it removes FedAvg's bias towards clients that take more
steps. The normalisation assumes plain SGD at a constant rate, so the local optimiser must be ``sgd``.
"""

from __future__ import annotations

import torch

from fedbayes.methods.core.base import LocalProblem, Method, weighted_mean


class FedNova(Method):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.p.optimizer != "sgd" or self.p.lr_schedule != "constant":
            raise ValueError("fednova: the vanilla-SGD normalisation needs optimizer: sgd and no lr_schedule")

    def local_weights(self, message, down):
        return down["w"] - message["tau"] * message["d"]

    def local_problem(self, k, down, state, data, rnd):
        return LocalProblem(down["w"])

    def local_result(self, k, problem, res, down, state, data, rnd):
        tau = torch.tensor(float(res.steps), dtype=down["w"].dtype, device=down["w"].device)
        return {"d": (down["w"] - res.w) / tau, "tau": tau}, state, res.mean_loss

    def server_update(self, server, messages, rnd):
        sizes = self.client_sizes.astype(float)
        d = weighted_mean({k: m["d"] for k, m in messages.items()}, sizes)
        tau_eff = weighted_mean({k: m["tau"].reshape(1) for k, m in messages.items()}, sizes)[0]
        eta_g = float(self.p.server_lr)
        return {**server, "w": server["w"] - eta_g * tau_eff * d}
