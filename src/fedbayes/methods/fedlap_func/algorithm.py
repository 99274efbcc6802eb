"""FedLap-Func (spec §3.8, paper Eq. 17): FedLap plus function-space terms on shared memory points.

Memory: ``memory_per_class`` random points of each class a client holds (chosen in round 1 from the
run's seeded stream, then fixed), visible to the server and every client; τ_i = τ_f N_{k,c} / M_{k,c}.
softCE(ŷ, w; x) = −Σ_c ŷ_c log softmax(f(x; w))_c (probability targets).

Client (round r ≥ 2; round 1 has no function-space terms):
    w_k ← argmin ℓ_k(w) + δ v_kᵀw + (δ/2)‖w − w_g‖²
                 − Σ_{i∈M_k} τ_i softCE(ŷ_i^{(k), prev}, w)      (own previous contribution removed)
                 + Σ_{i∈M}   τ_i softCE(ŷ_{i,g}, w)               (global term, ŷ_g = predictions of w_g)
    v_k ← v_k + ρ_k (w_k − w_g);   send v_k and ŷ^{(k)} = softmax f(x_{M_k}; w_k)
Server:
    w_g ← argmin (δ/2)‖w − Σ_k v_k‖² + Σ_k Σ_{i∈M_k} τ_i softCE(ŷ_i^{(k)}, w)
          (Adam, full batch over all memory points, ``server_iters`` steps at ``server_lr``, from Σ_k v_k)
Signs as derived in the spec (−own, +global): the printed Eq. 17 has a sign slip.
"""

from __future__ import annotations

import numpy as np
import torch

from fedbayes.methods.core import graphs
from fedbayes.methods.core.base import local_train_batched
from fedbayes.methods.core.local import make_optimizer
from fedbayes.methods.fedlap.algorithm import FedLap


def soft_ce(logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Σ_i weights_i · (−Σ_c targets_ic log softmax(logits_i)_c)."""
    return -(weights * (targets * torch.log_softmax(logits, -1)).sum(-1)).sum()


class FedLapFunc(FedLap):
    def init_state(self, w0):
        server, clients = super().init_state(w0)
        server["x_mem"] = torch.empty(0, device=w0.device)
        for c in clients:
            c["mem_idx"] = torch.empty(0, dtype=torch.long, device=w0.device)
        return server, clients

    def broadcast(self, server, rnd):
        down = super().broadcast(server, rnd)
        if rnd > 1 and len(server["x_mem"]):
            down.update(x_mem=server["x_mem"], tau_mem=server["tau_mem"])
        return down

    def choose_memory(self, data, rng: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Indices of ``memory_per_class`` random points per class held, and their τ_i."""
        m, tau_f = int(self.p.memory_per_class), float(self.p.tau)
        y = data.y.cpu().numpy()
        idx, tau = [], []
        for c in np.unique(y) if m > 0 else []:
            members = np.flatnonzero(y == c)
            pick = rng.choice(members, size=min(m, len(members)), replace=False)
            idx += pick.tolist()
            tau += [tau_f * len(members) / len(pick)] * len(pick)
        dev = data.y.device
        return torch.tensor(idx, dtype=torch.long, device=dev), torch.tensor(tau, dtype=data.x.dtype, device=dev)

    def client_update(self, k, down, state, data, rng, rnd):
        start, w_g = self.start_and_center(down)
        v, delta, n_k = state["v"], float(self.p.delta), len(data)
        state = self.with_memory(state, data, rng)
        x_own = data.x[state["mem_idx"]]

        function_space = self.function_space(down, state, rnd)
        if function_space:
            x_all, tau_all = down["x_mem"], down["tau_mem"]
            with torch.no_grad():
                y_g = torch.softmax(self.fm(w_g, x_all), -1)
            y_prev, tau_own = state["yhat"], state["tau"]

        def extra(w):
            loss = delta * (v @ w + 0.5 * (w - w_g).square().sum())
            if function_space:  # + global term on all memory points − own previous contribution
                loss = loss + (soft_ce(self.fm(w, x_all), y_g, tau_all) - soft_ce(self.fm(w, x_own), y_prev, tau_own))
            return loss / n_k

        res = self.local_train(start, data, rng, extra_loss=extra, state=state)
        return self.client_message(k, res.w, res.mean_loss, w_g, x_own, state, rnd)

    def with_memory(self, state, data, rng):
        """A copy of the client's state, with its memory picked in its first round (from its seeded stream,
        before its minibatches)."""
        state = dict(state)
        if "tau" not in state:
            state["mem_idx"], state["tau"] = self.choose_memory(data, rng)
        return state

    @staticmethod
    def function_space(down, state, rnd) -> bool:
        """Has the client's objective its function-space terms (round ≥ 2, memory known, its soft labels)?"""
        return rnd > 1 and "x_mem" in down and "yhat" in state

    def client_message(self, k, w, loss, w_g, x_own, state, rnd):
        """(message, state, loss): the new dual and soft labels, and in the client's first round (no soft
        labels yet) its memory points and τ."""
        v_new = state["v"] + self.rho(k, rnd) * (w - w_g)
        with torch.no_grad():
            yhat = torch.softmax(self.fm(w, x_own), -1)
        msg = {"v": v_new, "yhat": yhat}
        if "yhat" not in state:
            msg.update(x_mem=x_own, tau=state["tau"])
        state.update(v=v_new, yhat=yhat)
        return msg, state, loss

    def client_updates(self, ks, down, states, datas, rngs, rnd, generators=None):
        """The round's clients trained together (``base.local_train_batched``): the gradient of every
        client's extra terms, ``extra`` of ``client_update`` (dual, proximal pull and the function-space
        soft-CE terms through the network on the memory points), is one ``vmap(grad)`` over the stacked
        weights, with each client's own memory points padded to the longest (weight τ = 0) and the
        function-space terms switched off (a factor 0) for a client without soft labels yet."""
        start, w_g = self.start_and_center(down)
        delta = float(self.p.delta)
        states = [self.with_memory(st, d, r) for st, d, r in zip(states, datas, rngs)]
        x_owns = [d.x[st["mem_idx"]] for st, d in zip(states, datas)]
        on = [self.function_space(down, st, rnd) for st in states]
        dtype, dev = start.dtype, start.device
        V = torch.stack([st["v"] for st in states])
        inv_n = torch.tensor([1.0 / len(d) for d in datas], dtype=torch.float64, device=dev).to(dtype)

        if any(on):
            x_all, tau_all = down["x_mem"], down["tau_mem"]
            with torch.no_grad():
                y_g = torch.softmax(self.fm(w_g, x_all), -1)
            rows = max(len(x) for x in x_owns)
            X = torch.zeros(len(states), rows, *x_all.shape[1:], dtype=x_all.dtype, device=dev)
            Y = torch.zeros(len(states), rows, y_g.shape[-1], dtype=y_g.dtype, device=dev)
            T = torch.zeros(len(states), rows, dtype=tau_all.dtype, device=dev)
            for c, (st, x) in enumerate(zip(states, x_owns)):
                if on[c]:
                    X[c, :len(x)], Y[c, :len(x)], T[c, :len(x)] = x, st["yhat"], st["tau"]
            fs = torch.tensor(on, dtype=dtype, device=dev)

            def extra(w, v, inv, x_own, y_prev, tau_own, f):
                loss = delta * (v @ w + 0.5 * (w - w_g).square().sum())
                fsl = soft_ce(self.fm(w, x_all), y_g, tau_all) - soft_ce(self.fm(w, x_own), y_prev, tau_own)
                return (loss + f * fsl) * inv

            grad = torch.func.vmap(torch.func.grad(extra))
            extra_grad = lambda W: grad(W, V, inv_n, X, Y, T, fs)  # noqa: E731
        else:
            def extra(w, v, inv):
                return delta * (v @ w + 0.5 * (w - w_g).square().sum()) * inv

            grad = torch.func.vmap(torch.func.grad(extra))
            extra_grad = lambda W: grad(W, V, inv_n)  # noqa: E731
        results = local_train_batched(self, start, datas, rngs, states, extra_grad)
        if results is None:
            return None
        return [self.client_message(k, res.w, res.mean_loss, w_g, x, st, rnd)
                for k, res, x, st in zip(ks, results, x_owns, states)]

    def server_update(self, server, messages, rnd):
        server = super().server_update(server, messages, rnd)  # w = Σ_k v_k
        old = [k for k in messages if "x_mem" not in messages[k]]
        if old:                                        # soft labels of memory the server holds
            server["yhat"] = server["yhat"].clone()
            for k in old:
                server["yhat"][server["owner"] == k] = messages[k]["yhat"]
        new = sorted(k for k in messages if "x_mem" in messages[k])
        if new:                                        # a client's first round: its memory inputs, τ, soft labels
            dev = server["w"].device
            parts = {"x_mem": [messages[k]["x_mem"] for k in new], "tau_mem": [messages[k]["tau"] for k in new],
                     "owner": [torch.full((len(messages[k]["tau"]),), k, device=dev) for k in new],
                     "yhat": [messages[k]["yhat"] for k in new]}
            for key, vals in parts.items():
                held = [server[key]] if key in server and len(server[key]) else []
                server[key] = torch.cat(held + vals)
        if not len(server["x_mem"]):
            return server
        wbar, delta = server["w"], float(self.p.delta)
        w = wbar.clone().requires_grad_(True)
        opt = make_optimizer("adam", [w], float(self.p.server_lr))

        def step(_s_t):
            obj = 0.5 * delta * (w - wbar).square().sum() + soft_ce(self.fm(w, server["x_mem"]), server["yhat"], server["tau_mem"])
            opt.zero_grad(set_to_none=True)
            obj.backward()
            opt.step()

        # thousands of small steps: on a GPU one recorded step replayed (``graphs``), elsewhere a plain loop
        graphs.run_steps(step, int(self.p.server_iters), device=w.device, capture=graphs.mode(w.device) == "graph")
        return {**server, "w": w.detach()}
