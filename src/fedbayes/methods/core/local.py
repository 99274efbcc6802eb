"""The one local training loop every method's client runs, the minibatch order it draws, and the
flat-vector optimisers it steps (Adam, SGD; IVON implements the same protocol in ``methods/ivon.py``).

One step of ``train_local``, for a minibatch (x, y) of the epoch's permutation:

    θ, ℓ̄, g  ← opt.gradient(objective)       the minibatch gradient at the optimiser's point θ
                                              (the weights; IVON: a posterior sample, or S of them)
    on_grad(g, |b|)                           a hook that reads the data gradient (FOLA's Fisher sum)
    g ← g + extra_grad(w)                     a penalty whose gradient is known in closed form
    g ← clip(g)                               ``clip``: clip_grad_norm_'s rule
    opt.step(g, i, n)                         step i of the n local steps
    after_step(opt)                           (FedEP: the epoch's mean iterate)
and ``after_epoch(opt)`` after each epoch (FedEP, FedPA: one sample per epoch).

``objective(θ, x, y)`` is the minibatch-mean loss (reported) and, with ``extra_loss``, the loss that is
differentiated: loss_fn(f(θ, x), y) + extra_loss(θ). A term with a closed-form gradient belongs in
``extra_grad`` (no graph over the parameter vector; the same update up to round-off).

Every method's local loop used to be its own copy of this one; they now differ only in these hooks,
and each one's iterates are the same bit for bit as before (tests/test_replay.py). A round's clients
trained together on stacked weights run the batched form of this loop (``batched.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol

import numpy as np
import torch
import torch.nn.functional as F

Tensors = dict[str, torch.Tensor]


def minibatches(n: int, batch_size: int, rng: np.random.Generator, device=None) -> Iterator[torch.Tensor]:
    """One epoch over n rows: the row indices of each minibatch of a fresh permutation drawn from
    ``rng``, in batches of ``batch_size`` (the last one may be smaller)."""
    bs = int(batch_size)
    perm = torch.from_numpy(rng.permutation(n)).to(device)
    for start in range(0, n, bs):
        yield perm[start:start + bs]


def local_steps(n: int, batch_size: int, epochs: int) -> int:
    """The number of minibatch steps ``minibatches`` makes."""
    return int(epochs) * -(-n // int(batch_size))


class LocalOptimizer(Protocol):
    """What ``train_local`` needs from an optimiser on one flat parameter vector."""

    def gradient(self, objective: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
                 ) -> tuple[tuple[float, ...], torch.Tensor]:
        """(reported losses, gradient) of ``objective(θ) -> (reported, differentiated)`` at its point θ:
        one reported loss per point differentiated, each already divided by their number."""

    @property
    def weights(self) -> torch.Tensor:
        """The current weights (detached; the mean for a posterior optimiser)."""

    def step(self, grad: torch.Tensor, i: int, n: int) -> None:
        """Update with ``grad``; local step i (0-based) of n."""


class _PointOptimizer:
    """Shared by the point-estimate optimisers: the gradient is taken at the weights themselves, and an
    optional ``schedule(i, n)`` sets the learning rate of step i of n."""

    w: torch.Tensor
    lr: float
    schedule: Callable[[int, int], float] | None = None

    def gradient(self, objective):
        reported, loss = objective(self.w)
        (g,) = torch.autograd.grad(loss, self.w)
        return (reported.item(),), g

    @property
    def weights(self) -> torch.Tensor:
        return self.w.detach()

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.w.grad = None

    def step(self, grad: torch.Tensor | None = None, i: int = 0, n: int = 1) -> None:
        if self.schedule is not None:
            self.lr = self.schedule(i, n)
        with torch.no_grad():
            self._update(self.w.grad if grad is None else grad)


class FlatAdam(_PointOptimizer):
    """Adam on one flat parameter vector through PyTorch's fused Adam kernel (``torch._fused_adam_``, the
    kernel of ``torch.optim.Adam(fused=True)``: the same iterates bit for bit, tests/test_engine.py).
    ``torch.optim``'s first optimiser of a process imports TorchDynamo, 3–6 s of every training job's
    start-up; a flat vector needs none of its machinery."""

    def __init__(self, w: torch.Tensor, lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        self.w, self.lr, self.betas, self.eps = w, lr, betas, eps
        self.m, self.v = torch.zeros_like(w), torch.zeros_like(w)
        self.t = torch.zeros((), dtype=torch.float32, device=w.device)  # torch.optim's fused step counter

    def state(self) -> Tensors:
        """The state a persistent client keeps between rounds (client state keys ``opt/…``)."""
        return {"opt/m": self.m, "opt/v": self.v, "opt/t": self.t}

    def load_state(self, state: Tensors) -> None:
        """Continue from ``state()`` of an earlier call; a client's first call starts from zeros."""
        if "opt/m" in state:
            self.m, self.v, self.t = state["opt/m"].clone(), state["opt/v"].clone(), state["opt/t"].clone()

    def _update(self, grad: torch.Tensor) -> None:
        self.t += 1
        torch._fused_adam_([self.w], [grad], [self.m], [self.v], [], [self.t], amsgrad=False,
                           lr=float(self.lr), beta1=self.betas[0], beta2=self.betas[1], weight_decay=0.0,
                           eps=self.eps, maximize=False, grad_scale=None, found_inf=None)


class FlatSGD(_PointOptimizer):
    """SGD (optionally with heavy-ball momentum, no dampening) on one flat vector: the updates of
    ``torch.optim.SGD``'s single-tensor path, bit for bit (tests/test_engine.py), without its start-up."""

    def __init__(self, w: torch.Tensor, lr: float, momentum: float = 0.0):
        self.w, self.lr, self.momentum, self.buf = w, lr, momentum, None

    def state(self) -> Tensors:
        """The momentum buffer a persistent client keeps between rounds (none before the first step)."""
        return {"opt/buf": self.buf} if self.buf is not None else {}

    def load_state(self, state: Tensors) -> None:
        if "opt/buf" in state:
            self.buf = state["opt/buf"].clone()

    def _update(self, grad: torch.Tensor) -> None:
        d = grad
        if self.momentum:
            self.buf = d.clone() if self.buf is None else self.buf.mul_(self.momentum).add_(d)
            d = self.buf
        self.w.add_(d, alpha=-float(self.lr))


def make_optimizer(name: str, params, lr: float, momentum: float = 0.0) -> FlatAdam | FlatSGD:
    """The local optimiser on the flat parameter vector ``params[0]`` (requires grad): ``adam`` (fused
    kernel) or ``sgd`` (with ``momentum``)."""
    (w,) = params
    if name == "adam":
        return FlatAdam(w, lr)
    if name == "sgd":
        return FlatSGD(w, lr, momentum)
    raise ValueError(f"unknown local optimiser {name!r}; choose adam or sgd")


def clip_grad_(grad: torch.Tensor, max_norm: float) -> None:
    """``torch.nn.utils.clip_grad_norm_`` on one gradient vector, in place and with the same bits, without
    its multiplication of the whole gradient by a clamped coefficient of exactly 1 when the norm is within
    ``max_norm`` (an identity, but a pass over the parameter vector every step)."""
    total = torch.nn.utils.get_total_norm([grad], 2.0)
    coef = max_norm / (total + 1e-6)
    if not bool(coef >= 1.0):                             # NaN: scaled too, as clip_grad_norm_ does
        torch._foreach_mul_([grad], torch.clamp(coef, max=1.0))


def minibatch_plan(n: int, batch_size: int, epochs: int, rng: np.random.Generator) -> np.ndarray:
    """Every minibatch of ``epochs`` passes of ``minibatches`` at once, drawn from ``rng`` in the same
    order (one permutation per epoch): a (steps, batch_size) array of row indices, -1 after the rows
    of an epoch's smaller last batch."""
    bs, per_epoch = int(batch_size), -(-n // int(batch_size))
    plan = np.full((int(epochs) * per_epoch, bs), -1, dtype=np.int64)
    for e in range(int(epochs)):
        perm = rng.permutation(n)
        for b, start in enumerate(range(0, n, bs)):
            rows = perm[start:start + bs]
            plan[e * per_epoch + b, :len(rows)] = rows
    return plan


def train_local(fm, opt: LocalOptimizer, data, rng: np.random.Generator, *, epochs: int, batch_size: int,
                loss_fn=F.cross_entropy,
                extra_loss: Callable[[torch.Tensor], torch.Tensor] | None = None,
                extra_grad: Callable[[torch.Tensor], torch.Tensor | None] | None = None,
                on_grad: Callable[[torch.Tensor, int], None] | None = None,
                gradient: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None,
                clip: float | None = None,
                after_step: Callable[[LocalOptimizer], None] | None = None,
                after_epoch: Callable[[LocalOptimizer], None] | None = None) -> tuple[float, int]:
    """``epochs`` passes of minibatch steps of ``opt`` over ``data`` (the module docstring's step).
    ``gradient(x, y) -> (loss, g)`` replaces the optimiser's own gradient (FOLA's per-example Fisher).
    Returns (mean reported loss over the steps, number of steps)."""
    n = len(data)
    n_steps = local_steps(n, batch_size, epochs)
    total, i = 0.0, 0

    def objective(theta, x, y):
        loss = loss_fn(fm(theta, x), y)
        return loss, (loss if extra_loss is None else loss + extra_loss(theta))

    for _ in range(int(epochs)):
        for idx in minibatches(n, batch_size, rng, data.x.device):
            x, y = data.x[idx], data.y[idx]
            if gradient is not None:
                loss, g = gradient(x, y)
                losses = (loss.item(),)
            else:
                losses, g = opt.gradient(lambda theta: objective(theta, x, y))
            for loss in losses:
                total += loss
            with torch.no_grad():
                if on_grad is not None:
                    on_grad(g, len(idx))
                if extra_grad is not None and (pg := extra_grad(opt.weights)) is not None:
                    g.add_(pg)
                if clip:
                    clip_grad_(g, clip)
            opt.step(g, i, n_steps)
            i += 1
            if after_step is not None:
                after_step(opt)
        if after_epoch is not None:
            after_epoch(opt)
    return total / max(i, 1), i
