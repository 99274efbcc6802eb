"""The clients' states between rounds, in memory while they are small and on disk once they are not.

A stateful method keeps a state per client (FedEP's site: η_k, Λ_k and their momenta; SCAFFOLD's control
variate; a persistent client's Adam moments). With a large model and many clients these outgrow memory:
500 clients × 4 vectors of ResNet-18's 11.2 M parameters in fp32 is ≈ 90 GB, and a checkpoint that holds
them all writes that much every round. Once the states held in memory pass ``SPILL_BYTES``, each state is
written to its own file in the run's ``checkpoint.clients/`` folder as soon as its client has trained
(``<k>.r<round>.pt``, a new name every round it changes) and read back when its client trains again, so
memory holds about ``SPILL_BYTES`` of them. The round's checkpoint names those files instead of holding
the tensors, and a file is deleted only once a newer checkpoint no longer names it: a run killed at any
point resumes from a checkpoint whose files all exist. The tensors are saved and loaded as they are, so a
run's numbers do not depend on where its states were kept.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from fedbayes.fileio import atomic_target

CLIENTS_DIR = "checkpoint.clients"
SPILL_BYTES = 2 << 30   # the clients' states stay in memory up to 2 GiB
_FILE = "__client_state_file__"   # a checkpoint's stand-in for a state kept in a file


def nbytes(obj, seen: set | None = None) -> int:
    """The bytes of the tensors in ``obj`` (a state: tensors in dicts, lists and tuples), each tensor
    counted once in ``seen`` (``init_state`` may give every client the same state)."""
    seen = set() if seen is None else seen
    if isinstance(obj, torch.Tensor):
        if id(obj) in seen:
            return 0
        seen.add(id(obj))
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(nbytes(v, seen) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(nbytes(v, seen) for v in obj)
    return 0


def _named_file(state) -> str | None:
    """The file a checkpoint's entry names in place of a state, or None (the entry is the state)."""
    return state[_FILE] if isinstance(state, dict) and set(state) == {_FILE} else None


def missing_files(states: list, out: Path) -> list[str]:
    """The files a checkpoint's client states name that are not in ``out/checkpoint.clients/``."""
    return [f for f in map(_named_file, states) if f is not None and not (Path(out) / CLIENTS_DIR / f).is_file()]


class ClientStates:
    """A list of the clients' states (``states[k]``, ``states[k] = new``) that keeps them in files under
    ``out/checkpoint.clients/`` once those held in memory pass ``spill_bytes``."""

    def __init__(self, states: list, out: Path, device: torch.device | str = "cpu", spill_bytes: int | None = None):
        self._folder = Path(out) / CLIENTS_DIR
        self._device = device
        self._spill = SPILL_BYTES if spill_bytes is None else spill_bytes
        self._mem: list = []
        self._file: dict[int, str] = {}
        for k, s in enumerate(states):   # a checkpoint's entry may name a file
            name = _named_file(s)
            if name is not None:
                self._file[k] = name
            self._mem.append(None if name is not None else s)
        # at least the bytes held in memory (states set since the last count add theirs, replaced ones are not
        # subtracted): ``spill`` counts them all again only once this passes the limit, not after every client
        self._bound = nbytes(self._mem)

    def __len__(self) -> int:
        return len(self._mem)

    def __getitem__(self, k: int):
        if k in self._file:
            return torch.load(self._folder / self._file[k], map_location=self._device, weights_only=True)
        return self._mem[k]

    def __setitem__(self, k: int, state) -> None:
        self._mem[k] = state
        self._file.pop(k, None)   # its file stays until a checkpoint no longer names it (collect)
        self._bound += nbytes(state)

    def spill(self, rnd: int) -> None:
        """In round ``rnd``, after a client's update: where the states in memory pass the limit, write each
        to its own file. A file the last checkpoint names is never overwritten: the new name holds the round."""
        if self._bound <= self._spill:
            return
        held = [k for k, s in enumerate(self._mem) if k not in self._file and nbytes(s) > 0]
        seen: set = set()
        self._bound = sum(nbytes(self._mem[k], seen) for k in held)
        if self._bound <= self._spill:
            return
        self._folder.mkdir(parents=True, exist_ok=True)
        for k in held:
            name = f"{k}.r{rnd}.pt"
            with atomic_target(self._folder / name) as tmp:
                torch.save(self._mem[k], tmp)
            self._file[k], self._mem[k] = name, None
        self._bound = 0

    def snapshot(self) -> list:
        """What a checkpoint saves: each state, or the name of the file that holds it."""
        return [{_FILE: self._file[k]} if k in self._file else s for k, s in enumerate(self._mem)]

    def collect(self) -> None:
        """Delete the files no state names any longer (call after the checkpoint that names them was written)."""
        if not self._folder.is_dir():
            return
        named = set(self._file.values())
        for f in self._folder.iterdir():
            if f.name not in named:
                f.unlink(missing_ok=True)

    def discard(self) -> None:
        shutil.rmtree(self._folder, ignore_errors=True)
