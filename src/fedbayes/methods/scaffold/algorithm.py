"""SCAFFOLD (Karimireddy et al., ICML 2020), option II control variates; a baseline of the FOLA paper's
Table II (spec 004 §4.5).

server state: global weights w and control variate c;  client n keeps c_n.  c = c_n = 0 at the start.
client n (receives w and c):
    y ← w;  K steps of minibatch SGD with the corrected gradient   y ← y − η_l (g(y) − c_n + c)
            (the gradient of the extra loss (c − c_n)ᵀy, added to the minibatch gradient; a gradient
             clip applies to the corrected gradient)
    c_n⁺ = c_n − c + (w − y) / (K η_l)                                       (option II)
    sends Δy = y − w and Δc = c_n⁺ − c_n                                     (2P up; w, c: 2P down)
server (S = the sampled clients, π_n = N_n / Σ_{m∈S} N_m, K_total = number of clients):
    w ← w + η_g Σ_{n∈S} π_n Δy_n           (η_g = ``server_lr``, 1 in the FOLA protocol)
    c ← c + (|S| / K_total) mean_{n∈S} Δc_n

With full participation c stays the mean of the c_n, so the corrections c − c_n sum to zero over the
clients; on identical clients they vanish and SCAFFOLD is FedAvg. Option II's c_n⁺ is the mean
corrected-minus-correction gradient only for plain SGD at a constant rate, so the local optimiser must be
``sgd`` with a constant schedule. The client averaging uses the data weights π_n, as every other
FedAvg-style aggregate here (Karimireddy et al. average uniformly; equal under equal client sizes).
"""

from __future__ import annotations

import torch

from fedbayes.methods.core.base import LocalProblem, Method, weighted_mean


class Scaffold(Method):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.p.optimizer != "sgd" or self.p.lr_schedule != "constant":
            raise ValueError("scaffold: option II control variates need plain SGD at a constant rate "
                             "(set optimizer: sgd and no lr_schedule)")

    def local_weights(self, message, down):
        return down["w"] + message["dy"]

    def init_state(self, w0):
        zeros = torch.zeros_like(w0)
        return {"w": w0.clone(), "c": zeros.clone()}, [{"c": zeros.clone()} for _ in range(self.n_clients)]

    def broadcast(self, server, rnd):
        return {"w": server["w"], "c": server["c"]}

    def local_problem(self, k, down, state, data, rnd):
        def grad(y, correction):  # ∇ (c − c_n)ᵀy
            return correction

        return LocalProblem(down["w"], grad, (down["c"] - state["c"],))

    def local_result(self, k, problem, res, down, state, data, rnd):
        w, c, c_k = down["w"], down["c"], state["c"]
        c_new = c_k - c + (w - res.w) / (res.steps * float(self.p.lr))
        return {"dy": res.w - w, "dc": c_new - c_k}, {"c": c_new}, res.mean_loss

    def server_update(self, server, messages, rnd):
        dy = weighted_mean({k: m["dy"] for k, m in messages.items()}, self.client_sizes.astype(float))
        dc = torch.stack([m["dc"] for m in messages.values()]).mean(0)
        eta_g = float(self.p.server_lr)
        return {**server, "w": server["w"] + eta_g * dy, "c": server["c"] + len(messages) / self.n_clients * dc}
