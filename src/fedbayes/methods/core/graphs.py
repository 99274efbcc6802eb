"""A batched local loop's step captured once as a CUDA graph and replayed for every later step.

A round's clients trained together (``batched.train_local_batched``, ``ivon.ivon_train_batched``) take
one step as a few dozen small kernels (the vmapped forward and backward, the noise draws, the
optimiser's update); for the papers' small models each kernel runs for microseconds, so eager
execution is bound by the host dispatching them (reports/evidence/gpu.md). A CUDA graph records the
kernels of one step and replays them with one host call.

A step that can be recorded has static shapes and no host decision: its per-step inputs (minibatch rows,
masks, learning rates) are read from device tables at a device step counter ``s_t`` (``at``), and every
client takes part in every step. A client past its last step gets an all-zero mask (a zero gradient) and
its state is put back after the update (``keep_finished``), so the live clients' iterates are those of
the loop that leaves finished clients out, up to float round-off (the vmapped products run over C rows
instead of the live ones). Noise drawn from the clients' own generators is drawn in the graph too: the
generators are registered with it, so each replay draws the numbers eager execution would draw next.

Modes (``mode``):
  * ``subset``: the eager loop that leaves finished clients out (the CPU's, and any device's with
    ``FEDBAYES_CUDA_GRAPHS=0``);
  * ``static``: the recordable step run eagerly (``FEDBAYES_CUDA_GRAPHS=static``: how the tests check
    the recorded step's arithmetic on a CPU);
  * ``graph``: the recordable step run eagerly for ``WARMUP`` steps (kernel selection, compilation),
    captured, and replayed for the rest (CUDA, the default there).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence

import torch

WARMUP = 3   # eager steps before the capture: cuBLAS handles, torch.compile's kernels, lazy allocations
# how the batched loops of this process ran (``run_steps``' outcomes counted; benchmarks read it)
outcomes: dict[str, int] = {}


def mode(device: torch.device) -> str:
    """``subset``, ``static`` or ``graph`` for a batched loop on ``device`` (module docstring)."""
    env = os.environ.get("FEDBAYES_CUDA_GRAPHS", "1")
    if env not in ("0", "1", "static"):
        raise ValueError(f"FEDBAYES_CUDA_GRAPHS must be 0, 1 or static, got {env!r}")
    if env == "static":
        return "static"
    return "graph" if env == "1" and device.type == "cuda" else "subset"


def at(table: torch.Tensor, s_t: torch.Tensor) -> torch.Tensor:
    """``table[s]`` for the step counter ``s_t`` (a one-element long tensor on the table's device),
    without reading it on the host."""
    return table.index_select(0, s_t)[0]


def keep_finished(live: torch.Tensor, pairs: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """For each (tensor, its value before the update): rows of clients not ``live`` (a (C,) bool) get
    their old value back, in place."""
    for new, old in pairs:
        keep = live.view(-1, *([1] * (new.dim() - 1)))
        new.copy_(torch.where(keep, new, old))


def run_steps(step: Callable[[torch.Tensor], None], n_steps: int, *, device: torch.device,
              generators: Sequence[torch.Generator] = (), capture: bool) -> str | None:
    """``step(s_t)`` for s = 0 … n_steps − 1, ``s_t`` a one-element long tensor holding s. With
    ``capture`` (CUDA): ``WARMUP`` eager steps on a side stream, then one captured step (with the counter's
    increment) replayed for the rest. A capture that fails is reported once as a warning and the remaining
    steps run eagerly (the same arithmetic). Returns how the steps ran: "graph", "eager" or, after a
    failed capture, the error."""
    how = _run_steps(step, n_steps, device=device, generators=generators, capture=capture)
    outcomes[how] = outcomes.get(how, 0) + 1
    return how


def _run_steps(step, n_steps, *, device, generators, capture) -> str:
    s_t = torch.zeros(1, dtype=torch.long, device=device)
    if not capture or n_steps <= WARMUP + 1:
        for s in range(n_steps):
            s_t.fill_(s)
            step(s_t)
        return "eager"
    main = torch.cuda.current_stream(device)
    side = torch.cuda.Stream(device)
    side.wait_stream(main)
    with torch.cuda.stream(side):
        for s in range(WARMUP):
            s_t.fill_(s)
            step(s_t)
    main.wait_stream(side)
    s_t.fill_(WARMUP)
    graph = torch.cuda.CUDAGraph()
    try:
        for gen in generators:
            graph.register_generator_state(gen)
        with torch.cuda.graph(graph):
            step(s_t)
            s_t.add_(1)
    except Exception as err:  # noqa: BLE001  (an operation that cannot be recorded on this platform)
        warnings.warn(f"batched local loop: the CUDA graph capture failed ({type(err).__name__}: "
                      f"{str(err)[:300]}); the steps run eagerly", RuntimeWarning, stacklevel=3)
        for s in range(WARMUP, n_steps):
            s_t.fill_(s)
            step(s_t)
        return f"eager after a failed capture: {type(err).__name__}: {str(err)[:200]}"
    for _ in range(WARMUP, n_steps):
        graph.replay()
    return "graph"
