"""Writing one training run into MLflow: a run for the method's own prediction and one per prediction
variant, each replacing the earlier imports of its key atomically.

- params: the run's resolved configuration and ``defaults.<name>``, the defaults its method read from its
  spec (run.json ``defaults``; a run from before that record: ``catalog.FROZEN_DEFAULTS``).
- prediction variants (``bayesadmm@mean``): one MLflow run per evaluated name, with tags ``method``
  (``bayesadmm@mean``), ``base_method`` and ``variant`` (``none`` for the method's own prediction) and the
  variant's metrics under the plain names, so ``tags.method = 'bayesadmm@mean'`` finds it and it compares
  with other methods column by column. A variant's metrics are on the variant's run only.
- ``mlflow.runColor``: the method's colour in the project's figures (``reports.figures.method_style``), so
  a comparison of several methods draws each in its own colour, as the figures do.
- ``published/<metric>`` / ``verdict/<metric>``: the cells the run backs (``tracking.cells``).

Re-importing is atomic: a run is identified by its tag ``run_key``; the new import is written completely
and marked FINISHED first, and only then are the earlier runs of that key deleted (the previous import,
and RUNNING / FAILED leftovers of an import that crashed). A crash at any point leaves the previous good
import visible; an import that fails while the store still answers marks its partial run FAILED.
"Earlier" is by (tag ``trained``, tag ``import_id``): the training's finish time, then the import's start
in ns and a random part. An import deletes only imports of older trainings, or older imports of the same
training, never a newer one: two importers of one run at once (two Snakemake invocations; a tracking
server, which takes no file lock) leave the newer import, and two clones sharing one store, each with its
own training of a run, leave the newer training instead of deleting each other's in turn. The older
importer, finding its run deleted under it, adopts the newer one (same content).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from fedbayes.study import METHOD_VARIANTS, recorded_defaults
from fedbayes.runfiles import read_selected
from fedbayes.tracking.content import (EVAL_PREFIXES, NON_METRICS, code_tags, finite, flatten, hardware_tags,
                                       relative, run_note, run_times, scaled, shared_file, trained_at, unit_scale)
from fedbayes.tracking.store import with_retry


def run_key(p: dict, experiment: str, evaluated: str, point: str, seed: int) -> str:
    return f"{p['scale']}/{experiment}/{evaluated}/{point}/seed{seed}"


def order(tags: dict) -> tuple[str, str]:
    """Which of two imports of one key is the newer: the later training, then the later import."""
    return tags.get("trained", ""), tags.get("import_id", "")


def run_colour(evaluated: str) -> str:
    """The method's colour in the project's figures (a variant: its method's)."""
    from fedbayes.reports.figures import method_style   # (matplotlib: only where a run is written)

    return method_style(evaluated)["color"]


def write_run(p, client, exp_id, experiment, method, point, seed, run_dir, info, history, metrics, digest,
              partition_figure, selected, record, cells) -> str:
    """Write the MLflow runs of one training run (its own prediction's, each variant's); returns the own
    one's id. ``cells``: evaluated name → its published-cell tags (``cells.cell_tags``)."""
    from mlflow.entities import Metric, Param

    run_dir = Path(run_dir)
    cfg = info["config"]  # what actually produced these numbers
    start, end, stamps, how = run_times(run_dir, info, history)
    code = code_tags(info)
    chosen = read_selected(selected)["point"] if selected else None
    variants = sorted(v for v in metrics.get("variants", {}) if v)
    kinds = METHOD_VARIANTS.get(method, {})   # variant → "point" | "samples"; {} for an unknown method
    predictions = run_dir / "predictions.npz"
    base = {"experiment": experiment, "base_method": method, "point": point, "seed": str(seed),
            "content_hash": digest, "trained": trained_at(info),
            "import_id": f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}",
            "scale": p["scale"], "data": info["config"].get("data", "real"),   # "stand-in (tiny)": a rehearsal's
            **code, "times": how, "config_hash": info["config_hash"],
            "partition_hash": info["config"].get("partition_hash", ""),
            **hardware_tags(info), "torch": info.get("torch", ""), "run_dir": relative(run_dir)}
    if shared_file(predictions):   # a path every clone can open (predictions.npz is usually git-ignored)
        base["predictions"] = relative(predictions)
    if "diverged" in info:  # a finished run whose training became NaN/inf at that round
        base |= {"status": "diverged", "diverged_round": str(info["diverged"]["round"]),
                 "diverged_reason": info["diverged"]["reason"]}
    if chosen is not None:
        base["selected"] = str(chosen == point).lower()
    params = [Param(k, str(v)[:6000]) for k, v in flatten({**cfg, "defaults": recorded_defaults(info)}).items()]
    rows = list(zip(history["round"], stamps))

    def series(col: str, as_name: str):
        scale = unit_scale(col, variants)
        return [Metric(as_name, scaled(v, scale), ts, int(r)) for (r, ts), v in zip(rows, history[col]) if finite(v)]

    def finals(values: dict, have_series) -> list:
        return [Metric(f"final/{k}", scaled(v, unit_scale(k)), end, metrics["final_round"])
                for k, v in values.items() if finite(v) and not have_series(k)]

    # training's own columns (loss, clients, times, bytes): on every run; evaluated columns: per prediction
    shared = [c for c in history.columns if c not in NON_METRICS and not c.startswith(EVAL_PREFIXES)
              and c.split("/", 1)[0] not in variants]
    ids = {}
    for variant in ["", *variants]:
        evaluated = f"{method}@{variant}" if variant else method
        key = run_key(p, experiment, evaluated, point, seed)
        # the method and seed first: the runs table cuts a long name (the point is also a tag and params)
        name = f"{evaluated} s{seed}" + (f" {point}" if point != "default" else "")
        if variant:
            cols = [(c, c.split("/", 1)[1]) for c in history.columns if c.startswith(f"{variant}/")]
            batch = [m for c, n in cols + [(c, c) for c in shared] for m in series(c, n)]
            batch += finals(metrics["variants"][variant].get("final", {}), lambda k: f"{variant}/{k}" in history.columns)
        else:
            own = [c for c in history.columns if c.startswith(EVAL_PREFIXES)]
            batch = [m for c in own + shared for m in series(c, c)]
            batch += finals(metrics["final"], lambda k: k in history.columns)
        tags = {**base, "run_key": key, "method": evaluated, "variant": variant or "none",
                "prediction": kinds.get(variant, "unknown"), "mlflow.runColor": run_colour(evaluated),
                **cells.get(evaluated, {}),
                "mlflow.note.content": run_note(experiment, evaluated, point, seed, info, code, how)}

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

        ids[variant] = replace(client, exp_id, key, name, tags, start, end, write)
        if record is not None:
            record.append({"run_id": ids[variant], "point": point, "seed": seed, "experiment_id": exp_id,
                           "key": key, "content_hash": digest})
    return ids[""]


def replace(client, exp_id: str, key: str, name: str, tags: dict, start: int, end: int, write) -> str:
    """Write a new run of ``key`` (``write(run_id)``), mark it FINISHED, then delete the runs of ``key``
    older than it (``order``): the previous import and leftovers of crashed ones, never a newer import.
    Until FINISHED the previous import stays. Where a newer FINISHED import of ``key`` is there already (another
    clone's later training, a later import), this run is deleted instead: one active run per key. Returns the
    run that holds the key: this one, or that newer one."""
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
    others = [r for r in with_retry(lambda: client.search_runs([exp_id], f"tags.run_key = '{key}'"))
              if r.info.run_id != rid]
    newer = [r for r in others if r.info.status == "FINISHED" and order(r.data.tags) > order(tags)]
    if newer:   # another clone's later training (or a later import) holds the key: it stays, this one goes
        stale = [rid]
        rid = max(newer, key=lambda r: order(r.data.tags)).info.run_id
    else:
        stale = [r.info.run_id for r in others if order(r.data.tags) < order(tags)]
    for old in stale:
        try:
            with_retry(lambda: client.delete_run(old))
        except Exception:
            if _active(client, old):   # not already deleted by another importer
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
            if other.info.status == "FINISHED" and order(t) > order(tags) \
                    and t.get("content_hash") == tags["content_hash"]:
                return other.info.run_id
    except Exception:
        return None
    return None


def retag_selected(client, exp_id: str, p: dict, method: str, chosen: str) -> None:
    """A new selection re-tags earlier imports of the other points (no stale selected=true)."""
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
