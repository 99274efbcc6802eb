"""Why a finished run, its metrics or a sweep selection is to be made again, read from its files (the
rerun rule: fedbayes.study.rerun; the damage checks: fedbayes.runfiles). Each returns the reasons, empty
where nothing is stale; the rules turn them into rerun markers (``markers.marker``)."""

from __future__ import annotations

import json
from pathlib import Path

from fedbayes.study import default_changes, defaults_key, method_defaults, numerics, recorded_defaults
from fedbayes.study import config_changes
from fedbayes.eval import fingerprint
from fedbayes.runfiles import metrics_problems, run_problems, selection_problems

RUN_FILES = ("run.json", "history.csv")


def numerics_key(method: str, hparams: dict) -> str:
    """The rerun rule's key of a run (a train job's param): the numerics versions of its method and of the
    core, and the defaults it reads from its spec where they differ from the frozen record (so the key
    of a run under today's defaults is what it was)."""
    changed = defaults_key(method, hparams)
    return json.dumps({**numerics(method), **({"defaults": changed} if changed else {})}, sort_keys=True)


def finished(run_dir) -> bool:
    """Whether the run has a file of a finished run (run.json or history.csv)."""
    return any((Path(run_dir) / f).exists() for f in RUN_FILES)


def run_changes(run_dir, method: str, cfg: dict) -> list[str]:
    """Why a finished run is stale: a run file missing or damaged; else its recorded configuration other
    than ``cfg`` (its resolved configuration now), a spec default it read changed, or another numerics
    version than the code declares (a run.json without ``numerics`` was trained at version 1 of each).
    Empty for a run whose record matches, and for one never trained (it runs for its missing outputs)."""
    d = Path(run_dir)
    have = [f for f in RUN_FILES if (d / f).exists()]
    if not have:
        return []
    changed = [f"{f} missing" for f in RUN_FILES if f not in have] or run_problems(d)
    if changed:
        return changed
    info = json.loads((d / "run.json").read_text())
    changed = config_changes(info["config"], cfg, values=True)
    changed = _defaults_shown(changed, *_defaults_read(info, method, cfg))
    changed += [f"default of {method}'s {k} {then!r} -> {now!r}"
                for k, (then, now) in default_changes(method, cfg["hparams"], info.get("defaults")).items()]
    ran, now = info.get("numerics") or {"core": 1, "method": 1}, numerics(method)
    changed += [f"numerics version of {'the core' if k == 'core' else method} {ran.get(k)} -> {now[k]}"
                for k in sorted(now) if ran.get(k) != now[k]]
    return changed


def _defaults_read(info: dict, method: str, cfg: dict) -> tuple[dict, dict]:
    """The defaults the run read (its record) and those it would read now; {} where unknown (a method no
    installed package registers, a record without its method)."""
    try:
        then = recorded_defaults(info)
    except (KeyError, TypeError, AttributeError):
        then = {}
    try:
        now = method_defaults(method, cfg.get("hparams") or {})
    except (KeyError, TypeError, AttributeError):
        now = {}
    return then, now


ABSENT = "<absent>"


def _defaults_shown(changes: list[str], then: dict, now: dict) -> list[str]:
    """Rerun reasons with a hyperparameter one side leaves to its spec shown at the default that side reads
    (the run's recorded ``then``, today's ``now``) instead of '<absent>': ``hparams.swag_epochs 1 (its
    default) -> 2``. Only the wording changes: which runs are stale is ``config_changes``'s."""
    def shown(v):
        return f"{v if isinstance(v, str) else json.dumps(v)} (its default)"

    out = []
    for line in changes:
        key, _, values = line.partition(" ")
        name = key.removeprefix("hparams.")
        old, sep, new = values.partition(" -> ")
        if key.startswith("hparams.") and "." not in name and sep:
            old = shown(then[name]) if old == ABSENT and name in then else old
            new = shown(now[name]) if new == ABSENT and name in now else new
            line = f"{key} {old} -> {new}"
        out.append(line)
    return out


def metrics_changes(run_dir, codes) -> tuple[str, list[str]]:
    """Why a run's metrics.json is to be computed again, as (kind, reasons): ``("damaged", problems)`` for
    a damaged one or another run's; ``("changed", [...])`` naming each metric it holds under another code
    than the code's, or does not hold (``eval.fingerprint.changes``; ``codes()`` gives the code's, called
    only here: its cost is paid only where a metrics.json is met); ``("", [])`` otherwise (none yet: the
    job runs for its output)."""
    problems, metrics = metrics_problems(Path(run_dir))
    if problems:
        return "damaged", problems
    if metrics is None:
        return "", []
    return "changed", list(fingerprint.changes(metrics, codes(), fingerprint.has_predictions(run_dir)).values())


def selection_damage(selected) -> list[str]:
    """The problems of a damaged selected.json (none for a sound or missing one)."""
    return selection_problems(selected)[0]


def recorded_point(selected) -> str | None:
    """The point a selected.json records, or None where it is missing or damaged."""
    _, sel = selection_problems(selected)
    return sel["point"] if sel else None
