"""Image datasets beyond Fashion-MNIST: registered on import.

MNIST, CIFAR-10, CIFAR-100, EMNIST (letters, digits) and SVHN (cropped digits).
None has a default local mirror; provide the official files through
``$FEDBAYES_DATA_MIRRORS`` (or ``mirrors=``) or allow downloads.
"""

from __future__ import annotations

import codecs
import gzip
import io
import pickle
import tarfile
import zipfile
import zlib
from pathlib import Path

import numpy as np

from .idx import GZIP_MAGIC, parse_idx
from .registry import Arrays, DatasetSpec, load_idx_set
from .sources import MIRRORS_ENV, DataIntegrityError, FileSpec

SPECS: list[DatasetSpec] = []   # this module's datasets (the registry reads them; nothing registers on import)

# ------------------------------------------------------------------- MNIST
MNIST_URLS = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "http://yann.lecun.com/exdb/mnist/",
)
MNIST_FILES = (
    # official archive md5s (as used by torchvision); decompressed md5s unknown -> None
    FileSpec("train-images-idx3-ubyte.gz", "f68b3c2dcbeaaa9fbdd348bbdeb94873", None, "x_train", 9_912_422),
    FileSpec("train-labels-idx1-ubyte.gz", "d53e105ee54ea40749a09fcbcd1e9432", None, "y_train", 28_881),
    FileSpec("t10k-images-idx3-ubyte.gz", "9fb629c4189551a2d022fa330f9573f3", None, "x_test", 1_648_877),
    FileSpec("t10k-labels-idx1-ubyte.gz", "ec29112dd5afa0611ce80d1b7f02629c", None, "y_test", 4_542),
)


def load_mnist(spec: DatasetSpec, d: Path) -> Arrays:
    """The four IDX files, additionally checked to hold 28x28 images."""
    a = load_idx_set(spec, d)
    for role, x in (("x_train", a.x_train), ("x_test", a.x_test)):
        if x.shape[1:] != (28, 28):
            raise DataIntegrityError(f"{spec.name}/{role}: expected (N, 28, 28), got {x.shape}")
    return a


SPECS.append(DatasetSpec(
    name="mnist",
    stand_in="fedbayes.data.standin_files:_gen_idx",
    description="MNIST (LeCun et al. 1998), 60k/10k 28x28 grayscale digits, 10 classes",
    files=MNIST_FILES,
    loader=load_mnist,
    n_classes=10,
    n_train=60000,
    n_test=10000,
    urls=MNIST_URLS,
    fix_hint=(f"set {MIRRORS_ENV} to a directory holding the four official MNIST archives "
              f"({', '.join(f.name for f in MNIST_FILES)}; the original .gz files, since "
              "they are verified by their official md5), or allow downloads "
              "(download=True, with network access)"),
))

# ---------------------------------------------------------------- CIFAR-10
CIFAR10_URLS = ("https://www.cs.toronto.edu/~kriz/",)
CIFAR10_ARCHIVE = "cifar-10-python.tar.gz"
CIFAR10_DIR = "cifar-10-batches-py"
CIFAR10_TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR10_TEST_BATCH = "test_batch"
CIFAR10_SHAPE = (3, 32, 32)


def _numpy_reconstruct():
    try:
        from numpy._core.multiarray import _reconstruct  # numpy >= 2
    except ImportError:  # pragma: no cover - numpy 1.x
        from numpy.core.multiarray import _reconstruct
    return _reconstruct


# (module, name) -> object; anything else in a pickle is refused
_ALLOWED_GLOBALS = {
    ("builtins", "dict"): dict,
    ("builtins", "list"): list,
    ("builtins", "bytes"): bytes,
    ("builtins", "str"): str,
    ("builtins", "int"): int,
    # protocol-2 pickles written by Python 3 encode bytes as _codecs.encode(str, "latin1")
    ("_codecs", "encode"): codecs.encode,
    ("numpy.core.multiarray", "_reconstruct"): _numpy_reconstruct(),
    ("numpy._core.multiarray", "_reconstruct"): _numpy_reconstruct(),
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
}


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickler that resolves only the globals a CIFAR batch needs."""

    def find_class(self, module: str, name: str):
        try:
            return _ALLOWED_GLOBALS[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                f"forbidden global {module}.{name} in pickle") from None


def restricted_loads(data: bytes):
    """``pickle.loads(data, encoding="bytes")`` restricted to CIFAR's globals."""
    return RestrictedUnpickler(io.BytesIO(data), encoding="bytes").load()


def _read_batch(tf: tarfile.TarFile, member: str, where: str,
                label_key: bytes = b"labels") -> tuple[np.ndarray, np.ndarray]:
    """One CIFAR python batch: uint8 (N, 3, 32, 32) and int64 labels from ``label_key``."""
    try:
        fh = tf.extractfile(member)
    except KeyError:
        raise DataIntegrityError(f"{where}: no member {member}") from None
    if fh is None:
        raise DataIntegrityError(f"{where}: {member} is not a regular file")
    try:
        with fh:
            batch = restricted_loads(fh.read())
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as exc:
        raise DataIntegrityError(f"{where}: cannot read {member}: {exc}") from exc
    if not isinstance(batch, dict) or b"data" not in batch or label_key not in batch:
        raise DataIntegrityError(f"{where}: {member} is not a dict with b'data' and {label_key!r}")
    x, labels = batch[b"data"], batch[label_key]
    n_px = int(np.prod(CIFAR10_SHAPE))
    if not isinstance(x, np.ndarray) or x.dtype != np.uint8 or x.ndim != 2 or x.shape[1] != n_px:
        raise DataIntegrityError(
            f"{where}: {member} data must be uint8 (N, {n_px}), got "
            f"{getattr(x, 'dtype', type(x).__name__)} {getattr(x, 'shape', '')}")
    if not isinstance(labels, list) or not all(type(v) is int for v in labels):
        raise DataIntegrityError(f"{where}: {member} labels must be a list of int")
    if len(labels) != len(x):
        raise DataIntegrityError(f"{where}: {member} has {len(x)} images but {len(labels)} labels")
    return x.reshape((-1, *CIFAR10_SHAPE)), np.asarray(labels, dtype=np.int64).reshape(-1)


def load_cifar10(spec: DatasetSpec, d: Path) -> Arrays:
    """Read the python-pickle batches straight from the tar.gz (nothing extracted)."""
    path = d / spec.files[0].name
    try:
        with tarfile.open(path, "r:gz") as tf:
            train = [_read_batch(tf, f"{CIFAR10_DIR}/{b}", str(path))
                     for b in CIFAR10_TRAIN_BATCHES]
            x_test, y_test = _read_batch(tf, f"{CIFAR10_DIR}/{CIFAR10_TEST_BATCH}", str(path))
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise DataIntegrityError(f"{path}: unreadable archive: {exc}") from exc
    return Arrays(
        x_train=np.ascontiguousarray(np.concatenate([x for x, _ in train])),
        y_train=np.concatenate([y for _, y in train]),
        x_test=np.ascontiguousarray(x_test),
        y_test=y_test,
        n_classes=spec.n_classes,
    )


SPECS.append(DatasetSpec(
    name="cifar10",
    stand_in="fedbayes.data.standin_files:_gen_cifar10",
    description="CIFAR-10 (Krizhevsky 2009), 50k/10k 32x32 RGB (N, 3, 32, 32), 10 classes",
    # archive-only: verified by the official md5 of the .tar.gz
    files=(FileSpec(CIFAR10_ARCHIVE, "c58f30108f718f92721af3b95e74349a", None, "all", 170_498_071),),
    loader=load_cifar10,
    n_classes=10,
    n_train=50000,
    n_test=10000,
    urls=CIFAR10_URLS,
    fix_hint=(f"set {MIRRORS_ENV} to a directory holding the official {CIFAR10_ARCHIVE} "
              "(CIFAR-10 python version), or allow downloads (download=True, with "
              "network access)"),
))

# --------------------------------------------------------------- CIFAR-100
CIFAR100_ARCHIVE = "cifar-100-python.tar.gz"
CIFAR100_DIR = "cifar-100-python"
CIFAR100_TRAIN, CIFAR100_TEST = "train", "test"


def load_cifar100(spec: DatasetSpec, d: Path) -> Arrays:
    """The ``train``/``test`` pickles straight from the tar.gz, with the 100 fine labels."""
    path = d / spec.files[0].name
    try:
        with tarfile.open(path, "r:gz") as tf:
            x_train, y_train = _read_batch(tf, f"{CIFAR100_DIR}/{CIFAR100_TRAIN}", str(path),
                                           b"fine_labels")
            x_test, y_test = _read_batch(tf, f"{CIFAR100_DIR}/{CIFAR100_TEST}", str(path),
                                         b"fine_labels")
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise DataIntegrityError(f"{path}: unreadable archive: {exc}") from exc
    return Arrays(x_train=np.ascontiguousarray(x_train), y_train=y_train,
                  x_test=np.ascontiguousarray(x_test), y_test=y_test,
                  n_classes=spec.n_classes)


def cifar100_coarse_of_fine(root) -> np.ndarray:
    """The 20 superclasses (coarse labels) of CIFAR-100's 100 classes, (100,) int64, read from the
    training pickle's ``fine_labels`` and ``coarse_labels`` (for the Pachinko split)."""
    from fedbayes.data.registry import _fetched_dir, get_spec

    path = _fetched_dir(get_spec("cifar100"), root) / CIFAR100_ARCHIVE
    try:
        with tarfile.open(path, "r:gz") as tf:
            _, fine = _read_batch(tf, f"{CIFAR100_DIR}/{CIFAR100_TRAIN}", str(path), b"fine_labels")
            _, coarse = _read_batch(tf, f"{CIFAR100_DIR}/{CIFAR100_TRAIN}", str(path), b"coarse_labels")
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise DataIntegrityError(f"{path}: unreadable archive: {exc}") from exc
    out = np.full(100, -1, dtype=np.int64)
    out[fine] = coarse
    if (out < 0).any() or len({(f, c) for f, c in zip(fine.tolist(), coarse.tolist())}) != 100:
        raise DataIntegrityError(f"{path}: fine labels do not map to one coarse label each")
    return out


SPECS.append(DatasetSpec(
    name="cifar100",
    stand_in="fedbayes.data.standin_files:_gen_cifar100",
    label_groups=cifar100_coarse_of_fine,
    description="CIFAR-100 (Krizhevsky 2009), 50k/10k 32x32 RGB (N, 3, 32, 32), "
                "100 fine classes",
    # archive-only: verified by the official md5 of the .tar.gz (as used by torchvision)
    files=(FileSpec(CIFAR100_ARCHIVE, "eb9058c3a382ffc7106e4002c42a8d85", None, "all", 169_001_437),),
    loader=load_cifar100,
    n_classes=100,
    n_train=50000,
    n_test=10000,
    urls=CIFAR10_URLS,
    fix_hint=(f"set {MIRRORS_ENV} to a directory holding the official {CIFAR100_ARCHIVE} "
              "(CIFAR-100 python version), or allow downloads (download=True, with "
              "network access)"),
))

# ------------------------------------------------------------------ EMNIST
EMNIST_URLS = ("https://biometrics.nist.gov/cs_links/EMNIST/",)
EMNIST_ARCHIVE = "gzip.zip"  # the NIST distribution; every EMNIST split in one zip
EMNIST_MD5 = "58c8d27c78d21e728a6bc7b3cc06412e"  # official archive md5 (as used by torchvision)
EMNIST_DIR = "gzip"


def emnist_member(split: str, part: str, kind: str) -> str:
    """Zip member of one IDX file, e.g. ``gzip/emnist-letters-train-images-idx3-ubyte.gz``."""
    idx = "images-idx3" if kind == "images" else "labels-idx1"
    return f"{EMNIST_DIR}/emnist-{split}-{part}-{idx}-ubyte.gz"


def _read_zip_idx(zf: zipfile.ZipFile, member: str, where: str) -> np.ndarray:
    try:
        data = zf.read(member)
    except KeyError:
        raise DataIntegrityError(f"{where}: no member {member}") from None
    try:
        if data[:2] == GZIP_MAGIC:
            data = gzip.decompress(data)
        return parse_idx(data, f"{where}:{member}")
    except (OSError, EOFError, zlib.error) as exc:
        raise DataIntegrityError(f"{where}: cannot decompress {member}: {exc}") from exc
    except ValueError as exc:  # malformed IDX; the message names archive and member
        raise DataIntegrityError(str(exc)) from exc


def emnist_loader(split: str, label_offset: int):
    """Loader for one EMNIST split read straight from ``gzip.zip`` (nothing extracted).

    The files store each image transposed relative to MNIST (column-major); images are
    transposed back so they are upright as in MNIST.  ``label_offset`` is subtracted from
    the labels (1 for letters, whose files number the classes 1..26).
    """

    def load_emnist(spec: DatasetSpec, d: Path) -> Arrays:
        path = d / spec.files[0].name
        where = str(path)
        arr = {}
        try:
            with zipfile.ZipFile(path) as zf:
                for part in ("train", "test"):
                    x = _read_zip_idx(zf, emnist_member(split, part, "images"), where)
                    y = _read_zip_idx(zf, emnist_member(split, part, "labels"), where)
                    if x.dtype != np.uint8 or x.ndim != 3 or x.shape[1:] != (28, 28):
                        raise DataIntegrityError(
                            f"{where}: {emnist_member(split, part, 'images')}: expected uint8 "
                            f"(N, 28, 28), got {x.dtype} {x.shape}")
                    if y.ndim != 1:
                        raise DataIntegrityError(
                            f"{where}: {emnist_member(split, part, 'labels')}: expected (N,), "
                            f"got {y.shape}")
                    y = y.astype(np.int64)
                    lo, hi = label_offset, label_offset + spec.n_classes - 1
                    if len(y) and (y.min() < lo or y.max() > hi):
                        raise DataIntegrityError(
                            f"{where}: {emnist_member(split, part, 'labels')}: labels outside "
                            f"{lo}..{hi} (got {y.min()}..{y.max()})")
                    arr[f"x_{part}"] = np.ascontiguousarray(x.transpose(0, 2, 1))
                    arr[f"y_{part}"] = y - label_offset
        except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError,
                zlib.error) as exc:
            raise DataIntegrityError(f"{where}: unreadable archive: {exc}") from exc
        return Arrays(n_classes=spec.n_classes, **arr)

    load_emnist.__name__ = f"load_emnist_{split}"
    return load_emnist


def _emnist_hint(name: str) -> str:
    return (f"set {MIRRORS_ENV} to a directory holding the official EMNIST archive "
            f"{EMNIST_ARCHIVE} (the NIST distribution, ~536 MB, md5 {EMNIST_MD5}; "
            f"{name} reads its gzip/emnist-* IDX files), or allow downloads "
            "(download=True, with network access)")


def _register_emnist(split: str, description: str, n_classes: int, n_train: int, n_test: int,
                     label_offset: int = 0) -> None:
    """One EMNIST split as dataset ``emnist_<split>``, read from the shared NIST archive."""
    SPECS.append(DatasetSpec(
        name=f"emnist_{split}",
        stand_in="fedbayes.data.standin_files:_gen_emnist",
        description=description,
        files=(FileSpec(EMNIST_ARCHIVE, EMNIST_MD5, None, "all"),),
        loader=emnist_loader(split, label_offset=label_offset),
        n_classes=n_classes,
        n_train=n_train,
        n_test=n_test,
        urls=EMNIST_URLS,
        fix_hint=_emnist_hint(f"emnist_{split}"),
    ))


_register_emnist("letters", "EMNIST Letters (Cohen et al. 2017), 124.8k/20.8k 28x28 grayscale "
                 "handwritten letters, 26 classes (a/A..z/Z -> 0..25)", 26, 124800, 20800, label_offset=1)
_register_emnist("digits", "EMNIST Digits (Cohen et al. 2017), 240k/40k 28x28 grayscale "
                 "handwritten digits, 10 classes", 10, 240000, 40000)
_register_emnist("byclass", "EMNIST ByClass (Cohen et al. 2017), 697,932/116,323 28x28 grayscale handwritten "
                 "characters, 62 classes (digits, upper- and lower-case letters): the FedEP paper's "
                 "EMNIST-62 without TFF's writer partition", 62, 697932, 116323)

# -------------------------------------------------------------------- SVHN
SVHN_URLS = ("http://ufldl.stanford.edu/housenumbers/",)
SVHN_FILES = (
    # official md5s of the MATLAB files (as used by torchvision)
    FileSpec("train_32x32.mat", "e26dedcc434d2e4c54c9b2d4a06d8373", None, "train"),
    FileSpec("test_32x32.mat", "eb5a983be6a315427106f1b164d9cef3", None, "test"),
)
SVHN_SHAPE = (32, 32, 3)  # per image in the .mat files: X is (32, 32, 3, N)


def _read_svhn_mat(path: Path) -> tuple[np.ndarray, np.ndarray]:
    import scipy.io
    from scipy.io.matlab import MatReadError

    try:
        mat = scipy.io.loadmat(path, variable_names=["X", "y"])
    except (MatReadError, ValueError, TypeError, OSError, EOFError, zlib.error,
            NotImplementedError) as exc:
        raise DataIntegrityError(f"{path}: unreadable MATLAB file: {exc}") from exc
    if "X" not in mat or "y" not in mat:
        raise DataIntegrityError(f"{path}: expected variables X and y, got "
                                 f"{sorted(k for k in mat if not k.startswith('__'))}")
    x, y = mat["X"], mat["y"]
    if x.dtype != np.uint8 or x.ndim != 4 or x.shape[:3] != SVHN_SHAPE:
        raise DataIntegrityError(f"{path}: X must be uint8 (32, 32, 3, N), got {x.dtype} {x.shape}")
    # integer labels, or MATLAB doubles holding whole numbers
    if y.dtype.kind not in "uif" or y.size != x.shape[3] or y.ndim > 2 or \
            (y.ndim == 2 and 1 not in y.shape):
        raise DataIntegrityError(f"{path}: y must be integer (N, 1) with N = {x.shape[3]}, "
                                 f"got {y.dtype} {y.shape}")
    y = y.reshape(-1)
    if y.dtype.kind == "f" and not np.array_equal(y, np.round(y)):  # NaN fails too
        raise DataIntegrityError(f"{path}: y holds non-integer labels")
    y = y.astype(np.int64)
    if len(y) and (y.min() < 1 or y.max() > 10):
        raise DataIntegrityError(f"{path}: labels outside 1..10 (got {y.min()}..{y.max()})")
    # (H, W, C, N) -> (N, C, H, W); label 10 is the digit 0
    return np.ascontiguousarray(x.transpose(3, 2, 0, 1)), y % 10


def load_svhn(spec: DatasetSpec, d: Path) -> Arrays:
    """``train_32x32.mat`` and ``test_32x32.mat`` (MATLAB v5) as uint8 (N, 3, 32, 32)."""
    x_train, y_train = _read_svhn_mat(d / spec.file("train").name)
    x_test, y_test = _read_svhn_mat(d / spec.file("test").name)
    return Arrays(x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test,
                  n_classes=spec.n_classes)


SPECS.append(DatasetSpec(
    name="svhn",
    stand_in="fedbayes.data.standin_files:_gen_svhn",
    description="SVHN cropped digits (Netzer et al. 2011), 73,257/26,032 32x32 RGB "
                "(N, 3, 32, 32), 10 classes (label 10 -> digit 0); 'extra' not used",
    files=SVHN_FILES,
    loader=load_svhn,
    n_classes=10,
    n_train=73257,
    n_test=26032,
    urls=SVHN_URLS,
    fix_hint=(f"set {MIRRORS_ENV} to a directory holding the official SVHN files "
              f"({', '.join(f.name for f in SVHN_FILES)}; format 2, cropped digits), or "
              "allow downloads (download=True, with network access)"),
))
