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


def missing_files(states: list, out: Path) -> list[str]:
    """The files a checkpoint's client states name that are not in ``out/checkpoint.clients/``."""
    return [s[_FILE] for s in states if isinstance(s, dict) and set(s) == {_FILE}
            and not (Path(out) / CLIENTS_DIR / s[_FILE]).is_file()]


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
            if isinstance(s, dict) and set(s) == {_FILE}:
                self._file[k] = s[_FILE]
                self._mem.append(None)
            else:
                self._mem.append(s)

    def __len__(self) -> int:
        return len(self._mem)

    def __getitem__(self, k: int):
        if k in self._file:
            return torch.load(self._folder / self._file[k], map_location=self._device, weights_only=True)
        return self._mem[k]

    def __setitem__(self, k: int, state) -> None:
        self._mem[k] = state
        self._file.pop(k, None)   # its file stays until a checkpoint no longer names it (collect)

    def spill(self, rnd: int) -> None:
        """In round ``rnd``, after a client's update: where the states in memory pass the limit, write each
        to its own file. A file the last checkpoint names is never overwritten: the new name holds the round."""
        held = [k for k, s in enumerate(self._mem) if k not in self._file and nbytes(s) > 0]
        seen: set = set()
        if sum(nbytes(self._mem[k], seen) for k in held) <= self._spill:
            return
        self._folder.mkdir(parents=True, exist_ok=True)
        for k in held:
            name = f"{k}.r{rnd}.pt"
            with atomic_target(self._folder / name) as tmp:
                torch.save(self._mem[k], tmp)
            self._file[k], self._mem[k] = name, None

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
