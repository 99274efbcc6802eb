"""FedAvg with SGD-M clients and an SGD-M server (FedEP paper, spec 002 §2.10, §2.14): the FedEP
paper's FedAvg baseline, and the ``burn_in`` rounds of FedPA, FedEP and FedSEP:

    client:  E epochs of SGD (momentum 0.9, fresh each visit) on  mean CE + ½ λ_wd ‖θ‖²,  from θ_g;
             sends Δ_k = θ_g − θ_k
    server:  Δ̄ = Σ_k n_k Δ_k / Σ_k n_k;   m ← β m + Δ̄;   θ_g ← θ_g − lr_s m
"""

from __future__ import annotations

import torch

from fedbayes.methods.core.base import Method
from fedbayes.methods.core.batched import StackedIterates, train_local_batched
from fedbayes.methods.core.local import FlatSGD, train_local


class FedAvgM(Method):
    """FedAvg with SGD-M clients (weight decay) and an SGD-M server: the FedEP paper's FedAvg and
    the burn-in of FedEP, FedSEP and FedPA."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # the clients run SGD with momentum (the iterates are FedPA's and FedEP-M's samples): an
        # experiment's other optimiser would be recorded in run.json but never used
        if self.p.optimizer != "sgd":
            raise ValueError(f"{type(self).__name__}: the FedEP family's clients run SGD with momentum; "
                             f"set optimizer: sgd for it, not {self.p.optimizer!r}")

    def burn_in(self) -> int:
        return self.rounds if self.p.burn_in is None else int(self.p.burn_in)

    def init_state(self, w0):
        server = {"w": w0.clone(), "mom": torch.zeros_like(w0)}
        if self.burn_in() == 0:
            server = self.switch(server)
        return server, [{} for _ in range(self.n_clients)]

    # ---------------------------------------------------------------- FedAvg-M regime
    def sgd_epochs(self, start, data, rng, epochs, extra_grad=None, average=False):
        """``epochs`` passes of minibatch SGD with momentum (fresh buffer) from ``start`` on mean CE +
        ½ λ_wd ‖θ‖² + a term whose gradient is ``extra_grad(θ)``; returns the iterate after each epoch,
        or (``average``) the mean iterate of each epoch, and the mean loss.

        The penalty gradients are added in closed form after the CE backward pass, in the order
        autograd summed them when the penalties were part of the loss ((extra + weight decay) + CE),
        so the iterates are the same bit for bit (tests/test_fedep.py) without a graph over θ."""
        w = start.detach().clone().requires_grad_(True)
        opt = FlatSGD(w, lr=float(self.p.lr), momentum=float(self.p.momentum))
        wd = float(self.p.weight_decay)
        half_wd = torch.tensor(0.5 * wd, dtype=w.dtype, device=w.device)

        def penalty_grad(w):
            g = None if extra_grad is None else extra_grad(w)
            if wd:                                              # ∇ ½ λ_wd ‖θ‖² = (½ λ_wd)(2θ), autograd's form
                g_wd = (w * 2.0).mul_(half_wd)
                g = g_wd if g is None else g.add_(g_wd)
            return g

        out, acc, cnt = [], torch.zeros_like(start), 0

        def add_iterate(opt):
            nonlocal acc, cnt
            acc, cnt = acc + opt.weights, cnt + 1

        def end_epoch(opt):
            nonlocal acc, cnt
            out.append(acc / cnt if average else opt.weights.clone())
            acc, cnt = torch.zeros_like(start), 0

        mean_loss, _ = train_local(self.fm, opt, data, rng, epochs=epochs, batch_size=int(self.p.batch_size),
                                   extra_grad=penalty_grad if (wd or extra_grad is not None) else None,
                                   after_step=add_iterate if average else None, after_epoch=end_epoch)
        return torch.stack(out), mean_loss

    def fedavg_client(self, down, data, rng):
        samples, loss = self.sgd_epochs(down["w"], data, rng, int(self.p.local_epochs))
        return {"delta": down["w"] - samples[-1]}, loss

    def fedavg_server(self, server, messages):
        ks = sorted(messages)
        wts = torch.tensor(self.client_sizes[ks], dtype=server["w"].dtype, device=server["w"].device)
        d = torch.einsum("k,kp->p", wts / wts.sum(), torch.stack([messages[k]["delta"] for k in ks]))
        mom = float(self.p.server_momentum) * server["mom"] + d
        return {**server, "w": server["w"] - float(self.p.server_lr) * mom, "mom": mom}

    def client_update(self, k, down, state, data, rng, rnd):
        msg, loss = self.fedavg_client(down, data, rng)
        return msg, state, loss

    def sgd_epochs_batched(self, start, datas, rngs, epochs, extra_grad=None, average=False, samples=True):
        """``sgd_epochs`` for C clients together, all from ``start`` (``train_local_batched``: SGD-M with a
        fresh buffer each, the weight-decay gradient in ``sgd_epochs``' form (2θ)·(½ λ_wd) added after
        ``extra_grad(W)`` of the stacked weights W (C, P), the iterate samples by ``StackedIterates``):
        each client's (samples, mean loss), up to float round-off; None where the model draws (dropout).
        ``samples=False``: the last iterate alone, (1, P), with no hook in the loop."""
        if not self.fm.row_wise:
            return None
        wd = float(self.p.weight_decay)
        half_wd = torch.tensor(0.5 * wd, dtype=start.dtype, device=start.device)

        def penalty_grad(W):
            g = None if extra_grad is None else extra_grad(W)
            if wd:
                g_wd = (W * 2.0).mul_(half_wd)
                g = g_wd if g is None else g.add_(g_wd)
            return g

        trace = StackedIterates(start, [len(d) for d in datas], int(self.p.batch_size), epochs, average) \
            if samples else None
        W, losses, _ = train_local_batched(
            self.fm, start, datas, rngs, epochs=epochs, batch_size=int(self.p.batch_size), lr=float(self.p.lr),
            optimizer="sgd", momentum=float(self.p.momentum),
            extra_grad=penalty_grad if (wd or extra_grad is not None) else None, after_step=trace)
        return list(zip(trace.stacked() if samples else W.unsqueeze(1), losses))

    def client_updates(self, ks, down, states, datas, rngs, rnd, generators=None):
        """The FedAvg-M rounds (FedAvg-M's own, and the burn-in of FedPA, FedEP and FedSEP, whose clients
        then run ``fedavg_client``) trained together (``sgd_epochs_batched``). A subclass batches its own
        rounds by overriding ``client_updates_after_burn_in``."""
        if rnd > self.burn_in():
            return self.client_updates_after_burn_in(ks, down, states, datas, rngs, rnd)
        if type(self).fedavg_client is not FedAvgM.fedavg_client:
            return None
        out = self.sgd_epochs_batched(down["w"], datas, rngs, int(self.p.local_epochs), samples=False)
        if out is None:
            return None
        return [({"delta": down["w"] - samples[-1]}, st, loss) for (samples, loss), st in zip(out, states)]

    def client_updates_after_burn_in(self, ks, down, states, datas, rngs, rnd):
        """The rounds after the burn-in trained together, or None (one by one)."""
        return None

    def server_update(self, server, messages, rnd):
        return self.fedavg_server(server, messages)

    def switch(self, server):  # FedAvg-M has no EP phase
        return server
