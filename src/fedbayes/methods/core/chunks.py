"""Many networks on the same inputs at once: the S networks of a sampled predictive, the clients' local
models of a round (local accuracy). One network at a time cannot fill a GPU with a small model (each
forward is a few kernel launches of microseconds); stacked, their weights (M, P) go through one vmapped
forward per chunk of M networks, sized to the device's free memory.

On a CPU the chunk is one network (the stacked products cost what M separate ones do, and the numbers stay
those of the one-by-one loop bit for bit); on a GPU the logits agree with it up to float round-off
(batched matrix products sum in another order; tests/test_batched.py).
"""

from __future__ import annotations

import torch

# share of the device's free memory a chunk of networks may take (weights, activations, logits)
FREE_SHARE = 0.25


def row_floats(fm, x: torch.Tensor) -> int:
    """Floats of activations one input row makes through ``fm`` (the outputs of its leaf modules), from
    one probe forward of one row; kept on ``fm``."""
    key = tuple(x.shape[1:])
    cache = fm.__dict__.setdefault("_row_floats", {})
    if key not in cache:
        total = 0

        def hook(_mod, _inp, out):
            nonlocal total
            if torch.is_tensor(out):
                total += out[0].numel()

        leaves = [m for m in fm.module.modules() if not list(m.children())]
        handles = [m.register_forward_hook(hook) for m in leaves]
        try:
            with torch.no_grad():
                fm(fm.flat_params().to(device=x.device, dtype=x.dtype if x.is_floating_point() else None), x[:1])
        finally:
            for h in handles:
                h.remove()
        cache[key] = max(total, 1)
    return cache[key]


def networks_per_chunk(fm, x: torch.Tensor, n_networks: int) -> int:
    """How many networks go through one vmapped forward on ``x``: 1 on a CPU; on a GPU as many as fit
    ``FREE_SHARE`` of its free memory (weights and activations of every row, in x's dtype)."""
    if x.device.type != "cuda" or n_networks <= 1:
        return 1
    free, _ = torch.cuda.mem_get_info(x.device)
    per = x.element_size() * (fm.n_params + len(x) * row_floats(fm, x))
    return max(1, min(int(n_networks), int(FREE_SHARE * free // per)))


def stacked_logits(fm, W: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """(M, N, C) logits of the M networks W (M, P) on x: one vmapped forward."""
    return torch.func.vmap(fm, in_dims=(0, None))(W, x)
