"""Atomic file writes: a reader (or a killed job) never sees a half-written result; fast YAML reads."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path


def load_yaml(text: str):
    """``yaml.safe_load`` through libyaml where PyYAML has it (the same safe loader, ~10× faster: every
    workflow job reads the schema and params at start-up)."""
    import yaml

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` via a temporary file in the same directory and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def save_figure_atomic(fig, path: str | Path, dpi: int = 110) -> Path:
    """Save a matplotlib ``Figure`` as PNG via a temporary file and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp, dpi=dpi)
    os.replace(tmp, path)
    return path


@contextmanager
def exclusive_lock(path: str | Path):
    """Hold an exclusive ``flock`` on ``<path>.lock`` (created if missing): processes that create or
    write the same file (a dataset, a partition, a SQLite store) take turns. The kernel releases the
    lock when its holder dies, so a killed job never leaves it held."""
    import fcntl

    lock = Path(str(path) + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
