"""The import: finished runs' files into the MLflow store, the one way in (``import_runs``).

Training jobs never talk to MLflow: they write history.csv / metrics.json / run.json. ``fedbayes track``
imports them afterwards, either the runs it is given (``--run-dir``, ``--run``: always written anew) or
every run of a table's (experiment, method) pairs (``--pairs``, the workflow's import job: one process per
table, and a run the store already holds as it is is not written again). The Snakemake rule holds the
``mlflow_db`` resource (profile: ``--resources mlflow_db=1``) and the import a file lock on a SQLite store
(``store.store_lock``), so one writer touches it at a time, and every write retries on a locked database.

A run the store holds already: a FINISHED, active run of each of its keys (the method's own, each
variant's) with the same content hash and selected tag, or one of a newer training of that key (another
clone's, sharing the store: ``writer.order``), which this import leaves in place rather than replace and
be replaced by in turn.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from fedbayes.study import ConfigError, paths, seeds, selection_seeds, stand_in_size, swept_points
from fedbayes.runfiles import curves_of, read_history, read_metrics, read_run_info, read_selected
from fedbayes.runpaths import run_dir, selected_file
from fedbayes.tracking.cells import cell_tags, table_cells
from fedbayes.tracking.content import content_hash, evaluated_history, trained_at
from fedbayes.tracking.experiment import open_experiment
from fedbayes.tracking.marker import write_marker
from fedbayes.tracking.store import (check_reachable, check_store, sqlite_held, sqlite_path, store_lock,
                                     tracking_uri)
from fedbayes.tracking.writer import retag_selected, run_key, write_run


@dataclass(frozen=True)
class RunRef:
    """One training run to import: what it is, where its files are, its partition figure and selection."""
    experiment: str
    method: str
    point: str
    seed: int
    folder: Path
    figure: str | None = None
    selected: str | None = None


def imported_runs(p: dict, experiment: str, method: str, point: str) -> list[tuple[str, int]]:
    """(point, seed) of every run of (experiment, method) that is imported: each swept point on the
    selection's seeds, the selected ``point`` on every seed."""
    runs = {(point, s) for s in seeds(p, experiment, method)}
    runs |= {(pt, s) for pt in swept_points(p, experiment, method) for s in selection_seeds(p, experiment, method)}
    return sorted(runs, key=lambda r: (r[1], r[0]))


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
    scale = p.get("scale", "paper")   # a run.json from before runs recorded their scale: taken at its word
    if cfg.get("scale", scale) != scale:   # another scale's run would land under this scale's key and tag
        raise ConfigError(f"{Path(folder) / 'run.json'} records scale {cfg['scale']!r}, but these params track "
                          f"scale {scale!r} runs: track it with the params it ran with (--scale {cfg['scale']})")
    own, runs = run_dir(paths(p), experiment, method, point, seed), Path(paths(p)["runs"]).resolve()
    if Path(folder).resolve().is_relative_to(runs) and Path(folder).resolve() != own.resolve():
        raise ConfigError(f"{folder} is not the run directory of {experiment}/{method}/{point}/seed{seed} ({own}); "
                          "under paths.runs each directory holds its own run")


def pairs_runs(p: dict, pairs: dict[str, list[str]], figure: str) -> list[RunRef]:
    """Every run of each (experiment, method) of ``pairs`` ({experiment: [methods]}, a table's;
    ``imported_runs``). ``figure``: a run's partition figure, with ``{experiment}`` and ``{seed}``."""
    refs = []
    for experiment, methods in pairs.items():
        for method in methods:
            selected = selected_file(paths(p), experiment, method)
            chosen = read_selected(selected)["point"]
            refs += [RunRef(experiment, method, point, seed, run_dir(paths(p), experiment, method, point, seed),
                            figure.format(experiment=experiment, seed=seed), str(selected))
                     for point, seed in imported_runs(p, experiment, method, chosen)]
    return refs


def _held(uri: str, keys: list[str]) -> dict[str, list[tuple[str, str, str, str]]]:
    """run key → [(run id, experiment id, content hash, selected tag)] of its FINISHED, active runs in a
    SQLite store ({} for other stores: everything is imported, and ``writer.replace`` keeps the newest)."""
    db = sqlite_path(uri)
    if db is None or not db.exists() or not keys:
        return {}
    rows = sqlite_held(db, keys)
    held: dict[str, list] = {}
    for rid, eid, k, h, sel in ([] if isinstance(rows, str) else rows):
        held.setdefault(k, []).append((rid, eid, h, sel))
    return held


def _trained(uri: str, run_ids: list[str]) -> dict[str, str]:
    """run id → its tag ``trained`` in a SQLite store."""
    con = sqlite3.connect(f"file:{sqlite_path(uri)}?mode=ro", uri=True, timeout=30)
    try:
        return {rid: v for rid, v in con.execute(
            f"SELECT run_uuid, value FROM tags WHERE key = 'trained' AND run_uuid IN ({','.join('?' * len(run_ids))})",
            run_ids)}
    finally:
        con.close()


def import_runs(p: dict, refs: list[RunRef], marker: str | None = None, *, again: bool = False,
                record: list | None = None, log=print) -> dict:
    """Import each run of ``refs`` (the method's own MLflow run and one per prediction variant); with
    ``marker``, write one marker for them all (``write_marker``); ``record`` receives its lines' dicts.
    Without ``again``, a run the store holds already (module docstring) is not written again and the
    MLflow client is loaded only where one is not. ``log``: a line per (experiment, method). Returns
    {"runs", "imported", "ids": [the method's own MLflow run id per ref]}."""
    uri = tracking_uri(p)
    cells = table_cells(paths(p)["reports"], p.get("tables") or {})
    plan = []
    for r in refs:   # every run is read and checked before the store is touched
        info = read_run_info(r.folder)   # checked: a damaged or truncated run is never imported
        check_run_identity(p, r.experiment, r.method, r.point, r.seed, r.folder, info)
        metrics = read_metrics(r.folder, info)
        variants = sorted(v for v in metrics.get("variants", {}) if v)
        keys = [run_key(p, r.experiment, m, r.point, r.seed) for m in [r.method, *(f"{r.method}@{v}" for v in variants)]]
        flag = str(read_selected(r.selected)["point"] == r.point).lower() if r.selected else ""
        tags = {k.split("/")[2]: cell_tags(cells.get((r.experiment, k.split("/")[2], r.point), [])) for k in keys}
        digest = content_hash(r.folder, extra=json.dumps(tags, sort_keys=True))
        plan.append((r, info, metrics, keys, digest, flag, tags))
    check_reachable(uri)
    check_store(uri)
    counts = {"runs": len(plan), "imported": 0, "ids": []}
    record = [] if record is None else record
    session, chosen, fresh = {}, {}, {}
    with store_lock(uri):
        held = {} if again else _held(uri, [k for _, _, _, keys, *_ in plan for k in keys])
        for r, info, metrics, keys, digest, flag, tags in plan:
            pair = (r.experiment, r.method)
            fresh.setdefault(pair, [0, 0])[1] += 1
            have = _holding(uri, held, keys, digest, flag, trained_at(info))
            if have:
                record += [{"run_id": h[0], "point": r.point, "seed": r.seed, "experiment_id": h[1], "key": k,
                            "content_hash": h[2]} for k, h in zip(keys, have)]
                counts["ids"].append(have[0][0])
                continue
            history = evaluated_history(read_history(r.folder, info), curves_of(metrics))
            client, exp_id = open_experiment(session, p, r.experiment)
            counts["ids"].append(write_run(p, client, exp_id, r.experiment, r.method, r.point, r.seed, r.folder, info,
                                           history, metrics, digest, r.figure, r.selected, record, tags))
            counts["imported"] += 1
            fresh[pair][0] += 1
            if r.selected:
                chosen[pair] = read_selected(r.selected)["point"]
        for (experiment, method), point in chosen.items():   # once per method, after its runs
            client, exp_id = open_experiment(session, p, experiment)
            retag_selected(client, exp_id, p, method, point)
        if marker:
            write_marker(marker, uri, record)
    for (experiment, method), (n, of) in fresh.items():
        if log:
            log(f"{experiment}/{method}: {n} of {of} runs imported"
                + (f", {of - n} already in the store as they are" if n < of else ""))
    return counts


def _holding(uri, held, keys, digest, flag, trained):
    """The store's runs that stand for this import, one per key (run id, experiment id, content hash), or
    None: each key's run with this content (and selected tag), else, every key alike, a newer training's."""
    same = [next((h for h in held.get(k, []) if h[2] == digest and (not flag or h[3] == flag)), None) for k in keys]
    if all(same):
        return [h[:3] for h in same]
    if not all(held.get(k) for k in keys) or sqlite_path(uri) is None:
        return None
    stamps = _trained(uri, [h[0] for k in keys for h in held[k]])
    newer = [max(held[k], key=lambda h: stamps.get(h[0], "")) for k in keys]
    if all(stamps.get(h[0], "") > trained and (not flag or h[3] == flag) for h in newer):
        return [h[:3] for h in newer]
    return None


def log_run(p: dict, experiment: str, method: str, point: str, seed: int, folder: str | Path,
            partition_figure: str | None = None, selected: str | None = None, record: list | None = None) -> str:
    """``import_runs`` of one run, written anew; returns the method's own MLflow run id. ``record``
    receives a dict per MLflow run written (``write_marker``'s lines)."""
    ref = RunRef(experiment, method, point, seed, Path(folder), partition_figure, selected)
    return import_runs(p, [ref], again=True, record=record, log=None)["ids"][0]


def import_pairs(p: dict, pairs: dict[str, list[str]], figure: str, marker: str, log=print) -> dict:
    """The workflow's import of a table: every run of its (experiment, method) ``pairs`` (``pairs_runs``),
    those the store holds already left as they are, and the table's marker."""
    return import_runs(p, pairs_runs(p, pairs, figure), marker, log=log)


def summary(name: str, counts: dict, uri: str, seconds: float) -> str:
    """The import job's last line (the one the workflow prints): how many runs were written, and how
    many the store already held."""
    n, held = counts["imported"], counts["runs"] - counts["imported"]
    if n == 0:
        what = f"all {held} runs of {name} already imported" if held else f"no runs of {name} to import"
    else:
        what = f"{n} of {counts['runs']} runs of {name} imported" + (f" ({held} already there)" if held else "")
    return f"MLflow: {what} into {uri} in {seconds:.1f} s"
