"""EMNIST, SVHN and CIFAR-100 specs/loaders (fedbayes.data.images) on tiny real-format files.

EMNIST: a ``gzip.zip`` holding gzipped IDX files as in the NIST distribution; SVHN: MATLAB v5
``.mat`` files written by scipy; CIFAR-100: a tar.gz of protocol-2 pickles. No network.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import pickle
import struct
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
import scipy.io

from fedbayes.data import DATASETS, DataIntegrityError, DataUnavailableError, fetch, load
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


def pin(monkeypatch, name: str, mirror: Path, n_train, n_test) -> None:
    """Patch ``name``'s spec to the md5s of the files in ``mirror`` and the given sizes."""
    spec = DATASETS[name]
    files = tuple(dataclasses.replace(f, md5=md5((mirror / f.name).read_bytes()))
                  for f in spec.files)
    monkeypatch.setitem(DATASETS, name, dataclasses.replace(
        spec, files=files, n_train=n_train, n_test=n_test))


def corrupt(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


# ------------------------------------------------------------------ EMNIST
def emnist_zip(members: dict[str, bytes]) -> bytes:
    """A zip laid out like the NIST gzip.zip: ``gzip/emnist-*-ubyte.gz`` members."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, content in members.items():
            zf.writestr(zipfile.ZipInfo(name, date_time=(2017, 2, 1, 0, 0, 0)), content)
    return buf.getvalue()


def emnist_members(split: str, arrays: dict[str, np.ndarray]) -> dict[str, bytes]:
    out = {}
    for part in ("train", "test"):
        for kind, key in (("images", "x"), ("labels", "y")):
            name = f"gzip/emnist-{split}-{part}-{kind}-{'idx3' if kind == 'images' else 'idx1'}-ubyte.gz"
            out[name] = gzip.compress(idx_bytes(arrays[f"{key}_{part}"]), mtime=0)
    return out


def stored(x: np.ndarray) -> np.ndarray:
    """EMNIST files store images transposed (column-major) relative to MNIST."""
    return np.ascontiguousarray(x.transpose(0, 2, 1))


def upright_images(rng, n: int) -> np.ndarray:
    x = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    x[0] = 0
    x[0, 2:26, 5] = 255  # an "L": long vertical stroke in column 5 ...
    x[0, 25, 5:15] = 255  # ... and a short foot along row 25
    return x


@pytest.fixture
def tiny_emnist(tmp_path, monkeypatch):
    """One mirror gzip.zip holding tiny letters and digits splits; both specs pinned to it."""
    rng = np.random.default_rng(11)
    letters = {"x_train": upright_images(rng, 6), "y_train": np.array([1, 26, 2, 13, 25, 1]),
               "x_test": upright_images(rng, 3), "y_test": np.array([26, 1, 7])}
    digits = {"x_train": upright_images(rng, 5), "y_train": np.array([0, 9, 3, 0, 5]),
              "x_test": upright_images(rng, 2), "y_test": np.array([9, 0])}
    byclass = {"x_train": upright_images(rng, 4), "y_train": np.array([61, 0, 36, 10]),
               "x_test": upright_images(rng, 2), "y_test": np.array([35, 61])}
    members = {"gzip/emnist-letters-mapping.txt": b"1 65 97\n"}
    for split, arr in (("letters", letters), ("digits", digits), ("byclass", byclass)):
        members.update(emnist_members(split, {k: stored(v) if k.startswith("x") else v
                                              for k, v in arr.items()}))
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / images.EMNIST_ARCHIVE).write_bytes(emnist_zip(members))
    pin(monkeypatch, "emnist_letters", mirror, 6, 3)
    pin(monkeypatch, "emnist_digits", mirror, 5, 2)
    pin(monkeypatch, "emnist_byclass", mirror, 4, 2)
    return mirror, letters, digits, byclass


def test_emnist_fetch_and_load(tmp_path, tiny_emnist):
    mirror, letters, digits, byclass = tiny_emnist
    root = tmp_path / "raw"
    for name, want, n_classes in (("emnist_letters", letters, 26),
                                  ("emnist_digits", digits, 10), ("emnist_byclass", byclass, 62)):
        d = fetch(name, root=root, mirrors=[str(mirror)], download=False)
        assert d == root / name
        assert leftovers(d) == sorted([MANIFEST, images.EMNIST_ARCHIVE])
        a = load(name, root=root)
        assert a.n_classes == n_classes
        assert a.x_train.dtype == np.uint8 and a.y_train.dtype == np.int64
        assert a.x_train.shape == (len(want["y_train"]), 28, 28)
        assert a.x_test.shape == (len(want["y_test"]), 28, 28)
        assert a.x_train.flags.c_contiguous and a.x_test.flags.c_contiguous
        # transposed back: upright as written, the asymmetric "L" included
        np.testing.assert_array_equal(a.x_train, want["x_train"])
        np.testing.assert_array_equal(a.x_test, want["x_test"])
        assert a.x_train[0, 2:26, 5].min() == 255 and a.x_train[0, 25, 5:15].min() == 255
        assert a.x_train[0, 5, 6:].max() == 0  # the stroke is vertical, not along row 5
        # ... whereas in the file the same image lies on its side (stroke along row 5)
        with zipfile.ZipFile(mirror / images.EMNIST_ARCHIVE) as zf:
            split = name.split("_")[1]
            raw = gzip.decompress(zf.read(images.emnist_member(split, "train", "images")))
        in_file = np.frombuffer(raw, np.uint8, offset=16).reshape(-1, 28, 28)
        assert in_file[0, 5, 2:26].min() == 255 and in_file[0, 6:, 5].max() == 0
        np.testing.assert_array_equal(in_file.transpose(0, 2, 1), a.x_train)
        # idempotent re-fetch with no sources
        assert fetch(name, root=root, mirrors=[], download=False) == d
    a = load("emnist_letters", root=root)
    assert a.y_train.tolist() == [0, 25, 1, 12, 24, 0]  # files number letters 1..26
    assert a.y_test.tolist() == [25, 0, 6]
    a = load("emnist_digits", root=root)
    assert a.y_train.tolist() == [0, 9, 3, 0, 5] and a.y_test.tolist() == [9, 0]
    a = load("emnist_byclass", root=root)  # 62 classes numbered from 0
    assert a.y_train.tolist() == [61, 0, 36, 10] and a.y_test.tolist() == [35, 61]


def test_emnist_corrupt_archive_rejected(tmp_path, tiny_emnist):
    mirror, *_ = tiny_emnist
    corrupt(mirror / images.EMNIST_ARCHIVE)
    root = tmp_path / "raw"
    with pytest.raises(DataUnavailableError) as ei:
        fetch("emnist_letters", root=root, mirrors=[str(mirror)], download=False)
    msg = str(ei.value)
    assert f"file {images.EMNIST_ARCHIVE}: no source gave a verified copy" in msg
    assert f"mirror {mirror / images.EMNIST_ARCHIVE}: checksum mismatch" in msg
    assert (f"download {images.EMNIST_URLS[0]}{images.EMNIST_ARCHIVE}: "
            "skipped (download=False)") in msg
    assert sources.MIRRORS_ENV in msg and images.EMNIST_MD5 in msg  # fix hint
    assert leftovers(root / "emnist_letters") == []  # nothing half-written


def test_emnist_bad_contents_rejected(tmp_path, monkeypatch):
    """Verified archives whose contents are wrong: clear errors naming archive and member."""
    ok = {"x_train": np.zeros((2, 28, 28), np.uint8), "y_train": np.array([1, 2]),
          "x_test": np.zeros((1, 28, 28), np.uint8), "y_test": np.array([3])}
    root, mirror = tmp_path / "raw", tmp_path / "m"
    mirror.mkdir()
    archive = mirror / images.EMNIST_ARCHIVE
    cases = [
        # letters files number classes 1..26; a 0 is not a letter
        ({**ok, "y_train": np.array([0, 2])}, {},
         r"emnist-letters-train-labels-idx1-ubyte\.gz: labels outside 1\.\.26"),
        ({**ok, "x_test": np.zeros((1, 32, 32), np.uint8)}, {},
         r"emnist-letters-test-images-idx3-ubyte\.gz: expected uint8 \(N, 28, 28\)"),
        (ok, {"gzip/emnist-letters-test-labels-idx1-ubyte.gz": b"\x1f\x8bnot gzip"},
         r"cannot decompress gzip/emnist-letters-test-labels"),
        (ok, {"gzip/emnist-letters-train-images-idx3-ubyte.gz": gzip.compress(b"\0\0\x08\x03xx")},
         r"gzip\.zip:gzip/emnist-letters-train-images-idx3-ubyte\.gz: truncated IDX header"),
    ]
    for arrays, override, pattern in cases:
        archive.write_bytes(emnist_zip({**emnist_members("letters", arrays), **override}))
        pin(monkeypatch, "emnist_letters", mirror, None, None)
        fetch("emnist_letters", root=root, mirrors=[str(mirror)], download=False)
        with pytest.raises(DataIntegrityError, match=pattern) as ei:
            load("emnist_letters", root=root)
        assert str(root / "emnist_letters" / images.EMNIST_ARCHIVE) in str(ei.value)
    # the letters split missing altogether (e.g. a zip of the digits split only)
    archive.write_bytes(emnist_zip(emnist_members("digits", ok)))
    pin(monkeypatch, "emnist_letters", mirror, None, None)
    fetch("emnist_letters", root=root, mirrors=[str(mirror)], download=False)
    with pytest.raises(DataIntegrityError,
                       match=r"no member gzip/emnist-letters-train-images-idx3-ubyte\.gz"):
        load("emnist_letters", root=root)


def test_emnist_wrong_size_rejected(tmp_path, tiny_emnist, monkeypatch):
    mirror, *_ = tiny_emnist
    monkeypatch.setitem(DATASETS, "emnist_digits", dataclasses.replace(
        DATASETS["emnist_digits"], n_train=240000, n_test=40000))
    fetch("emnist_digits", root=tmp_path, mirrors=[str(mirror)], download=False)
    with pytest.raises(DataIntegrityError, match="emnist_digits/train: 5 examples, expected 240000"):
        load("emnist_digits", root=tmp_path)


# -------------------------------------------------------------------- SVHN
def svhn_mat(x_nchw: np.ndarray, labels: np.ndarray, y_dtype=np.uint8) -> bytes:
    """MATLAB v5 file as distributed: X (32, 32, 3, N) uint8, y (N, 1) with 10 for 0."""
    buf = io.BytesIO()
    scipy.io.savemat(buf, {"X": np.ascontiguousarray(x_nchw.transpose(2, 3, 1, 0)),
                           "y": labels.astype(y_dtype).reshape(-1, 1)}, format="5")
    return buf.getvalue()


@pytest.fixture
def tiny_svhn(tmp_path, monkeypatch):
    rng = np.random.default_rng(5)
    x_train = rng.integers(0, 256, (7, 3, 32, 32), dtype=np.uint8)
    x_test = rng.integers(0, 256, (4, 3, 32, 32), dtype=np.uint8)
    y_train = np.array([10, 1, 2, 9, 10, 5, 3])
    y_test = np.array([4, 10, 8, 1])
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "train_32x32.mat").write_bytes(svhn_mat(x_train, y_train))
    # labels as MATLAB doubles in one file: whole numbers are accepted whatever their type
    (mirror / "test_32x32.mat").write_bytes(svhn_mat(x_test, y_test, np.float64))
    pin(monkeypatch, "svhn", mirror, 7, 4)
    return mirror, (x_train, y_train, x_test, y_test)


def test_svhn_fetch_and_load(tmp_path, tiny_svhn):
    mirror, (x_train, y_train, x_test, y_test) = tiny_svhn
    root = tmp_path / "raw"
    d = fetch("svhn", root=root, mirrors=[str(mirror)], download=False)
    assert leftovers(d) == sorted([MANIFEST, "test_32x32.mat", "train_32x32.mat"])
    a = load("svhn", root=root)
    assert a.n_classes == 10
    assert a.x_train.shape == (7, 3, 32, 32) and a.x_test.shape == (4, 3, 32, 32)
    assert a.x_train.dtype == np.uint8 and a.y_train.dtype == np.int64
    assert a.x_train.flags.c_contiguous
    np.testing.assert_array_equal(a.x_train, x_train)
    np.testing.assert_array_equal(a.x_test, x_test)
    # pixel (row i, column j, channel c) of image n is X[i, j, c, n] in the .mat file
    raw = scipy.io.loadmat(mirror / "train_32x32.mat")["X"]
    for n, c, i, j in [(0, 0, 0, 0), (3, 1, 5, 27), (6, 2, 31, 0), (2, 0, 0, 31)]:
        assert a.x_train[n, c, i, j] == raw[i, j, c, n]
    assert a.y_train.tolist() == [0, 1, 2, 9, 0, 5, 3]  # 10 is the digit 0
    assert a.y_test.tolist() == [4, 0, 8, 1]
    assert fetch("svhn", root=root, mirrors=[], download=False) == d


def test_svhn_corrupt_file_rejected(tmp_path, tiny_svhn):
    mirror, _ = tiny_svhn
    corrupt(mirror / "test_32x32.mat")
    root = tmp_path / "raw"
    with pytest.raises(DataUnavailableError) as ei:
        fetch("svhn", root=root, mirrors=[str(mirror)], download=False)
    msg = str(ei.value)
    assert f"mirror {mirror / 'test_32x32.mat'}: checksum mismatch" in msg
    assert f"download {images.SVHN_URLS[0]}test_32x32.mat: skipped (download=False)" in msg
    assert "train_32x32.mat" not in msg.split("To fix:")[0]  # the intact file was fine
    assert sources.MIRRORS_ENV in msg
    # the verified train file is in place; nothing of the corrupt one, no temp files
    assert leftovers(root / "svhn") == ["train_32x32.mat"]


def test_svhn_bad_contents_rejected(tmp_path, tiny_svhn, monkeypatch):
    mirror, (x_train, y_train, x_test, y_test) = tiny_svhn
    root = tmp_path / "raw"
    test_path = root / "svhn" / "test_32x32.mat"
    cases = [
        (svhn_mat(x_test, np.array([4, 0, 8, 1])), r"labels outside 1\.\.10"),
        (svhn_mat(x_test, np.array([4, 10, 8])), r"y must be integer \(N, 1\) with N = 4"),
        (svhn_mat(x_test, np.array([4, 10, 8.5, 1]), np.float64), "non-integer labels"),
        (svhn_mat(x_test[:, :, :, :28], y_test), r"X must be uint8 \(32, 32, 3, N\)"),
        (b"MATLAB 5.0 MAT-file" + bytes(200), "unreadable MATLAB file"),
    ]
    for content, pattern in cases:
        (mirror / "test_32x32.mat").write_bytes(content)
        pin(monkeypatch, "svhn", mirror, None, None)
        fetch("svhn", root=root, mirrors=[str(mirror)], download=False)
        with pytest.raises(DataIntegrityError, match=pattern) as ei:
            load("svhn", root=root)
        assert str(test_path) in str(ei.value)


# --------------------------------------------------------------- CIFAR-100
def cifar100_pickle(data: np.ndarray, fine: list[int], protocol: int = 2) -> bytes:
    n = len(fine)
    return pickle.dumps({b"filenames": [b"img%d.png" % i for i in range(n)],
                         b"batch_label": b"training batch 1 of 1", b"fine_labels": fine,
                         b"coarse_labels": [v // 5 for v in fine], b"data": data},
                        protocol=protocol)


def cifar100_tar_gz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, content in members.items():
            info = tarfile.TarInfo(f"{images.CIFAR100_DIR}/{name}")
            info.size, info.mtime = len(content), 0
            tf.addfile(info, io.BytesIO(content))
    return buf.getvalue()


def install_cifar100(monkeypatch, mirror: Path, archive: bytes, n_train, n_test) -> None:
    mirror.mkdir(exist_ok=True)
    (mirror / images.CIFAR100_ARCHIVE).write_bytes(archive)
    pin(monkeypatch, "cifar100", mirror, n_train, n_test)


@pytest.fixture
def tiny_cifar100(tmp_path, monkeypatch):
    rng = np.random.default_rng(9)
    x_train = rng.integers(0, 256, (6, 3072), dtype=np.uint8)
    x_test = rng.integers(0, 256, (3, 3072), dtype=np.uint8)
    y_train, y_test = [0, 99, 42, 7, 99, 13], [55, 0, 99]
    members = {"meta": pickle.dumps({b"fine_label_names": [], b"coarse_label_names": []}, 2),
               "train": cifar100_pickle(x_train, y_train),
               "test": cifar100_pickle(x_test, y_test),
               "file.txt~": b""}
    mirror = tmp_path / "mirror"
    install_cifar100(monkeypatch, mirror, cifar100_tar_gz(members), 6, 3)
    return mirror, (x_train, y_train, x_test, y_test)


def test_cifar100_fetch_and_load(tmp_path, tiny_cifar100):
    mirror, (x_train, y_train, x_test, y_test) = tiny_cifar100
    root = tmp_path / "raw"
    d = fetch("cifar100", root=root, mirrors=[str(mirror)], download=False)
    assert leftovers(d) == sorted([MANIFEST, images.CIFAR100_ARCHIVE])
    a = load("cifar100", root=root)
    assert a.n_classes == 100
    assert a.x_train.shape == (6, 3, 32, 32) and a.x_test.shape == (3, 3, 32, 32)
    assert a.x_train.dtype == np.uint8 and a.y_train.dtype == np.int64
    for c, i, j in [(0, 0, 0), (1, 5, 7), (2, 31, 31)]:
        assert a.x_train[1, c, i, j] == x_train[1][c * 1024 + i * 32 + j]
    np.testing.assert_array_equal(a.x_train.reshape(6, -1), x_train)
    np.testing.assert_array_equal(a.x_test.reshape(3, -1), x_test)
    assert a.y_train.tolist() == y_train and a.y_test.tolist() == y_test  # fine labels
    assert fetch("cifar100", root=root, mirrors=[], download=False) == d


def test_cifar100_corrupt_archive_leaves_nothing(tmp_path, tiny_cifar100):
    mirror, _ = tiny_cifar100
    p = mirror / images.CIFAR100_ARCHIVE
    p.write_bytes(p.read_bytes()[:-10])
    root = tmp_path / "raw"
    with pytest.raises(DataUnavailableError) as ei:
        fetch("cifar100", root=root, mirrors=[str(mirror)], download=False)
    msg = str(ei.value)
    assert f"mirror {p}: checksum mismatch" in msg
    assert f"download {images.CIFAR10_URLS[0]}{images.CIFAR100_ARCHIVE}" in msg
    assert leftovers(root / "cifar100") == []


def test_cifar100_bad_contents_rejected(tmp_path, monkeypatch):
    root, mirror = tmp_path / "raw", tmp_path / "m"
    good = cifar100_pickle(np.zeros((2, 3072), np.uint8), [0, 1])
    coarse_only = pickle.dumps({b"data": np.zeros((2, 3072), np.uint8),
                                b"coarse_labels": [0, 1]}, protocol=2)
    cases = [
        ({"train": good}, r"no member cifar-100-python/test"),
        ({"train": good, "test": coarse_only}, r"cifar-100-python/test is not a dict .*fine_labels"),
        ({"train": cifar100_pickle(np.zeros((2, 3071), np.uint8), [0, 1]), "test": good},
         r"cifar-100-python/train data must be uint8 \(N, 3072\)"),
        ({"train": good, "test": cifar100_pickle(np.zeros((2, 3072), np.uint8), [0, 100])},
         r"cifar100/test: labels outside \[0, 100\)"),
    ]
    for members, pattern in cases:
        install_cifar100(monkeypatch, mirror, cifar100_tar_gz(members), None, None)
        fetch("cifar100", root=root, mirrors=[str(mirror)], download=False)
        with pytest.raises(DataIntegrityError, match=pattern):
            load("cifar100", root=root)
