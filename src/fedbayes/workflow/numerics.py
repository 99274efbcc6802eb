"""The numerics gate: a finished run is adopted only by code that computes its method's numbers as the
code of the method's last numerics check did (fedbayes.engine.goldens.numerics_check). Where the code (the
method's sources, the numerics versions) or the machine class differs from that of the method's record
(work/numerics/<method>.json), or a run of the method takes a code path no golden of that check covered,
the method's check is due. The checks due in the whole study run in one job (rule ``numerics_check``: one
process, which replays each due code path in turn), whose gate file is an input of the jobs that would use
a due method's numbers. Unchanged code on the same machine costs a source hash and plans no job."""

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


def study_methods(params: dict) -> list[str]:
    """The methods the study's experiments run, in params order."""
    return list(dict.fromkeys(m for e in params["experiments"] for m in experiment_config(params, e)["methods"]))


def gate(work, due: dict[str, list[dict]]) -> str | None:
    """The gate file of the checks due (``{method: [hyperparameters of each code path due]}``; None when
    none is): named by a hash of the paths due and of the state of their methods' records, so that a check
    made again (new records) is a new file."""
    due = {m: hps for m, hps in due.items() if hps}
    if not due:
        return None
    state = file_state([record_file(work, m) for m in due])
    key = hashlib.sha256(json.dumps([[[m, [run_tag(m, hp) for hp in hps]] for m, hps in due.items()], state],
                                    sort_keys=True).encode()).hexdigest()[:12]
    return f"{work}/numerics/gate/check-{key}.txt"


def study_gate(params: dict, work) -> tuple[str, dict[str, list[str]]] | None:
    """(the gate file, {method: the hyperparameters of each code path due, as JSON}) for the checks due
    among the study's methods, else None."""
    due = {m: due_hparams(work, m, method_hparams(params, m)) for m in study_methods(params)}
    path = gate(work, due)
    return (path, {m: [json.dumps(hp, sort_keys=True) for hp in hps] for m, hps in due.items() if hps}) if path else None
