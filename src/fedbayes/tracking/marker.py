"""An import's marker: the workflow's record of what a table's import put into which store.

``fedbayes track --marker`` records the store (the URI) and each imported MLflow run's key and content
hash. ``marker_problems`` trusts a marker only where that store holds a FINISHED run of each key with
that content (SQLite read directly, a tracking server asked over its REST API): another URI, a server or
store that lacks the runs, or runs of other content make the import stale, and the rules re-import.
"""

from __future__ import annotations

from pathlib import Path

from fedbayes.fileio import write_text_atomic
from fedbayes.tracking.store import is_server, server_held, sqlite_held, sqlite_path

# the workflow's import of every (experiment, method) at rehearsal scale (its marker, its rule mlflow_rehearsal)
REHEARSAL_IMPORT = "rehearsal"
MARKER_STORE = "store "   # the marker's first line: "store <tracking URI>"


def write_marker(path: str | Path, uri: str, imported: list[dict]) -> None:
    """The store, then a line per MLflow run (the method's own, each variant's):
    "<run id> <point> seed<seed> <experiment id> <run key> <content hash>"."""
    lines = [MARKER_STORE + uri] + [f"{r['run_id']} {r['point']} seed{r['seed']} {r['experiment_id']} {r['key']} "
                                    f"{r['content_hash']}" for r in imported]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, "\n".join(lines) + "\n")


def marker_problems(marker: str | Path, uri: str) -> list[str]:
    """Why an import marker (``write_marker``) no longer stands for runs in the store, or [] when it does
    (or cannot be told: a database other than SQLite, a server that does not answer now). It stands only
    for the store it names, and only where that store holds a FINISHED, active run of each of its keys
    with the content hash it records. A marker from before stores and hashes were recorded is stale."""
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
    if sqlite_path(uri) is not None:
        rows = sqlite_held(sqlite_path(uri), sorted({k for k, _ in want}))
        found = rows if isinstance(rows, str) else {(k, h) for _, _, k, h, _ in rows}
    elif is_server(uri):
        found = server_held(uri, sorted({e[3] for e in entries}), {k for k, _ in want})
    else:
        return []
    if isinstance(found, str):
        return [found] if found else []
    lost = want - found
    return [f"{len(lost)} of its {len(want)} imported runs are not in {uri} as imported"] if lost else []


def marker_runs(marker: str | Path, scale: str, experiment: str, method: str) -> int:
    """How many MLflow runs of (experiment, method) an import marker records: the method's own and each
    prediction variant's; 0 without a marker."""
    marker = Path(marker)
    if not marker.exists():
        return 0
    keys = [line.split()[4] for line in marker.read_text().splitlines()[1:] if len(line.split()) == 6]
    return sum(1 for k in keys if k.split("/")[:2] == [scale, experiment] and k.split("/")[2].split("@")[0] == method)
