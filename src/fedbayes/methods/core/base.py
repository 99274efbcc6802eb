"""The method interface and the shared local trainer.

A federated method is a small module of tensor math on flat parameter vectors:

* ``init_state(w0)``     server state (a dict holding at least the global weights ``"w"``) and the
                         per-client states;
* ``broadcast(server)``  what the server sends down each round;
* ``client_update(...)`` what a client optimises and what it sends up;
* ``server_update(...)`` what the server does with the messages;
* ``predict_logits(...)`` how the method predicts: (N, C) for a point estimate, (S, N, C) for S
                         posterior samples (the evaluator averages probabilities, never logits).
                         The spec's ``variants`` names the predictions one run is evaluated with: ""
                         is the method's own; e.g. BayesADMM adds "mean" (the point prediction at the
                         posterior mean, reported as ``bayesadmm@mean``).

What a method is called, its hyperparameters and variants are declared in its ``MethodSpec``
(``fedbayes.methods.spec``; docs/adding-a-method.md).

The engine owns everything else (rounds, sampling, data, evaluation, checkpoints, tracking).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable

import numpy as np
import torch

from fedbayes.methods.core.ivon import lr_schedule
from fedbayes.methods.core.batched import train_local_batched
from fedbayes.methods.core.local import make_optimizer, train_local
from fedbayes.models import FlatModel

Tensors = dict[str, torch.Tensor]


@dataclass
class ClientData:
    x: torch.Tensor
    y: torch.Tensor

    def __len__(self) -> int:
        return len(self.y)


@dataclass
class LocalResult:
    w: torch.Tensor
    mean_loss: float
    steps: int


@dataclass
class LocalProblem:
    """A client's local problem declared as terms (``Method.local_problem``), so that the engine can train
    the round's clients one by one or together with the same arithmetic: Adam/SGD from ``start`` on the
    mean loss plus terms whose gradient ``grad(w, *args)`` is known in closed form and elementwise in w
    (a proximal pull, a dual, a diagonal quadratic). ``args`` are the client's operands (tensors shaped
    like w, or Python numbers); one by one the gradient is ``grad(w, *args)``, together it is
    ``vmap(grad)`` over the clients' stacked weights and operands (numbers become a float column of w's
    dtype: the value the scalar operation rounds to). ``batchable``: False where ``grad`` branches on the
    data (``prox_norm: unsquared``: a norm per client). ``extra``: what ``local_result`` needs."""
    start: torch.Tensor
    grad: Callable[..., torch.Tensor] | None = None
    args: tuple = ()
    batchable: bool = True
    extra: dict = field(default_factory=dict)

    def extra_grad(self) -> Callable[[torch.Tensor], torch.Tensor] | None:
        if self.grad is None:
            return None
        grad, args = self.grad, self.args
        return lambda w: grad(w, *args)


def stacked_extra_grad(problems: list[LocalProblem], like: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """``grad`` of the clients' problems on their stacked weights W (C, P): one vmapped call."""
    if problems[0].grad is None:
        return None
    cols, dims = [], [0]
    for i in range(len(problems[0].args)):
        vals = [p.args[i] for p in problems]
        if torch.is_tensor(vals[0]) and all(v is vals[0] for v in vals):   # one tensor for every client
            cols.append(vals[0])
            dims.append(None)
        else:
            cols.append(torch.stack(vals) if torch.is_tensor(vals[0])
                        else torch.tensor([float(v) for v in vals], dtype=like.dtype, device=like.device))
            dims.append(0)
    fn = torch.func.vmap(problems[0].grad, in_dims=tuple(dims))
    return lambda W: fn(W, *cols)


@dataclass(frozen=True)
class RunContext:
    """What the engine tells a method about its run, at construction (``build_method``)."""

    rounds: int = 0                           # R (schedules over rounds)
    clients_per_round: int = 0                # M, the clients sampled a round
    seed: int = 0                             # the run's base seed (server-side random streams)
    server_x: torch.Tensor | None = None      # inputs held out of the clients for the server (``server_share``)


@dataclass
class Method:
    """Base class: holds the model, hyperparameters, client sizes and run context every method needs."""

    fm: FlatModel
    hp: dict
    client_sizes: np.ndarray
    context: RunContext = field(default_factory=RunContext)
    name: str = field(default="", init=False)
    # prediction variant → "point" or "samples": the spec's ``variants``, set by ``build_method``
    variants = {"": "point"}

    @classmethod
    def with_fixed(cls, fixed: dict, key: str = "") -> type[Method]:
        """This method with hyperparameters fixed (``MethodSpec.fixed``; ``fedep_i`` is FedEP with
        ``variant: I``, a row of its own in the FedEP paper's tables): a run may not set them otherwise."""
        base = cls

        class Fixed(cls):
            def __init__(self, fm, hp, client_sizes, context=None):
                for k, v in fixed.items():
                    if hp.get(k, v) != v:
                        raise ValueError(f"{key or base.__name__}: {k} is fixed to {v!r}, got {hp[k]!r}")
                super().__init__(fm, {**hp, **fixed}, client_sizes, context or RunContext())

        Fixed.__name__ = Fixed.__qualname__ = cls.__name__ + "".join(str(v) for v in fixed.values())
        return Fixed

    spec = None   # its MethodSpec (fedbayes.methods.spec), set by build_method

    @classmethod
    def for_spec(cls, spec, params, fm: FlatModel, hp: dict, client_sizes: np.ndarray,
                 context: RunContext) -> Method:
        """The method of ``spec`` (``build_method``): its own spec and its typed hyperparameters ``params``
        (``spec.params``, validated) are ``self.spec`` and ``self.p`` before its ``__init__`` runs, so that
        ``__init__`` may read them; then it is constructed as ``cls(fm, hp, client_sizes, context)``."""
        m = cls.__new__(cls)
        m.spec, m._p = spec, params
        m.__init__(fm, hp, client_sizes, context)
        return m

    def __post_init__(self) -> None:
        # a method's hyperparameters are fixed for its life: a read-only view (``p`` is their typed form)
        self.hp = MappingProxyType(dict(self.hp))

    @property
    def p(self):
        """The run's hyperparameters as its spec's typed ``params`` (its defaults where params.yaml gives
        none; validated by ``build_method``): ``self.p.server_lr``, the one default, written in the spec."""
        try:
            return self._p
        except AttributeError:
            raise AttributeError(f"{type(self).__name__}.p needs the method's spec: build it with "
                                 "fedbayes.methods.build_method") from None

    @property
    def rounds(self) -> int:
        return self.context.rounds

    @property
    def clients_per_round(self) -> int:
        return self.context.clients_per_round

    @property
    def seed(self) -> int:
        return self.context.seed

    @property
    def n_clients(self) -> int:
        return len(self.client_sizes)

    @property
    def weights(self) -> np.ndarray:
        """N_k / N, the data-size weights of the clients."""
        return self.client_sizes / self.client_sizes.sum()

    def rho(self, k: int, rnd: int) -> float:
        """Dual damping ρ_k (FedLap family, App. E): ``data`` = N_k/N, ``uniform`` = 1/K;
        ``rho_switch_round: R`` switches from N_k/N to 1/K after round R (CIFAR-10)."""
        kind = self.p.rho
        switch = self.p.rho_switch_round
        if switch is not None and rnd > switch:
            kind = "uniform"
        if kind == "data":
            return float(self.weights[k])
        if kind == "uniform":
            return 1.0 / self.n_clients
        raise ValueError(f"unknown rho {kind!r}; choose data (N_k/N) or uniform (1/K)")
    def init_state(self, w0: torch.Tensor) -> tuple[Tensors, list[Tensors]]:
        return {"w": w0.clone()}, [{} for _ in range(self.n_clients)]

    def broadcast(self, server: Tensors, rnd: int) -> Tensors:
        """What the server sends down at the start of round ``rnd`` (counted as bytes down)."""
        return {"w": server["w"]}

    def client_update(self, k: int, down: Tensors, state: Tensors, data: ClientData,
                      rng: np.random.Generator, rnd: int) -> tuple[Tensors, Tensors, float]:
        """Returns (message up, new client state, mean local training loss). The default solves the
        client's declared ``local_problem`` with ``local_train`` and hands the weights to ``local_result``."""
        problem = self.local_problem(k, down, state, data, rnd)
        if problem is None:
            raise NotImplementedError(f"{type(self).__name__} defines neither client_update nor local_problem")
        res = self.local_train(problem.start, data, rng, extra_grad=problem.extra_grad(), state=state)
        return self.local_result(k, problem, res, down, state, data, rnd)

    def local_problem(self, k: int, down: Tensors, state: Tensors, data: ClientData, rnd: int) -> LocalProblem | None:
        """Client k's local problem as declared terms (``LocalProblem``), or None where the method writes
        its own ``client_update``. A method that declares it trains one by one or together (on a GPU)
        with no loop of its own."""
        return None

    def local_result(self, k: int, problem: LocalProblem, res: LocalResult, down: Tensors, state: Tensors,
                     data: ClientData, rnd: int) -> tuple[Tensors, Tensors, float]:
        """(message up, new client state, mean local loss) from the client's training ``res`` (its weights
        ``res.w``, ``res.mean_loss``, ``res.steps``)."""
        raise NotImplementedError

    def client_updates(self, ks: list[int], down: Tensors, states: list[Tensors], datas: list[ClientData],
                       rngs: list[np.random.Generator], rnd: int, generators: list[torch.Generator] | None = None
                       ) -> list[tuple[Tensors, Tensors, float]] | None:
        """The round's clients ``ks`` trained together (a run with ``batch_clients``): for each, what
        ``client_update`` returns, up to float round-off; or None where this method trains its clients
        one by one (the default: the engine then calls ``client_update`` for each). Torch's global
        generator is not reseeded per client here: ``generators[i]`` is client ``ks[i]``'s own, seeded as
        the global one is before its ``client_update`` (the same draws), for a method that samples (IVON).
        The default trains a declared ``local_problem`` together (``local_train_batched``) where every
        client starts from the same weights and the terms have a batched form."""
        if type(self).client_update is not Method.client_update:
            return None
        problems = [self.local_problem(k, down, st, d, rnd) for k, st, d in zip(ks, states, datas)]
        if any(p is None or not p.batchable or p.start is not problems[0].start for p in problems):
            return None
        results = local_train_batched(self, problems[0].start, datas, rngs, states,
                                      stacked_extra_grad(problems, problems[0].start))
        if results is None:
            return None
        return [self.local_result(k, p, res, down, st, d, rnd)
                for k, p, res, st, d in zip(ks, problems, results, states, datas)]

    def server_update(self, server: Tensors, messages: dict[int, Tensors], rnd: int) -> Tensors:
        raise NotImplementedError

    @classmethod
    def server_share(cls, p) -> float:
        """The share of the training points the engine holds out for the server (a method whose spec
        ``needs`` ``server_data`` says how much, from its hyperparameters ``p``), given to it as
        ``context.server_x``."""
        return 0.0

    def local_weights(self, message: Tensors, down: Tensors) -> torch.Tensor | None:
        """The client's trained weights θ_n recovered from its message (for ``local_eval``, the FOLA
        paper's local accuracy; asked of a method whose spec ``needs`` ``local_models``); None where a
        method's client has no single model to evaluate."""
        return None

    def predict_logits(self, server: Tensors, x: torch.Tensor, variant: str = "", seed: int = 0) -> torch.Tensor:
        """Logits of prediction ``variant`` on ``x``; sampling variants draw their networks from
        ``seed`` alone, so every chunk of a test set sees the same samples."""
        return self.fm(server["w"], x)

    def local_train(self, w_start: torch.Tensor, data: ClientData, rng: np.random.Generator,
                    extra_loss: Callable[[torch.Tensor], torch.Tensor] | None = None,
                    state: Tensors | None = None,
                    extra_grad: Callable[[torch.Tensor], torch.Tensor] | None = None) -> LocalResult:
        """``local_epochs`` passes of minibatch Adam/SGD on mean CE (+ ``extra_loss(w)``), from ``w_start``.

        ``extra_grad(w)`` is the gradient of a term whose gradient is known in closed form (the proximal
        and dual terms of the FedLap family), added to the minibatch gradient after the backward pass:
        the same update as putting the term in ``extra_loss``, up to float round-off, without autograd's
        graph over the whole parameter vector (a third of FedProx's step time).

        Minibatches follow a fresh permutation of the client's data each epoch, drawn from ``rng``;
        the last batch of an epoch may be smaller. ``client_optimizer`` (hyperparameter) says what the
        optimiser starts from: ``fresh`` (default) re-creates it on every call; ``persistent`` keeps
        each client's optimiser state (Adam's moments and step count) in its client ``state`` from the
        last round it trained, as the FedLap/BayesADMM authors' code builds one Adam per client once and
        only overwrites its weights with w_g (spec 000 "Adam state"). ``lr_schedule: linear_local``
        decays the learning rate linearly to ``lr_final`` over the call's steps (FedIVON's baselines);
        the default is a constant rate.
        """
        p = self.p
        w = w_start.detach().clone().requires_grad_(True)
        opt = make_optimizer(p.optimizer, [w], p.lr)
        persistent = p.client_optimizer == "persistent"
        if persistent:
            if state is None:
                raise TypeError(f"{type(self).__name__}: client_optimizer: persistent needs the client state "
                                "passed to local_train")
            opt.load_state(state)
        if p.lr_schedule != "constant":
            opt.schedule = lr_schedule(p, 1, 1)
        mean_loss, steps = train_local(self.fm, opt, data, rng, epochs=int(p.local_epochs),
                                       batch_size=int(p.batch_size), extra_loss=extra_loss,
                                       extra_grad=extra_grad, clip=p.grad_clip)
        if persistent:
            state.update(opt.state())
        return LocalResult(w.detach(), mean_loss, steps)


def local_train_batched(method: Method, w_start: torch.Tensor, datas: list[ClientData],
                        rngs: list[np.random.Generator], states: list[Tensors],
                        extra_grad: Callable[[torch.Tensor], torch.Tensor] | None = None
                        ) -> list[LocalResult] | None:
    """``method.local_train`` without ``extra_loss`` for several clients at once
    (``methods.core.batched.train_local_batched``; ``extra_grad`` of the stacked weights (C, P)): (weights (C, P),
    each client's ``LocalResult``, or None where the hyperparameters ask for what the batched loop does not
    do (a learning-rate schedule) or the model draws (dropout) or mixes rows (batch norm)."""
    p = method.p
    if p.lr_schedule != "constant":
        return None
    if not method.fm.row_wise:   # dropout draws (or batch statistics): no vmapped form with the same numbers
        return None
    W, losses, steps = train_local_batched(
        method.fm, w_start, datas, rngs, epochs=int(p.local_epochs), batch_size=int(p.batch_size),
        lr=float(p.lr), optimizer=p.optimizer, clip=p.grad_clip, states=states if p.client_optimizer == "persistent" else None,
        extra_grad=extra_grad)
    return [LocalResult(W[c], losses[c], steps[c]) for c in range(len(datas))]


def prox_batchable(mode: str) -> bool:
    """Has ``prox_grad`` of ``prox_norm`` ``mode`` a batched (vmapped) form? The squared term's gradient
    is elementwise; the unsquared one branches on each client's norm."""
    return mode == "squared"


def prox_grad(w: torch.Tensor, w_g: torch.Tensor, mode: str) -> torch.Tensor:
    """Gradient of the proximal term ``½‖w − w_g‖²`` (``prox_norm: squared``, the papers), or of
    ``½‖w − w_g‖`` (``unsquared``: the FedLap/BayesADMM authors' baselines call torch.norm without
    squaring it, spec 001 §6 item 5): ``(w − w_g) / (2‖w − w_g‖)``, 0 at w = w_g as torch.norm's."""
    d = w - w_g
    if mode == "squared":
        return d
    if mode == "unsquared":
        n = torch.linalg.vector_norm(d)
        return d * (0.5 / n) if n > 0 else torch.zeros_like(d)
    raise ValueError(f"prox_norm must be squared or unsquared, got {mode!r}")


def weighted_mean(vectors: dict[int, torch.Tensor], weights: np.ndarray) -> torch.Tensor:
    """Σ_k ω_k v_k / Σ_k ω_k over the clients present in ``vectors``."""
    ks = sorted(vectors)
    w = torch.tensor(weights[ks], dtype=vectors[ks[0]].dtype, device=vectors[ks[0]].device)
    return torch.einsum("k,kp->p", w / w.sum(), torch.stack([vectors[k] for k in ks]))
