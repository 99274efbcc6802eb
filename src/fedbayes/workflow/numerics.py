"""The numerics gate: a finished run is adopted only by code that computes its method's numbers as the
code of the method's last numerics check did (fedbayes.engine.goldens.numerics_check). Where the code (the
method's sources, the numerics versions) or the machine class differs from that of the method's record
(work/numerics/<method>.json), or a run of the method takes a code path no golden of that check covered,
the method's gate is due: a job (rule ``numerics_check``) that replays its goldens, an input of the jobs
that would use its numbers. Unchanged code on the same machine costs a source hash and plans no job."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from fedbayes.study import experiment_config, sweep_points
from fedbayes.study import method_hparams as resolved_hparams
from fedbayes.engine.goldens import check_due, run_tag
from fedbayes.workflow.markers import file_state


def record_file(work, method: str) -> Path:
    """The method's check record: ``<work>/numerics/<method>.json``."""
    return Path(work, "numerics", f"{method}.json")


def method_hparams(params: dict, method: str) -> list[dict]:
    """The resolved hyperparameters of each code path the method's runs take in ``params`` (every
    experiment that runs it, every sweep point), one per path (``run_tag``), in params order."""
    out = {}
    for e in params["experiments"]:
        if method not in experiment_config(params, e)["methods"]:
            continue
        for point in sweep_points(params, e, method):
            hp = resolved_hparams(params, e, method, point)
            out.setdefault(run_tag(method, hp), hp)
    return list(out.values())


def due_hparams(work, method: str, hparams: list[dict]) -> list[dict]:
    """The ``hparams`` (code paths) whose check is due: all of them where the code or the machine class
    changed since the method's last check, else those no golden of it covered."""
    record = record_file(work, method)
    return [hp for hp in hparams if check_due(method, record, hp)]


def gate(work, method: str, due: list[dict]) -> str | None:
    """The gate file of a method whose check is due (None when none is): named by a hash of the paths due
    and of the state of its record, so that a check made again (a new record) is a new file."""
    if not due:
        return None
    state = file_state([record_file(work, method)])
    key = hashlib.sha256(json.dumps([method, [run_tag(method, hp) for hp in due], state], sort_keys=True)
                         .encode()).hexdigest()[:12]
    return f"{work}/numerics/gate/{method}.check-{key}.txt"


def method_gate(params: dict, work, method: str) -> tuple[str, list[str]] | None:
    """(the method's gate file, the hyperparameters of each code path due, as JSON) where its check is
    due, else None."""
    due = due_hparams(work, method, method_hparams(params, method))
    path = gate(work, method, due)
    return (path, [json.dumps(hp, sort_keys=True) for hp in due]) if path else None
