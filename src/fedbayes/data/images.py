"""Image datasets beyond Fashion-MNIST (MNIST, CIFAR-10): registered on import.

Neither has a default local mirror; provide the official files through
``$FEDBAYES_DATA_MIRRORS`` (or ``mirrors=``) or allow downloads.
"""

from __future__ import annotations

import codecs
import io
import pickle
import tarfile
import zlib
from pathlib import Path

import numpy as np

from .registry import Arrays, DatasetSpec, load_idx_set, register
from .sources import MIRRORS_ENV, DataIntegrityError, FileSpec

# ------------------------------------------------------------------- MNIST
MNIST_URLS = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "http://yann.lecun.com/exdb/mnist/",
)
MNIST_FILES = (
    # official archive md5s (as used by torchvision); decompressed md5s unknown -> None
    FileSpec("train-images-idx3-ubyte.gz", "f68b3c2dcbeaaa9fbdd348bbdeb94873", None, "x_train"),
    FileSpec("train-labels-idx1-ubyte.gz", "d53e105ee54ea40749a09fcbcd1e9432", None, "y_train"),
    FileSpec("t10k-images-idx3-ubyte.gz", "9fb629c4189551a2d022fa330f9573f3", None, "x_test"),
    FileSpec("t10k-labels-idx1-ubyte.gz", "ec29112dd5afa0611ce80d1b7f02629c", None, "y_test"),
)


def load_mnist(spec: DatasetSpec, d: Path) -> Arrays:
    """The four IDX files, additionally checked to hold 28x28 images."""
    a = load_idx_set(spec, d)
    for role, x in (("x_train", a.x_train), ("x_test", a.x_test)):
        if x.shape[1:] != (28, 28):
            raise DataIntegrityError(f"{spec.name}/{role}: expected (N, 28, 28), got {x.shape}")
    return a


register(DatasetSpec(
    name="mnist",
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


def _read_batch(tf: tarfile.TarFile, member: str, where: str) -> tuple[np.ndarray, np.ndarray]:
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
    if not isinstance(batch, dict) or b"data" not in batch or b"labels" not in batch:
        raise DataIntegrityError(f"{where}: {member} is not a dict with b'data' and b'labels'")
    x, labels = batch[b"data"], batch[b"labels"]
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


register(DatasetSpec(
    name="cifar10",
    description="CIFAR-10 (Krizhevsky 2009), 50k/10k 32x32 RGB (N, 3, 32, 32), 10 classes",
    # archive-only: verified by the official md5 of the .tar.gz
    files=(FileSpec(CIFAR10_ARCHIVE, "c58f30108f718f92721af3b95e74349a", None, "all"),),
    loader=load_cifar10,
    n_classes=10,
    n_train=50000,
    n_test=10000,
    urls=CIFAR10_URLS,
    fix_hint=(f"set {MIRRORS_ENV} to a directory holding the official {CIFAR10_ARCHIVE} "
              "(CIFAR-10 python version), or allow downloads (download=True, with "
              "network access)"),
))
