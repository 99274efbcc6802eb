"""FedProx (Li et al. 2020) as in the FedLap paper (spec §3.3): Eq. 2 with the dual fixed to 0.

Client:  w_k ← argmin_w ℓ̄_k(w) + (α/2) ‖w − w_g‖²      (mean loss; E epochs of Adam from w_g)
Server:  w_g ← Σ_k (N_k/N) w_k
"""

from __future__ import annotations

from fedbayes.methods.core.base import prox_grad
from fedbayes.methods.fedavg.algorithm import FedAvg


class FedProx(FedAvg):
    def client_update(self, k, down, state, data, rng, rnd):
        w_g, alpha = down["w"], float(self.p.alpha)
        # ∇ (α/2)‖w − w_g‖² = α (w − w_g)   (prox_norm: unsquared → α (w − w_g) / (2‖w − w_g‖))
        res = self.local_train(w_g, data, rng, extra_grad=lambda w: alpha * prox_grad(w, w_g, self.p.prox_norm), state=state)
        return {"w": res.w}, state, res.mean_loss

    def client_updates(self, ks, down, states, datas, rngs, rnd, generators=None):
        # the squared term's gradient α (W − w_g) is elementwise, so the same on the stacked clients; the
        # unsquared one has a norm per client: one by one
        if type(self).client_update is not FedProx.client_update or self.p.prox_norm != "squared":
            return None
        w_g, alpha = down["w"], float(self.p.alpha)
        return self.train_together(w_g, datas, rngs, states, extra_grad=lambda W: alpha * prox_grad(W, w_g, self.p.prox_norm))
