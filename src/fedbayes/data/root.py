"""Where datasets live and how a process gets them: the real data's folder or, on stand-in data, the
stand-ins' folder (its generated sources activated), and the locked, idempotent fetch every job uses."""

from __future__ import annotations

import os
from pathlib import Path

from fedbayes.data import standin
from fedbayes.data.registry import fetch
from fedbayes.fileio import exclusive_lock

OFFLINE_ENV = "FEDBAYES_OFFLINE"  # set (non-empty): `fedbayes data` uses local sources only, never downloads


def open_data_root(root: str, stand_in: str | None) -> str:
    """``root``, ready to read: on stand-in data (``stand_in``, a size of fedbayes.data.standin.SIZES) every
    stand-in generated there so far is activated in this process, so the real fetch/verify/load code reads
    it, verified against the checksums recorded beside it, which are used nowhere else."""
    if stand_in:
        standin.activate_all(stand_in_sources(root))
    return root


def stand_in_sources(root: str | Path) -> Path:
    """The generated stand-in files (what a download would serve), beside the fetched copies in ``root``."""
    return Path(root) / ".source"


def fetch_dataset(name: str, root: str, download: bool = True, repair: bool = True, stand_in: str | None = None):
    """Fetch (idempotently) under a lock: a training job fetches its own data when it is missing, and
    refuses (``repair=False``) a present file that fails its checksum. With ``stand_in`` (a size of
    fedbayes.data.standin.SIZES) the dataset's stand-in files are generated first (once; deterministic)
    and fetched by the same code from there, verified against their own recorded checksums."""
    with exclusive_lock(Path(root) / name, read_only_ok=True):
        if stand_in:
            standin.write_source(name, stand_in_sources(root), size=stand_in)
            standin.activate(name, stand_in_sources(root))
            download = False
        return fetch(name, root=root, download=download and not os.environ.get(OFFLINE_ENV), repair=repair)
