"""Diagonal curvature of a client's summed loss ℓ_k = Σ_n CE(y_n, f(x_n; w)) (FedLap-Cov's H_k).

The exact diagonal generalised Gauss-Newton for the softmax likelihood,

    diag H = Σ_n diag(J_nᵀ Λ_n J_n),   Λ_n = diag(p_n) − p_n p_nᵀ,

computed without forming Λ_n: with b_{n,c} = √p_{n,c} (e_c − p_n) one has Λ_n = Σ_c b_{n,c} b_{n,c}ᵀ,
so diag H = Σ_n Σ_c (J_nᵀ b_{n,c})², one vector-Jacobian product per (point, class), batched with
``torch.func.vmap``. It is PSD by construction and needs no labels (not the empirical Fisher).
"""

from __future__ import annotations

import torch
from torch.func import vjp, vmap


def diag_ggn(fm, w: torch.Tensor, x: torch.Tensor, chunk: int = 64) -> torch.Tensor:
    """Σ over the rows of ``x`` of the exact diagonal GGN of softmax cross-entropy at ``w`` (sum-loss units)."""
    w = w.detach()
    out = torch.zeros_like(w)

    def one(xi):
        logits, pullback = vjp(lambda p: fm(p, xi.unsqueeze(0)).squeeze(0), w)
        p = torch.softmax(logits.detach(), -1)
        b = p.sqrt().unsqueeze(1) * (torch.eye(p.numel(), dtype=p.dtype, device=p.device) - p.unsqueeze(0))
        (g,) = vmap(pullback)(b)  # (C, P): J_nᵀ b_{n,c} for every class c
        return g.square().sum(0)

    for i in range(0, len(x), chunk):
        out += vmap(one)(x[i:i + chunk]).sum(0)
    return out
