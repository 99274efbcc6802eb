"""FedADMM (FedLap paper Eq. 2, spec §3.1).

Client: w_k ← argmin ℓ̄_k(w) + v_kᵀw + (α/2)‖w − w_g‖²;   v_k ← v_k + α(w_k − w_g)
Server: w_g ← (1/K) Σ_k (w_k + v_k/α)
"""

from __future__ import annotations

import torch

from fedbayes.methods.core.base import LocalProblem, Method, prox_batchable, prox_grad


class FedADMM(Method):
    def init_state(self, w0):
        # z_k = w_k + v_k/α as last reported; a client that has not reported yet counts as w_0 (v_k = 0)
        server = {"w": w0.clone(), "z": w0.repeat(self.n_clients, 1)}
        return server, [{"v": torch.zeros_like(w0)} for _ in range(self.n_clients)]

    def local_problem(self, k, down, state, data, rnd):
        w_g, mode = down["w"], self.p.prox_norm

        def grad(w, v, alpha, w_g):  # ∇ [vᵀw + (α/2)‖w − w_g‖²] = v + α (w − w_g)
            return v + alpha * prox_grad(w, w_g, mode)

        return LocalProblem(w_g, grad, (state["v"], float(self.p.alpha), w_g), batchable=prox_batchable(mode))

    def local_result(self, k, problem, res, down, state, data, rnd):
        v_new = state["v"] + float(self.p.alpha) * (res.w - down["w"])
        return {"w": res.w, "v": v_new}, {**state, "v": v_new}, res.mean_loss

    def server_update(self, server, messages, rnd):
        z = server["z"].clone()
        for k, m in messages.items():
            z[k] = m["w"] + m["v"] / float(self.p.alpha)
        return {**server, "z": z, "w": z.mean(0)}
