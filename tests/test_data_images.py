"""MNIST and CIFAR-10 specs/loaders (fedbayes.data.images), on tiny real-format files. No network.

EMNIST, SVHN and CIFAR-100 loaders: tests/test_data_images2.py; their real specs are checked here.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import os
import pickle
import struct
import tarfile
from pathlib import Path

import numpy as np
import pytest

from fedbayes.data import (
    DATASETS,
    DataIntegrityError,
    DataUnavailableError,
    FileSpec,
    fetch,
    load,
)
from fedbayes.data import images, sources

MANIFEST = "manifest.json"


def md5(b: bytes) -> str:
    return hashlib.md5(b).hexdigest()


def leftovers(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


def idx_bytes(arr: np.ndarray) -> bytes:
    """Independent uint8 IDX writer."""
    return struct.pack(">BBBB", 0, 0, 0x08, arr.ndim) + struct.pack(
        f">{arr.ndim}I", *arr.shape) + arr.astype(np.uint8).tobytes()


# ------------------------------------------------------------------- MNIST
@pytest.fixture
def tiny_mnist(tmp_path, monkeypatch):
    """Mirror dir with 20/10 real-format MNIST IDX .gz files; the mnist spec patched to them."""
    rng = np.random.default_rng(7)
    arrays = {
        "x_train": rng.integers(0, 256, (20, 28, 28), dtype=np.uint8),
        "y_train": (np.arange(20) % 10).astype(np.uint8),
        "x_test": rng.integers(0, 256, (10, 28, 28), dtype=np.uint8),
        "y_test": rng.permutation(10).astype(np.uint8),
    }
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    spec = DATASETS["mnist"]
    files = []
    for f in spec.files:
        gz = gzip.compress(idx_bytes(arrays[f.role]), mtime=0)
        (mirror / f.name).write_bytes(gz)
        files.append(dataclasses.replace(f, md5=md5(gz)))
    monkeypatch.setitem(DATASETS, "mnist", dataclasses.replace(
        spec, files=tuple(files), n_train=20, n_test=10))
    return mirror, arrays


def test_mnist_fetch_and_load(tmp_path, tiny_mnist):
    mirror, arrays = tiny_mnist
    root = tmp_path / "raw"
    d = fetch("mnist", root=root, mirrors=[str(mirror)], download=False)
    assert leftovers(d) == sorted([MANIFEST, *(f.name for f in DATASETS["mnist"].files)])
    a = load("mnist", root=root)
    assert a.n_classes == 10
    assert a.x_train.shape == (20, 28, 28) and a.x_test.shape == (10, 28, 28)
    assert a.x_train.dtype == np.uint8 and a.y_train.dtype == np.int64
    for k in ("x_train", "x_test", "y_train", "y_test"):
        np.testing.assert_array_equal(getattr(a, k), arrays[k])


def test_mnist_corrupt_mirror(tmp_path, tiny_mnist):
    mirror, _ = tiny_mnist
    name = "t10k-images-idx3-ubyte.gz"
    data = bytearray((mirror / name).read_bytes())
    data[-5] ^= 0xFF
    (mirror / name).write_bytes(bytes(data))
    root = tmp_path / "raw"
    with pytest.raises(DataUnavailableError) as ei:
        fetch("mnist", root=root, mirrors=[str(mirror)], download=False)
    msg = str(ei.value)
    assert f"mirror {mirror / name}: checksum mismatch" in msg
    for url in images.MNIST_URLS:
        assert f"download {url}{name}: skipped (download=False)" in msg
    assert sources.MIRRORS_ENV in msg  # fix hint
    assert not list((root / "mnist").glob(f"*{name}*"))  # no partial/unverified file
    assert not list((root / "mnist").glob(".*"))


def test_mnist_wrong_image_size_rejected(tmp_path, tiny_mnist, monkeypatch):
    mirror, _ = tiny_mnist
    spec = DATASETS["mnist"]
    gz = gzip.compress(idx_bytes(np.zeros((20, 32, 32), np.uint8)), mtime=0)
    (mirror / "train-images-idx3-ubyte.gz").write_bytes(gz)
    files = tuple(dataclasses.replace(f, md5=md5(gz)) if f.role == "x_train" else f
                  for f in spec.files)
    monkeypatch.setitem(DATASETS, "mnist", dataclasses.replace(spec, files=files))
    fetch("mnist", root=tmp_path, mirrors=[str(mirror)], download=False)
    with pytest.raises(DataIntegrityError, match="28, 28"):
        load("mnist", root=tmp_path)


# ---------------------------------------------------------------- CIFAR-10
def batch_pickle(data, labels, protocol: int = 2) -> bytes:
    return pickle.dumps({b"batch_label": b"tiny batch", b"labels": labels, b"data": data,
                         b"filenames": [b"img%d.png" % i for i in range(len(labels))]},
                        protocol=protocol)


def cifar_tar_gz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, content in members.items():
            info = tarfile.TarInfo(f"{images.CIFAR10_DIR}/{name}")
            info.size, info.mtime = len(content), 0
            tf.addfile(info, io.BytesIO(content))
    return buf.getvalue()


def install_cifar(monkeypatch, mirror: Path, archive: bytes, n_train, n_test) -> None:
    mirror.mkdir(exist_ok=True)
    (mirror / images.CIFAR10_ARCHIVE).write_bytes(archive)
    spec = DATASETS["cifar10"]
    monkeypatch.setitem(DATASETS, "cifar10", dataclasses.replace(
        spec, files=(dataclasses.replace(spec.files[0], md5=md5(archive)),),
        n_train=n_train, n_test=n_test))


@pytest.fixture
def tiny_cifar(tmp_path, monkeypatch):
    rng = np.random.default_rng(3)
    sizes = {**{b: 3 for b in images.CIFAR10_TRAIN_BATCHES}, images.CIFAR10_TEST_BATCH: 4}
    batches, members = {}, {"batches.meta": pickle.dumps({b"label_names": []}, protocol=2)}
    for name, n in sizes.items():
        data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        labels = [int(v) for v in rng.integers(0, 10, n)]
        batches[name] = (data, labels)
        members[name] = batch_pickle(data, labels)
    mirror = tmp_path / "mirror"
    install_cifar(monkeypatch, mirror, cifar_tar_gz(members), 15, 4)
    return mirror, batches


def test_cifar10_fetch_and_load(tmp_path, tiny_cifar):
    mirror, batches = tiny_cifar
    root = tmp_path / "raw"
    d = fetch("cifar10", root=root, mirrors=[str(mirror)], download=False)
    assert leftovers(d) == sorted([MANIFEST, images.CIFAR10_ARCHIVE])
    a = load("cifar10", root=root)
    assert a.n_classes == 10
    assert a.x_train.shape == (15, 3, 32, 32) and a.x_test.shape == (4, 3, 32, 32)
    assert a.x_train.dtype == np.uint8 and a.y_train.dtype == np.int64
    data0, labels0 = batches["data_batch_1"]
    for c, i, j in [(0, 0, 0), (1, 5, 7), (2, 31, 31), (2, 17, 3)]:
        assert a.x_train[0, c, i, j] == data0[0][c * 1024 + i * 32 + j]
    np.testing.assert_array_equal(a.x_train.reshape(15, -1),
                                  np.concatenate([batches[b][0] for b in
                                                  images.CIFAR10_TRAIN_BATCHES]))
    assert a.y_train.tolist() == sum((batches[b][1] for b in images.CIFAR10_TRAIN_BATCHES), [])
    test_data, test_labels = batches["test_batch"]
    np.testing.assert_array_equal(a.x_test.reshape(4, -1), test_data)
    assert a.y_test.tolist() == test_labels
    # idempotent re-fetch without sources
    assert fetch("cifar10", root=root, mirrors=[], download=False) == d


def test_cifar10_corrupt_archive_leaves_nothing(tmp_path, tiny_cifar):
    mirror, _ = tiny_cifar
    p = mirror / images.CIFAR10_ARCHIVE
    p.write_bytes(p.read_bytes()[:-10])
    root = tmp_path / "raw"
    with pytest.raises(DataUnavailableError) as ei:
        fetch("cifar10", root=root, mirrors=[str(mirror)], download=False)
    assert "checksum mismatch" in str(ei.value)
    assert f"download {images.CIFAR10_URLS[0]}{images.CIFAR10_ARCHIVE}" in str(ei.value)
    assert leftovers(root / "cifar10") == []


def test_cifar10_wrong_shape_rejected(tmp_path, monkeypatch):
    members = {b: batch_pickle(np.zeros((2, 3072), np.uint8), [0, 1])
               for b in images.CIFAR10_TRAIN_BATCHES}
    members["test_batch"] = batch_pickle(np.zeros((2, 3071), np.uint8), [0, 1])
    install_cifar(monkeypatch, tmp_path / "m", cifar_tar_gz(members), None, None)
    fetch("cifar10", root=tmp_path / "raw", mirrors=[str(tmp_path / "m")], download=False)
    with pytest.raises(DataIntegrityError, match="test_batch.*3072"):
        load("cifar10", root=tmp_path / "raw")


def test_cifar10_label_count_mismatch_and_missing_batch(tmp_path, monkeypatch):
    members = {b: batch_pickle(np.zeros((2, 3072), np.uint8), [0, 1])
               for b in images.CIFAR10_TRAIN_BATCHES[:-1]}
    members["test_batch"] = batch_pickle(np.zeros((2, 3072), np.uint8), [0])
    install_cifar(monkeypatch, tmp_path / "m", cifar_tar_gz(members), None, None)
    fetch("cifar10", root=tmp_path / "raw", mirrors=[str(tmp_path / "m")], download=False)
    with pytest.raises(DataIntegrityError, match="no member .*data_batch_5"):
        load("cifar10", root=tmp_path / "raw")


class Evil:
    def __reduce__(self):
        return (os.system, ("true",))


def test_restricted_unpickler_refuses_forbidden_globals(tmp_path, monkeypatch):
    payload = pickle.dumps({b"data": Evil(), b"labels": []}, protocol=2)
    with pytest.raises(pickle.UnpicklingError, match="forbidden global .*system"):
        images.restricted_loads(payload)
    with pytest.raises(pickle.UnpicklingError, match="forbidden"):
        images.restricted_loads(pickle.dumps(Path("x"), protocol=2))
    # allowed content round-trips (protocol 2, as in the original batches)
    ok = images.restricted_loads(batch_pickle(np.arange(6, dtype=np.uint8).reshape(2, 3), [1, 2]))
    assert ok[b"labels"] == [1, 2] and ok[b"data"].tolist() == [[0, 1, 2], [3, 4, 5]]

    # and through the loader: a verified archive holding such a pickle is refused
    members = {b: batch_pickle(np.zeros((1, 3072), np.uint8), [0])
               for b in images.CIFAR10_TRAIN_BATCHES}
    members["data_batch_3"] = payload
    members["test_batch"] = batch_pickle(np.zeros((1, 3072), np.uint8), [0])
    install_cifar(monkeypatch, tmp_path / "m", cifar_tar_gz(members), None, None)
    fetch("cifar10", root=tmp_path / "raw", mirrors=[str(tmp_path / "m")], download=False)
    with pytest.raises(DataIntegrityError, match="data_batch_3.*forbidden global"):
        load("cifar10", root=tmp_path / "raw")


# ------------------------------------------------------------ real specs
MNIST_MD5 = {
    "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
    "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
    "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
}


def test_real_specs():
    m = DATASETS["mnist"]
    assert {f.name: f.md5 for f in m.files} == MNIST_MD5
    assert [f.role for f in m.files] == ["x_train", "y_train", "x_test", "y_test"]
    assert m.urls == ("https://ossci-datasets.s3.amazonaws.com/mnist/",
                      "http://yann.lecun.com/exdb/mnist/")
    assert (m.n_train, m.n_test, m.n_classes, m.default_mirrors) == (60000, 10000, 10, ())
    c = DATASETS["cifar10"]
    assert c.files == (FileSpec("cifar-10-python.tar.gz", "c58f30108f718f92721af3b95e74349a",
                                None, "all", 170_498_071),)   # the size bounds a download
    assert c.urls == ("https://www.cs.toronto.edu/~kriz/",)
    assert (c.n_train, c.n_test, c.n_classes, c.default_mirrors) == (50000, 10000, 10, ())


def test_real_specs_emnist_svhn_cifar100():
    # official md5s as used by torchvision (EMNIST, SVHN: datasets/mnist.py, svhn.py;
    # CIFAR-100: datasets/cifar.py)
    for name, n_classes, n_train, n_test in (("emnist_letters", 26, 124800, 20800),
                                             ("emnist_digits", 10, 240000, 40000),
                                             ("emnist_byclass", 62, 697932, 116323)):
        e = DATASETS[name]
        assert e.files == (FileSpec("gzip.zip", "58c8d27c78d21e728a6bc7b3cc06412e", None, "all"),)
        assert e.urls == ("https://biometrics.nist.gov/cs_links/EMNIST/",)
        assert (e.n_train, e.n_test, e.n_classes, e.default_mirrors) == (
            n_train, n_test, n_classes, ())
    s = DATASETS["svhn"]
    assert s.files == (FileSpec("train_32x32.mat", "e26dedcc434d2e4c54c9b2d4a06d8373", None, "train"),
                       FileSpec("test_32x32.mat", "eb5a983be6a315427106f1b164d9cef3", None, "test"))
    assert s.urls == ("http://ufldl.stanford.edu/housenumbers/",)
    assert (s.n_train, s.n_test, s.n_classes, s.default_mirrors) == (73257, 26032, 10, ())
    c = DATASETS["cifar100"]
    assert c.files == (FileSpec("cifar-100-python.tar.gz", "eb9058c3a382ffc7106e4002c42a8d85",
                                None, "all", 169_001_437),)
    assert c.urls == ("https://www.cs.toronto.edu/~kriz/",)
    assert (c.n_train, c.n_test, c.n_classes, c.default_mirrors) == (50000, 10000, 100, ())


@pytest.mark.parametrize("name", ["mnist", "cifar10", "cifar100", "emnist_letters",
                                  "emnist_digits", "emnist_byclass", "svhn"])
def test_real_spec_unavailable_offline(tmp_path, name):
    spec = DATASETS[name]
    with pytest.raises(DataUnavailableError) as ei:
        fetch(name, root=tmp_path, download=False)
    msg = str(ei.value)
    for f in spec.files:
        for url in spec.urls:
            assert f"download {url}{f.name}: skipped (download=False)" in msg
    assert sources.MIRRORS_ENV in msg
    assert leftovers(tmp_path / name) == []
