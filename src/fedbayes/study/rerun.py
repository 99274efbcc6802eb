"""The rerun rule: what makes a finished run stale. Its resolved configuration (``config_changes``), the
numerics versions of its method and of the shared core, and the defaults its method reads from its spec;
never a source file's edit."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from fedbayes.methods.hyperparameters import REQUIRED
from fedbayes.study.names import METHOD_SPECS


# Numerics versions: the rerun rule. A finished run is rerun when what it would compute changes — its
# resolved configuration (params.yaml), or the numerics version of its method or of the shared core
# (engine, models, data, partitions, local optimisers) — never because a source file was edited. A
# change that alters any number a run computes bumps the version it touches, in the same commit;
# tests/test_replay.py replays the first round of one committed run per method and fails, naming the
# method, when the code no longer gives its history bit for bit. A refactor that keeps the numbers
# bumps nothing and retrains nothing. A run.json without ``numerics`` was trained at version 1.
CORE_NUMERICS = 1
# Each method's version is its spec's ``numerics`` (why each was bumped: a comment beside it).
METHOD_NUMERICS: dict[str, int] = {m: s.numerics for m, s in METHOD_SPECS.items()}


def numerics(method: str) -> dict[str, int]:
    """The numerics versions a run of ``method`` is trained under (recorded in its run.json)."""
    return {"core": CORE_NUMERICS, "method": METHOD_NUMERICS[method]}


# Defaults: the values a run's method reads from its spec (``self.p``) where its resolved configuration
# gives none. They decide numbers as its configuration does, so a run records them (run.json
# ``defaults``, MLflow params ``defaults.*``) and the rerun rule compares them: a finished run whose
# recorded defaults differ from today's is stale. Runs trained before the record were trained under the
# defaults of FROZEN_DEFAULTS (each built-in method's, written once when the record was introduced and
# never edited: a change of a default is made in the spec, and this file is what it is compared with);
# the rerun key (workflow/rules/train.smk) holds only a run's defaults that differ from it, so adding
# the record changed no committed run's key. A hyperparameter the record lacks (a new option) is not a
# change: its code is new, and a new option that changes numbers bumps the method's numerics version.
FROZEN_DEFAULTS: dict[str, dict] = json.loads((Path(__file__).parents[1] / "methods" / "frozen_defaults.json").read_text())


def method_defaults(method: str, hparams: dict) -> dict:
    """name → the default a run of ``method`` with hyperparameters ``hparams`` reads from its spec (every
    field of its ``params`` that ``hparams`` does not set and that has a default), and the values its spec
    fixes (``MethodSpec.fixed``); JSON values, as recorded in run.json."""
    spec = METHOD_SPECS[method]
    out = {f.name: f.default for f in dataclasses.fields(spec.params) if f.name not in hparams and f.default is not REQUIRED}
    return json.loads(json.dumps({**out, **spec.fixed}))


def default_changes(method: str, hparams: dict, ran: dict | None = None) -> dict[str, tuple]:
    """name → (the default a run used, today's) for each default of ``method`` that changed since the run:
    ``ran`` is its run.json ``defaults`` (None: a run from before the record, trained under
    FROZEN_DEFAULTS; a method without a frozen record: under unknown defaults, each a change). A name the
    run did not record (an option added since) or that ``hparams`` now sets (a configuration change,
    ``config_changes``) is not one."""
    now = method_defaults(method, hparams)
    if ran is None:
        if method not in FROZEN_DEFAULTS:
            return {k: ("unrecorded", v) for k, v in now.items()}
        ran = FROZEN_DEFAULTS[method]
    return {k: (ran[k], now[k]) for k in sorted(now) if k in ran and ran[k] != now[k]}


def defaults_key(method: str, hparams: dict) -> dict:
    """The part of a run's defaults in its rerun key: those that differ from FROZEN_DEFAULTS (a method
    without a frozen record, a plug-in or a new method: all of them). {} for every run today, so the
    record changed no committed run's key; a default's edit changes the key of exactly the runs that read
    it."""
    return {k: now for k, (_, now) in default_changes(method, hparams).items()}


def recorded_defaults(info: dict) -> dict:
    """The defaults a finished run was trained under, from its run.json: its ``defaults`` record, or, for a
    run from before the record, its method's FROZEN_DEFAULTS less the values its configuration sets ({}
    for a method without a frozen record)."""
    if "defaults" in info:
        return info["defaults"]
    hp = info["config"].get("hparams", {})
    return {k: v for k, v in FROZEN_DEFAULTS.get(info["config"]["method"], {}).items() if k not in hp}


def config_hash(cfg: Any) -> str:
    return hashlib.sha256(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:16]


RECORDED_ONLY = ("partition_hash",)  # keys training adds to the run configuration (engine-side facts)


def config_changes(recorded: dict, current: dict, prefix: str = "", values: bool = False) -> list[str]:
    """Dotted keys whose value differs between a run's recorded configuration (``run.json``'s
    ``config``) and the configuration params.yaml gives it now; [] when the run is current. With
    ``values``, each with its recorded and its current value (``hparams.lr 0.001 -> 0.002``)."""
    if not prefix:
        recorded = {k: v for k, v in recorded.items() if k not in RECORDED_ONLY}
        current = json.loads(json.dumps(current))  # the recorded one went through JSON too
    out = []
    for k in sorted(set(recorded) | set(current)):
        a, b = recorded.get(k, "<absent>"), current.get(k, "<absent>")
        if isinstance(a, dict) and isinstance(b, dict):
            out += config_changes(a, b, f"{prefix}{k}.", values)
        elif a != b and not _same_number(a, b):
            out.append(f"{prefix}{k}" + (f" {_shown(a)} -> {_shown(b)}" if values else ""))
    return out


def _shown(v) -> str:
    """A configuration value as a rerun reason shows it: a string as written, anything else as JSON."""
    return v if isinstance(v, str) else json.dumps(v)


def _same_number(a, b) -> bool:
    """'1e-05' recorded by older runs (YAML 1.1 reads a point name's 1e-05 as a string) is 1e-05."""
    if not (isinstance(a, str) ^ isinstance(b, str)) or isinstance(a, bool) or isinstance(b, bool):
        return False
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return False
