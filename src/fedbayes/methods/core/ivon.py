"""IVON (Shen et al. 2024) on one flat parameter vector, with a general diagonal Gaussian prior and the
Lagrange terms BayesADMM adds (BayesADMM spec Alg. 2; FedIVON spec Alg. 2).

It solves, for a data term ℓ̄ (minibatch-mean loss) and an effective sample size λ,

    min_q  λ E_q[ ℓ̄(θ) + vᵀθ − ½ θᵀ(u∘θ) ] + KL(q ‖ N(m_p, diag(1/(λδ)))),    q = N(m, diag(1/(λ(h + δ))))

where δ (a vector or a scalar) is the prior precision per unit of λ (IVON's "weight decay"). State:
mean m, Hessian estimate h, momentum g, step count t. One step with S Monte-Carlo samples:

    θ_s = m + ε_s / sqrt(λ(h + δ)),  ε_s ~ N(0, I)
    ĝ = mean_s ∇ℓ̄(θ_s);   ĥ = mean_s ∇ℓ̄(θ_s)∘(θ_s − m) · λ(h + δ) − u       (reparameterisation estimate)
    g ← β1 g + (1 − β1) ĝ
    h ← β2 h + (1 − β2) ĥ + ½(1 − β2)² (h − ĥ)² / (h + δ)                       (h before the update on the right)
    m ← m − lr_t · clip( (g/(1 − β1^t) + v − u∘m + δ∘(m − m_p)) / (h + δ), ±r )   (the new h)

With u = v = 0, m_p = 0 and a scalar δ this is ivon-opt's ``IVON`` step for step (same seed, same
iterates: ``tests/test_ivon.py``); ivon-opt's ``rescale_lr`` is ``lr_t = lr·(h0 + δ)`` here.
The posterior precision is ``λ(h + δ)``.
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from fedbayes.methods.core import graphs, kernels
from fedbayes.methods.core.chunks import networks_per_chunk, stacked_logits
from fedbayes.methods.core.batched import StackedPlan
from fedbayes.methods.core.local import train_local
from fedbayes.methods.hyperparameters import Hyperparameters


@dataclass
class IVONState:
    m: torch.Tensor
    h: torch.Tensor
    g: torch.Tensor
    t: int = 0

    @classmethod
    def start(cls, m: torch.Tensor, h0) -> "IVONState":
        h = torch.as_tensor(h0, dtype=m.dtype, device=m.device).expand_as(m).clone()
        return cls(m.detach().clone(), h, torch.zeros_like(m), 0)

    def precision(self, ess: float, delta) -> torch.Tensor:
        """λ(h + δ), the diagonal precision of q."""
        return ess * (self.h + delta)


def ivon_step(st: IVONState, grad: torch.Tensor, nxg: torch.Tensor, *, lr: float, ess: float, delta,
              beta1: float = 0.9, beta2: float = 0.99999, prior_mean=0.0, v=None, u=None,
              clip_radius: float = math.inf, debias: bool = True) -> IVONState:
    """One update from the MC-averaged gradient ``grad`` and ``nxg`` = mean_s ∇ℓ̄(θ_s)∘(θ_s − m)."""
    t = st.t + 1
    g = beta1 * st.g + (1.0 - beta1) * grad
    hd = st.h + delta
    h_hat = nxg * hd * ess
    if u is not None:
        h_hat = h_hat - u
    h = beta2 * st.h + (1.0 - beta2) * h_hat + 0.5 * (1.0 - beta2) ** 2 * (st.h - h_hat).square() / hd
    step = g / (1.0 - beta1 ** t if debias else 1.0) + delta * (st.m - prior_mean)
    if v is not None:
        step = step + v
    if u is not None:
        step = step - u * st.m
    step = step / (h + delta)
    if math.isfinite(clip_radius):
        step = step.clamp(-clip_radius, clip_radius)
    return IVONState(st.m - lr * step, h, g, t)


def _ivon_step_(m: torch.Tensor, h: torch.Tensor, g: torch.Tensor, t: int, grad: torch.Tensor, nxg: torch.Tensor,
                hd: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *, lr: float, ess: float, delta,
                beta1: float, beta2: float, prior_mean, v, u, clip_radius: float, debias: bool,
                bias=None) -> int:
    """``ivon_step`` in place: m, h, g are overwritten with the new state and ``hd`` (h + δ on entry) with
    new h + δ, using the scratch vectors a, b (no allocation). The same elementwise operations on the same
    operands in the same order as ``ivon_step`` (only the commutative products' operand order differs),
    so the iterates are the same bit for bit (tests/test_ivon.py); it saves ``ivon_step``'s ~20 temporary
    vectors a step, whose allocation and cache misses cost several times the arithmetic. ``bias``: the
    debiasing divisor 1 − β1^t (t the new count) given by the caller (the compiled step passes it, ``lr``
    and ``ess`` as 0-dim tensors, so that one compiled kernel serves every step). Returns t + 1."""
    t += 1
    g.mul_(beta1)
    torch.mul(grad, 1.0 - beta1, out=a)
    g.add_(a)                                                     # g = β1 g + (1 − β1) ĝ
    torch.mul(nxg, hd, out=a)
    a.mul_(ess)
    if u is not None:
        a.sub_(u)                                                 # a = ĥ
    torch.sub(h, a, out=b)
    b.square_()
    b.mul_(0.5 * (1.0 - beta2) ** 2)
    b.div_(hd)
    h.mul_(beta2)
    a.mul_(1.0 - beta2)
    h.add_(a)
    h.add_(b)                                                     # h = new h
    torch.div(g, bias if bias is not None else 1.0 - beta1 ** t if debias else 1.0, out=a)
    torch.sub(m, prior_mean, out=b)
    b.mul_(delta)
    a.add_(b)
    if v is not None:
        a.add_(v)
    if u is not None:
        torch.mul(u, m, out=b)
        a.sub_(b)
    torch.add(h, delta, out=hd)                                   # new h + δ (the next step's too)
    a.div_(hd)
    if math.isfinite(clip_radius):
        a.clamp_(-clip_radius, clip_radius)
    a.mul_(lr)
    m.sub_(a)
    return t


# ``_ivon_step_`` compiled into one loop over the parameters — on the CPU the loop of ``kernels.cpp``,
# elsewhere torch.compile's kernel: the same elementwise operations in the same order, IEEE-rounded one
# by one (no contraction into fused multiply-adds, no reassociation), so the same bits as the eager step
# — checked on every committed BayesADMM / FedIVON replay (tests/test_replay.py) and on random state
# (tests/test_ivon.py, tests/test_kernels.py) — at about a quarter of its time (25 passes over the
# vectors become one). Used from COMPILE_MIN_PARAMS parameters up, where it pays for its compilation;
# FEDBAYES_COMPILE=0 turns it off, and a machine where compilation fails (no C++ compiler) falls back to
# the eager step with one warning.
COMPILE_MIN_PARAMS = kernels.MIN_NUMEL   # the CPU kernels' threshold too
_compiled = None


def _step_fn(n_params: int):
    global _compiled
    if n_params < COMPILE_MIN_PARAMS or os.environ.get("FEDBAYES_COMPILE", "1") == "0" or _compiled is False:
        return _ivon_step_
    if _compiled is None:
        _compiled = torch.compile(_ivon_step_)
    return _compiled


def _fall_back(err: Exception) -> None:
    global _compiled
    _compiled = False
    warnings.warn(f"IVON: the compiled step is unavailable ({type(err).__name__}: {str(err)[:200]}); "
                  "using the eager step (the same numbers, slower)", RuntimeWarning, stacklevel=3)


class IVON:
    """IVON as a local optimiser of ``train_local`` (``methods/core/local.py``): its ``gradient`` is the
    MC average over posterior samples θ_s = m + ε_s/sqrt(λ(h + δ)) (noise from torch's global generator,
    which the engine seeds per round and client, drawn by ``kernels.sample_``: torch.randn's numbers), and
    its ``step`` is ``_ivon_step_`` on copies of the state (the caller's tensors are never written). ``lr(i, n)``: the rate of local step i of n."""

    def __init__(self, st: IVONState, *, lr: Callable[[int, int], float], ess: float, delta, prior_mean=0.0,
                 v=None, u=None, beta1: float = 0.9, beta2: float = 0.99999, mc_samples: int = 1,
                 clip_radius: float = math.inf, debias: bool = True):
        self.m, self.h, self.g, self.t = st.m.clone(), st.h.clone(), st.g.clone(), st.t
        self.lr, self.ess, self.delta, self.prior_mean, self.v, self.u = lr, ess, delta, prior_mean, v, u
        self.beta1, self.beta2, self.mc_samples = beta1, beta2, int(mc_samples)
        self.clip_radius, self.debias = clip_radius, debias
        self.hd = self.h + delta                       # h + δ, kept current by the step
        m = self.m
        self.a, self.b, self.std = torch.empty_like(m), torch.empty_like(m), torch.empty_like(m)
        self.noise, self.theta = torch.empty_like(m), torch.empty_like(m)
        self.nxg = None
        self._unscaled = None                          # (θ − m, ĝ, ĝ's version) while nxg is still to form

    @property
    def state(self) -> IVONState:
        return IVONState(self.m, self.h, self.g, self.t)

    @property
    def weights(self) -> torch.Tensor:
        return self.m

    def gradient(self, objective):
        m, S = self.m, self.mc_samples
        grad = nxg = None
        losses = []
        for s in range(S):
            if S == 1:  # into the buffers: ε∘std, θ = m + ε∘std (ε∘std∘ĝ is formed by the step)
                noise = self.noise
                with torch.no_grad():
                    kernels.sample_(noise, self.theta, m, self.hd, self.ess, self.std)
                theta = self.theta.detach().requires_grad_(True)
            else:
                if s == 0:
                    with torch.no_grad():
                        torch.mul(self.hd, self.ess, out=self.std)
                        self.std.rsqrt_()                                 # (λ(h + δ))^-1/2
                noise = kernels.randn(m.shape, dtype=m.dtype, device=m.device) * self.std
                theta = (m + noise).requires_grad_(True)
            reported, loss = objective(theta)
            (gs,) = torch.autograd.grad(loss, theta)
            losses.append(reported.item() / S)
            if S == 1:  # ĝ∘(θ − m) is formed by the step (from the noise buffer), which checks that ĝ is unchanged
                grad, self._unscaled = gs, (noise, gs, gs._version)
            else:
                grad = gs if grad is None else grad + (gs - grad) / (s + 1)       # running means
                nxg = noise * gs if nxg is None else nxg + (noise * gs - nxg) / (s + 1)
        self.nxg = nxg
        return tuple(losses), grad

    def step(self, grad: torch.Tensor, i: int, n: int) -> None:
        noise = None
        if self.nxg is None:
            noise, gs, version = self._unscaled
            if grad is not gs or gs._version != version:
                raise RuntimeError("IVON.step takes the gradient its gradient() returned, unchanged (its "
                                   "∇ℓ̄(θ)∘(θ − m) is formed from it): no on_grad, extra_grad or clipping hook")
        args = (self.m, self.h, self.g, self.t, grad, self.nxg, self.hd, self.a, self.b)
        kw = dict(lr=self.lr(i, n), ess=self.ess, delta=self.delta, beta1=self.beta1, beta2=self.beta2,
                  prior_mean=self.prior_mean, v=self.v, u=self.u, clip_radius=self.clip_radius, debias=self.debias,
                  noise=noise)
        with torch.no_grad():
            self.t = ivon_step_(*args, **kw)


def ivon_step_(m, h, g, t, grad, nxg, hd, a, b, *, lr, ess, noise=None, **kw) -> int:
    """``_ivon_step_`` at its fastest: on the CPU the compiled loop of ``kernels.ivon_step``; elsewhere (a
    GPU) torch.compile's kernel where that is on (``_step_fn``), the step's changing numbers (rate,
    effective sample size, the debiasing divisor of step t + 1) going in as 0-dim float32 tensors, the
    values the eager kernels compute with, so that one kernel serves every step of a run. ``nxg`` None:
    formed here as ``noise``·``grad`` (in ``noise``'s place where the kernel does not run). The CPU kernel
    is tried first, so that a CPU run never builds (or imports) torch.compile."""
    done = kernels.ivon_step(m, h, g, t, grad, nxg, hd, lr=lr, ess=ess, noise=noise, **kw)
    if done is not None:
        return done
    if nxg is None:
        nxg = noise.mul_(grad)
    step = _step_fn(m.numel())
    if step is _ivon_step_:
        return _ivon_step_(m, h, g, t, grad, nxg, hd, a, b, lr=lr, ess=ess, **kw)
    f32 = lambda x: torch.tensor(x, dtype=m.dtype, device=m.device)  # noqa: E731
    bias = f32(1.0 - kw["beta1"] ** (t + 1) if kw["debias"] else 1.0)
    try:
        step(m, h, g, 0, grad, nxg, hd, a, b, lr=f32(lr), ess=f32(ess), bias=bias, **kw)
    except Exception as err:  # noqa: BLE001  (compilation: no C++ compiler, unsupported platform)
        _fall_back(err)
        return _ivon_step_(m, h, g, t, grad, nxg, hd, a, b, lr=lr, ess=ess, **kw)
    return t + 1


def ivon_train(fm, st: IVONState, data, rng: np.random.Generator, *, epochs: int, batch_size: int,
               lr: Callable[[int, int], float], ess: float, delta, prior_mean=0.0, v=None, u=None,
               beta1: float = 0.9, beta2: float = 0.99999, mc_samples: int = 1,
               clip_radius: float = math.inf, debias: bool = True,
               loss_fn=F.cross_entropy) -> tuple[IVONState, float, int]:
    """``epochs`` passes of IVON over ``data`` through the shared local loop (``train_local``: a fresh
    permutation from ``rng`` each epoch; the last batch may be smaller); ``loss_fn(outputs, y)`` is the
    minibatch-mean loss ℓ̄. ``lr(i, n)`` is the learning rate of local step i (0-based) of n.
    Returns the new state, the mean minibatch loss at the samples, and the number of steps."""
    opt = IVON(st, lr=lr, ess=ess, delta=delta, prior_mean=prior_mean, v=v, u=u, beta1=beta1, beta2=beta2,
               mc_samples=mc_samples, clip_radius=clip_radius, debias=debias)
    mean_loss, steps = train_local(fm, opt, data, rng, epochs=epochs, batch_size=batch_size, loss_fn=loss_fn)
    return opt.state, mean_loss, steps


def ivon_train_batched(fm, sts: list[IVONState], datas: list, rngs: list[np.random.Generator],
                       generators: list[torch.Generator], *, epochs: int, batch_size: int,
                       lrs: list[Callable[[int, int], float]], esss: list[float], deltas: list, prior_means: list,
                       vs: list | None = None, us: list | None = None, beta1: float = 0.9,
                       beta2: float = 0.99999, clip_radius: float = math.inf,
                       debias: bool = True) -> tuple[list[IVONState], list[float], list[int]]:
    """``ivon_train`` with one posterior sample a step (``mc_samples: 1``) and minibatch-mean cross-entropy
    for C clients together: client c's arguments are the c-th entries of the lists. Their states are
    stacked (C, P); at step s the C sampled networks' minibatch gradients are one vmapped call
    (``batched.StackedPlan``) and their IVON updates one pass of ``_ivon_step_`` over the stacks, the
    per-client numbers (rate, effective sample size, debiasing divisor) as (C, 1) columns of the float32
    values the sequential step computes with. Client c draws its minibatches from ``rngs[c]`` as
    ``minibatches`` would and its noise from ``generators[c]`` (seeded as the engine seeds torch's global
    generator before the client's ``client_update``), so the iterates are those of C calls of
    ``ivon_train`` up to float round-off (batched products sum in another order; tests/test_batched.py).
    A client with fewer steps than the others is left out of the updates after its last one. The model
    must be ``row_wise`` (no dropout or batch-norm draws, which the sequential loop interleaves with the
    noise). Returns (states, mean losses at the samples, steps)."""
    C = len(sts)
    dev, dtype = sts[0].m.device, sts[0].m.dtype
    plan = StackedPlan(fm, datas, rngs, batch_size=batch_size, epochs=epochs, device=dev, dtype=dtype)
    S, steps = plan.n_steps, plan.steps
    stack = lambda xs: torch.stack([x.to(dtype) for x in xs])  # noqa: E731
    M, H, G = stack([s.m for s in sts]), stack([s.h for s in sts]), stack([s.g for s in sts])
    col = lambda xs: torch.tensor(xs, dtype=dtype, device=dev).reshape(-1, 1)  # noqa: E731
    ess = col([float(e) for e in esss])
    # δ, the prior mean and the Lagrange terms: shared where every client has the same one, else stacked
    same = lambda xs: all(x is xs[0] or (isinstance(x, float) and x == xs[0]) for x in xs)  # noqa: E731
    wide = lambda x: x if torch.is_tensor(x) else torch.full_like(M[0], float(x))  # noqa: E731
    delta = deltas[0] if same(deltas) else torch.stack([wide(d) for d in deltas])
    prior = prior_means[0] if same(prior_means) else torch.stack([wide(p) for p in prior_means])
    V = None if vs is None else torch.stack(vs)
    U = None if us is None else torch.stack(us)
    # each client's rate and debiasing divisor at each of its steps, one table (S, C) sent at once
    lr_tab = np.zeros((S, C), dtype=np.float64)
    bias_tab = np.ones((S, C), dtype=np.float64)
    for c, st in enumerate(sts):
        for i in range(steps[c]):
            lr_tab[i, c] = lrs[c](i, steps[c])
            bias_tab[i, c] = 1.0 - beta1 ** (st.t + i + 1) if debias else 1.0
    lr_t = torch.tensor(lr_tab, dtype=dtype, device=dev)
    bias_t = torch.tensor(bias_tab, dtype=dtype, device=dev)
    HD = H + delta
    std, noise = torch.empty_like(M), torch.empty_like(M)
    A, B = torch.empty_like(M), torch.empty_like(M)
    kw = dict(beta1=beta1, beta2=beta2, clip_radius=clip_radius, debias=debias)
    # the step: on a GPU torch.compile's one kernel where that is on (as the sequential step there), else eager
    step = _ivon_step_ if dev.type == "cpu" else _step_fn(M.numel())

    def update(*args, **kws):
        nonlocal step
        try:
            step(*args, **kws, **kw)
        except Exception as err:  # noqa: BLE001  (compilation: no C++ compiler, unsupported platform)
            if step is _ivon_step_:
                raise
            _fall_back(err)
            step = _ivon_step_
            step(*args, **kws, **kw)

    @torch.no_grad()
    def sample(clients) -> torch.Tensor:
        """θ = M + ε/sqrt(λ(h + δ)), ε from ``clients``' own generators (the others' rows are stale)."""
        for c in clients:
            kernels.randn_(noise[c], generators[c])
        torch.mul(HD, ess, out=std)
        std.rsqrt_()
        noise.mul_(std)
        return M + noise

    how = graphs.mode(dev)
    if how != "subset":   # the recordable step (``graphs``): every client every step, finished ones put back
        lr_now, bias_now = torch.empty_like(ess), torch.empty_like(ess)

        def static_step(s_t):
            grad = plan.gradient_static(sample(range(C)), s_t)
            with torch.no_grad():
                nxg = noise.mul_(grad)
                old = [(x, x.clone()) for x in (M, H, G, HD)]
                lr_now.copy_(graphs.at(lr_t, s_t)[:, None])
                bias_now.copy_(graphs.at(bias_t, s_t)[:, None])
                update(M, H, G, 0, grad, nxg, HD, A, B, lr=lr_now, ess=ess, delta=delta, prior_mean=prior,
                       v=V, u=U, bias=bias_now)
                graphs.keep_finished(plan.live(s_t), old)

        graphs.run_steps(static_step, S, device=dev, generators=generators, capture=how == "graph")
    for s in range(S if how == "subset" else 0):
        act = plan.active(s)
        grad = plan.gradient(sample(act), s)
        with torch.no_grad():
            nxg = noise.mul_(grad)
            if len(act) == C:
                update(M, H, G, 0, grad, nxg, HD, A, B, lr=lr_t[s, :, None], ess=ess, delta=delta,
                       prior_mean=prior, v=V, u=U, bias=bias_t[s, :, None])
            else:  # the clients still training, gathered, stepped and written back
                ix = plan.active_index
                pick = lambda x: x[ix] if torch.is_tensor(x) and x.dim() == 2 else x  # noqa: E731
                m, h, g, hd = M[ix], H[ix], G[ix], HD[ix]
                update(m, h, g, 0, grad[ix], nxg[ix], hd, A[ix], B[ix], lr=lr_t[s, ix, None],
                       ess=ess[ix], delta=pick(delta), prior_mean=pick(prior), v=pick(V), u=pick(U),
                       bias=bias_t[s, ix, None])
                M[ix], H[ix], G[ix], HD[ix] = m, h, g, hd
    out = [IVONState(M[c].clone(), H[c].clone(), G[c].clone(), sts[c].t + steps[c]) for c in range(C)]
    return out, plan.mean_losses(), steps


def ivon_settings(method) -> dict:
    """The IVON settings of ``ivon_train`` / ``ivon_train_batched`` an IVON method (BayesADMM, FedIVON)
    takes from its hyperparameters alike."""
    p = method.p
    return dict(epochs=int(p.local_epochs), batch_size=int(p.batch_size), beta1=float(p.beta1),
                beta2=float(p.beta2), clip_radius=float(p.clip_radius or math.inf))


def batchable(method, cls, generators) -> bool:
    """Can ``method`` (an IVON method of class ``cls``) train its round's clients with
    ``ivon_train_batched``? Only with the clients' own generators, one sample a step, the cross-entropy
    loss, a ``row_wise`` model and ``cls``'s own ``client_update`` (a subclass that changes it trains one
    by one)."""
    return (generators is not None and int(method.p.mc_samples) == 1 and method.loss_fn is F.cross_entropy
            and method.fm.row_wise and type(method).client_update is cls.client_update)


def stacked_problems(problems: list[dict]) -> dict:
    """The per-client keyword arguments of ``ivon_train`` (lr, ess, delta, prior_mean, v, u) as the lists
    ``ivon_train_batched`` takes."""
    out = {"lrs": [p["lr"] for p in problems], "esss": [p["ess"] for p in problems],
           "deltas": [p["delta"] for p in problems], "prior_means": [p.get("prior_mean", 0.0) for p in problems]}
    for key in ("v", "u"):
        if any(p.get(key) is not None for p in problems):
            out[key + "s"] = [p[key] for p in problems]
    return out


def lr_schedule(p: Hyperparameters, rnd: int, rounds: int, scale: float = 1.0) -> Callable[[int, int], float]:
    """The local learning rate as a function of (local step i, local steps n):

    * ``constant``: ``lr``;
    * ``cosine_rounds``: ``lr·(1 + cos(π (r−1)/R))/2`` in round r of R, constant within a round
      (BayesADMM, PyTorch's CosineAnnealingLR stepped once per round, η_min = 0);
    * ``linear_local``: from ``lr`` to ``lr_final`` linearly over the n local steps of each client
      update (FedIVON App. B "linearly decaying", spec ambiguity A3: step i gets lr + (lr_final − lr)·i/n).
    Multiplied by ``scale`` (IVON's rescale_lr factor h0 + δ where a method uses it). ``p``: the run's
    hyperparameters (``lr_schedule``, ``lr``, ``lr_final``)."""
    kind, lr0, scale = p.lr_schedule, float(p.lr), float(scale)
    if kind == "constant":
        return lambda i, n: lr0 * scale
    if kind == "cosine_rounds":
        val = lr0 * 0.5 * (1.0 + math.cos(math.pi * (rnd - 1) / rounds))
        return lambda i, n: val * scale
    if kind == "linear_local":
        lr1 = float(p.lr_final)
        return lambda i, n: (lr0 + (lr1 - lr0) * i / n) * scale
    raise ValueError(f"unknown lr_schedule {kind!r}; choose constant, cosine_rounds or linear_local")


@torch.no_grad()
def gaussian_samples_logits(fm, mean: torch.Tensor, std: torch.Tensor, x: torch.Tensor, n_samples: int,
                            seed: int, chunk: int | None = None) -> torch.Tensor:
    """(S, N, C) logits at S draws θ_s = mean + std∘ε_s. The draws depend only on ``seed`` (not on x),
    so calling this chunk by chunk over a test set uses the same S networks for every chunk. ``chunk``
    networks go through one vmapped forward (``chunks.stacked_logits``; None: ``chunks.networks_per_chunk``,
    one on a CPU, as many as fit on a GPU), the draws in the same order."""
    gen = torch.Generator(device=mean.device).manual_seed(int(seed))
    n_samples = int(n_samples)
    if chunk is None:
        chunk = networks_per_chunk(fm, x, n_samples) if fm.row_wise else 1
    out = []
    for start in range(0, n_samples, chunk):
        thetas = [mean + std * kernels.randn(mean.shape, generator=gen, dtype=mean.dtype, device=mean.device)
                  for _ in range(min(chunk, n_samples - start))]
        if chunk == 1:
            out.append(fm(thetas[0], x).unsqueeze(0))
        else:
            out.append(stacked_logits(fm, torch.stack(thetas), x))
    return torch.cat(out)
