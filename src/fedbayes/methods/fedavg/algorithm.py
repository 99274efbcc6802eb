"""FedAvg (McMahan et al. 2017), as used by FedLap (spec §3.4), BayesADMM and FedIVON.

Client:  w_k ← E epochs of Adam on the mean loss ℓ̄_k (+ (wd/2)‖w‖² with ``weight_decay``, as Adam's
         coupled weight decay; FedIVON App. B), starting from the broadcast w_g.
Server:  w_g ← Σ_k (N_k / N) w_k        (over the participating clients, renormalised).
"""

from __future__ import annotations

import torch

from fedbayes.methods.core.base import Method, local_train_batched, weighted_mean


class FedAvg(Method):
    def local_weights(self, message, down):
        return message["w"]

    def client_update(self, k, down, state, data, rng, rnd):
        wd = float(self.p.weight_decay)
        res = self.local_train(down["w"], data, rng, extra_loss=(lambda w: 0.5 * wd * w.square().sum()) if wd else None,
                               state=state)
        return {"w": res.w}, state, res.mean_loss

    def client_updates(self, ks, down, states, datas, rngs, rnd, generators=None):
        # a subclass that adds a term to the client's objective trains one by one unless it batches that
        # term itself (FedProx)
        if type(self).client_update is not FedAvg.client_update:
            return None
        wd = float(self.p.weight_decay)
        if not wd:
            return self.train_together(down["w"], datas, rngs, states)
        half_wd = torch.tensor(0.5 * wd, dtype=down["w"].dtype, device=down["w"].device)
        return self.train_together(down["w"], datas, rngs, states, lambda W: (W * 2.0).mul_(half_wd))  # ∇ ½ λ_wd ‖θ‖²

    def train_together(self, w_start, datas, rngs, states, extra_grad=None):
        """The clients' messages and losses from ``base.local_train_batched`` (``extra_grad`` of the stacked
        weights), or None where the hyperparameters ask for what it does not do."""
        results = local_train_batched(self, w_start, datas, rngs, states, extra_grad)
        if results is None:
            return None
        return [({"w": res.w}, st, res.mean_loss) for res, st in zip(results, states)]

    def server_update(self, server, messages, rnd):
        ws = {k: m["w"] for k, m in messages.items()}
        return {**server, "w": weighted_mean(ws, self.client_sizes.astype(float))}
