"""What code produced a file: the commit, whether the tree was dirty, and a hash of the package sources.

``code_identity()`` is recorded in every run.json (MLflow's ``mlflow.source.git.commit`` reads it) and
keys every checkpoint: a checkpoint is resumed only by the exact code and library versions that wrote
it (``resume_key``; a plug-in method's package too, ``plugin_identity``), while a *finished* run is
adopted by any code that keeps its numbers (the numerics versions in ``fedbayes.study.rerun``). Torch-free.
"""

from __future__ import annotations

import functools
import hashlib
import subprocess
from importlib import metadata
from pathlib import Path

from fedbayes.methods.spec import plugin_origin

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


def _tree_hash(modules: list[str]) -> str:
    """SHA-256 (16 hex) over the source and data files (``SOURCE_SUFFIXES``) of top-level modules or
    packages, found on sys.path without importing them; a module that cannot be found hashes as missing."""
    import importlib.util

    h = hashlib.sha256()
    for name in modules:
        spec = importlib.util.find_spec(name)
        roots = list(spec.submodule_search_locations or []) if spec is not None else []
        files = [(Path(r), f) for r in roots for f in Path(r).rglob("*")
                 if f.suffix in SOURCE_SUFFIXES and "__pycache__" not in f.parts] if roots else \
                [(Path(spec.origin).parent, Path(spec.origin))] if spec is not None and spec.origin else []
        h.update(name.encode() + (b"\0" if files or spec is not None else b"\0missing\0"))
        for root, f in sorted(files, key=lambda rf: str(rf[1].relative_to(rf[0]))):
            h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=None)
def plugin_identity(method: str) -> dict | None:
    """``{"distribution", "version", "source"}`` of an installed package's method (entry-point group
    ``fedbayes.methods``): its distribution's name and version, and a hash of the files of the packages
    its spec and implementation live in (``source_hash`` covers fedbayes' own only); None for a built-in
    method, whose run.json, MLflow tags and resume key therefore carry nothing new. In run.json
    (``plugin``), the MLflow tags and ``resume_key``."""
    origin = plugin_origin(method)
    if origin is None:
        return None
    name, version, modules = origin
    return {"distribution": name, "version": version, "source": _tree_hash(modules)}


def resume_key(method: str | None = None) -> str:
    """What a checkpoint must have been written by to be resumed: the sources and library versions, and
    for an installed package's method its distribution, version and source hash (``plugin_identity``),
    so a checkpoint is never resumed onto an edited plug-in."""
    c = code_identity()
    key = f"{c['source']}/torch {c['torch']}/numpy {c['numpy']}"
    p = plugin_identity(method) if method is not None else None
    return key if p is None else f"{key}/plugin {p['distribution']} {p['version']} {p['source']}"
