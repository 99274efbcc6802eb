"""Downloads are bounded: a size cap per file (the registry's expected size where it records one), a
total and an idle timeout, and a Content-Length above the cap refused before a byte is written. Each
hostile server below, on 127.0.0.1, stops with one clear error and leaves no file behind."""

from __future__ import annotations

import http.server
import threading
import time

import pytest

from fedbayes.data import sources
from fedbayes.data.registry import DATASETS

REAL_DOWNLOAD = sources.download_url


class Endless(http.server.BaseHTTPRequestHandler):
    """A body that never ends (no Content-Length), as fast as the client reads."""

    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        block = b"x" * 65536
        try:
            while True:
                self.wfile.write(block)
        except OSError:
            pass

    def log_message(self, *args):
        pass


class Trickle(Endless):
    """One byte every 2 s, forever: never idle long enough for a read timeout."""

    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        try:
            while True:
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(2)
        except OSError:
            pass


class Huge(Endless):
    """Announces 22 GB."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(22 << 30))
        self.end_headers()
        try:
            self.wfile.write(b"x" * 65536)
        except OSError:
            pass


@pytest.fixture
def serve():
    servers = []

    def start(handler) -> str:
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        httpd.daemon_threads = True
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        servers.append(httpd)
        return f"http://127.0.0.1:{httpd.server_address[1]}/file.bin"

    yield start
    for httpd in servers:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize("handler, limits, says", [
    (Endless, {"max_bytes": 1 << 20}, "more than 1048576 bytes"),
    (Trickle, {"total_s": 5.0, "idle_s": 3.0}, "not finished after 5 s"),
    (Huge, {"max_bytes": 1 << 20}, f"announces {22 << 30} bytes, more than the 1048576"),
], ids=["endless", "trickle", "content-length"])
def test_a_hostile_server_stops_with_one_error(serve, tmp_path, handler, limits, says):
    dst = tmp_path / "file.bin"
    t0 = time.monotonic()
    with pytest.raises(sources.DownloadRefused) as e:
        REAL_DOWNLOAD(serve(handler), dst, **limits)
    assert time.monotonic() - t0 < 20
    assert says in str(e.value) and "\n" not in str(e.value), e.value
    assert dst.stat().st_size <= 1 << 20 if dst.exists() else True


def test_an_idle_server_stops_at_the_idle_timeout(serve, tmp_path):
    class Silent(Endless):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.flush()
            time.sleep(30)

    t0 = time.monotonic()
    with pytest.raises(sources.DownloadRefused, match="no data for 1 s"):
        REAL_DOWNLOAD(serve(Silent), tmp_path / "file.bin", idle_s=1.0)
    assert time.monotonic() - t0 < 10


def test_fetch_from_an_endless_server_leaves_no_file(serve, tmp_path, monkeypatch):
    """Through the fetch every job uses: one DataUnavailableError naming the cap, no partial file."""
    from fedbayes.data import DataUnavailableError, standin
    from fedbayes.data.registry import fetch

    monkeypatch.setattr(sources, "download_url", REAL_DOWNLOAD)
    monkeypatch.setattr(sources, "DOWNLOAD_MAX_BYTES", 1 << 20)
    monkeypatch.delenv("FEDBAYES_OFFLINE", raising=False)
    url = serve(Endless).rsplit("/", 1)[0] + "/"
    source = tmp_path / "source"
    standin.write_source("uci_credit", source, size="tiny")
    standin.activate("uci_credit", source, urls=(url,), default_mirrors=())
    try:
        with pytest.raises(DataUnavailableError, match="more than 1048576 bytes"):
            fetch("uci_credit", root=tmp_path / "raw", mirrors=[], download=True)
    finally:
        standin.deactivate("uci_credit")
    assert not [p for p in (tmp_path / "raw").rglob("*") if p.is_file() and not p.name.endswith(".lock")]


def test_the_registry_caps_a_file_at_its_expected_size():
    fmnist = {f.name: f.size for f in DATASETS["fmnist"].files}
    assert fmnist["train-images-idx3-ubyte.gz"] == 26_421_880 and fmnist["t10k-labels-idx1-ubyte.gz"] == 5_148
    assert sources.size_cap(DATASETS["fmnist"].files[0]) == 2 * 26_421_880  # repackaged copies verify by content
    assert sources.size_cap(DATASETS["cifar10"].files[0]) == 170_498_071
    assert sources.size_cap(sources.FileSpec("unknown.bin")) == sources.DOWNLOAD_MAX_BYTES
