"""FedBE (Chen & Chao, ICLR 2021): Bayesian model ensemble distilled on the server; a baseline of the
FOLA paper's Table II (spec 004 §4.6, with the FedBE authors' defaults).

client n: FedAvg's local training from w, sends θ_n.
server (π_n = N_n / Σ_{m∈S} N_m over the sampled clients S; U = unlabeled server inputs, C classes):
    w̄  = Σ_n π_n θ_n;   σ² = Σ_n π_n (θ_n − w̄)²                       diagonal Gaussian over the client models
    teachers = {w̄} ∪ {w̄ + √(var_scale) σ ⊙ ε_s, s = 1..teacher_samples} [∪ {θ_n} if ``teacher_clients``]
    p̄(x) = mean over teachers of softmax f(x; ·),  x ∈ U                 the ensemble's pseudo-labels
    P(x) = p̄(x)^(1/T) / Σ_c p̄_c(x)^(1/T),  T = ``temperature``         sharpened targets (teacher side only)
    w ← distil(w̄): ``server_epochs`` of SGD (``server_lr``, ``server_momentum``, ``server_weight_decay``) in
         minibatches of ``server_batch_size`` on  (1/C) · KL( P(x) ‖ softmax f(x; w) ), averaged over the batch
Prediction: the plug-in network at w; the clients start the next round from it.

U is the share ``server_unlabeled`` of the partition's points, which the engine holds out of the clients
(drawn uniformly; labels unused): the FedBE authors ran 40k CIFAR-10 images on clients and 10k unlabeled
on the server (spec 004 §4.6, its recommended choice; share 0.2), so FedBE's clients hold fewer points
than the other methods' on the same partition.

Defaults follow what the FedBE authors' code does with its logged arguments (hongyouc/FedBE
``log/args.txt``; read for facts, nothing copied). The spec's summary (§4.6) differs in three places,
which decide the result at α = 0.01 (papers/fola/NOTES.md):
- the ensemble is the mean and 10 Gaussian samples; ``use_client`` is off, so the client models are
  not teachers (``teacher_clients: true`` adds them, as the FedBE paper describes);
- the temperature sharpens the averaged teacher probabilities only; the student's logits are not
  divided by T, and the KL is averaged over batch × classes (hence 1/C), with no T² factor;
- the server SGD is hard-coded to lr 1e-3, momentum 0.9, weight decay 1e-5 (``server_lr`` 0.01 in
  args.txt is not read).
The authors' Gaussian lives in normalised-update space around the round's starting model, with
var_scale multiplying the standard deviation; ours is the plain diagonal Gaussian above. No SWA.
The server's random draws (samples, minibatch order) come from their own stream per (seed, round).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fedbayes.engine.seeds import SERVER, torch_seed
from fedbayes.methods.core import kernels
from fedbayes.methods.core.base import weighted_mean
from fedbayes.methods.fedavg.algorithm import FedAvg


class FedBE(FedAvg):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not 0 < float(self.p.server_unlabeled) < 1:
            raise ValueError("fedbe needs unlabeled server data: set server_unlabeled (a share of the training points, 0–1)")

    @classmethod
    def server_share(cls, p) -> float:
        return float(p.server_unlabeled)

    def teachers(self, ws: dict[int, torch.Tensor], gen: torch.Generator) -> list[torch.Tensor]:
        sizes = self.client_sizes.astype(float)
        mean = weighted_mean(ws, sizes)
        var = weighted_mean({k: (w - mean).square() for k, w in ws.items()}, sizes)
        std = (float(self.p.var_scale) * var).sqrt()
        samples = [mean + std * kernels.randn(mean.shape, generator=gen, dtype=mean.dtype).to(mean.device)
                   for _ in range(int(self.p.teacher_samples))]
        clients = [ws[k] for k in sorted(ws)] if self.p.teacher_clients else []
        return [mean, *samples, *clients]

    @torch.no_grad()
    def pseudo_labels(self, teachers: list[torch.Tensor], x: torch.Tensor, batch: int = 4096) -> torch.Tensor:
        """p̄(x): the teachers' mean predictive probabilities."""
        out = torch.zeros(len(x), self.fm(teachers[0], x[:1]).shape[-1], dtype=x.dtype, device=x.device)
        for start in range(0, len(x), batch):
            xb = x[start:start + batch]
            out[start:start + batch] = sum(F.softmax(self.fm(w, xb), -1) for w in teachers) / len(teachers)
        return out

    def distil(self, w_start: torch.Tensor, x: torch.Tensor, p_bar: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        temp = float(self.p.temperature)
        target = F.softmax(p_bar.clamp_min(1e-12).log() / temp, -1)   # P = p̄^(1/T), renormalised
        n_classes = target.shape[-1]
        w = w_start.detach().clone().requires_grad_(True)
        opt = torch.optim.SGD([w], lr=float(self.p.server_lr), momentum=float(self.p.server_momentum),
                              weight_decay=float(self.p.server_weight_decay))
        bs = int(self.p.server_batch_size)
        for _ in range(int(self.p.server_epochs)):
            perm = torch.randperm(len(x), generator=gen).to(x.device)
            for start in range(0, len(x), bs):
                idx = perm[start:start + bs]
                logq = F.log_softmax(self.fm(w, x[idx]), -1)
                loss = F.kl_div(logq, target[idx], reduction="batchmean") / n_classes
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
        return w.detach()

    def server_update(self, server, messages, rnd):
        if self.context.server_x is None:
            raise RuntimeError("fedbe: the run context holds no unlabeled server data (server_x)")
        gen = torch.Generator().manual_seed(torch_seed(self.seed, SERVER, rnd))
        teachers = self.teachers({k: m["w"] for k, m in messages.items()}, gen)
        p_bar = self.pseudo_labels(teachers, self.context.server_x)
        return {**server, "w": self.distil(teachers[0], self.context.server_x, p_bar, gen)}
