"""FedLap-Cov (Swaroop, Khan & Doshi-Velez, "Connecting Federated ADMM to Bayes"; spec §3.7, Eq. 21),
diagonal precisions, on FedLap's mean-loss scale (``fedbayes.methods.fedlap.algorithm``):

Client: w_k ← argmin ℓ_k(w) + v_kᵀw − ½ wᵀV_k w + ½‖w − w_g‖²_{S_g}
        H_k = diag GGN of ℓ_k at w_k;   S_k = H_k − V_k + S_g
        v_k ← v_k + ρ (S_k w_k − S_g w_g);   V_k ← (1 − ρ) V_k + ρ H_k
Server: S_g ← δ + Σ_k V_k;   w_g ← (Σ_k v_k) / S_g
Initialisation: v_k = V_k = 0, so w_g = 0 (the prior mean) and S_g = δ; round-1 local training starts
from the shared random w_0 (spec §6.1). Prediction: plug-in at w_g.
"""

from __future__ import annotations

import torch

from fedbayes.methods.core.base import LocalProblem, Method
from fedbayes.methods.core.curvature import diag_ggn


class FedLapCov(Method):
    def init_state(self, w0):
        zeros = torch.zeros_like(w0)
        delta = float(self.p.delta)
        server = {"w": zeros.clone(), "S": torch.full_like(w0, delta), "w0": w0.clone(),
                  "v": zeros.repeat(self.n_clients, 1), "V": zeros.repeat(self.n_clients, 1)}
        return server, [{"v": zeros.clone(), "V": zeros.clone()} for _ in range(self.n_clients)]

    def broadcast(self, server, rnd):
        if rnd == 1:  # w_g = 0 and S_g = δ are known to every client
            return {"w0": server["w0"]}
        return {"w": server["w"], "S": server["S"]}

    def local_problem(self, k, down, state, data, rnd):
        if "w0" in down:
            start, w_g, S_g = down["w0"], torch.zeros_like(down["w0"]), torch.full_like(down["w0"], float(self.p.delta))
        else:
            start, w_g, S_g = down["w"], down["w"], down["S"]

        def grad(w, v, V, S_g, w_g, n_k):  # ∇ [vᵀw − ½ wᵀ diag(V) w + ½ (w − w_g)ᵀ diag(S_g) (w − w_g)] / N_k
            return (v - V * w + S_g * (w - w_g)) / n_k

        return LocalProblem(start, grad, (state["v"], state["V"], S_g, w_g, len(data)), extra={"w_g": w_g, "S_g": S_g})

    def local_result(self, k, problem, res, down, state, data, rnd):
        w, w_g, S_g, v, V = res.w, problem.extra["w_g"], problem.extra["S_g"], state["v"], state["V"]
        H = diag_ggn(self.fm, w, data.x).clamp_min(0.0)
        rho = self.rho(k, rnd)
        S_k = H - V + S_g
        v_new = v + rho * (S_k * w - S_g * w_g)
        V_new = (1 - rho) * V + rho * H
        return {"v": v_new, "V": V_new}, {**state, "v": v_new, "V": V_new}, res.mean_loss

    def server_update(self, server, messages, rnd):
        v, V = server["v"].clone(), server["V"].clone()
        for k, m in messages.items():
            v[k], V[k] = m["v"], m["V"]
        S = float(self.p.delta) + V.sum(0)
        return {**server, "v": v, "V": V, "S": S, "w": v.sum(0) / S}
