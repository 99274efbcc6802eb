"""What code produced a file: the commit, whether the tree was dirty, and a hash of the package sources.

``code_identity()`` is recorded in every run.json (MLflow's ``mlflow.source.git.commit`` reads it) and
keys every checkpoint: a checkpoint is resumed only by the exact code and library versions that wrote
it (``resume_key``), while a *finished* run is adopted by any code that keeps its numbers (the numerics
versions in ``fedbayes.catalog``). Torch-free.
"""

from __future__ import annotations

import functools
import hashlib
import subprocess
from importlib import metadata
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
SOURCE_SUFFIXES = (".py", ".yaml", ".cpp", ".c", ".h")   # every file that computes or holds numbers


@functools.lru_cache(maxsize=1)
def source_hash() -> str:
    """SHA-256 (16 hex) over the package's sources (Python and the compiled kernels' C++) and data files,
    by relative path."""
    h = hashlib.sha256()
    for f in sorted(p for p in PACKAGE.rglob("*") if p.suffix in SOURCE_SUFFIXES and "__pycache__" not in p.parts):
        h.update(str(f.relative_to(PACKAGE)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=PACKAGE, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=1)
def code_identity() -> dict:
    """``{"commit", "dirty", "source", "torch", "numpy"}``: the git commit of the checkout the package
    runs from (None outside git), whether its package sources differ from that commit, the source
    hash, and the library versions that decide numbers."""
    commit = _git("rev-parse", "HEAD")
    dirty = None
    if commit is not None:
        status = _git("status", "--porcelain", "--", str(PACKAGE))
        dirty = bool(status) if status is not None else None
    return {"commit": commit, "dirty": dirty, "source": source_hash(),
            "torch": _version("torch"), "numpy": _version("numpy")}


def resume_key() -> str:
    """What a checkpoint must have been written by to be resumed: the sources and library versions."""
    c = code_identity()
    return f"{c['source']}/torch {c['torch']}/numpy {c['numpy']}"
