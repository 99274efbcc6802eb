"""Where raw dataset files come from, and how they are verified and placed.

A *source* (local mirror directory, installed Python package, URL, or an
in-process generator) offers *candidates* for one file.  :func:`materialise`
writes each candidate to a temporary file in the destination directory,
verifies it against the official checksums, and ``os.replace``\\ s it into
place; a candidate that fails is deleted and the reason recorded.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from fedbayes.fileio import user_cache_path

from .idx import read_bytes

log = logging.getLogger(__name__)

MIRRORS_ENV = "FEDBAYES_DATA_MIRRORS"
DOWNLOAD_TIMEOUT_S = 60.0         # idle: no byte for this long stops a download
DOWNLOAD_TOTAL_S = 4 * 3600.0     # a whole file (the largest, ~0.6 GB, at 50 kB/s)
DOWNLOAD_MAX_BYTES = 2 << 30      # a file whose size the registry does not record (the largest is ~0.6 GB)
PART_SUFFIX = ".part"
_CHUNK = 1 << 20


class DataUnavailableError(RuntimeError):
    """No source could provide a verified copy of a dataset file."""


class DataIntegrityError(RuntimeError):
    """A file in the data directory does not match its expected checksum."""


@dataclass(frozen=True)
class FileSpec:
    """One raw file of a dataset.

    ``md5`` is the checksum of the file as published (e.g. the .gz archive);
    ``content_md5`` that of its decompressed content.  A file is accepted if
    either matches.  Files with neither are *generated* and verified against
    the generator's output.
    """

    name: str
    md5: str | None = None
    content_md5: str | None = None
    role: str = ""  # e.g. "x_train", "y_test"; used by loaders
    size: int | None = None  # bytes as published, where known: the most a download may write

    @property
    def is_gz(self) -> bool:
        return self.name.endswith(".gz")

    @property
    def stem(self) -> str:
        return self.name[:-3] if self.is_gz else self.name


# ----------------------------------------------------------------- checksums
_MD5S: dict[tuple, str] = {}   # this process's file checksums, by the file's identity and state


def _identity(path: Path | str) -> tuple:
    """A file as the kernel sees it now: any write changes its ctime (which no one can set back), a
    replacement its inode."""
    st = os.stat(path)
    return (os.path.realpath(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def md5_file(path: Path | str) -> str:
    """The md5 of ``path``'s bytes; a file unchanged since this process hashed it is not read again (a
    training job verifies each raw file when it fetches, describes and loads its dataset: three reads)."""
    key = _identity(path)
    if key in _MD5S:
        return _MD5S[key]
    h = hashlib.md5()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(_CHUNK), b""):
            h.update(chunk)
    if _identity(path) == key:   # not changed while it was read
        _MD5S[key] = h.hexdigest()
    return h.hexdigest()


def md5_gz_content(path: Path | str) -> str | None:
    """md5 of the decompressed content, or None if ``path`` is not valid gzip."""
    h = hashlib.md5()
    try:
        with gzip.open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(_CHUNK), b""):
                h.update(chunk)
    except (OSError, EOFError, gzip.BadGzipFile):
        return None
    return h.hexdigest()


GZ_MEMO_ENV = "FEDBAYES_VERIFIED_CACHE"


def _gz_memo_path() -> Path:
    """Where the md5 → decompressed-md5 pairs of verified gzip files are remembered (outside the data
    directories, which are DVC outputs)."""
    return user_cache_path("verified-gz.json", GZ_MEMO_ENV)


def _memo_key() -> bytes | None:
    """This user's secret for the memo's entries (``<memo>.key``, created 0600): an entry is trusted only
    with a MAC under it, so whoever can write the memo file (a shared cache folder, another user) cannot
    make a modified archive pass as the official one. A key file that another user owns or that others
    may read is not used (the memo is then ignored: it only costs time)."""
    import secrets

    path = _gz_memo_path().with_suffix(".key")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32))
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        st = path.stat()
        if st.st_uid != os.getuid() or st.st_mode & 0o077:
            return None
        return bytes.fromhex(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _mac(key: bytes, file_md5: str, content_md5: str) -> str:
    import hmac

    return hmac.new(key, f"{file_md5} {content_md5}".encode(), "sha256").hexdigest()


def _gz_memo() -> dict:
    """file md5 → decompressed md5 of the verified gzip files, each entry checked against its MAC."""
    key = _memo_key()
    if key is None:
        return {}
    try:
        raw = json.loads(_gz_memo_path().read_text())
    except (OSError, ValueError):
        return {}
    import hmac

    return {k: v["content"] for k, v in (raw.items() if isinstance(raw, dict) else ())
            if isinstance(v, dict) and isinstance(v.get("content"), str) and isinstance(v.get("mac"), str)
            and hmac.compare_digest(v["mac"], _mac(key, k, v["content"]))}


def _gz_memo_add(file_md5: str, content_md5: str) -> None:
    """Remember that the gzip file with these bytes decompresses to ``content_md5`` (a fact about the
    bytes, so any copy anywhere is covered). Best effort: an unwritable cache only costs time."""
    key = _memo_key()
    if key is None:
        return
    path = _gz_memo_path()
    entries = {k: {"content": v, "mac": _mac(key, k, v)} for k, v in {**_gz_memo(), file_md5: content_md5}.items()}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.part")
        tmp.write_text(json.dumps(entries))
        os.replace(tmp, path)
    except OSError:
        pass


DECOMPRESSED_ENV = "FEDBAYES_DECOMPRESSED_CACHE"


def _decompressed_path(content_md5: str) -> Path:
    return user_cache_path("decompressed", DECOMPRESSED_ENV) / content_md5


def read_content(path: Path | str, spec: FileSpec) -> bytes:
    """The bytes of the raw file ``path`` (of ``spec``), decompressed if gzip.

    Decompressing Fashion-MNIST's training images costs ≈ 0.5 s in every job that reads them. A gzip file
    that verifies (``check_file``: the official archive's md5, or the remembered pair of a repackaged one;
    the loader's own verification has just hashed it) takes its content from the user's cache
    (``decompressed/<content md5>`` in ``$XDG_CACHE_HOME/fedbayes``, or ``$FEDBAYES_DECOMPRESSED_CACHE``),
    used only when its own md5 is ``spec.content_md5`` (a damaged cache file is decompressed again and
    replaced). Any other file is read as it is."""
    if not (spec.is_gz and spec.content_md5) or check_file(path, spec) is not None:
        return read_bytes(path)
    cached = _decompressed_path(spec.content_md5)
    try:
        data = cached.read_bytes()
        if hashlib.md5(data).hexdigest() == spec.content_md5:
            return data
    except OSError:
        pass
    data = read_bytes(path)
    if hashlib.md5(data).hexdigest() == spec.content_md5:
        tmp = cached.with_name(f"{cached.name}.{os.getpid()}.part")
        try:   # best effort: an unwritable cache costs a decompression next time
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(data)
            os.replace(tmp, cached)
        except OSError:
            tmp.unlink(missing_ok=True)
    return data


def check_file(path: Path | str, spec: FileSpec, expected_md5: str | None = None) -> str | None:
    """Return None if ``path`` verifies against ``spec``, else a reason string.

    ``expected_md5`` overrides ``spec.md5`` (used for generated files). A gzip file whose bytes differ
    from the official archive (a repackaged copy, e.g. Debian's) verifies by the md5 of its decompressed
    content; that costs a full decompression (about 1 s for Fashion-MNIST in every training process),
    so the (md5 of the bytes → content md5) pair is remembered once verified and a later check of the
    same bytes costs one md5 of the file. A changed byte changes the file's md5 and gets the full check.
    """
    want = expected_md5 or spec.md5
    if want is None and spec.content_md5 is None:
        raise ValueError(f"{spec.name}: no checksum to verify against")
    got = md5_file(path)
    if want is not None and got == want:
        return None
    got_content = None
    if spec.content_md5 is not None:
        if spec.is_gz and _gz_memo().get(got) == spec.content_md5:
            return None
        got_content = md5_gz_content(path) if spec.is_gz else got
        if got_content == spec.content_md5:
            if spec.is_gz:
                _gz_memo_add(got, got_content)
            return None
    expected = [f"md5 {want}"] if want else []
    if spec.content_md5:
        expected.append(f"decompressed md5 {spec.content_md5}")
    got_s = f"md5 {got}"
    if spec.content_md5 and spec.is_gz:
        got_s += (
            f", decompressed md5 {got_content}" if got_content else ", not valid gzip"
        )
    return f"checksum mismatch: got {got_s}; expected {' or '.join(expected)}"


def canonical_checksum(spec: FileSpec, expected_md5: str | None = None) -> str:
    """Source-independent checksum identifying a file's content."""
    return spec.content_md5 or expected_md5 or spec.md5 or ""


# ------------------------------------------------------------------- sources
Writer = Callable[[Path], None]


@dataclass(frozen=True)
class Candidate:
    """One attempt at a file: ``write`` fills a path, or ``missing`` says why not."""

    label: str
    write: Writer | None = None
    missing: str | None = None


def _copy(src: Path) -> Writer:
    def write(dst: Path) -> None:
        shutil.copyfile(src, dst)

    return write


def _gzip_copy(src: Path) -> Writer:
    def write(dst: Path) -> None:
        with open(src, "rb") as fin, open(dst, "wb") as raw:
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
                shutil.copyfileobj(fin, gz, _CHUNK)

    return write


class MirrorSource:
    """A local directory holding the file, gzipped or not."""

    def __init__(self, directory: Path | str):
        self.directory = Path(directory)

    def candidates(self, spec: FileSpec) -> list[Candidate]:
        d = self.directory
        if not d.is_dir():
            return [Candidate(f"mirror {d}", missing="directory does not exist")]
        out = []
        if (d / spec.name).is_file():
            out.append(Candidate(f"mirror {d / spec.name}", _copy(d / spec.name)))
        if spec.is_gz and (d / spec.stem).is_file():
            out.append(Candidate(f"mirror {d / spec.stem}", _gzip_copy(d / spec.stem)))
        if not out:
            names = f"{spec.name} or {spec.stem}" if spec.is_gz else spec.name
            out.append(Candidate(f"mirror {d}", missing=f"missing (no {names})"))
        return out


class PackageSource:
    """A data file shipped inside an installed Python package (not imported)."""

    def __init__(self, package: str, parts: tuple[str, ...]):
        self.package, self.parts = package, tuple(parts)

    def candidates(self, spec: FileSpec) -> list[Candidate]:
        label = f"package {self.package}:{'/'.join(self.parts)}"
        try:
            found = importlib.util.find_spec(self.package)
        except (ImportError, ValueError):
            found = None
        if found is None or not found.submodule_search_locations:
            return [Candidate(label, missing=f"Python package {self.package!r} is not "
                              f"installed (pip install {self.package})")]
        for loc in found.submodule_search_locations:
            path = Path(loc).joinpath(*self.parts)
            if path.is_file():
                return [Candidate(f"package {path}", _copy(path))]
        return [Candidate(label, missing=f"missing from installed {self.package}")]


class IncompleteDownloadError(ConnectionError):
    """The server closed the connection before sending the announced Content-Length."""


class DownloadRefused(ConnectionError):
    """A download stopped at a bound: more bytes than the file may have, or too long a transfer."""


def size_cap(spec: FileSpec) -> int:
    """The most bytes a download of ``spec`` may write: its recorded size (twice that where a repackaged
    archive verifies by its content, ``content_md5``: another compression of the same bytes), else
    DOWNLOAD_MAX_BYTES."""
    if not spec.size:
        return DOWNLOAD_MAX_BYTES
    return spec.size * (2 if spec.content_md5 else 1)


def download_url(url: str, dst: Path, max_bytes: int | None = None, total_s: float | None = None,
                 idle_s: float | None = None) -> None:
    """Stream ``url`` into ``dst`` (tests monkeypatch this), bounded: at most ``max_bytes`` (a larger
    Content-Length is refused before the body is read), ``total_s`` for the whole transfer and
    ``idle_s`` without a byte (defaults: DOWNLOAD_MAX_BYTES, DOWNLOAD_TOTAL_S, DOWNLOAD_TIMEOUT_S).
    A bound reached raises DownloadRefused; the caller removes the partial file.

    A transfer cut short raises IncompleteDownloadError: http.client's chunked reads return the
    bytes received so far without an error when the connection drops early, which would otherwise
    surface as a "checksum mismatch" of the truncated file (misread as a bad file on the server, and
    for the unpinned tabular sets an md5 a user might pin).
    """
    max_bytes = DOWNLOAD_MAX_BYTES if max_bytes is None else max_bytes
    total_s = DOWNLOAD_TOTAL_S if total_s is None else total_s
    idle_s = DOWNLOAD_TIMEOUT_S if idle_s is None else idle_s
    req = urllib.request.Request(url, headers={"User-Agent": "fedbayes-data/1"})
    try:
        with urllib.request.urlopen(req, timeout=idle_s) as resp, open(dst, "wb") as out:
            announced = resp.headers.get("Content-Length")
            announced = int(announced) if announced is not None and announced.strip().isdigit() else None
            if announced is not None and announced > max_bytes:
                raise DownloadRefused(f"{url} announces {announced} bytes, more than the {max_bytes} this file "
                                      "may have: not downloaded")
            _copy_bounded(resp, out, url, max_bytes, time.monotonic() + total_s, total_s)
            encoded = resp.headers.get("Content-Encoding", "identity").lower() != "identity"
            got = out.tell()
    except TimeoutError:
        raise DownloadRefused(f"{url}: no data for {idle_s:g} s (idle timeout); stopped") from None
    if announced is not None and not encoded and got != announced:
        raise IncompleteDownloadError(f"incomplete download: got {got} of {announced} bytes "
                                      "(the connection closed early)")


def _copy_bounded(resp, out, url: str, max_bytes: int, deadline: float, total_s: float) -> None:
    """Copy ``resp`` into ``out`` until its end, DownloadRefused past ``max_bytes`` or ``deadline``.
    ``read1`` returns what has arrived (at most after the idle timeout), so the deadline is checked
    however slowly a server sends."""
    while chunk := resp.read1(_CHUNK):
        if out.tell() + len(chunk) > max_bytes:
            raise DownloadRefused(f"{url} sends more than {max_bytes} bytes, more than this file may have; stopped")
        out.write(chunk)
        if time.monotonic() > deadline:
            raise DownloadRefused(f"{url}: not finished after {total_s:g} s (total timeout; "
                                  f"{out.tell()} bytes received); stopped")


class URLSource:
    """``base_url + file name`` over HTTP(S)."""

    def __init__(self, base_url: str, enabled: bool = True):
        self.base_url, self.enabled = base_url, enabled

    def candidates(self, spec: FileSpec) -> list[Candidate]:
        url = self.base_url.rstrip("/") + "/" + spec.name
        if not self.enabled:
            return [Candidate(f"download {url}", missing="skipped (download=False)")]

        def write(dst: Path) -> None:
            # looked up at call time so tests can monkeypatch sources.download_url
            download_url(url, dst, max_bytes=size_cap(spec))

        return [Candidate(f"download {url}", write)]


class GeneratorSource:
    """Bytes produced in-process (deterministic synthetic data)."""

    def __init__(self, generate: Callable[[str], bytes]):
        self.generate = generate

    def candidates(self, spec: FileSpec) -> list[Candidate]:
        return [Candidate("generator", lambda dst: dst.write_bytes(self.generate(spec.name)))]


def mirror_dirs(mirrors: Iterable[str | Path] | None, defaults: Iterable[str] = ()) -> list[Path]:
    """``mirrors`` if given, else $FEDBAYES_DATA_MIRRORS followed by ``defaults``."""
    if mirrors is not None:
        return [Path(m) for m in mirrors]
    env = [p for p in os.environ.get(MIRRORS_ENV, "").split(os.pathsep) if p]
    return [Path(p) for p in [*env, *defaults]]


# ------------------------------------------------------------- materialise
def _describe(exc: BaseException) -> str:
    import urllib.error

    kind = "network error" if isinstance(exc, (urllib.error.URLError, TimeoutError,
                                               ConnectionError)) else "error"
    return f"{kind}: {type(exc).__name__}: {exc}"


def remove_stale_parts(dest: Path, older_than_s: float = 600.0) -> None:
    """Delete temp files left by a crashed fetch (not ones still being written)."""
    now = time.time()
    for p in dest.glob(f".*{PART_SUFFIX}"):
        try:
            if now - p.stat().st_mtime > older_than_s:
                p.unlink()
        except FileNotFoundError:
            pass


def materialise(
    spec: FileSpec,
    dest: Path,
    sources: Iterable[object],
    expected_md5: str | None = None,
) -> tuple[str | None, list[tuple[str, str]]]:
    """Place a verified ``dest/spec.name`` from the first working source.

    Returns ``(label_of_winning_source, failures)``; label is None if every
    candidate failed (``failures`` then lists each ``(label, reason)``).
    No temporary or unverified file survives this call.
    """
    final = dest / spec.name
    failures: list[tuple[str, str]] = []
    for source in sources:
        for cand in source.candidates(spec):  # type: ignore[attr-defined]
            if cand.write is None:
                failures.append((cand.label, cand.missing or "unavailable"))
                continue
            fd, tmp_name = tempfile.mkstemp(prefix=f".{spec.name}.", suffix=PART_SUFFIX,
                                            dir=dest)
            os.close(fd)
            tmp = Path(tmp_name)
            try:
                try:
                    cand.write(tmp)
                except Exception as exc:  # noqa: BLE001 - any failure: next source
                    failures.append((cand.label, _describe(exc)))
                    continue
                reason = check_file(tmp, spec, expected_md5)
                if reason is not None:
                    failures.append((cand.label, reason))
                    continue
                os.chmod(tmp, 0o644)  # mkstemp makes 0600
                os.replace(tmp, final)
                return cand.label, failures
            finally:
                tmp.unlink(missing_ok=True)
    return None, failures

