"""Diagonal curvature of a client's summed loss ℓ_k = Σ_n CE(y_n, f(x_n; w)) (FedLap-Cov's H_k).

The exact diagonal generalised Gauss-Newton for the softmax likelihood,

    diag H = Σ_n diag(J_nᵀ Λ_n J_n),   Λ_n = diag(p_n) − p_n p_nᵀ,

computed without forming Λ_n: with b_{n,c} = √p_{n,c} (e_c − p_n) one has Λ_n = Σ_c b_{n,c} b_{n,c}ᵀ,
so diag H = Σ_n Σ_c (J_nᵀ b_{n,c})². PSD by construction; needs no labels (not the empirical Fisher).

Two exact implementations:
* models made of ``nn.Linear`` layers (MLP, logistic regression): C backward passes of the whole
  batch give each layer's output cotangents g_{n,c}; for a weight W_ij the diagonal is
  Σ_n Σ_c g_{n,c,i}² a_{n,j}² (a = the layer input), i.e. one matrix product per layer
  (the BackPACK DiagGGNExact construction);
* models made of ``nn.Linear`` and ``nn.Conv2d`` layers (the CNNs): the same C backward passes; a
  convolution's per-example gradient for class c is g_{n,c} · unfold(a_n)ᵀ (its output cotangents times
  its unfolded input), squared and summed over points and classes: C batched products per layer, each
  with the multiply-adds of the layer's forward pass;
* any other model: one vector-Jacobian product per (point, class), vectorised with torch.func.vmap
  (slow, used as the fallback and as the test oracle).

Also the Laplace helpers that FOLA and FedCurv share (per-example gradients for the empirical Fisher,
the quadratic prior penalty), so that neither method imports the other's module.
"""

from __future__ import annotations

from collections.abc import Callable

from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import grad_and_value, vjp, vmap

from fedbayes.methods.core import kernels


@contextmanager
def evaluation_mode(fm):
    """The model as it predicts (dropout off) for a curvature pass, its training mode restored after:
    a Laplace / Fisher / GGN is the curvature of the predictive model, not of one dropout mask."""
    training = fm.module.training
    fm.module.eval()
    try:
        yield fm
    finally:
        fm.module.train(training)


def _sqrt_factor(logits: torch.Tensor) -> torch.Tensor:
    """(N, C, C) with [n, c, :] = b_{n,c} = √p_{n,c} (e_c − p_n), so Λ_n = Σ_c b_{n,c} b_{n,c}ᵀ."""
    p = torch.softmax(logits, -1)
    eye = torch.eye(p.shape[-1], dtype=p.dtype, device=p.device)
    return p.sqrt().unsqueeze(-1) * (eye - p.unsqueeze(-2))


def diag_ggn(fm, w: torch.Tensor, x: torch.Tensor, chunk: int = 1024) -> torch.Tensor:
    """Σ over the rows of ``x`` of the exact diagonal GGN of softmax cross-entropy at ``w`` (sum-loss units),
    of the model as it predicts: dropout off (evaluation mode) for the pass, the module's mode restored."""
    param_modules = [m for m in fm.module.modules() if any(True for _ in m.parameters(recurse=False))]
    with evaluation_mode(fm):
        if all(isinstance(m, nn.Linear) for m in param_modules):
            return sum(_diag_ggn_linear(fm, w, x[i:i + chunk]) for i in range(0, len(x), chunk))
        if all(isinstance(m, nn.Linear) or _plain_conv(m) for m in param_modules):
            return sum(_diag_ggn_conv(fm, w, x[i:i + CONV_CHUNK]) for i in range(0, len(x), CONV_CHUNK))
        return diag_ggn_vjp(fm, w, x)


CONV_CHUNK = 128   # points a pass: the unfolded inputs and per-example gradients of a CIFAR CNN layer, ~0.1 GB


def _plain_conv(m: nn.Module) -> bool:
    """A Conv2d whose per-example weight gradient is g · unfold(a)ᵀ: one group, zero padding."""
    return isinstance(m, nn.Conv2d) and m.groups == 1 and m.padding_mode == "zeros" and isinstance(m.padding, tuple)


def _diag_ggn_conv(fm, w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The exact diagonal GGN of a model of Linear and Conv2d layers over the rows of ``x``: C backward
    passes of the batch to the layers' outputs, then per layer and class the per-example gradients
    (Linear: the outer product g aᵀ, whose square is g² a²; Conv2d: g · unfold(a)ᵀ), squared and summed."""
    names = dict((m, n) for n, m in fm.module.named_modules())
    acts: dict[str, tuple[nn.Module, torch.Tensor, torch.Tensor]] = {}

    def hook(mod, inputs, output):
        acts[names[mod]] = (mod, inputs[0].detach(), output)

    layers_ = [m for m in fm.module.modules() if isinstance(m, (nn.Linear, nn.Conv2d))]
    handles = [m.register_forward_hook(hook) for m in layers_]
    try:
        with torch.enable_grad():
            logits = fm(w.detach().requires_grad_(True), x)
    finally:
        for h in handles:
            h.remove()
    factor = _sqrt_factor(logits.detach())
    layers = list(acts)
    outs = [acts[n][2] for n in layers]
    unfolded = {}
    for n in layers:
        mod, a, _ = acts[n]
        if isinstance(mod, nn.Conv2d):   # (N, I·kh·kw, L): the inputs each output position sees
            unfolded[n] = F.unfold(a, mod.kernel_size, dilation=mod.dilation, padding=mod.padding, stride=mod.stride)
    diag = {n: [torch.zeros_like(p) for p in (acts[n][0].weight, acts[n][0].bias) if p is not None] for n in layers}
    for c in range(factor.shape[1]):
        grads = torch.autograd.grad(logits, outs, grad_outputs=factor[:, c, :], retain_graph=c < factor.shape[1] - 1)
        for n, g in zip(layers, grads):
            mod, a, _ = acts[n]
            g = g.detach()
            if isinstance(mod, nn.Conv2d):
                g = g.flatten(2)                                      # (N, O, L)
                diag[n][0] += torch.bmm(g, unfolded[n].transpose(1, 2)).square_().sum(0).view_as(mod.weight)
                if mod.bias is not None:
                    diag[n][1] += g.sum(2).square_().sum(0)
            else:
                sq = g.square()
                diag[n][0] += sq.T @ a.square()
                if mod.bias is not None:
                    diag[n][1] += sq.sum(0)
    by_name = {}
    for n in layers:
        mod = acts[n][0]
        by_name[f"{n}.weight"] = diag[n][0]
        if mod.bias is not None:
            by_name[f"{n}.bias"] = diag[n][1]
    return torch.cat([by_name[name].reshape(-1) for name in fm.names])


def _diag_ggn_linear(fm, w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    names = dict((m, n) for n, m in fm.module.named_modules())
    acts: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def hook(mod, inputs, output):
        acts[names[mod]] = (inputs[0].detach(), output)

    handles = [m.register_forward_hook(hook) for m in fm.module.modules() if isinstance(m, nn.Linear)]
    try:
        with torch.enable_grad():
            logits = fm(w.detach().requires_grad_(True), x)
            factor = _sqrt_factor(logits.detach())
            layers = list(acts)
            outs = [acts[n][1] for n in layers]
            sq = {n: torch.zeros_like(acts[n][1]) for n in layers}  # Σ_c g_{n,c}² per layer output
            for c in range(factor.shape[1]):
                grads = torch.autograd.grad(logits, outs, grad_outputs=factor[:, c, :], retain_graph=True)
                for n, g in zip(layers, grads):
                    sq[n] += g.square()
    finally:
        for h in handles:
            h.remove()
    diag = {}
    for n in layers:
        a = acts[n][0]
        diag[f"{n}.weight"] = sq[n].T @ a.square()
        diag[f"{n}.bias"] = sq[n].sum(0)
    return torch.cat([diag[name].reshape(-1) for name in fm.names])


GGN_CHUNK_BYTES = 1 << 30   # the (points, classes, parameters) gradients one vmapped call holds


def diag_ggn_vjp(fm, w: torch.Tensor, x: torch.Tensor, chunk: int | None = None) -> torch.Tensor:
    """Generic exact diagonal GGN: one VJP per (point, class). Any architecture; slow. ``chunk`` points a
    vmapped call (default: as many as fit GGN_CHUNK_BYTES, at most 64: CIFAR-10's CNN with 64 points held
    3.2 GB of gradients at once)."""
    w = w.detach()
    out = torch.zeros_like(w)
    if chunk is None:
        with torch.no_grad():
            n_classes = fm(w, x[:1]).shape[-1]
        chunk = int(max(1, min(64, GGN_CHUNK_BYTES // (n_classes * w.numel() * w.element_size()))))

    def one(xi):
        logits, pullback = vjp(lambda p: fm(p, xi.unsqueeze(0)).squeeze(0), w)
        (g,) = vmap(pullback)(_sqrt_factor(logits.detach()))  # (C, P): J_nᵀ b_{n,c} for every class c
        return g.square().sum(0)

    for i in range(0, len(x), chunk):
        out += vmap(one)(x[i:i + chunk]).sum(0)
    return out


# --- Fisher and Laplace helpers shared by FOLA and FedCurv (empirical Fisher from per-example gradients) ---

PRIOR_LOSSES = ("paper", "released")


def prior_has_gradient(mode: str) -> bool:
    """Has the prior term of ``prior_loss`` mode ``mode`` a gradient? ``released`` (spec D3) has none; a
    mode that is not one of ``PRIOR_LOSSES`` is refused."""
    if mode not in PRIOR_LOSSES:
        raise ValueError(f"prior_loss must be one of {PRIOR_LOSSES}, got {mode!r}")
    return mode != "released"


def _prior_factor(precision: torch.Tensor, lam: float) -> torch.Tensor:
    """2·((λ/2)·precision): the prior gradient's factor, rounded as autograd rounds ((λ/2)·precision)·(2 d)."""
    return (precision * (0.5 * lam)).mul_(2.0)


def prior_loss(w: torch.Tensor, mu: torch.Tensor, precision: torch.Tensor, lam: float,
               mode: str = "paper") -> torch.Tensor:
    """λ · L_Prior = (λ/2) Σ_j precision_j (w_j − μ_j)² (Eq. 15–16); gradient λ · precision ∘ (w − μ).

    ``released``: the same value computed from ``w.detach()``, so it has no gradient (spec D3)."""
    if not prior_has_gradient(mode):
        w = w.detach()
    return 0.5 * lam * (precision * (w - mu).square()).sum()


def prior_grad(w: torch.Tensor, mu: torch.Tensor, precision: torch.Tensor, lam: float,
               mode: str = "paper") -> torch.Tensor | None:
    """The gradient of ``prior_loss`` in closed form, λ · precision ∘ (w − μ), with autograd's bits
    (it computes ((λ/2) · precision) · (2 (w − μ)); ``prior_grad_fn`` moves the exact doubling onto the
    factor; tests/test_fola.py), without building a graph over the parameter vector (two thirds of a
    FOLA step's time with autograd). ``released``: None (the detached penalty has no gradient)."""
    return prior_grad_fn(mu, precision, lam, mode)(w)


def prior_grad_fn(mu: torch.Tensor, precision: torch.Tensor, lam: float,
                  mode: str = "paper") -> Callable[[torch.Tensor], torch.Tensor | None]:
    """``w ↦ prior_grad(w, mu, precision, lam, mode)`` for the steps of one local update, into one buffer
    (overwritten by the next call). Its factor is computed once: ((λ/2)·precision)·(2 d) and
    (2·((λ/2)·precision))·d round alike, doubling being exact, so each step is one pass over the
    parameters (d = (w − μ)·factor, ``kernels.scaled_difference_``) where it was four and two allocations."""
    if not prior_has_gradient(mode):
        return lambda w: None
    factor = _prior_factor(precision, lam)
    d = torch.empty_like(mu)

    def gradient(w: torch.Tensor) -> torch.Tensor:
        return kernels.scaled_difference_(d, w.detach(), mu, factor)

    return gradient


def stacked_prior_grad_fn(mu: torch.Tensor, precision: torch.Tensor, lam: float,
                          mode: str = "paper") -> Callable[[torch.Tensor], torch.Tensor] | None:
    """``prior_grad_fn`` on the stacked weights W (C, P) of clients trained together (one μ and precision
    for all): (W − μ)·factor, rounded as ``prior_grad_fn`` rounds a row. ``released``: None."""
    if not prior_has_gradient(mode):
        return None
    factor = _prior_factor(precision, lam)
    return lambda W: torch.sub(W, mu).mul_(factor)


def per_example_grads(fm, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(|b|, P) gradients ∇_w CE(w; x_i, y_i) and the (|b|,) losses, one row per example (torch.func), of
    the model in its current mode: in training, a dropout layer draws each example's own mask."""

    def one(p, xi, yi):
        return F.cross_entropy(fm(p, xi.unsqueeze(0)), yi.unsqueeze(0))

    return vmap(grad_and_value(one), in_dims=(None, 0, 0), randomness="different")(w.detach(), x, y)
