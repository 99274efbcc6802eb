"""The local training of a round's clients together: C clients' minibatch steps on their stacked
weight vectors (C, P), one vmapped gradient and one optimiser update over the stacks a step
(``train_local_batched``; IVON's batched loop in ``ivon.py`` draws its minibatches from ``StackedPlan``
too), with the stacked forms of ``train_local``'s hooks (``StackedIterates``, ``StackedFisher``) and the
recordable step that ``graphs`` captures (``_static_steps``). Each client's minibatches, optimiser and
clipping are those of ``local.py``'s sequential loop, client by client.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from fedbayes.methods.core import graphs
from fedbayes.methods.core.local import Tensors, minibatch_plan


class StackedPlan:
    """The minibatches of C clients trained together, step by step: client c's rows at step s are those
    ``minibatch_plan`` draws from its ``rng`` (so ``minibatches``' order), padded to the batch size with
    a mask; after its last step a client is left out (``active``, ``active_index``). Shared by every
    batched local loop (Adam/SGD: ``train_local_batched``; IVON: ``ivon.ivon_train_batched``)."""

    def __init__(self, fm, datas: list, rngs: list[np.random.Generator], *, batch_size: int, epochs: int,
                 device, dtype, loss_fn=F.cross_entropy):
        plans = [minibatch_plan(len(d), batch_size, epochs, r) for d, r in zip(datas, rngs)]
        self.steps = [len(plan) for plan in plans]
        C, S, bs = len(datas), max(self.steps), int(batch_size)
        self.n_steps = S
        offsets = np.cumsum([0] + [len(d) for d in datas[:-1]])
        rows = np.zeros((S, C, bs), dtype=np.int64)        # into the clients' rows concatenated
        mask = np.zeros((S, C, bs), dtype=np.float32)      # 1 for a minibatch row, 0 for padding
        for c, plan in enumerate(plans):
            ok = plan >= 0
            rows[:len(plan), c] = np.where(ok, plan, 0) + offsets[c]
            mask[:len(plan), c] = ok
        self.x, self.y = torch.cat([d.x for d in datas]), torch.cat([d.y for d in datas])
        self.rows = torch.from_numpy(rows).to(device)
        self.mask = torch.from_numpy(mask).to(device=device, dtype=dtype)

        def loss_one(w, xb, yb, mb):   # a live client's mask sums to ≥ 1 (the clamp changes nothing); a
            # finished client's all-zero mask (the recordable step's) gives loss 0 and gradient 0, not 0/0
            return (loss_fn(fm(w, xb), yb, reduction="none") * mb).sum() / mb.sum().clamp(min=1.0)

        self._grad_and_loss = torch.func.vmap(torch.func.grad_and_value(loss_one))
        self.steps_t = torch.tensor(self.steps, device=device)
        self._fm, self._loss_fn = fm, loss_fn
        self.total = torch.zeros(C, dtype=torch.float64, device=device)
        self._active = list(range(C))
        self.active_index = None        # the active clients as a device index, once some have finished

    def active(self, s: int) -> list[int]:
        """The clients that take step s (every client has steps 0 … steps[c] − 1)."""
        still = [c for c in self._active if s < self.steps[c]]
        if len(still) != len(self._active):
            self.active_index = torch.tensor(still, device=self.rows.device)
        self._active = still
        return self._active

    def gradient(self, W: torch.Tensor, s: int) -> torch.Tensor:
        """The minibatch-mean gradients of step s at the stacked points W (C, P), one vmapped call over the
        clients that take step s (``active(s)`` first); a client past its last step gets a zero row and
        costs nothing (Dirichlet clients' step counts differ several-fold). The losses are summed for
        ``mean_losses``."""
        rows, mask = self.rows[s], self.mask[s]
        if len(self._active) == len(self.steps):
            g, loss = self._grad_and_loss(W, self.x[rows], self.y[rows], mask)
            self.total += loss.detach().double()
            return g
        ix = self.active_index
        rows = rows[ix]
        g_act, loss = self._grad_and_loss(W[ix], self.x[rows], self.y[rows], mask[ix])
        self.total[ix] += loss.detach().double()
        g = torch.zeros_like(W)
        g[ix] = g_act
        return g

    def example_gradients(self, W: torch.Tensor, s: int,
                          reduce: Callable[[torch.Tensor, torch.Tensor | None], None]) -> torch.Tensor:
        """``gradient`` from per-example gradients (FOLA's ``fisher_norm: paper``, ``train_local``'s
        ``gradient`` hook): the (A, B, P) gradients of each row of the A clients that take step s, handed to
        ``reduce(G2, index)`` as their mean squares over each client's rows (A, P) first (``index``: the A
        clients' rows, None for all); returns the minibatch-mean gradients (C, P) as ``gradient`` does (zero
        rows for the clients past their last step)."""
        if not hasattr(self, "_example_grads"):
            fm, loss_fn = self._fm, self._loss_fn

            def one(w, xi, yi):
                return loss_fn(fm(w, xi.unsqueeze(0)), yi.unsqueeze(0))

            self._example_grads = torch.func.vmap(torch.func.vmap(torch.func.grad_and_value(one), in_dims=(None, 0, 0)))
        rows, mask = self.rows[s], self.mask[s]
        ix = None if len(self._active) == len(self.steps) else self.active_index
        if ix is not None:
            W, rows, mask = W[ix], rows[ix], mask[ix]
        grads, losses = self._example_grads(W, self.x[rows], self.y[rows])
        cnt = mask.sum(1)
        m = mask[:, :, None]
        reduce((grads.square() * m).sum(1) / cnt[:, None], ix)
        g_act = (grads * m).sum(1) / cnt[:, None]
        loss = ((losses * mask).sum(1) / cnt).detach().double()
        if ix is None:
            self.total += loss
            return g_act
        self.total[ix] += loss
        g = torch.zeros(len(self.steps), *g_act.shape[1:], dtype=g_act.dtype, device=g_act.device)
        g[ix] = g_act
        return g

    def live(self, s_t: torch.Tensor) -> torch.Tensor:
        """(C,) bool: which clients take step ``s_t`` (a device step counter, ``graphs.at``)."""
        return self.steps_t > s_t

    def gradient_static(self, W: torch.Tensor, s_t: torch.Tensor) -> torch.Tensor:
        """``gradient`` at the device step counter ``s_t`` for every client (a recordable step,
        ``graphs``): a client past its last step has an all-zero mask, so a zero gradient and loss."""
        rows, mask = graphs.at(self.rows, s_t), graphs.at(self.mask, s_t)
        g, loss = self._grad_and_loss(W, self.x[rows], self.y[rows], mask)
        self.total += loss.detach().double()
        return g

    def mean_losses(self) -> list[float]:
        return (self.total.cpu() / torch.tensor(self.steps, dtype=torch.float64, device="cpu")).tolist()


def train_local_batched(fm, w_start: torch.Tensor, datas: list, rngs: list[np.random.Generator], *,
                        epochs: int, batch_size: int, lr: float, optimizer: str = "adam", momentum: float = 0.0,
                        clip: float | None = None, states: list[Tensors] | None = None,
                        extra_grad: Callable[[torch.Tensor], torch.Tensor] | None = None,
                        loss_fn=F.cross_entropy,
                        on_grad: Callable[[torch.Tensor, int, list[int]], None] | None = None,
                        gradient: Callable[[StackedPlan, torch.Tensor, int], torch.Tensor] | None = None,
                        after_step: Callable[[torch.Tensor, int, list[int]], None] | None = None
                        ) -> tuple[torch.Tensor, list[float], list[int]]:
    """``train_local`` with FlatAdam or FlatSGD for C clients together, all starting from ``w_start``: the
    minibatch gradients of the C clients' step s are one vmapped call over their stacked weights W (C, P),
    their clipping one norm per row (``clip_grad_``'s rule), and their updates one multi-tensor kernel
    (Adam: the fused kernel; SGD: foreach ops, momentum buffers as ``FlatSGD`` keeps them). One hook:
    ``extra_grad(W)``, the closed-form penalty gradient of every client at once (``train_local``'s
    ``extra_grad`` row by row). Each client draws its minibatches from its own ``rng`` exactly as
    ``minibatches`` would, so the iterates are those of C calls of ``train_local`` up to float round-off
    (batched matrix products and norms sum in another order); a client with fewer steps than the others is
    left out of the updates after its last one. ``states``: the clients' persistent optimiser states
    (``FlatAdam.state()`` / ``FlatSGD.state()``), read and updated in place; None for fresh optimisers.
    Two more hooks, ``train_local``'s on stacked tensors: ``on_grad(G, s, active)`` reads the data gradients
    G (C, P) of step s before ``extra_grad`` (a Fisher sum: ``StackedFisher``), ``after_step(W, s, active)``
    reads the weights after step s (iterate samples: ``StackedIterates``); ``active`` lists the clients that
    took step s (the others' rows of G are zeros, of W unchanged). ``gradient(plan, W, s)`` replaces the
    step's minibatch gradients (``train_local``'s ``gradient``; e.g. ``plan.example_gradients``). A hook
    with a ``static`` method also runs in the recordable step (``graphs``); with another hook (or
    ``gradient``) the loop leaves finished clients out eagerly.
    ``train_local``'s ``extra_loss`` has no batched form: a method that needs it trains one by one.
    Returns (weights (C, P), each client's mean loss over its steps, each client's number of steps).

    Pays where one client's step cannot fill the device (a GPU); on a CPU the stacked products cost what
    C separate ones do (benchmarks/roofline.md)."""
    if optimizer not in ("adam", "sgd"):
        raise ValueError(f"unknown local optimiser {optimizer!r}; choose adam or sgd")
    C, dev, dtype = len(datas), w_start.device, w_start.dtype
    plan = StackedPlan(fm, datas, rngs, batch_size=batch_size, epochs=epochs, device=dev, dtype=dtype, loss_fn=loss_fn)
    W = w_start.detach().unsqueeze(0).repeat(C, 1)
    if optimizer == "adam":
        m, v = torch.zeros_like(W), torch.zeros_like(W)
        t = torch.zeros(C, dtype=torch.float32, device=dev)
        for c, st in enumerate(states or []):
            if "opt/m" in st:
                m[c], v[c], t[c] = st["opt/m"], st["opt/v"], st["opt/t"]
    else:
        buf = torch.zeros_like(W)
        has_buf = [False] * C                           # FlatSGD's buffer exists after a client's first step
        for c, st in enumerate(states or []):
            if "opt/buf" in st:
                buf[c], has_buf[c] = st["opt/buf"], True
    how = graphs.mode(dev)
    if gradient is not None or any(h is not None and not hasattr(h, "static") for h in (on_grad, after_step)):
        how = "subset"                                  # a hook without a recordable form
    if how != "subset":
        _static_steps(plan, W, extra_grad, clip, optimizer, lr, momentum, capture=how == "graph",
                      adam=(m, v, t) if optimizer == "adam" else None, sgd=None if optimizer == "adam" else (buf, has_buf),
                      on_grad=on_grad, after_step=after_step)
    for s in range(plan.n_steps if how == "subset" else 0):
        active = plan.active(s)
        g = plan.gradient(W, s) if gradient is None else gradient(plan, W, s)
        if on_grad is not None:
            on_grad(g, s, active)
        if extra_grad is not None:
            g.add_(extra_grad(W))
        if clip:
            clip_rows_(g, clip)
        if optimizer == "adam":
            t_act = [t[c] for c in active]
            torch._foreach_add_(t_act, 1.0)
            torch._fused_adam_([W[c] for c in active], [g[c] for c in active], [m[c] for c in active],
                               [v[c] for c in active], [], t_act, amsgrad=False, lr=float(lr), beta1=0.9,
                               beta2=0.999, weight_decay=0.0, eps=1e-8, maximize=False, grad_scale=None,
                               found_inf=None)
            if after_step is not None:
                after_step(W, s, active)
            continue
        if momentum:
            fresh = [c for c in active if not has_buf[c]]
            for c in fresh:
                buf[c].copy_(g[c])
                has_buf[c] = True
            old = [c for c in active if c not in fresh]
            if old:
                torch._foreach_mul_([buf[c] for c in old], float(momentum))
                torch._foreach_add_([buf[c] for c in old], [g[c] for c in old])
            steps_ = [buf[c] for c in active]
        else:
            steps_ = [g[c] for c in active]
        torch._foreach_add_([W[c] for c in active], steps_, alpha=-float(lr))
        if after_step is not None:
            after_step(W, s, active)
    for c, st in enumerate(states or []):
        if optimizer == "adam":
            st.update({"opt/m": m[c].clone(), "opt/v": v[c].clone(), "opt/t": t[c].clone()})
        elif momentum and has_buf[c]:
            st.update({"opt/buf": buf[c].clone()})
    return W, plan.mean_losses(), plan.steps


class StackedIterates:
    """``train_local``'s ``after_step``/``after_epoch`` iterate samples for C clients trained together
    (``train_local_batched``'s ``after_step``): client c's weights at the end of each of its ``epochs``
    epochs, or (``average``) the mean of its iterates over each epoch, as ``FedAvgM.sgd_epochs`` keeps them
    one by one. ``sizes``: the clients' numbers of rows (their epoch lengths follow from ``batch_size``)."""

    def __init__(self, start: torch.Tensor, sizes: list[int], batch_size: int, epochs: int, average: bool = False):
        self.per_epoch = [-(-int(n) // int(batch_size)) for n in sizes]
        self.epochs, self.average = int(epochs), average
        self.acc = torch.zeros(len(sizes), *start.shape, dtype=start.dtype, device=start.device)
        self.cnt = [0] * len(sizes)
        self.samples: list[list[torch.Tensor]] = [[] for _ in sizes]

    def __call__(self, W: torch.Tensor, s: int, active: list[int]) -> None:
        if self.average:
            if len(active) == len(self.cnt):
                self.acc.add_(W)
            else:
                self.acc[active] += W[active]
        for c in active:
            self.cnt[c] += 1
            if (s + 1) % self.per_epoch[c] == 0:            # client c's epoch ends with step s
                self.samples[c].append(self.acc[c] / self.cnt[c] if self.average else W[c].clone())
                self.acc[c].zero_()
                self.cnt[c] = 0

    def static(self, W: torch.Tensor, s_t: torch.Tensor, live: torch.Tensor) -> None:
        """``__call__`` in a recordable step (``graphs``): step ``s_t`` of every client, ``live`` (C,) the
        clients that took it; epoch ends and sample slots read from device tables, the samples kept in
        one (C, epochs, P) buffer."""
        if not hasattr(self, "_ends"):
            C, E = len(self.cnt), self.epochs
            S = E * max(self.per_epoch)
            ends = np.zeros((S, C), dtype=bool)
            slot = np.zeros((S, C), dtype=np.int64)
            for c, k in enumerate(self.per_epoch):
                ends[k - 1:E * k:k, c] = True
                slot[:E * k, c] = np.arange(E * k) // k
            dev = W.device
            self._ends, self._slot = torch.from_numpy(ends).to(dev), torch.from_numpy(slot).to(dev)
            self._cnt = torch.zeros(C, dtype=W.dtype, device=dev)
            self._buf = torch.zeros(C, E, *W.shape[1:], dtype=W.dtype, device=dev)
            self._rows = torch.arange(C, device=dev)
        keep = live.view(-1, *([1] * (W.dim() - 1)))
        if self.average:
            self.acc.add_(torch.where(keep, W, torch.zeros_like(W)))
        self._cnt.add_(live.to(W.dtype))
        end = graphs.at(self._ends, s_t)
        slot = graphs.at(self._slot, s_t)
        val = self.acc / self._cnt.clamp(min=1.0).view_as(keep) if self.average else W
        end_ = end.view_as(keep)
        self._buf[self._rows, slot] = torch.where(end_, val, self._buf[self._rows, slot])
        self.acc.copy_(torch.where(end_, torch.zeros_like(self.acc), self.acc))
        self._cnt.copy_(torch.where(end, torch.zeros_like(self._cnt), self._cnt))

    def stacked(self) -> list[torch.Tensor]:
        """Each client's samples, (epochs, P)."""
        if hasattr(self, "_buf"):
            return list(self._buf)
        return [torch.stack(s) for s in self.samples]


class StackedFisher:
    """FOLA's Fisher sum F_c += (|b|/N_c) g² of the data gradient g of each step (``train_local``'s
    ``on_grad`` with ``kernels.add_scaled_square_``) for C clients trained together (``train_local_batched``'s
    ``on_grad``): one pass over the stacked gradients a step. Minibatch sizes follow ``minibatches``."""

    def __init__(self, like: torch.Tensor, sizes: list[int], batch_size: int, epochs: int = 1):
        self.sizes, self.bs, self.epochs = [int(n) for n in sizes], int(batch_size), int(epochs)
        self.per_epoch = [-(-n // self.bs) for n in self.sizes]
        self.fisher = torch.zeros(len(sizes), *like.shape, dtype=like.dtype, device=like.device)
        # |b|/N_c of client c's step s (its epoch's b-th minibatch), 0 past its last step (where G's row is zero)
        table = np.zeros((self.epochs * max(self.per_epoch, default=0), len(self.sizes)))
        for c, (n, k) in enumerate(zip(self.sizes, self.per_epoch)):
            for s in range(self.epochs * k):
                table[s, c] = min(self.bs, n - (s % k) * self.bs) / n
        self._table = torch.from_numpy(table).to(device=like.device, dtype=like.dtype)

    def __call__(self, G: torch.Tensor, s: int, active: list[int]) -> None:
        self.fisher.add_(torch.mul(G, G).mul_(self._table[s][:, None]))

    def static(self, G: torch.Tensor, s_t: torch.Tensor) -> None:
        """``__call__`` in a recordable step (``graphs``): the coefficients of step ``s_t`` read on the device."""
        self.fisher.add_(torch.mul(G, G).mul_(graphs.at(self._table, s_t)[:, None]))


def _static_steps(plan: StackedPlan, W: torch.Tensor, extra_grad, clip, optimizer: str, lr: float, momentum: float,
                  *, capture: bool, adam: tuple | None, sgd: tuple | None, on_grad=None, after_step=None) -> None:
    """``train_local_batched``'s steps as a recordable step (``graphs``): every client every step, a
    finished client's state put back after the update; the same operations on the live clients. The hooks
    run in their recordable form (``on_grad.static(G, s_t)``, ``after_step.static(W, s_t, live)``)."""
    C = W.shape[0]
    rows = lambda x: [x[c] for c in range(C)]  # noqa: E731
    Ws = rows(W)

    def step(s_t):
        g = plan.gradient_static(W, s_t)
        if on_grad is not None:
            on_grad.static(g, s_t)
        if extra_grad is not None:
            g.add_(extra_grad(W))
        if clip:
            clip_rows_(g, clip)
        live = plan.live(s_t)
        if adam is not None:
            m, v, t = adam
            old = [(x, x.clone()) for x in (W, m, v, t)]
            ts = rows(t)
            torch._foreach_add_(ts, 1.0)
            torch._fused_adam_(Ws, rows(g), rows(m), rows(v), [], ts, amsgrad=False, lr=float(lr), beta1=0.9,
                               beta2=0.999, weight_decay=0.0, eps=1e-8, maximize=False, grad_scale=None,
                               found_inf=None)
        elif momentum:
            buf, has_buf = sgd
            old = [(W, W.clone()), (buf, buf.clone())]
            fresh = [c for c in range(C) if not has_buf[c]]    # step 0 only: every client takes step 0
            for c in fresh:
                buf[c].copy_(g[c])
                has_buf[c] = True
            rest = [c for c in range(C) if c not in fresh]
            if rest:
                torch._foreach_mul_([buf[c] for c in rest], float(momentum))
                torch._foreach_add_([buf[c] for c in rest], [g[c] for c in rest])
            torch._foreach_add_(Ws, rows(buf), alpha=-float(lr))
        else:
            old = [(W, W.clone())]
            torch._foreach_add_(Ws, rows(g), alpha=-float(lr))
        graphs.keep_finished(live, old)
        if after_step is not None:
            after_step.static(W, s_t, live)

    graphs.run_steps(step, plan.n_steps, device=W.device, capture=capture)


def clip_rows_(G: torch.Tensor, max_norm: float) -> None:
    """``clip_grad_`` on each row of G (a client's gradient), in place: rows whose norm exceeds
    ``max_norm`` are scaled by max_norm / (norm + 1e-6), the others left as they are (NaN scales too)."""
    coef = max_norm / (torch.linalg.vector_norm(G, 2.0, dim=1) + 1e-6)
    G.mul_(torch.where(coef >= 1.0, torch.ones_like(coef), coef)[:, None])
