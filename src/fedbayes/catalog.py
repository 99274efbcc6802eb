"""Names params.yaml may use, without importing torch: methods with their prediction variants and
numerics versions (derived from the method specs, ``fedbayes.methods.spec``), and models. Validation
(every CLI command and the Snakefile) reads these; importing the implementations would cost every
non-training job 4 s of torch import. tests/test_config.py checks that the models listed here and the
implementations (``fedbayes.models.MODELS``) agree."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from fedbayes.methods.spec import REQUIRED, MethodSpec, code_defaults, method_specs

# Methods are described once each, in their packages (``fedbayes.methods.<key>`` or an installed package's),
# registered under the entry-point group ``fedbayes.methods``; the tables below are derived from those specs.
METHOD_SPECS: dict[str, MethodSpec] = method_specs()

# method → {prediction variant: "point" | "samples"}; "" is the method's own prediction
# (a sampled variant may be evaluated less often, see engine.loop.evaluated_variants)
METHOD_VARIANTS: dict[str, dict[str, str]] = {m: dict(s.variants) for m, s in METHOD_SPECS.items()}

# Hyperparameters with a default in the code: a resolved configuration leaves out a value equal to its
# default, so that declaring the default in params.yaml (or adding a new option) changes no run's
# configuration and reruns nothing (the ``code_default`` fields of the methods' hyperparameters).
HPARAM_DEFAULTS: dict[str, object] = code_defaults(METHOD_SPECS)

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
FROZEN_DEFAULTS: dict[str, dict] = json.loads((Path(__file__).parent / "methods" / "frozen_defaults.json").read_text())


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


# model name -> the options params.yaml may give it (``experiments.<e>.model``, besides ``name``): the keyword
# arguments of its builder in fedbayes.models after (input shape or size, number of classes);
# tests/test_config.py checks them against the builders' signatures
MODEL_KEYS: dict[str, tuple[str, ...]] = {
    "mlp": ("hidden", "activation"),
    **{name: () for name in ("logistic", "cifar_cnn", "emnist_cnn", "lenet5", "acar_cnn", "mcmahan_cnn",
                             "resnet20_gn", "resnet18_gn", "cnn_dropout")},
}
MODEL_NAMES: tuple[str, ...] = tuple(MODEL_KEYS)


def split_variant(name: str) -> tuple[str, str]:
    """``bayesadmm@mean`` → (``bayesadmm``, ``mean``); a plain name has variant ``""``."""
    base, _, variant = name.partition("@")
    return base, variant
