"""The tensor math of FedSWAG-diag (the spec's docstring says what it computes)."""

from __future__ import annotations

import torch

from fedbayes.methods.core.base import Method
from fedbayes.methods.core.ivon import gaussian_samples_logits
from fedbayes.methods.core.local import make_optimizer, train_local


class FedSWAG(Method):
    def init_state(self, w0):
        server, clients = super().init_state(w0)
        # before any client has reported: the narrowest Gaussian at w0 (its samples are w0 to float precision)
        return {**server, "prec": torch.full_like(w0, 1.0 / float(self.p.var_floor))}, clients

    def client_update(self, k, down, state, data, rng, rnd):
        res = self.local_train(down["w"], data, rng, state=state)
        mean, sq, n = self.swag_moments(res.w, data, rng)
        var = (sq - mean.square()).clamp_min(float(self.p.var_floor))
        return {"w": mean, "prec": var.reciprocal()}, state, res.mean_loss

    def swag_moments(self, w_start, data, rng):
        """Running first and second moments of the iterates of ``swag_epochs`` more epochs from ``w_start``."""
        p = self.p
        w = w_start.detach().clone().requires_grad_(True)
        opt = make_optimizer(p.optimizer, [w], p.lr)
        acc = {"mean": torch.zeros_like(w_start), "sq": torch.zeros_like(w_start), "n": 0}

        def collect(o):
            theta = o.weights.detach()
            acc["n"] += 1
            acc["mean"] += (theta - acc["mean"]) / acc["n"]
            acc["sq"] += (theta.square() - acc["sq"]) / acc["n"]

        train_local(self.fm, opt, data, rng, epochs=int(p.swag_epochs), batch_size=int(p.batch_size),
                    clip=p.grad_clip, after_step=collect)
        return acc["mean"], acc["sq"], acc["n"]

    def local_weights(self, message, down):
        return message["w"]

    def server_update(self, server, messages, rnd):
        ks = sorted(messages)
        prec = torch.stack([messages[k]["prec"] for k in ks])
        mean = torch.stack([messages[k]["w"] for k in ks])
        total = prec.sum(0)
        return {**server, "w": (prec * mean).sum(0) / total, "prec": total}

    def predict_logits(self, server, x, variant="", seed=0):
        if variant == "mean":
            return self.fm(server["w"], x)
        return gaussian_samples_logits(self.fm, server["w"], server["prec"].rsqrt(), x, int(self.p.pred_samples), seed)
