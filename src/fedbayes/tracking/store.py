"""The MLflow store: its URI, whether it can be reached, one writer at a time, and what it already holds.

A tracking server (http/https URI) that cannot be reached fails fast: a TCP connect with a
``CONNECT_TIMEOUT_S`` limit before anything else, and MLflow's HTTP retries bounded by ``HTTP_ENV``
(defaults only: a value already in the environment wins), then one line naming the URI
(``TrackingUnavailable``; ``fedbayes track`` exits 2). A store file that is not a database is one line
naming it and the remedy (``StoreDamaged``). Reads of what a store holds go to SQLite directly or to a
server's REST API, so a look-up never loads the MLflow client.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

from fedbayes.fileio import exclusive_lock

# A tracking server that does not answer fails in seconds, not after MLflow's default 7 retries with
# exponential backoff and 120 s timeouts (minutes of silence). Set only where the environment has no value.
CONNECT_TIMEOUT_S = 5.0
HTTP_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
            "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}


class TrackingUnavailable(RuntimeError):
    """The tracking store named by the URI cannot be reached (one line, names the URI)."""


class StoreDamaged(TrackingUnavailable):
    """The SQLite store file is not a database MLflow can open (one line: the file and the remedy)."""


def tracking_uri(p: dict) -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or p["paths"]["mlflow_uri"]


def sqlite_path(uri: str) -> Path | None:
    return Path(uri[len("sqlite:///"):]) if uri.startswith("sqlite:///") else None


def is_server(uri: str) -> bool:
    return urlparse(uri).scheme in ("http", "https")


def check_store(uri: str) -> None:
    """A SQLite store that exists must be a database: random bytes (or a file cut short in its header) made
    the import a sqlalchemy traceback. StoreDamaged names the file and how to rebuild the store."""
    db = sqlite_path(uri)
    if db is None or not db.exists() or db.stat().st_size == 0:
        return
    try:
        with open(db, "rb") as f:
            head = f.read(16)
        if head != b"SQLite format 3\x00":
            raise sqlite3.DatabaseError("it does not begin with the SQLite header")
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
        try:
            con.execute("SELECT count(*) FROM sqlite_master").fetchone()
        finally:
            con.close()
    except sqlite3.DatabaseError as e:
        if "locked" in str(e).lower():
            return
        raise damaged(db, str(e)) from None


def damaged(db: Path, why: str) -> StoreDamaged:
    return StoreDamaged(f"the MLflow store {db} is not an SQLite database ({why}); move it aside "
                        f"(mv {db} {db}.damaged) and run the target again: every run is imported into a new store")


def check_reachable(uri: str) -> None:
    """For a tracking server: bound MLflow's HTTP retries (``HTTP_ENV``) and refuse, in at most
    ``CONNECT_TIMEOUT_S``, a host:port that accepts no connection. Other stores (sqlite, databases) need
    nothing. Behind a proxy the server cannot be probed directly; the bounded retries still apply."""
    if not is_server(uri):
        return
    for k, v in HTTP_ENV.items():
        os.environ.setdefault(k, v)
    u = urlparse(uri)
    host, port = u.hostname, u.port or (443 if u.scheme == "https" else 80)
    if not host:
        raise TrackingUnavailable(f"MLflow tracking URI {uri} names no host")
    if urllib.request.getproxies().get(u.scheme) and not urllib.request.proxy_bypass(host):
        return
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as e:
        why = "timed out" if isinstance(e, TimeoutError) else (e.strerror or str(e) or type(e).__name__).lower()
        raise TrackingUnavailable(
            f"MLflow tracking server {uri} is unreachable ({why} within {CONNECT_TIMEOUT_S:g} s); start it, or "
            f"point MLFLOW_TRACKING_URI at a running server (unset, the local store of params.yaml is used)") from None


def with_retry(fn, attempts: int = 8, delay: float = 0.5):
    for i in range(attempts):
        try:
            return fn()
        except Exception as e:  # sqlite "database is locked" surfaces as several exception types;
            # "duplicate column" is two processes racing through the first schema migration
            msg = str(e).lower()
            if not ("locked" in msg or "duplicate column" in msg) or i == attempts - 1:
                raise
            time.sleep(delay * 2**i)


@contextmanager
def store_lock(uri: str):
    """For a SQLite store, an exclusive lock on ``<db>.lock`` for the whole import: concurrent writers
    (jobs of two Snakemake invocations, cluster jobs on a shared filesystem) otherwise race through the
    schema migration of a new store ("table ... already exists", alembic "expected to match one row")
    and collide on writes ("database is locked"). Tracking servers and other databases serialise
    themselves; within one Snakemake invocation the ``mlflow_db`` resource already runs one import at a time."""
    u = urlparse(uri)
    if u.scheme != "sqlite":
        yield
        return
    db = Path(uri.split(":///", 1)[1] if ":///" in uri else u.path)
    with exclusive_lock(db):
        yield


# --- what the store holds, read without the MLflow client ---------------------------------------------

# a run is the import of its files when it is FINISHED, active, and tagged with the key and content hash
_HELD_SQL = ("SELECT r.run_uuid, r.experiment_id, k.value, h.value, s.value FROM runs r "
             "JOIN tags k ON k.run_uuid = r.run_uuid AND k.key = 'run_key' "
             "JOIN tags h ON h.run_uuid = r.run_uuid AND h.key = 'content_hash' "
             "LEFT JOIN tags s ON s.run_uuid = r.run_uuid AND s.key = 'selected' "
             "WHERE r.lifecycle_stage = 'active' AND r.status = 'FINISHED' AND k.value IN ({})")


def sqlite_held(db: Path, keys: list[str]) -> list[tuple[str, str, str, str, str]] | str:
    """(run id, experiment id, run key, content hash, selected tag) of every FINISHED, active run of
    ``keys`` in the SQLite store ``db`` (several per key where importers of two clones both wrote one),
    or why the store cannot be read."""
    if not db.exists():
        return f"the MLflow store {db} is gone"
    rows = []
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
        try:
            for i in range(0, len(keys), 500):
                chunk = keys[i:i + 500]
                rows += [(rid, str(eid), k, h, sel or "")
                         for rid, eid, k, h, sel in con.execute(_HELD_SQL.format(",".join("?" * len(chunk))), chunk)]
        finally:
            con.close()
    except sqlite3.Error as e:
        return f"the MLflow store {db} cannot be read ({e})"
    return rows


_SERVER_DOWN: set[str] = set()   # servers that did not answer this process (asked once, not per marker)


def server_held(uri: str, experiment_ids: list[str], keys: set[str]) -> set[tuple[str, str]] | str:
    """(run key, content hash) of the FINISHED, active runs of ``keys`` on a tracking server (MLflow's REST
    API, ``runs/search`` by key prefix); "" (cannot tell) where it does not answer — the import itself
    says so in one line when it runs."""
    if uri in _SERVER_DOWN:
        return ""
    prefix = os.path.commonprefix(sorted(keys))
    query = {"experiment_ids": experiment_ids, "run_view_type": "ACTIVE_ONLY", "max_results": 1000,
             "filter": "tags.run_key LIKE '" + prefix.replace("'", "\\'") + "%'"}
    headers = {"Content-Type": "application/json"}
    if os.environ.get("MLFLOW_TRACKING_TOKEN"):
        headers["Authorization"] = f"Bearer {os.environ['MLFLOW_TRACKING_TOKEN']}"
    found, token = set(), None
    try:
        while True:
            body = json.dumps({**query, **({"page_token": token} if token else {})}).encode()
            req = urllib.request.Request(uri.rstrip("/") + "/api/2.0/mlflow/runs/search", body, headers)
            with urllib.request.urlopen(req, timeout=CONNECT_TIMEOUT_S) as r:
                page = json.loads(r.read())
            for run in page.get("runs", []):
                tags = {t["key"]: t.get("value") for t in run.get("data", {}).get("tags", [])}
                if run.get("info", {}).get("status") == "FINISHED" and tags.get("run_key") in keys:
                    found.add((tags["run_key"], tags.get("content_hash")))
            token = page.get("next_page_token")
            if not token:
                return found
    except urllib.error.HTTPError as e:
        if e.code == 404:   # RESOURCE_DOES_NOT_EXIST: the experiment is not there (another server)
            return set()
        _SERVER_DOWN.add(uri)
        return ""
    except (OSError, ValueError, KeyError, TypeError):
        _SERVER_DOWN.add(uri)
        return ""
