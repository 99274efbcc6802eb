"""MLflow import of finished runs: ``import_runs`` is the one way runs enter the store, and
``fedbayes track`` its one command (``--run-dir`` / ``--run``: given runs; ``--pairs``: a table's runs,
the workflow's import job).

Modules, one concern each:

- ``store``: the store's URI, reachability (fail fast, one line), the SQLite lock, look-ups of what it holds.
- ``marker``: the workflow's import markers and whether a store still holds what they record.
- ``content``: what a run's files say (code, times, hardware, units, paths every clone has).
- ``cells``: the published value and verdict of each table cell a run backs.
- ``experiment``: the MLflow experiment (get-or-create, description, view).
- ``writer``: one training run as MLflow runs (own prediction, variants), replacing older imports atomically.
- ``importer``: which runs, what the store already holds, ``import_runs``.
"""

from fedbayes.tracking.content import code_tags, content_hash
from fedbayes.tracking.experiment import EXPERIMENT_KIND, VIEW_KEY, VIEW_STATE, experiment_description
from fedbayes.tracking.importer import (RunRef, check_run_identity, import_pairs, import_runs, imported_runs,
                                        log_run, pairs_runs, summary)
from fedbayes.tracking.marker import REHEARSAL_IMPORT, marker_problems, marker_runs, write_marker
from fedbayes.tracking.store import StoreDamaged, TrackingUnavailable, check_reachable, store_lock, tracking_uri

__all__ = ["EXPERIMENT_KIND", "REHEARSAL_IMPORT", "VIEW_KEY", "VIEW_STATE", "RunRef", "StoreDamaged",
           "TrackingUnavailable", "check_reachable", "check_run_identity", "code_tags", "content_hash",
           "experiment_description", "import_pairs", "import_runs", "imported_runs", "log_run", "marker_problems",
           "marker_runs", "pairs_runs", "store_lock", "summary", "tracking_uri", "write_marker"]
