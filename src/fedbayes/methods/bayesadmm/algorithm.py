"""BayesADMM, diagonal Gaussian with the IVON client solver (BayesADMM paper Alg. 1 + Alg. 2; spec §3.1).

Server posterior q̄ = N(m̄, diag(1/s̄)), initialised m̄ = 0, s̄ = δ (the prior N(0, δ⁻¹I)). Client k keeps
duals v_k, u_k (init 0). With ρ (step), γ = c·ρ (dual step, c = ``dual_damping``), temperature τ and
α = 1/(1 + Kρ):

client k:  (m_k, s_k) ← argmin_q E_q[ Σ_i ℓ_k^{(i)}(θ)/τ + v_kᵀθ − ½ θᵀ(u_k∘θ) ] + ρ KL(q ‖ q̄)
              = IVON (methods/core/ivon.py) with ℓ̄ = minibatch-mean CE, λ = N_k/(ρτ), prior (m̄, δ_ivon = s̄/λ),
                Lagrange terms v = (τ/N_k) v_k, u = (τ/N_k) u_k; it returns s_k = λ(h + δ_ivon)
           v_k ← v_k + γ (s_k∘m_k − s̄∘m̄)                                          (line 5)
           u_k ← u_k + γ (s_k − s̄)                                                 (line 6)
           sends  a_k = (1−α)/K · s_k∘m_k + α v_k  and  b_k = (1−α)/K · s_k + α u_k   (2P, lines 9–10 pre-summed)
server:    s̄ ← Σ_k b_k + α δ      [= (1−α) Mean(s_k) + α(δ + Σ u_k)]              (line 10)
           m̄ ← Σ_k a_k / s̄        [= ((1−α) Mean(s_k∘m_k) + α Σ v_k) / s̄]        (lines 9, 11)

What the client's IVON starts from (``ivon_reset``; spec §3.1.2 items 3–4, ambiguity 3):
* ``code`` (default, the authors' code, needed to match their numbers): round 1 starts at the network's
  random initialisation with h = h0 under the prior N(0, δ⁻¹); later rounds start at m̄ with h = 0 (so
  the client's initial precision is s̄). Momentum and IVON's step counter persist across rounds.
* ``paper`` (Alg. 2 as printed): every round starts at m = m̄, h = h0, g = 0, t = 0.

Learning rate: ``lr_schedule: cosine_rounds`` (lr·(1 + cos(π(r−1)/R))/2 in round r) or ``constant``.

Prediction: ``bayesadmm`` = mean of softmax over ``pred_samples`` (32) networks θ_j ~ q̄;
``bayesadmm@mean`` = the network at m̄. ``pred_var: code_quirk`` samples from
N(m̄, 1/(λ_g h0 + δ)), λ_g = N/(τρ), as the authors' evaluation did (spec §3.1.2 item 8).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from fedbayes.methods.core.base import Method
from fedbayes.methods.core.ivon import (IVONState, batchable, gaussian_samples_logits, ivon_settings, ivon_train,
                                  ivon_train_batched, lr_schedule, stacked_problems)


class BayesADMM(Method):
    loss_fn = staticmethod(F.cross_entropy)   # minibatch-mean loss ℓ̄ (a test swaps in a Gaussian one)

    @property
    def alpha(self) -> float:
        return 1.0 / (1.0 + self.n_clients * float(self.p.rho))

    def init_state(self, w0):
        delta = float(self.p.delta)
        zeros = torch.zeros_like(w0)
        server = {"w": zeros.clone(), "s": torch.full_like(w0, delta), "w0": w0.clone()}
        clients = [{"v": zeros.clone(), "u": zeros.clone(), "g": zeros.clone(), "t": torch.zeros((), dtype=torch.long)}
                   for _ in range(self.n_clients)]
        return server, clients

    def broadcast(self, server, rnd):
        down = {"w": server["w"], "s": server["s"]}
        if rnd == 1 and self.p.ivon_reset == "code":
            down["w0"] = server["w0"]  # the shared random initialisation the clients start from
        return down

    def _client_problem(self, down, state, n_k, rnd) -> tuple[IVONState, dict]:
        """Client k's IVON problem (the module docstring's client step): its start state and the
        per-client arguments of ``ivon_train``."""
        rho, tau = float(self.p.rho), float(self.p.tau)
        m_bar, s_bar = down["w"], down["s"]
        ess = n_k / (rho * tau)
        if self.p.ivon_reset == "code":
            if "w0" in down:
                st = IVONState(down["w0"].clone(), torch.full_like(m_bar, float(self.p.h0)), state["g"], int(state["t"]))
            else:
                st = IVONState(m_bar.clone(), torch.zeros_like(m_bar), state["g"], int(state["t"]))
        else:
            st = IVONState.start(m_bar, float(self.p.h0))
        return st, dict(lr=lr_schedule(self.p, rnd, self.rounds), ess=ess, delta=s_bar / ess, prior_mean=m_bar,
                        v=(tau / n_k) * state["v"], u=(tau / n_k) * state["u"])

    def _client_result(self, st: IVONState, problem: dict, down, state) -> tuple[dict, dict]:
        """The dual updates (lines 5–6) and the message (lines 9–10) from the client's IVON result."""
        gamma = float(self.p.dual_damping) * float(self.p.rho)
        m_bar, s_bar, v, u = down["w"], down["s"], state["v"], state["u"]
        s_k = st.precision(problem["ess"], problem["delta"])
        v_new = v + gamma * (s_k * st.m - s_bar * m_bar)
        u_new = u + gamma * (s_k - s_bar)
        a, K = self.alpha, self.n_clients
        msg = {"a": (1 - a) / K * s_k * st.m + a * v_new, "b": (1 - a) / K * s_k + a * u_new}
        return msg, {"v": v_new, "u": u_new, "g": st.g, "t": torch.tensor(st.t)}

    def client_update(self, k, down, state, data, rng, rnd):
        st, problem = self._client_problem(down, state, len(data), rnd)
        st, loss, _ = ivon_train(self.fm, st, data, rng, **ivon_settings(self), **problem,
                                 mc_samples=int(self.p.mc_samples), loss_fn=self.loss_fn)
        return *self._client_result(st, problem, down, state), loss

    def client_updates(self, ks, down, states, datas, rngs, rnd, generators=None):
        if not batchable(self, BayesADMM, generators):
            return None
        problems = [self._client_problem(down, state, len(d), rnd) for state, d in zip(states, datas)]
        sts, losses, _ = ivon_train_batched(self.fm, [p[0] for p in problems], datas, rngs, generators,
                                            **ivon_settings(self), **stacked_problems([p[1] for p in problems]))
        return [(*self._client_result(st, p[1], down, state), loss)
                for st, p, state, loss in zip(sts, problems, states, losses)]

    def server_update(self, server, messages, rnd):
        if len(messages) != self.n_clients:
            raise ValueError("BayesADMM's server step needs every client each round (full participation)")
        s = torch.stack([m["b"] for m in messages.values()]).sum(0) + self.alpha * float(self.p.delta)
        w = torch.stack([m["a"] for m in messages.values()]).sum(0) / s
        return {**server, "w": w, "s": s}

    def sample_std(self, server) -> torch.Tensor:
        if self.p.pred_var == "code_quirk":
            lam_g = float(self.client_sizes.sum()) / (float(self.p.rho) * float(self.p.tau))
            return torch.full_like(server["w"], 1.0 / math.sqrt(lam_g * float(self.p.h0) + float(self.p.delta)))
        return server["s"].rsqrt()

    def predict_logits(self, server, x, variant="", seed=0):
        if variant == "mean":
            return self.fm(server["w"], x)
        return gaussian_samples_logits(self.fm, server["w"], self.sample_std(server), x,
                                       int(self.p.pred_samples), seed)
