"""FedIVON (Pal et al.; FedIVON spec §3): IVON on every client, precision-weighted server averaging.

Server state: mean m and Hessian vector h (init: the network's random initialisation, h = h0).
Clients keep nothing between rounds. With ESS λ (``ess``), weight decay δ (``delta``; prior
N(0, 1/(λδ))) and h0:

client i (sampled):  IVON from (m, h), momentum 0, step counter 0, E epochs of minibatch-mean CE,
                     lr rescaled by (h0 + δ) and decayed linearly within the update (``linear_local``);
                     sends (m_i, h_i)
server:              w_i = N_i / Σ_{j sampled} N_j
                     h ← Σ_i w_i h_i
                     m ← Σ_i w_i (h_i + δ) m_i / Σ_i w_i (h_i + δ)
                     (spec Eq. 4 with the precision λ(h_i + δ), which stays positive while h_i may dip
                     below 0 — ambiguity A5; Alg. 1's weights h_i differ by δ only)

Prediction: ``fedivon`` = mean of softmax over ``pred_samples`` (500) networks θ ~ N(m, 1/(λ(h + δ)));
``fedivon@mean`` = the network at m.
"""

from __future__ import annotations


import torch
import torch.nn.functional as F

from fedbayes.methods.core.base import Method
from fedbayes.methods.core.ivon import (IVONState, batchable, gaussian_samples_logits, ivon_settings, ivon_train,
                                  ivon_train_batched, lr_schedule, stacked_problems)


class FedIVON(Method):
    loss_fn = staticmethod(F.cross_entropy)   # minibatch-mean loss ℓ̄ (a test swaps in a Gaussian one)

    def init_state(self, w0):
        server = {"w": w0.clone(), "h": torch.full_like(w0, float(self.p.h0))}
        return server, [{} for _ in range(self.n_clients)]

    def broadcast(self, server, rnd):
        return {"w": server["w"], "h": server["h"]}

    def _client_problem(self, down, rnd) -> tuple[IVONState, dict]:
        """A sampled client's IVON problem: from the server's (m, h), momentum 0, step counter 0."""
        delta, h0 = float(self.p.delta), float(self.p.h0)
        st = IVONState(down["w"].clone(), down["h"].clone(), torch.zeros_like(down["w"]), 0)
        return st, dict(lr=lr_schedule(self.p, rnd, self.rounds, scale=h0 + delta), ess=float(self.p.ess),
                        delta=delta, prior_mean=0.0)

    def client_update(self, k, down, state, data, rng, rnd):
        st, problem = self._client_problem(down, rnd)
        st, loss, _ = ivon_train(self.fm, st, data, rng, **ivon_settings(self), **problem,
                                 mc_samples=int(self.p.mc_samples), loss_fn=self.loss_fn)
        return {"w": st.m, "h": st.h}, state, loss

    def client_updates(self, ks, down, states, datas, rngs, rnd, generators=None):
        if not batchable(self, FedIVON, generators):
            return None
        problems = [self._client_problem(down, rnd) for _ in ks]
        sts, losses, _ = ivon_train_batched(self.fm, [p[0] for p in problems], datas, rngs, generators,
                                            **ivon_settings(self), **stacked_problems([p[1] for p in problems]))
        return [({"w": st.m, "h": st.h}, state, loss) for st, state, loss in zip(sts, states, losses)]

    def server_update(self, server, messages, rnd):
        ks = sorted(messages)
        h = torch.stack([messages[k]["h"] for k in ks])
        m = torch.stack([messages[k]["w"] for k in ks])
        w = torch.tensor(self.client_sizes[ks], dtype=m.dtype, device=m.device)
        w = w / w.sum()
        prec = h + float(self.p.delta)
        return {"w": torch.einsum("k,kp->p", w, prec * m) / torch.einsum("k,kp->p", w, prec),
                "h": torch.einsum("k,kp->p", w, h)}

    def predict_logits(self, server, x, variant="", seed=0):
        if variant == "mean":
            return self.fm(server["w"], x)
        std = (float(self.p.ess) * (server["h"] + float(self.p.delta))).rsqrt()
        return gaussian_samples_logits(self.fm, server["w"], std, x, int(self.p.pred_samples), seed)
