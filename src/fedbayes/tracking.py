"""MLflow import of finished runs.

Training jobs never talk to MLflow: they write history.csv / metrics.json / run.json. One
``fedbayes track`` job per run imports those files afterwards. The Snakemake rule holds the
``mlflow_db`` resource (profile: ``--resources mlflow_db=1``) so only one writer touches the SQLite
store at a time, and every write retries on a locked database. Importing is idempotent: the run is
identified by the tag ``run_key``, and an earlier import of the same key is deleted first.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

import pandas as pd

from fedbayes.config import paths
from fedbayes.fileio import exclusive_lock

NON_METRICS = {"round"}


def tracking_uri(p: dict) -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or p["paths"]["mlflow_uri"]


def git_sha() -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, check=True).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


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


def log_run(p: dict, experiment: str, method: str, point: str, seed: int, run_dir: str | Path,
            partition_figure: str | None = None, selected: str | None = None) -> str:
    with store_lock(tracking_uri(p)):
        return _log_run(p, experiment, method, point, seed, run_dir, partition_figure, selected)


def _log_run(p: dict, experiment: str, method: str, point: str, seed: int, run_dir: str | Path,
             partition_figure: str | None, selected: str | None) -> str:
    import mlflow
    from mlflow.entities import Metric, Param, RunTag
    from mlflow.tracking import MlflowClient

    run_dir = Path(run_dir)
    history = pd.read_csv(run_dir / "history.csv")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    info = json.loads((run_dir / "run.json").read_text())
    cfg = info["config"]  # what actually produced these numbers
    key = f"{p['scale']}/{experiment}/{method}/{point}/seed{seed}"
    name = f"{method}[{point}]-seed{seed}" if point != "default" else f"{method}-seed{seed}"
    exp_name = experiment if p["scale"] == "paper" else f"{p['scale']}-{experiment}"

    mlflow.set_tracking_uri(tracking_uri(p))
    client = with_retry(lambda: _ready_client(MlflowClient()))

    def get_experiment():
        e = client.get_experiment_by_name(exp_name)
        if e is not None:
            return e.experiment_id
        if urlparse(tracking_uri(p)).scheme in ("http", "https"):  # a tracking server stores (or proxies) artifacts
            return client.create_experiment(exp_name)
        art = Path(paths(p).get("mlartifacts", "mlartifacts")).resolve() / exp_name
        return client.create_experiment(exp_name, artifact_location=art.as_uri())

    exp_id = with_retry(get_experiment)
    for old in with_retry(lambda: client.search_runs([exp_id], f"tags.run_key = '{key}'")):
        with_retry(lambda: client.delete_run(old.info.run_id))

    tags = {"run_key": key, "experiment": experiment, "method": method, "point": point, "seed": str(seed),
            "scale": p["scale"], "git_sha": git_sha(), "config_hash": info["config_hash"],
            "partition_hash": info["config"].get("partition_hash", ""),
            "device": info.get("device", ""), "device_name": info.get("device_name", ""),
            "torch": info.get("torch", ""), "predictions": str((run_dir / "predictions.npz").resolve())}
    if "diverged" in info:  # a finished run whose training became NaN/inf at that round
        tags |= {"status": "diverged", "diverged_round": str(info["diverged"]["round"]),
                 "diverged_reason": info["diverged"]["reason"]}
    if selected:
        tags["selected"] = str(json.loads(Path(selected).read_text())["point"] == point).lower()
    run = with_retry(lambda: client.create_run(exp_id, run_name=name, tags={"mlflow.runName": name, **tags}))
    rid = run.info.run_id
    now = int(time.time() * 1000)
    params = [Param(k, str(v)[:6000]) for k, v in flatten(cfg).items()]
    series = [Metric(col, float(v), now, int(r)) for col in history.columns if col not in NON_METRICS
              for r, v in zip(history["round"], history[col]) if _finite(v)]
    final = [Metric(f"final/{k}", float(v), now, metrics["final_round"]) for k, v in metrics["final"].items()]
    final += [Metric(f"final/{name}/{k}", float(v), now, metrics["final_round"])  # final/mean/test/acc
              for name, var in metrics.get("variants", {}).items() for k, v in var["final"].items()]
    batch = series + final
    with_retry(lambda: client.log_batch(rid, params=params[:100], tags=[RunTag(k, v) for k, v in tags.items()]))
    for i in range(100, len(params), 100):
        with_retry(lambda: client.log_batch(rid, params=params[i:i + 100]))
    for i in range(0, len(batch), 1000):
        with_retry(lambda: client.log_batch(rid, metrics=batch[i:i + 1000]))
    for name in ("history.csv", "metrics.json", "run.json"):
        client.log_artifact(rid, str(run_dir / name))
    if partition_figure and Path(partition_figure).exists():
        client.log_artifact(rid, partition_figure, artifact_path="partition")
    with_retry(lambda: client.set_terminated(rid, "FINISHED"))
    if selected:  # a new selection re-tags earlier imports of the other points (no stale selected=true)
        chosen = json.loads(Path(selected).read_text())["point"]
        query = f"tags.method = '{method}' and tags.scale = '{p['scale']}'"
        for other in with_retry(lambda: client.search_runs([exp_id], query)):
            flag = str(other.data.tags.get("point") == chosen).lower()
            if other.data.tags.get("selected") != flag:
                with_retry(lambda: client.set_tag(other.info.run_id, "selected", flag))
    return rid
