"""MLflow import of finished runs.

Training jobs never talk to MLflow: they write history.csv / metrics.json / run.json. One
import job per table (``python -m fedbayes.tracking``, ``import_pairs``) imports those files afterwards;
``fedbayes track`` imports single runs. The Snakemake rule holds
the ``mlflow_db`` resource (profile: ``--resources mlflow_db=1``) so only one writer touches the SQLite
store at a time, and every write retries on a locked database.

What an imported run says is the training's, not the import's:

- ``git_sha`` / ``mlflow.source.git.commit``: the commit that trained the run (run.json ``code``), with
  ``git_dirty`` (its package sources differed from that commit) and ``source_hash``; a run.json from before
  code identity was recorded gives ``git_sha = unknown`` (never the importer's HEAD) and no
  ``mlflow.source.git.commit``; an installed package's method adds ``plugin``, ``plugin_version`` and
  ``plugin_source`` (run.json ``plugin``: its distribution, version and a hash of its package's files).
- params: the run's resolved configuration and ``defaults.<name>``, the defaults its method read from its
  spec (run.json ``defaults``; a run from before that record: ``catalog.FROZEN_DEFAULTS``).
- start / end time: run.json ``started`` / ``finished``; where they were not recorded (older runs) the end
  is bounded by when run.json was written (its mtime, or the commit that added it if earlier) and the start
  is the end less the history's training + evaluation seconds. Tag ``times`` says which.
- units: accuracy metrics are logged in % (``ACC_METRICS``), as the tables print them; NLL in nats; ECE,
  MCE, Brier and AUROC as fractions. The history.csv / metrics.json artifacts keep the fractions.
- prediction variants (``bayesadmm@mean``): one MLflow run per evaluated name, with tags ``method``
  (``bayesadmm@mean``), ``base_method`` and ``variant`` (``none`` for the method's own prediction) and the
  variant's metrics under the plain names, so ``mlflow runs search --filter-string
  "tags.method = 'bayesadmm@mean'"`` finds it and it compares with other methods column by column.
- paths (tags ``run_dir``, ``predictions``) are relative to the repository root (the working directory
  of the workflow).

Re-importing is atomic (issue 21 class 5): a run is identified by its tag ``run_key``; the new import is
written completely and marked FINISHED first, and only then are the earlier runs of that key deleted
(the previous import, and RUNNING / FAILED leftovers of an import that crashed). A crash at any point
leaves the previous good import visible; an import that fails while the store still answers marks its
partial run FAILED. "Earlier" is by tag ``import_id`` (the import's start in ns, then a random part): an
import deletes only older imports of its key, never a newer one, so two importers of one run at once (two
Snakemake invocations; a tracking server, which takes no file lock) leave the newer import instead of
deleting each other's; the older, finding its run deleted under it, adopts the newer one (same content).

What a run imported holds is tagged ``content_hash`` (its history.csv, metrics.json and run.json), and
``fedbayes track --marker`` records the store (the URI) and each imported run's key and content hash.
``marker_problems`` trusts a marker only where that store holds a FINISHED run of each key with that
content (SQLite read directly, a tracking server asked over its REST API): another URI, a server or
store that lacks the runs, or runs of other content make the import stale, and the rules re-import.
A store file that is not a database is one line naming it and the remedy (``StoreDamaged``).

A tracking server (http/https URI) that cannot be reached fails fast: a TCP connect with a
``CONNECT_TIMEOUT_S`` limit before anything else, and MLflow's HTTP retries bounded by ``HTTP_ENV``
(defaults only: a value already in the environment wins), then one line naming the URI
(``TrackingUnavailable``; ``fedbayes track`` exits 2).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import socket
import subprocess
import time
import urllib.request
import uuid
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlparse

from fedbayes.machine import class_id
from fedbayes.catalog import METHOD_VARIANTS, recorded_defaults
from fedbayes.config import (ConfigError, experiment_config, load_params, paths, seeds, selection_seeds,
                             stand_in_size, swept_points, table_figures)
from fedbayes.eval.registry import PERCENT as ACC_METRICS  # logged in %, the tables' unit
from fedbayes.fileio import exclusive_lock, write_text_atomic
from fedbayes.runfiles import DamagedFile, curves_of, read_history, read_metrics, read_run_info, read_selected
from fedbayes.runpaths import run_dir, selected_file

NON_METRICS = {"round"}
EVAL_PREFIXES = ("test/", "ood/")  # history columns that belong to one prediction (a variant has its own)
# MLflow 3 opens an experiment on the view its tag ``mlflow.experimentKind`` names; without it, on an empty
# GenAI dashboard (traces). "custom_model_development" is its "Model training" kind: the runs table.
EXPERIMENT_KIND = "custom_model_development"
# MLflow 3.17's UI keeps a browser-wide GenAI / Model training switch that overrides the tag (GenAI
# until switched): ``#/experiments/<id>/runs?workflowType=machine_learning`` opens the runs table, and
# ``&viewStateShareKey=fedbayes`` with the columns below (a shared view: experiment tag
# ``mlflow.sharedViewState.<key>``, JSON of the runs table's state): the sweep point, whether it is the
# selected one, and the final accuracy, NLL and ECE (a series' latest value: its last round, the value
# metrics.json holds; the default columns show no param or metric).
VIEW_KEY = "fedbayes"
VIEW_STATE = {"selectedColumns": ["tags.`point`", "tags.`selected`", "metrics.`test/acc`",
                                  "metrics.`test/nll`", "metrics.`test/ece`", "attributes.`Duration`"],
              "runsHiddenMode": "SHOW_ALL"}

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


def _sqlite_path(uri: str) -> Path | None:
    return Path(uri[len("sqlite:///"):]) if uri.startswith("sqlite:///") else None


def check_store(uri: str) -> None:
    """A SQLite store that exists must be a database: random bytes (or a file cut short in its header) made
    the import a sqlalchemy traceback. StoreDamaged names the file and how to rebuild the store."""
    import sqlite3

    db = _sqlite_path(uri)
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
        raise _damaged(db, str(e)) from None


def _damaged(db: Path, why: str) -> StoreDamaged:
    return StoreDamaged(f"the MLflow store {db} is not an SQLite database ({why}); move it aside "
                        f"(mv {db} {db}.damaged) and run the target again: every run is imported into a new store")


def content_hash(run_dir: str | Path) -> str:
    """What an import of ``run_dir`` holds: a hash of its history.csv, metrics.json and run.json (the
    files it reads and logs as artifacts)."""
    h = hashlib.sha256()
    for name in ("history.csv", "metrics.json", "run.json"):
        h.update(name.encode() + b"\0" + (Path(run_dir) / name).read_bytes() + b"\0")
    return h.hexdigest()[:16]


# the workflow's import of every (experiment, method) at rehearsal scale (its marker, its rule mlflow_rehearsal)
REHEARSAL_IMPORT = "rehearsal"
MARKER_STORE = "store "   # the marker's first line: "store <tracking URI>"


def write_marker(path: str | Path, uri: str, imported: list[dict]) -> None:
    """``fedbayes track --marker``: the store, then a line per MLflow run (the method's own, each
    variant's): "<run id> <point> seed<seed> <experiment id> <run key> <content hash>"."""
    lines = [MARKER_STORE + uri] + [f"{r['run_id']} {r['point']} seed{r['seed']} {r['experiment_id']} {r['key']} "
                                    f"{r['content_hash']}" for r in imported]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, "\n".join(lines) + "\n")


def marker_problems(marker: str | Path, uri: str) -> list[str]:
    """Why an import marker (``write_marker``) no longer stands for runs in the store, or [] when it does
    (or cannot be told: a database other than SQLite, a server that does not answer now). It stands only
    for the store it names, and only where that store holds a FINISHED, active run of each of its keys
    with the content hash it records: a SQLite store is read directly (no MLflow import), a tracking
    server asked once (``runs/search``). A marker from before stores and hashes were recorded is stale."""
    marker = Path(marker)
    if not marker.exists():
        return []
    lines = marker.read_text().splitlines()
    if not lines or not lines[0].startswith(MARKER_STORE):
        return ["its import marker records no store or content (an earlier version's)"]
    store = lines[0][len(MARKER_STORE):]
    if store != uri:
        return [f"the runs were imported into {store}, and MLFLOW_TRACKING_URI / paths.mlflow_uri is now {uri}"]
    entries = [line.split() for line in lines[1:] if line.strip()]
    if any(len(e) != 6 for e in entries):
        return [f"its import marker {marker} is damaged"]
    want = {(e[4], e[5]) for e in entries}
    if not want:
        return []
    if _sqlite_path(uri) is not None:
        found = _sqlite_holds(_sqlite_path(uri), {k for k, _ in want})
    elif _is_server(uri):
        found = _server_holds(uri, sorted({e[3] for e in entries}), {k for k, _ in want})
    else:
        return []
    if isinstance(found, str):
        return [found] if found else []
    lost = want - found
    return [f"{len(lost)} of its {len(want)} imported runs are not in {uri} as imported"] if lost else []


def _sqlite_holds(db: Path, keys: set[str]) -> set[tuple[str, str]] | str:
    """(run key, content hash) of the FINISHED, active runs of ``keys`` in the SQLite store ``db``, or why not."""
    import sqlite3

    if not db.exists():
        return f"the MLflow store {db} is gone"
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
        try:
            rows = con.execute(
                "SELECT k.value, h.value FROM runs r JOIN tags k ON k.run_uuid = r.run_uuid AND k.key = 'run_key' "
                "JOIN tags h ON h.run_uuid = r.run_uuid AND h.key = 'content_hash' WHERE r.lifecycle_stage = 'active' "
                f"AND r.status = 'FINISHED' AND k.value IN ({','.join('?' * len(keys))})", sorted(keys)).fetchall()
        finally:
            con.close()
    except sqlite3.Error as e:
        return f"the MLflow store {db} cannot be read ({e})"
    return set(rows)


_SERVER_DOWN: set[str] = set()   # servers that did not answer this process (asked once, not per marker)


def _server_holds(uri: str, experiment_ids: list[str], keys: set[str]) -> set[tuple[str, str]] | str:
    """The same, asked of a tracking server (MLflow's REST API, ``runs/search`` by key prefix); "" (cannot
    tell: trusted) where it does not answer — the import itself says so in one line when it runs."""
    import json
    import urllib.error

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


def _is_server(uri: str) -> bool:
    return urlparse(uri).scheme in ("http", "https")


def check_reachable(uri: str) -> None:
    """For a tracking server: bound MLflow's HTTP retries (``HTTP_ENV``) and refuse, in at most
    ``CONNECT_TIMEOUT_S``, a host:port that accepts no connection. Other stores (sqlite, databases) need
    nothing. Behind a proxy the server cannot be probed directly; the bounded retries still apply."""
    if not _is_server(uri):
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


def flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = json.dumps(v) if isinstance(v, (list, tuple)) else v
    return out


def _finite(v) -> bool:
    try:
        return math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


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


def _ready_client(client):
    client.search_experiments(max_results=1)  # creates / migrates the store now, inside the retry
    return client


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


# --- what the run says about itself ---------------------------------------------------------------

def unit_scale(metric: str, variants=()) -> float:
    """100 for an accuracy metric (``test/acc``, ``mean/test/acc``, ``final/mean/test/acc``), else 1."""
    name = metric.removeprefix("final/")
    head, _, rest = name.partition("/")
    if head in variants:
        name = rest
    return 100.0 if name in ACC_METRICS else 1.0


def code_tags(info: dict) -> dict[str, str]:
    """Tags of the code that trained the run, from run.json ``code`` (provenance.code_identity) and, for an
    installed package's method, ``plugin`` (provenance.plugin_identity)."""
    code = info.get("code") or {}
    commit, dirty = code.get("commit"), code.get("dirty")
    tags = {"git_sha": commit or "unknown",
            "git_dirty": "unknown" if dirty is None or not commit else str(bool(dirty)).lower(),
            "source_hash": code.get("source") or "unknown"}
    if commit:  # the UI shows it (6 characters) beside the source name in a run's "Source" row
        tags |= {"mlflow.source.git.commit": commit, "mlflow.source.name": "fedbayes train",
                 "mlflow.source.type": "LOCAL"}
    replayed = info.get("replayed")   # a later clean commit replayed its first rounds (fedbayes replay --record)
    if replayed:
        # bit for bit, or on another machine class the replay's verdict (within round-off, the seed spread, …)
        how = "bit for bit" if replayed.get("identical", True) else str(replayed.get("verdict"))
        on = f" on {replayed['machine']}" if replayed.get("machine") else ""
        tags |= {"replayed_commit": str(replayed.get("commit")),
                 "replayed_rounds": f"{replayed.get('rounds')} of {replayed.get('of')}",
                 "replayed_verdict": how,
                 "provenance": (f"trained from {'a modified tree of ' + commit[:12] if commit and dirty else 'code not recorded'}; "
                                f"rounds 0-{replayed.get('rounds')} of {replayed.get('of')} replayed {how} at the "
                                f"clean commit {str(replayed.get('commit'))[:12]}{on}")}
    plugin = info.get("plugin")   # an installed package's method (provenance.plugin_identity)
    if plugin:
        tags |= {"plugin": str(plugin.get("distribution")), "plugin_version": str(plugin.get("version")),
                 "plugin_source": str(plugin.get("source"))}
    return tags


def _iso_ms(s) -> int | None:
    try:
        t = datetime.fromisoformat(str(s))
    except (TypeError, ValueError):
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return int(t.timestamp() * 1000)


def _written_ms(path: Path) -> tuple[int, str]:
    """An upper bound of when ``path`` was written: its mtime, or the time of the commit that last
    changed it where that is earlier (a fresh clone's files are as new as the checkout)."""
    best, how = int(path.stat().st_mtime * 1000), "run.json mtime"
    try:
        status = subprocess.run(["git", "status", "--porcelain", "--", path.name], cwd=path.parent,
                                capture_output=True, text=True, timeout=10)
        log = subprocess.run(["git", "log", "-1", "--format=%ct", "--", path.name], cwd=path.parent,
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return best, how
    if status.returncode == 0 and not status.stdout.strip() and log.returncode == 0 and log.stdout.strip():
        committed = int(log.stdout.strip()) * 1000
        if committed < best:
            best, how = committed, "date of the last commit of run.json"
    return best, how


def run_times(run_dir: Path, info: dict, history) -> tuple[int, int, list[int], str]:
    """(start ms, end ms, per-row timestamp ms, how they were obtained) of a training run. The per-row
    timestamps add each round's training and evaluation seconds to the start (capped at the end)."""
    seconds = [0.0 if not _finite(t) else float(t) for t in history.get("time_s", [0.0] * len(history))]
    evals = [0.0 if not _finite(t) else float(t) for t in history.get("eval_s", [0.0] * len(history))]
    elapsed, acc = [], 0.0
    for a, b in zip(seconds, evals):
        acc += a + b
        elapsed.append(acc)
    duration = int(round(1000 * acc))
    start, end = _iso_ms(info.get("started")), _iso_ms(info.get("finished"))
    if start is not None and end is not None:
        how = "recorded at training (run.json started, finished)"
    elif end is not None:
        start, how = end - duration, "end recorded at training; start = end − history's training + evaluation time"
    else:
        end, bound = _written_ms(run_dir / "run.json")
        start = end - duration
        how = (f"not recorded (run.json from before times were kept): end ≈ {bound} (an upper bound), "
               f"start = end − history's training + evaluation time")
    stamps = [min(end, start + int(round(1000 * e))) for e in elapsed]
    return start, end, stamps, how


def _relative(path: Path) -> str:
    """``path`` relative to the repository root (the workflow's working directory) where it lies in it."""
    resolved, root = path.resolve(), Path.cwd().resolve()
    try:
        return resolved.relative_to(root).as_posix()
    except ValueError:
        return os.path.relpath(resolved, root) if not path.is_absolute() else str(path)


def experiment_description(p: dict, experiment: str) -> str:
    """mlflow.note.content of an experiment: what it is, which tables read it, how to read its runs."""
    try:
        e = experiment_config(p, experiment)
    except Exception:  # an experiment params.yaml does not define (a test's): the generic part only
        e = {}
    lines = [f"# {experiment} ({p.get('scale', 'paper')} scale)", ""]

    if stand_in_size(p):
        lines += [f"**STAND-IN REHEARSAL**: trained on generated stand-in data (size {stand_in_size(p)}), not on "
                  f"the real dataset: it shows that the pipeline runs, never a result.", ""]
    if e:
        part = e.get("partition") or {}
        how = ", ".join(f"{k} {v}" for k, v in part.items() if k != "scheme")
        sub = f"{e['subsample'] * 100:g} % of " if e.get("subsample") not in (None, 1, 1.0) else ""
        model = (e.get("model") or {}).get("name", "?")
        lines.append(f"{sub}**{e.get('dataset', '?')}** split over {e.get('clients', '?')} clients "
                     f"({part.get('scheme', '?')}{': ' + how if how else ''}), {e.get('rounds', '?')} rounds, "
                     f"model {model}" + (f", OOD set {e['ood']}" if e.get("ood") else "") + ".")
        lines.append("")
        lines.append("Methods: " + ", ".join(e.get("methods") or []) + ".")
    tables = {name: t for name, t in (p.get("tables") or {}).items() if experiment in (t.get("experiments") or [])}
    if tables:
        reports = paths(p)["reports"]
        lines.append("Tables that read it: " + ", ".join(f"{t} ({reports}/{t}.md)" for t in tables) + ".")
        figures = [f"{reports}/figures/{f}" for name, t in tables.items() for f in table_figures(name, t)]
        if figures:
            lines.append("Their figures: " + ", ".join(figures) + ".")
        lines.append(f"Which published cells reproduce, with the causes of the others: the scorecard, {reports}/README.md.")
    lines += ["",
              "One run per (method, sweep point, seed), imported from the run's files (history.csv, metrics.json, "
              "run.json) after training; each prediction variant is a run of its own (tag method = "
              "'bayesadmm@mean', base_method, variant). Tag selected = true marks the selected sweep point.",
              "",
              "A metric's latest value is its last round's, the run's final value (metrics.json's 'final'); a final value "
              "with no per-round series is logged as final/<metric>.",
              "",
              "Units: accuracy (test/acc, local/acc) in %, as in the tables; NLL in nats; ECE, "
              "MCE, Brier and OOD AUROC as fractions. The history.csv and metrics.json artifacts keep accuracy "
              "as a fraction.",
              "",
              "Provenance: git_sha / mlflow.source.git.commit = the commit that trained the run (unknown for runs "
              "from before it was recorded), git_dirty, source_hash; start and end = the training's (tag times "
              "says how they were obtained).",
              "",
              "Search: `tags.method = 'bayesadmm@mean' and tags.selected = 'true' and attributes.status = "
              "'FINISHED'`."]
    return "\n".join(lines)


# --- the import ---------------------------------------------------------------------------------

def check_run_identity(p: dict, experiment: str, method: str, point: str, seed: int, folder: str | Path,
                       info: dict) -> None:
    """The run in ``folder`` is the one named (experiment, method, point, seed): its run.json records it
    (a run.json without a point, written before runs recorded theirs, is taken at its word for the
    point), and a folder under paths.runs is that run's own; it ran on the data these params track (a
    stand-in run is never imported as a result: the params' experiment and scale tag would call it one).
    ConfigError in one line otherwise: the store would hold one run's numbers under another's name."""
    cfg = info["config"]
    named = {"experiment": experiment, "method": method, "point": point, "seed": seed}
    for key, value in named.items():
        recorded = cfg.get(key, value)
        if recorded != value:
            raise ConfigError(f"{Path(folder) / 'run.json'} records {key} {recorded!r}, not --{key} {value!r}: "
                              "it is another run's; give that run's arguments or the run directory of this one")
    data, want = cfg.get("data", "real"), f"stand-in ({stand_in_size(p)})" if stand_in_size(p) else "real"
    if data != want:
        raise ConfigError(f"{Path(folder) / 'run.json'} records data {data!r} (scale {cfg.get('scale', '?')!r}), but "
                          f"these params (scale {p.get('scale', 'paper')!r}) track runs on {want!r} data: track it "
                          "with the params it ran with (--scale rehearsal for a stand-in run)")
    own, runs = run_dir(paths(p), experiment, method, point, seed), Path(paths(p)["runs"]).resolve()
    if Path(folder).resolve().is_relative_to(runs) and Path(folder).resolve() != own.resolve():
        raise ConfigError(f"{folder} is not the run directory of {experiment}/{method}/{point}/seed{seed} ({own}); "
                          "under paths.runs each directory holds its own run")


def log_run(p: dict, experiment: str, method: str, point: str, seed: int, run_dir: str | Path,
            partition_figure: str | None = None, selected: str | None = None, record: list | None = None) -> str:
    """Import one training run (and a run per prediction variant); returns the method's own run id.
    ``record`` receives a dict per MLflow run written (``write_marker``'s lines)."""
    check_run_identity(p, experiment, method, point, seed, run_dir, read_run_info(run_dir))  # before the store
    uri = tracking_uri(p)
    check_reachable(uri)
    check_store(uri)
    with store_lock(uri):
        rid = _log_run(p, experiment, method, point, seed, run_dir, partition_figure, selected, record, session := {})
        if selected:
            _retag_selected(session, p, method, read_selected(selected)["point"])
        return rid


def _replace(client, exp_id: str, key: str, name: str, tags: dict, start: int, end: int, write) -> str:
    """Write a new run of ``key`` (``write(run_id)``), mark it FINISHED, then delete the older runs of
    ``key`` (tag ``import_id`` below this import's): the previous import and leftovers of crashed ones,
    never a newer import. Until FINISHED the previous import stays. Returns the run that holds the
    import: this one, or the newer one of the same content that replaced it meanwhile."""
    from mlflow.entities import RunTag

    run = with_retry(lambda: client.create_run(exp_id, start_time=start, run_name=name,
                                               tags={"mlflow.runName": name, **tags}))
    rid = run.info.run_id
    try:
        write(rid, RunTag)
        with_retry(lambda: client.set_terminated(rid, "FINISHED", end_time=end))
    except Exception:
        newer = _superseded(client, exp_id, key, rid, tags)
        if newer:   # a newer import of the same content deleted this one while it was written
            return newer
        try:  # the store may still answer: then the partial run says so (else the next import removes it)
            client.set_terminated(rid, "FAILED", end_time=end)
        except Exception:
            pass
        raise
    except BaseException:
        try:
            client.set_terminated(rid, "FAILED", end_time=end)
        except Exception:
            pass
        raise
    for old in with_retry(lambda: client.search_runs([exp_id], f"tags.run_key = '{key}'")):
        if old.info.run_id != rid and old.data.tags.get("import_id", "") < tags["import_id"]:
            try:
                with_retry(lambda: client.delete_run(old.info.run_id))
            except Exception:
                if _active(client, old.info.run_id):   # not already deleted by another importer
                    raise
    return rid


def _active(client, run_id: str) -> bool:
    try:
        return client.get_run(run_id).info.lifecycle_stage == "active"
    except Exception:
        return False


def _superseded(client, exp_id: str, key: str, rid: str, tags: dict) -> str | None:
    """The newer FINISHED import of ``key`` with this import's content, where it deleted run ``rid``."""
    try:
        if _active(client, rid):
            return None
        for other in client.search_runs([exp_id], f"tags.run_key = '{key}'"):
            t = other.data.tags
            if other.info.status == "FINISHED" and t.get("import_id", "") > tags["import_id"] \
                    and t.get("content_hash") == tags["content_hash"]:
                return other.info.run_id
    except Exception:
        return None
    return None


def _log_run(p: dict, experiment: str, method: str, point: str, seed: int, run_dir: str | Path,
             partition_figure: str | None, selected: str | None, record: list | None = None,
             session: dict | None = None) -> str:
    """One run's import. ``session`` (a dict) keeps the client and the experiment between the runs of one
    process: the store is opened and the experiment's tags set once, not per run. The selected=true|false
    tags of earlier imports of other points are the caller's (``_retag_selected``, once per method)."""
    session = {} if session is None else session
    run_dir = Path(run_dir)
    info = read_run_info(run_dir)  # checked: a damaged or truncated run is never imported
    metrics = read_metrics(run_dir, info)
    history = evaluated_history(read_history(run_dir, info), curves_of(metrics))
    digest = content_hash(run_dir)
    client, exp_id = _session(session, p, experiment)
    return _write_run(p, client, exp_id, experiment, method, point, seed, run_dir, info, history, metrics, digest,
                      partition_figure, selected, record)


def evaluated_history(history, curves):
    """history.csv's training columns (loss, clients, times, bytes) with the metric values from
    metrics.json (``curves``: the one source of metric values, eval.evaluate) in place of training's own."""
    train = history.drop(columns=[c for c in curves.columns if c != "round" and c in history.columns])
    return train.merge(curves, on="round", how="left")


def _session(session: dict, p: dict, experiment: str):
    """(client, experiment id) of ``experiment`` in the store, opened once per ``session``."""
    import mlflow
    from mlflow.tracking import MlflowClient

    uri = tracking_uri(p)
    exp_name = experiment if p["scale"] == "paper" else f"{p['scale']}-{experiment}"
    if "client" in session and exp_name in session.setdefault("experiments", {}):
        session["exp_id"] = session["experiments"][exp_name]
        return session["client"], session["exp_id"]
    mlflow.set_tracking_uri(uri)
    try:
        client = session.get("client") or with_retry(lambda: _ready_client(MlflowClient()))
    except Exception as e:
        if _sqlite_path(uri) is not None and any(w in str(e).lower() for w in ("not a database", "malformed")):
            raise _damaged(_sqlite_path(uri), (str(e).strip().splitlines() or ["?"])[0][:200]) from None
        if isinstance(e, ImportError) or type(e).__name__ == "NoSuchModuleError":   # a database URI whose driver is not installed
            raise TrackingUnavailable(f"MLflow tracking store {uri}: its driver is not installed ({e})") from None
        if not _is_server(uri):
            raise
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
        raise TrackingUnavailable(f"MLflow tracking server {uri} does not answer: {first}") from None

    def get_experiment():
        e = client.get_experiment_by_name(exp_name)
        if e is not None:
            return e.experiment_id
        if _is_server(uri):  # a tracking server stores (or proxies) artifacts
            return client.create_experiment(exp_name)
        art = Path(paths(p).get("mlartifacts", "mlartifacts")).resolve() / exp_name
        return client.create_experiment(exp_name, artifact_location=art.as_uri())

    exp_id = with_retry(get_experiment)
    with_retry(lambda: client.set_experiment_tag(exp_id, "mlflow.note.content", experiment_description(p, experiment)))
    with_retry(lambda: client.set_experiment_tag(exp_id, "mlflow.experimentKind", EXPERIMENT_KIND))  # earlier stores too
    with_retry(lambda: client.set_experiment_tag(exp_id, f"mlflow.sharedViewState.{VIEW_KEY}", json.dumps(VIEW_STATE)))
    session["client"] = client
    session.setdefault("experiments", {})[exp_name] = exp_id
    session["exp_id"] = exp_id
    return client, exp_id


def _write_run(p, client, exp_id, experiment, method, point, seed, run_dir, info, history, metrics, digest,
               partition_figure, selected, record) -> str:
    from mlflow.entities import Metric, Param


    cfg = info["config"]  # what actually produced these numbers
    start, end, stamps, how = run_times(run_dir, info, history)
    code = code_tags(info)
    chosen = read_selected(selected)["point"] if selected else None
    variants = sorted(v for v in metrics.get("variants", {}) if v)
    catalog = _variant_kinds(method)
    base = {"experiment": experiment, "base_method": method, "point": point, "seed": str(seed),
            "content_hash": digest, "import_id": f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}",
            "scale": p["scale"], "data": info["config"].get("data", "real"),   # "stand-in (tiny)": a rehearsal's
            **code, "times": how, "config_hash": info["config_hash"],
            "partition_hash": info["config"].get("partition_hash", ""),
            "device": info.get("device", ""), "device_name": info.get("device_name", ""),
            # the machine class that computed its bits (fedbayes.machine); runs from before the record: none
            "machine_class": class_id(info["machine"]) if isinstance(info.get("machine"), dict) else "not recorded",
            "torch": info.get("torch", ""), "run_dir": _relative(run_dir),
            "predictions": _relative(run_dir / "predictions.npz")}
    if "diverged" in info:  # a finished run whose training became NaN/inf at that round
        base |= {"status": "diverged", "diverged_round": str(info["diverged"]["round"]),
                 "diverged_reason": info["diverged"]["reason"]}
    if chosen is not None:
        base["selected"] = str(chosen == point).lower()
    # the resolved configuration and the defaults the method read from its spec (catalog.recorded_defaults)
    params = [Param(k, str(v)[:6000]) for k, v in flatten({**cfg, "defaults": recorded_defaults(info)}).items()]
    rows = list(zip(history["round"], stamps))

    def series(col: str, as_name: str):
        scale = unit_scale(col, variants)
        return [Metric(as_name, scale * float(v), ts, int(r)) for (r, ts), v in zip(rows, history[col]) if _finite(v)]

    shared = [c for c in history.columns if c not in NON_METRICS and not c.startswith(EVAL_PREFIXES)
              and c.split("/", 1)[0] not in variants]
    ids = {}
    for variant in ["", *variants]:
        evaluated = f"{method}@{variant}" if variant else method
        key = f"{p['scale']}/{experiment}/{evaluated}/{point}/seed{seed}"
        # the method and seed first: the runs table cuts a long name (the point is also a tag and params)
        name = f"{evaluated} s{seed}" + (f" {point}" if point != "default" else "")
        if variant:  # the variant's evaluation under the plain names, plus the training's own columns
            cols = [(c, c.split("/", 1)[1]) for c in history.columns if c.startswith(f"{variant}/")] + \
                   [(c, c) for c in shared]
            finals = metrics["variants"][variant].get("final", {})
            batch = [m for c, n in cols for m in series(c, n)]
            batch += [Metric(f"final/{k}", unit_scale(k) * float(v), end, metrics["final_round"])
                      for k, v in finals.items() if _finite(v) and f"{variant}/{k}" not in history.columns]
        else:  # the method's own prediction (every column, variants' included, as before)
            batch = [m for c in history.columns if c not in NON_METRICS for m in series(c, c)]
            batch += [Metric(f"final/{k}", unit_scale(k) * float(v), end, metrics["final_round"])
                      for k, v in metrics["final"].items() if _finite(v) and k not in history.columns]
            batch += [Metric(f"final/{vn}/{k}", unit_scale(k) * float(v), end, metrics["final_round"])
                      for vn, var in metrics.get("variants", {}).items() for k, v in var["final"].items()
                      if _finite(v) and f"{vn}/{k}" not in history.columns]
        tags = {**base, "run_key": key, "method": evaluated, "variant": variant or "none",
                "prediction": catalog.get(variant, "unknown"),
                "mlflow.note.content": _run_note(experiment, evaluated, point, seed, info, code, how)}

        def write(rid, RunTag, batch=batch, tags=tags):
            with_retry(lambda: client.log_batch(rid, params=params[:100], tags=[RunTag(k, v) for k, v in tags.items()]))
            for i in range(100, len(params), 100):
                with_retry(lambda: client.log_batch(rid, params=params[i:i + 100]))
            for i in range(0, len(batch), 1000):
                with_retry(lambda: client.log_batch(rid, metrics=batch[i:i + 1000]))
            for f in ("history.csv", "metrics.json", "run.json"):
                client.log_artifact(rid, str(run_dir / f))
            if partition_figure and Path(partition_figure).exists():
                client.log_artifact(rid, partition_figure, artifact_path="partition")

        ids[variant] = _replace(client, exp_id, key, name, tags, start, end, write)
        if record is not None:
            record.append({"run_id": ids[variant], "point": point, "seed": seed, "experiment_id": exp_id,
                           "key": key, "content_hash": digest})

    return ids[""]


def _retag_selected(session: dict, p: dict, method: str, chosen: str) -> None:
    """A new selection re-tags earlier imports of the other points (no stale selected=true)."""
    if "client" not in session:
        return
    client, exp_id = session["client"], session["exp_id"]
    found = {}
    for field in ("base_method", "method"):  # "method": imports from before base_method existed
        query = f"tags.{field} = '{method}' and tags.scale = '{p['scale']}'"
        found |= {r.info.run_id: r for r in with_retry(lambda: client.search_runs([exp_id], query))}
    for other in found.values():
        flag = str(other.data.tags.get("point") == chosen).lower()
        if other.data.tags.get("selected") != flag:
            try:
                with_retry(lambda: client.set_tag(other.info.run_id, "selected", flag))
            except Exception:
                if _active(client, other.info.run_id):   # (else replaced meanwhile by another importer)
                    raise


def _variant_kinds(method: str) -> dict[str, str]:
    """variant → "point" | "samples" (fedbayes.catalog); {} for a method the catalogue does not know."""
    return METHOD_VARIANTS.get(method, {})


def _run_note(experiment, evaluated, point, seed, info, code, how) -> str:
    commit = code["git_sha"] + (" (package sources modified)" if code["git_dirty"] == "true" else "")
    wall = info.get("wall_s")
    return "\n".join([
        f"**{evaluated}** on {experiment}, sweep point `{point}`, seed {seed}.",
        "",
        f"Trained at commit {commit} on {info.get('device', '?')} ({info.get('device_name', '?')}), torch "
        f"{info.get('torch', '?')}" + (f"; {wall:.0f} s of training rounds" if _finite(wall) else "") + ".",
        f"Times: {how}.",
        "Accuracy in %, NLL in nats, ECE / Brier / AUROC as fractions (the artifacts keep accuracy as a fraction)."])


# --- every run of a set of (experiment, method) pairs (a table's) in one process -----------------------

def imported_runs(p: dict, experiment: str, method: str, point: str) -> list[tuple[str, int]]:
    """(point, seed) of every run of (experiment, method) that is imported: each swept point on the
    selection's seeds, the selected ``point`` on every seed."""
    runs = {(point, s) for s in seeds(p, experiment, method)}
    runs |= {(pt, s) for pt in swept_points(p, experiment, method) for s in selection_seeds(p, experiment, method)}
    return sorted(runs, key=lambda r: (r[1], r[0]))


def _held(uri: str, keys: list[str]) -> dict[str, tuple[str, str, str, str]]:
    """run key → (run id, experiment id, content hash, selected tag) of the FINISHED, active runs of ``keys``
    in a SQLite store ({} for other stores: everything is imported)."""
    import sqlite3

    db = _sqlite_path(uri)
    if db is None or not db.exists() or not keys:
        return {}
    held = {}
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        for i in range(0, len(keys), 500):
            chunk = keys[i:i + 500]
            held |= {k: (rid, str(eid), h, sel or "") for rid, eid, k, h, sel in con.execute(
                "SELECT r.run_uuid, r.experiment_id, k.value, h.value, s.value FROM runs r "
                "JOIN tags k ON k.run_uuid = r.run_uuid AND k.key = 'run_key' "
                "JOIN tags h ON h.run_uuid = r.run_uuid AND h.key = 'content_hash' "
                "LEFT JOIN tags s ON s.run_uuid = r.run_uuid AND s.key = 'selected' "
                "WHERE r.lifecycle_stage = 'active' AND r.status = 'FINISHED' "
                f"AND k.value IN ({','.join('?' * len(chunk))})", chunk)}
    except sqlite3.Error:
        return {}
    finally:
        con.close()
    return held


def import_pairs(p: dict, pairs: dict[str, list[str]], figure: str, marker: str, log=print) -> dict:
    """Import every run of (experiment, method) for each of ``pairs`` ({experiment: [methods]}, a table's;
    ``imported_runs``) in this one process, and write one marker for them all (``write_marker``). A run
    whose every MLflow run (the method's own, each variant's) the store already holds FINISHED with the
    same content and selected tag is not imported again; the MLflow client is loaded only where one is
    not. ``figure``: the partition figure of a run, with ``{experiment}`` and ``{seed}``. Returns counts."""
    uri = tracking_uri(p)
    check_reachable(uri)
    check_store(uri)
    plan = {}
    for experiment, methods in pairs.items():
        for method in methods:
            selected = selected_file(paths(p), experiment, method)
            chosen = read_selected(selected)["point"]
            runs = []
            for point, seed in imported_runs(p, experiment, method, chosen):
                d = run_dir(paths(p), experiment, method, point, seed)
                info = read_run_info(d)
                check_run_identity(p, experiment, method, point, seed, d, info)
                variants = sorted(v for v in read_metrics(d, info).get("variants", {}) if v)
                keys = [f"{p['scale']}/{experiment}/{m}/{point}/seed{seed}" for m in
                        [method, *(f"{method}@{v}" for v in variants)]]
                runs.append((point, seed, d, figure.format(experiment=experiment, seed=seed), keys, content_hash(d),
                             str(chosen == point).lower()))
            plan[experiment, method] = (selected, chosen, runs)
    counts = {"runs": 0, "imported": 0}
    record = []
    with store_lock(uri):
        held = _held(uri, [k for _, _, runs in plan.values() for r in runs for k in r[4]])
        session = {}
        for (experiment, method), (selected, chosen, runs) in plan.items():
            fresh = 0
            for point, seed, d, fig, keys, digest, flag in runs:
                have = [held.get(k) for k in keys]
                if all(h and h[2] == digest and h[3] == flag for h in have):
                    record += [{"run_id": h[0], "point": point, "seed": seed, "experiment_id": h[1], "key": k,
                                "content_hash": digest} for k, h in zip(keys, have)]
                    continue
                _log_run(p, experiment, method, point, seed, d, fig, str(selected), record, session)
                fresh += 1
            if fresh:
                _session(session, p, experiment)   # the experiment whose runs are re-tagged
                _retag_selected(session, p, method, chosen)
            counts["runs"] += len(runs)
            counts["imported"] += fresh
            log(f"{experiment}/{method}: {fresh} of {len(runs)} runs imported"
                + (f", {len(runs) - fresh} already in the store as they are" if fresh < len(runs) else ""))
        write_marker(marker, uri, record)
    return counts


def marker_runs(marker: str | Path, scale: str, experiment: str, method: str) -> int:
    """How many MLflow runs of (experiment, method) an import marker (``write_marker``) records: the
    method's own and each prediction variant's; 0 without a marker."""
    marker = Path(marker)
    if not marker.exists():
        return 0
    keys = [line.split()[4] for line in marker.read_text().splitlines()[1:] if len(line.split()) == 6]
    return sum(1 for k in keys if k.split("/")[:2] == [scale, experiment] and k.split("/")[2].split("@")[0] == method)


def main(argv=None) -> None:
    """``python -m fedbayes.tracking``: the workflow's MLflow import of a table's runs (``import_pairs``)."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m fedbayes.tracking", description=import_pairs.__doc__.split(".")[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--name", required=True, help="what the pairs are (a table's name), for the summary line")
    ap.add_argument("--pairs", required=True, help='the (experiment, method) pairs, JSON: {"experiment": [methods]}')
    ap.add_argument("--figure", required=True, help="a run's partition figure: a path with {experiment} and {seed}")
    ap.add_argument("--marker", required=True, help="the import marker written")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    try:
        p = load_params(args.params)
        n = import_pairs(p, json.loads(args.pairs), args.figure, args.marker, log=lambda line: print(line, flush=True))
    except (TrackingUnavailable, ConfigError, DamagedFile) as e:  # one line naming the URI, store or file
        print(f"fedbayes track: error: {e}", file=sys.stderr)
        sys.exit(2)
    print(f"MLflow: {n['imported']} of {n['runs']} runs of {args.name} imported into {tracking_uri(p)} "
          f"in {time.monotonic() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
