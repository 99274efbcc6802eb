"""FedDyn (Acar et al. 2021, spec §3.2).

α_k = α N / (K N_k).
Client: w_k ← argmin ℓ̄_k(w) + α_k λ_kᵀw + (α_k/2)‖w − w_g‖² + (wd/2)‖w‖²;   λ_k ← λ_k + (w_k − w_g)
Server: w_g ← mean_{k∈S} w_k + (1/K) Σ_k λ_k   (the server mirrors Σ_k λ_k from the w_k it receives)
Predicts with the cloud model w_g; ``feddyn@avg`` with the plain average mean_{k∈S} w_k of the round's
client models, which is what the official FedDyn code reports as its test accuracy.
"""

from __future__ import annotations

import torch

from fedbayes.methods.core.base import LocalProblem, Method, prox_batchable, prox_grad


class FedDyn(Method):
    def alpha_k(self, k: int) -> float:
        return float(self.p.alpha) / (self.n_clients * float(self.weights[k]))

    def init_state(self, w0):
        return {"w": w0.clone(), "lam_sum": torch.zeros_like(w0), "w_avg": w0.clone()}, \
            [{"lam": torch.zeros_like(w0)} for _ in range(self.n_clients)]

    def local_problem(self, k, down, state, data, rnd):
        w_g, mode = down["w"], self.p.prox_norm

        def grad(w, a, lam, w_g, wd):  # ∇ [a λᵀw + (a/2)‖w − w_g‖² + (wd/2)‖w‖²]
            return a * lam + a * prox_grad(w, w_g, mode) + wd * w

        return LocalProblem(w_g, grad, (self.alpha_k(k), state["lam"], w_g, float(self.p.weight_decay)),
                            batchable=prox_batchable(mode))

    def local_result(self, k, problem, res, down, state, data, rnd):
        return {"w": res.w}, {**state, "lam": state["lam"] + (res.w - down["w"])}, res.mean_loss

    def server_update(self, server, messages, rnd):
        ws = torch.stack([m["w"] for m in messages.values()])
        lam_sum = server["lam_sum"] + (ws - server["w"]).sum(0)
        w_avg = ws.mean(0)
        return {**server, "lam_sum": lam_sum, "w_avg": w_avg, "w": w_avg + lam_sum / self.n_clients}

    def predict_logits(self, server, x, variant="", seed=0):
        return self.fm(server["w_avg"] if variant == "avg" else server["w"], x)
