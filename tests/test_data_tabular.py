"""Tests for fedbayes.data.tabular (UCI Credit, FLamby-Heart). No network: the tests write
small files in the real on-disk formats into a mirror directory."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from fedbayes.data import DATASETS, DataIntegrityError, DataUnavailableError, fetch, load
from fedbayes.data import tabular
from fedbayes.data.tabular import flamby_centres, pin_md5
from fedbayes.partition.schemes import credit_heterogeneous_split
from dagutil import read_params

HEART_FILES = ["processed.cleveland.data", "processed.hungarian.data",
               "processed.switzerland.data", "processed.va.data"]


def md5(b: bytes) -> str:
    return hashlib.md5(b).hexdigest()


def pinned(monkeypatch, name: str, mirror: Path) -> None:
    """Pin the md5s of the files in ``mirror`` for ``name``; restored after the test."""
    monkeypatch.setitem(DATASETS, name, DATASETS[name])
    pin_md5(name, {f.name: md5((mirror / f.name).read_bytes()) for f in DATASETS[name].files})


# ------------------------------------------------------------ crx.data writer
A6 = ["c", "d", "cc", "i", "j", "k", "m", "r", "q", "w", "x", "e", "aa", "ff"]
A7 = ["v", "h", "bb", "j", "n", "z", "dd", "ff", "o"]


def crx_text(n_rows: int, n_missing: int, seed: int = 0) -> tuple[str, list[list[str]]]:
    """crx.data-format text (16 fields, A1..A15 then '+'/'-'); ``n_missing`` rows hold a '?'."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n_rows):
        r = [rng.choice(["a", "b"]), f"{rng.uniform(15, 80):.2f}", f"{rng.uniform(0, 28):.3f}",
             rng.choice(["u", "y", "l"]), rng.choice(["g", "p", "gg"]), rng.choice(A6),
             rng.choice(A7), f"{rng.uniform(0, 28):.3f}", rng.choice(["t", "f"]),
             rng.choice(["t", "f"]), f"{rng.integers(0, 67):02d}", rng.choice(["t", "f"]),
             rng.choice(["g", "p", "s"]), f"{rng.integers(0, 2000):05d}",
             str(rng.integers(0, 100000)), "+" if rng.random() < 0.45 else "-"]
        rows.append([str(v) for v in r])
    for i in rng.choice(n_rows, n_missing, replace=False):
        rows[i][int(rng.choice([0, 1, 3, 4, 5, 6, 13]))] = "?"
    return "".join(",".join(r) + "\n" for r in rows), rows


@pytest.fixture
def credit_mirror(tmp_path):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    text, rows = crx_text(690, 37)
    (mirror / "crx.data").write_text(text)
    return mirror, rows


def test_credit_real_spec():
    spec = DATASETS["uci_credit"]
    assert spec.urls == ("https://archive.ics.uci.edu/ml/machine-learning-databases/"
                         "credit-screening/",)
    assert [f.name for f in spec.files] == ["crx.data"]
    assert spec.n_classes == 2 and (spec.n_train, spec.n_test) == (522, 131)
    assert spec.files[0].md5 == tabular.UNPINNED and spec.files[0].content_md5 is None


def test_credit_unpinned_refuses_and_leaves_nothing(tmp_path, credit_mirror):
    mirror, _ = credit_mirror
    root = tmp_path / "raw"
    with pytest.raises(DataUnavailableError) as ei:
        fetch("uci_credit", root=root, mirrors=[str(mirror)], download=False)
    msg = str(ei.value)
    assert md5((mirror / "crx.data").read_bytes()) in msg  # the md5 the mirror gave
    assert "pin_md5('uci_credit'" in msg and "skipped (download=False)" in msg
    assert not (root / "uci_credit").exists() or not any((root / "uci_credit").iterdir())
    # a copy placed by hand is not loaded unverified
    (root / "uci_credit").mkdir(parents=True, exist_ok=True)
    (root / "uci_credit" / "crx.data").write_bytes((mirror / "crx.data").read_bytes())
    with pytest.raises(DataIntegrityError):
        load("uci_credit", root=root)


def test_credit_load(tmp_path, credit_mirror, monkeypatch):
    mirror, rows = credit_mirror
    pinned(monkeypatch, "uci_credit", mirror)
    root = tmp_path / "raw"
    fetch("uci_credit", root=root, mirrors=[str(mirror)], download=False)
    a = load("uci_credit", root=root)  # real n_train/n_test (522/131) are checked by load
    assert a.x_train.shape[0] == 522 and a.x_test.shape[0] == 131 and a.n_classes == 2
    assert a.x_train.dtype == np.float32 and a.y_train.dtype == np.int64

    kept = [r for r in rows if "?" not in r]
    assert len(kept) == 653
    cats = [0, 3, 4, 5, 6, 8, 9, 11, 12]
    width = 6 + sum(len({r[c] for r in kept}) for c in cats)
    assert a.x_train.shape[1] == width == a.x_test.shape[1]

    # shuffle = RandomState(0).permutation over the kept rows; '+' -> 1
    perm = np.random.RandomState(0).permutation(653)
    y = np.array([1 if kept[i][15] == "+" else 0 for i in perm])
    np.testing.assert_array_equal(np.concatenate([a.y_train, a.y_test]), y)
    # numeric columns: standardised over all 653 rows (StandardScaler on everything)
    x = np.concatenate([a.x_train, a.x_test]).astype(np.float64)
    np.testing.assert_allclose(x[:, :6].mean(0), 0, atol=1e-5)
    np.testing.assert_allclose(x[:, :6].std(0), 1, atol=1e-5)
    a2 = np.array([float(kept[i][1]) for i in perm])
    np.testing.assert_allclose(x[:, 0], (a2 - a2.mean()) / a2.std(), atol=1e-5)
    # one-hot blocks: each row has exactly one 1 per categorical column
    onehot = x[:, 6:]
    assert set(np.unique(onehot)) <= {0.0, 1.0}
    assert (onehot.sum(1) == len(cats)).all()
    # first block = column 0, categories sorted: ['a', 'b']
    np.testing.assert_array_equal(x[:, 6], [kept[i][0] == "a" for i in perm])

    b = load("uci_credit", root=root)  # deterministic
    np.testing.assert_array_equal(a.x_train, b.x_train)
    np.testing.assert_array_equal(a.y_test, b.y_test)


def test_credit_small_file_split_sizes(tmp_path, monkeypatch):
    mirror = tmp_path / "m"
    mirror.mkdir()
    text, _ = crx_text(45, 5, seed=3)
    (mirror / "crx.data").write_text(text)
    pinned(monkeypatch, "uci_credit", mirror)
    monkeypatch.setitem(DATASETS, "uci_credit", replace(
        DATASETS["uci_credit"], n_train=None, n_test=None))
    fetch("uci_credit", root=tmp_path / "raw", mirrors=[str(mirror)], download=False)
    a = load("uci_credit", root=tmp_path / "raw")
    assert (len(a.y_train), len(a.y_test)) == (32, 8)  # 40 kept: ceil(0.2 * 40) = 8 test


def test_credit_bad_label(tmp_path, monkeypatch):
    mirror = tmp_path / "m"
    mirror.mkdir()
    text, _ = crx_text(20, 0)
    (mirror / "crx.data").write_text(text.replace(",+\n", ",yes\n", 1).replace(",-\n", ",yes\n", 1))
    pinned(monkeypatch, "uci_credit", mirror)
    fetch("uci_credit", root=tmp_path / "raw", mirrors=[str(mirror)], download=False)
    with pytest.raises(DataIntegrityError, match="'\\+' or '-'"):
        load("uci_credit", root=tmp_path / "raw")


# ----------------------------------------------------- heterogeneous split
def test_credit_heterogeneous_split():
    y = np.zeros(522, np.int64)
    y[np.random.default_rng(5).choice(522, 236, replace=False)] = 1  # 45% positive
    clients = credit_heterogeneous_split(y, rng=np.random.default_rng(0))
    assert [len(c) for c in clients] == [36] * 5 + [67] * 5
    for c in clients[:5]:
        assert y[c].sum() == 2  # 34 negatives + 2 positives
    for c in clients[5:]:
        assert abs(y[c].mean() - 0.66) <= 0.05
    allidx = np.concatenate(clients)
    assert len(np.unique(allidx)) == len(allidx) == 515
    assert allidx.min() >= 0 and allidx.max() < 522
    # pool of big clients: (236 - 10) / 342 positive
    assert abs(y[np.concatenate(clients[5:])].mean() - 226 / 342) < 0.05
    again = credit_heterogeneous_split(y, rng=np.random.default_rng(0))
    assert all((p == q).all() for p, q in zip(clients, again))
    for cbf in (0.878, 0.938):  # spec: any c in ~[0.877, 0.939)
        assert all(y[c].sum() == 2 for c in credit_heterogeneous_split(y, class_balance_factor=cbf)[:5])
    one_pos = np.zeros(522, np.int64)
    one_pos[0] = 1
    with pytest.raises(ValueError, match="not enough points"):
        credit_heterogeneous_split(one_pos)
    with pytest.raises(ValueError, match="0/1"):
        credit_heterogeneous_split(y + 1)


# ------------------------------------------------------- heart-disease files
# rows per centre in the real files, and how many of them are complete after dropping
# columns 10-12 (FLamby: 199+104, 172+89, 30+16, 85+45)
HEART_SIZES = [(303, 303), (294, 261), (123, 46), (200, 130)]


def heart_rows(centre: int, n: int, n_complete: int, seed: int) -> list[list[str]]:
    """14-field rows; ages lie in a band per centre; '?' in slope/ca/thal never drops a row."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        age = 30 + 10 * centre + rng.uniform(0, 9)
        r = [f"{age:.1f}", str(rng.integers(0, 2)), str(rng.integers(1, 5)),
             str(rng.integers(95, 200)), str(rng.integers(0, 560)), str(rng.integers(0, 2)),
             str(rng.integers(0, 3)), str(rng.integers(60, 202)), str(rng.integers(0, 2)),
             f"{rng.uniform(-2.6, 6.2):.1f}", str(rng.integers(1, 4)), str(rng.integers(0, 4)),
             rng.choice(["3", "6", "7"]), str(rng.choice(5, p=[0.45, 0.2, 0.15, 0.1, 0.1]))]
        r[rng.choice([10, 11, 12])] = "?" if rng.random() < 0.3 else r[10]
        rows.append(r)
    for i in rng.choice(n, n - n_complete, replace=False):
        rows[i][int(rng.choice([0, 3, 4, 5, 6, 7, 8, 9]))] = "?"
    return rows


@pytest.fixture
def heart_mirror(tmp_path):
    mirror = tmp_path / "heart"
    mirror.mkdir()
    data = {}
    for c, (fname, (n, k)) in enumerate(zip(HEART_FILES, HEART_SIZES)):
        rows = heart_rows(c, n, k, seed=10 + c)
        data[fname] = rows
        (mirror / fname).write_text("".join(",".join(r) + "\n" for r in rows))
    return mirror, data


def test_heart_real_spec():
    spec = DATASETS["flamby_heart"]
    assert spec.urls == ("https://archive.ics.uci.edu/ml/machine-learning-databases/"
                         "heart-disease/",)
    assert [f.name for f in spec.files] == HEART_FILES
    assert spec.n_classes == 2 and (spec.n_train, spec.n_test) == (486, 254)
    assert all(f.md5 == tabular.UNPINNED for f in spec.files)


def test_heart_load_and_centres(tmp_path, heart_mirror, monkeypatch):
    mirror, data = heart_mirror
    pinned(monkeypatch, "flamby_heart", mirror)
    root = tmp_path / "raw"
    fetch("flamby_heart", root=root, mirrors=[str(mirror)], download=False)
    a = load("flamby_heart", root=root)  # checks 486 / 254
    ctr, cte = flamby_centres(root)
    assert a.x_train.dtype == np.float32 and a.y_train.dtype == np.int64
    # 8 plain features + cp dummies (4 values, drop first) + restecg dummies (3, drop first)
    assert a.x_train.shape == (486, 13) and a.x_test.shape == (254, 13)
    assert np.bincount(ctr).tolist() == [199, 172, 30, 85]
    assert np.bincount(cte).tolist() == [104, 89, 16, 45]
    assert (np.diff(ctr) >= 0).all() and (np.diff(cte) >= 0).all()
    # standardised with training statistics
    np.testing.assert_allclose(a.x_train.mean(0), 0, atol=1e-5)
    np.testing.assert_allclose(a.x_train.std(0), 1, atol=1e-4)
    # age (feature 0) bands identify the centre: centre ids line up with the rows
    for x, c in ((a.x_train, ctr), (a.x_test, cte)):
        for k in range(3):
            assert x[c == k, 0].max() < x[c == k + 1, 0].min()
    # labels (num > 0) and per-centre stratification
    for k, fname in enumerate(HEART_FILES):
        kept = [r for r in data[fname] if "?" not in [r[i] for i in range(14) if i not in (10, 11, 12)]]
        y = np.array([int(r[13]) > 0 for r in kept])
        ytr, yte = a.y_train[ctr == k], a.y_test[cte == k]
        assert ytr.sum() + yte.sum() == y.sum()
        assert abs(yte.sum() - len(yte) * y.mean()) <= 1  # stratified
    b = load("flamby_heart", root=root)
    np.testing.assert_array_equal(a.x_test, b.x_test)
    np.testing.assert_array_equal(flamby_centres(root)[0], ctr)


def test_heart_bad_rows(tmp_path, heart_mirror, monkeypatch):
    mirror, _ = heart_mirror
    p = mirror / HEART_FILES[2]
    p.write_text(p.read_text() + "1,2,3\n")
    pinned(monkeypatch, "flamby_heart", mirror)
    fetch("flamby_heart", root=tmp_path / "raw", mirrors=[str(mirror)], download=False)
    with pytest.raises(DataIntegrityError, match="expected 14"):
        load("flamby_heart", root=tmp_path / "raw")


def test_heart_unpinned_and_not_fetched(tmp_path, heart_mirror):
    mirror, _ = heart_mirror
    with pytest.raises(DataUnavailableError, match="pin_md5"):
        fetch("flamby_heart", root=tmp_path / "raw", mirrors=[str(mirror)], download=False)
    assert not any((tmp_path / "raw").rglob("*.data"))
    with pytest.raises(FileNotFoundError):
        flamby_centres(tmp_path / "raw")


def test_pin_md5_unknown_file(monkeypatch):
    monkeypatch.setitem(DATASETS, "uci_credit", DATASETS["uci_credit"])
    with pytest.raises(KeyError):
        pin_md5("uci_credit", {"nope.data": "0" * 32})


def test_flamby_experiment_runs_end_to_end(tmp_path, heart_mirror, monkeypatch, repo):
    """The flamby-heart-k4 experiment of params.yaml on real-format files: the natural split gives the
    four hospitals as clients, and FedLap-Cov trains logistic regression on them."""

    from fedbayes.engine.partitions import data_root, ensure_partition, write_partition
    from fedbayes.study import run_config
    from fedbayes.engine import load_run_data, run_federated
    from fedbayes.study.model import RunSpec
    from fedbayes.partition import load_partition

    mirror, _ = heart_mirror
    pinned(monkeypatch, "flamby_heart", mirror)
    root = tmp_path / "raw"
    fetch("flamby_heart", root=root, mirrors=[str(mirror)], download=False)
    p = read_params(repo)
    p["paths"]["raw"] = str(root)
    part = tmp_path / "seed0.npz"
    written = write_partition(p, "flamby-heart-k4", 0, str(part))
    parts, meta = load_partition(part)
    assert [len(x) for x in parts] == [199, 172, 30, 85] and meta["partition"] == {"scheme": "natural"}
    # what a training job keeps in memory is what the file holds (Snakemake may delete the file under it)
    for got in (written, ensure_partition(p, "flamby-heart-k4", 0, str(part))):
        assert got[1] == meta and all(np.array_equal(a, b) for a, b in zip(got[0], parts, strict=True))
    p["experiments"]["flamby-heart-k4"]["rounds"] = 3
    p["experiments"]["flamby-heart-k4"]["report_rounds"] = [3]
    point = next(iter(p["experiments"]["flamby-heart-k4"]["methods"]["fedlap_cov"]["sweep"]))  # grid keys
    cfg = run_config(p, "flamby-heart-k4", "fedlap_cov", 0, "delta=1.0+local_epochs=1+lr=0.01")
    assert point in cfg["hparams"] and cfg["model"] == {"name": "logistic"} and cfg["hparams"]["batch_size"] == 4
    import torch

    data, m = load_run_data(data_root(p), cfg, str(part), torch.device("cpu"))
    part.unlink()  # the partition as read once (what `fedbayes train` passes on) gives the same run data
    data2, m2 = load_run_data(data_root(p), cfg, (parts, meta), torch.device("cpu"))
    assert m2 == m and all(torch.equal(getattr(data, k), getattr(data2, k)) for k in ("x_train", "x_test", "y_test"))
    cfg["partition_hash"] = m["hash"]
    hist = run_federated(RunSpec.from_config(cfg), data, tmp_path / "run", torch.device("cpu"))
    assert [h["round"] for h in hist] == [0, 1, 2, 3] and all(np.isfinite(h["test/nll"]) for h in hist)
    assert hist[-1]["train/loss"] < hist[1]["train/loss"]  # the synthetic labels are noise: it only fits
