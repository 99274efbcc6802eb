"""FedLap (Swaroop, Khan & Doshi-Velez, "Connecting Federated ADMM to Bayes"; spec §3.6), diagonal.

Objectives are on the mean-loss scale: ℓ̄_k(w) + (extra terms)/N_k, the paper's sum-loss objective
divided by N_k (same minimiser). δ is the prior precision, in sum-loss units.

Client: w_k ← argmin ℓ_k(w) + δ v_kᵀw + (δ/2)‖w − w_g‖²;   v_k ← v_k + ρ_k (w_k − w_g)     (Eq. 9)
Server: w_g ← Σ_k v_k
Initialisation: v_k = 0; round-1 local training starts from the shared random w_0 (spec §6.1).
Prediction: plug-in at w_g.
"""

from __future__ import annotations

import torch

from fedbayes.methods.core.base import LocalProblem, Method, prox_batchable, prox_grad


class FedLap(Method):
    def init_state(self, w0):
        zeros = torch.zeros_like(w0)
        server = {"w": zeros.clone(), "w0": w0.clone(), "v": zeros.repeat(self.n_clients, 1)}
        return server, [{"v": zeros.clone()} for _ in range(self.n_clients)]

    def broadcast(self, server, rnd):
        # round 1: w_g = Σ v_k = 0 is known to every client; the server sends the shared start w_0
        return {"w0": server["w0"]} if rnd == 1 else {"w": server["w"]}

    @staticmethod
    def start_and_center(down):
        if "w0" in down:
            return down["w0"], torch.zeros_like(down["w0"])
        return down["w"], down["w"]

    def local_problem(self, k, down, state, data, rnd):
        (start, w_g), mode = self.start_and_center(down), self.p.prox_norm

        def grad(w, coef, v, w_g):  # ∇ (δ/N_k) [vᵀw + ½‖w − w_g‖²]
            return coef * (v + prox_grad(w, w_g, mode))

        return LocalProblem(start, grad, (float(self.p.delta) / len(data), state["v"], w_g),
                            batchable=prox_batchable(mode), extra={"w_g": w_g})

    def local_result(self, k, problem, res, down, state, data, rnd):
        v_new = state["v"] + self.rho(k, rnd) * (res.w - problem.extra["w_g"])
        return {"v": v_new}, {**state, "v": v_new}, res.mean_loss

    def server_update(self, server, messages, rnd):
        v = server["v"].clone()
        for k, m in messages.items():
            v[k] = m["v"]
        return {**server, "v": v, "w": v.sum(0)}
