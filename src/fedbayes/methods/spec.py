"""How a method describes itself, torch-free, and the registry of the installed methods: a ``MethodSpec``
(key, prediction variants, numerics version, hyperparameters, needs, where the tensor math lives) and
``method_specs`` with what goes with it (the entry points, the plug-ins left out and why, the rules and
flags of every method's hyperparameters together). How a hyperparameter is declared (``hparam``,
``Hyperparameters``, the rule constants) lives in ``fedbayes.methods.hyperparameters``.

Everything that names methods without running them reads the specs: validation of params.yaml (the
params schema's method hyperparameters and the sweepable keys are generated from the ``params``
dataclasses, ``fedbayes.study.complete_schema``), ``fedbayes.study`` (variants, numerics versions,
code defaults), the DAG and the reports. The implementation (``"module:Class"``) is imported only by
``MethodSpec.load``, so none of them imports torch.

The registry (``method_specs``) is what installed packages register under the entry-point group
``fedbayes.methods`` (docs/adding-a-method.md); fedbayes' own methods are registered the same way, in
its pyproject.toml, one package each under ``fedbayes/methods/``::

    [project.entry-points."fedbayes.methods"]
    fedavg = "fedbayes.methods.fedavg:SPEC"
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

# The declaration names installed plug-ins import from this module (``from fedbayes.methods.spec import
# MethodSpec, hparam, …``) stay importable here, so a plug-in written against it keeps working;
# fedbayes' own code imports them from ``fedbayes.methods.hyperparameters``, where they are defined.
from fedbayes.methods.hyperparameters import (BOOL, NONNEG, NONNEG_INT, POSINT, POSNUM, REQUIRED,  # noqa: F401
                                              SCHEDULES, SHARE, EngineOptions, Hyperparameters, LocalTraining,
                                              enum, hparam, hyperparameters, like)

ENTRY_POINT_GROUP = "fedbayes.methods"
DISTRIBUTION = "fedbayes"   # the distribution whose entry points are the built-in methods
KEY_PATTERN = re.compile(r"^[a-z_]+$")   # a method is a path component of every run (workflow/rules/common.smk)
PREDICTIONS = ("point", "samples")
NEEDS = {
    "server_data": "a share of the training points held out on the server (Method.server_share says how much)",
    "local_models": "local_weights() returns each client's model (local/acc, experiments.<e>.local_eval)",
}
NEED_HOOKS = {"server_data": "server_share", "local_models": "local_weights"}   # the Method hook each need asks for

POINT: Mapping[str, str] = {"": "point"}
RESERVED = ("sweep", "seeds", "overrides")   # keys of methods.<m> that are not hyperparameters


@dataclass(frozen=True)
class MethodSpec:
    """One federated method, described without torch.

    key:            its name in params.yaml, run paths, MLflow and tables (``[a-z_]+``)
    implementation: ``"package.module:Class"``, a ``fedbayes.methods.core.base.Method`` subclass, imported
                    only when a run trains
    params:         its ``Hyperparameters`` subclass (types, defaults, rules, documentation)
    variants:       prediction variant → ``"point"`` | ``"samples"``; ``""`` is its own prediction,
                    another is reported as ``<key>@<variant>``
    numerics:       the version of its numbers (the rerun rule, ``fedbayes.study.rerun``): bump it in the
                    commit that changes any number one of its runs computes
    needs:          what it needs from the run beyond the clients' data (keys of ``NEEDS``)
    fixed:          hyperparameters the method fixes (``fedep_i`` is FedEP with ``variant: I``)
    doc:            one line: the paper and what the method does
    schedules:      the ``lr_schedule`` values its training honours (validation refuses the others): the
                    shared local loop (``Method.local_train``) honours ``constant`` and ``linear_local``;
                    ``cosine_rounds`` needs the round, which only a method passing it to
                    ``core.ivon.lr_schedule`` honours; a method with a loop of its own declares its own
    family:         the row of panels its learning curves are drawn in (methods of one family share a row);
                    ``""``: a row of its own, named after its key
    colour:         its colour in every figure (``#rrggbb``, no two methods alike); ``""``: one of the
                    figures' spare colours, chosen by its key
    """

    key: str
    implementation: str
    params: type[Hyperparameters] = Hyperparameters
    variants: Mapping[str, str] = field(default_factory=lambda: dict(POINT))
    numerics: int = 1
    needs: frozenset[str] = frozenset()
    fixed: Mapping[str, Any] = field(default_factory=dict)
    doc: str = ""
    schedules: tuple[str, ...] = ("constant", "linear_local")
    family: str = ""
    colour: str = ""

    def __post_init__(self) -> None:
        problems = []
        if not isinstance(self.key, str) or not KEY_PATTERN.match(self.key):
            problems.append(f"key must match {KEY_PATTERN.pattern}")
        if not isinstance(self.implementation, str) or not re.match(r"^[\w.]+:[\w.]+$", self.implementation):
            problems.append(f"implementation must be 'module:Class', got {self.implementation!r}")
        if not (isinstance(self.params, type) and issubclass(self.params, Hyperparameters)):
            problems.append("params must be a subclass of fedbayes.methods.spec.Hyperparameters")
        if "" not in self.variants or any(k not in PREDICTIONS for k in self.variants.values()) \
                or not all(v == "" or KEY_PATTERN.match(v) for v in self.variants):
            problems.append(f"variants must map '' and [a-z_]+ names to one of {PREDICTIONS}, got {dict(self.variants)}")
        if not (isinstance(self.numerics, int) and not isinstance(self.numerics, bool) and self.numerics >= 1):
            problems.append(f"numerics must be an integer >= 1, got {self.numerics!r}")
        if isinstance(self.params, type) and issubclass(self.params, Hyperparameters) and \
                {f.name for f in dataclasses.fields(self.params)} & set(RESERVED):
            problems.append(f"params may not declare {sorted(set(RESERVED))} (keys of methods.<m> in params.yaml)")
        if not set(self.schedules) <= set(SCHEDULES) or "constant" not in self.schedules:
            problems.append(f"schedules must hold 'constant' and name lr_schedule values {SCHEDULES}, "
                            f"got {self.schedules!r}")
        if not isinstance(self.family, str):
            problems.append(f"family must be a string, got {self.family!r}")
        if not (self.colour == "" or isinstance(self.colour, str) and re.match(r"^#[0-9a-f]{6}$", self.colour)):
            problems.append(f"colour must be '#rrggbb' (lower case) or '', got {self.colour!r}")
        if set(self.needs) - set(NEEDS):
            problems.append(f"needs: unknown {sorted(set(self.needs) - set(NEEDS))}; known: {sorted(NEEDS)}")
        if problems:
            raise ValueError(f"method spec {self.key!r}: " + "; ".join(problems))
        object.__setattr__(self, "needs", frozenset(self.needs))

    def hparams(self, sweep: bool = False) -> list[str]:
        """The hyperparameters it takes: its ``params``' fields (the shared ones of ``Hyperparameters``,
        local training and evaluation cadence, and its own), or those a sweep grid may vary. A block of
        params.yaml for this method sets no other key (``fedbayes.study``): the schema's rules are every
        method's together, and another method's key there would be accepted and never read."""
        return [f.name for f in dataclasses.fields(self.params) if not sweep or f.metadata["sweep"]]

    def load(self) -> type:
        """The implementation class (imports it, and torch): with ``fixed`` hyperparameters applied."""
        return _load(self.implementation, tuple(self.fixed.items()), self.key)


@cache
def _load(implementation: str, fixed: tuple, key: str) -> type:
    module, _, name = implementation.partition(":")
    obj: Any = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj.with_fixed(dict(fixed), key) if fixed else obj


def _from_entry_point(ep) -> list[MethodSpec]:
    obj = ep.load()
    specs = [obj] if isinstance(obj, MethodSpec) else list(obj) if isinstance(obj, list | tuple) else None
    if not specs or not all(isinstance(s, MethodSpec) for s in specs):
        raise TypeError(f"entry point {ep.name} = {ep.value} (group {ENTRY_POINT_GROUP}) must name a MethodSpec "
                        f"or a list of them, got {type(obj).__name__}")
    if len(specs) == 1 and specs[0].key != ep.name:
        raise ValueError(f"entry point {ep.name} = {ep.value}: its spec's key is {specs[0].key!r}; "
                         "name the entry point after the method")
    return specs


def _is_builtin(ep) -> bool:
    """An entry point of fedbayes' own distribution (its pyproject.toml's table)."""
    dist = getattr(ep, "dist", None)
    return dist is not None and (dist.metadata["Name"] or "").lower() == DISTRIBUTION


@cache
def method_specs() -> dict[str, MethodSpec]:
    """Every method this installation knows, each registered under the entry-point group
    ``fedbayes.methods``: fedbayes' own (its pyproject.toml, in its order) first, then each other installed
    package's.
    A package that cannot be loaded, whose spec is invalid, or whose key fedbayes or another package
    has too, is left out with a warning naming it (``plugin_problems``): it breaks only the
    configurations that name its key, which validation refuses with that reason, not every command."""
    import warnings
    from importlib.metadata import entry_points

    out: dict[str, MethodSpec] = {}
    where: dict[str, str] = {}
    problems: dict[str, str] = {}
    origins: dict[str, tuple] = {}
    eps = entry_points(group=ENTRY_POINT_GROUP)   # fedbayes' own first, then the others by name
    if not any(_is_builtin(e) for e in eps):
        from importlib.metadata import PackageNotFoundError, distribution

        try:
            where = f"its installed metadata ({getattr(distribution(DISTRIBUTION), '_path', '?')}) has no entry points " \
                    f"{ENTRY_POINT_GROUP}: stale, or from an older pyproject.toml"
        except PackageNotFoundError:
            where = "fedbayes is not installed (its pyproject.toml's entry points are the registry)"
        raise RuntimeError(f"fedbayes' own methods are not registered: {where}; install it: pip install -e .")
    for ep in [e for e in eps if _is_builtin(e)] + sorted((e for e in eps if not _is_builtin(e)), key=lambda e: e.name):
        builtin = _is_builtin(ep)
        source = DISTRIBUTION if builtin else f"{ep.value} (entry point {ep.name})"
        try:
            specs = _from_entry_point(ep)
        except Exception as err:  # noqa: BLE001  (an import error, a spec that is not one: its own problem)
            if builtin:
                raise
            problems[ep.name] = f"the installed method {source} cannot be used: {type(err).__name__}: {err}"
            continue
        for s in specs:
            if s.key in problems:   # a third registration of a key already refused
                problems[s.key] += f", and by {source}"
            elif s.key in out:
                problems[s.key] = f"method {s.key!r} is registered twice: by {where[s.key]} and by {source}"
                if where[s.key] != DISTRIBUTION:   # two packages: neither is used (which one was meant?)
                    del out[s.key]
            else:
                out[s.key], where[s.key] = s, source
                if not builtin:
                    origins[s.key] = (ep, s.implementation)
    for key, why in problems.items():
        warnings.warn(f"fedbayes: {why}; left out", RuntimeWarning, stacklevel=2)
    _PROBLEMS.clear()
    _PROBLEMS.update(problems)
    _SOURCES.clear()
    _SOURCES.update({k: v for k, v in where.items() if k in out and v != DISTRIBUTION})
    _ORIGINS.clear()
    _ORIGINS.update({k: v for k, v in origins.items() if k in _SOURCES})
    return out


_PROBLEMS: dict[str, str] = {}
_SOURCES: dict[str, str] = {}   # key → "module:SPEC (entry point name)" of each installed package's method
_ORIGINS: dict[str, tuple] = {}   # key → (its entry point, its implementation) of each installed package's method


def plugin_origin(key: str) -> tuple[str, str | None, list[str]] | None:
    """(distribution name, version, the top-level modules of its spec and implementation) of an installed
    package's method ``key``; None for a built-in one (and a key no package registers). What
    ``provenance.plugin_identity`` records of it."""
    method_specs()
    if key not in _ORIGINS:
        return None
    ep, implementation = _ORIGINS[key]
    dist = getattr(ep, "dist", None)
    name = (dist.metadata["Name"] if dist is not None else None) or "unknown"
    modules = list(dict.fromkeys(m.partition(":")[0].split(".")[0] for m in (ep.value, implementation)))
    return name, dist.version if dist is not None else None, modules


def plugin_problems() -> dict[str, str]:
    """key (or entry-point name) → why an installed method was left out (``method_specs``)."""
    method_specs()
    return dict(_PROBLEMS)


def implementation_problem(key: str) -> str | None:
    """Why an installed package's method ``key`` cannot train, found by importing its implementation (and
    torch) now, or None (also for a built-in method: fedbayes' own implementations are its tests'
    business). Its spec loading is not enough: an implementation missing a dependency validated, and
    every training job of it failed later, one traceback each. Not part of ``method_specs`` (every
    command reads the specs, torch-free); the DAG's validation and ``fedbayes validate`` ask it for the
    methods params.yaml names (``fedbayes.study.check_implementations``)."""
    spec = method_specs().get(key)
    if spec is None or key not in _SOURCES:
        return None
    try:
        cls = spec.load()
        # a Method subclass (fedbayes.methods.core.base, which its import imported: no import of it here)
        if not (isinstance(cls, type) and any(_is_base(c) for c in cls.__mro__)):
            raise TypeError(f"it is a {type(cls).__name__}, not a fedbayes.methods.core.base.Method subclass")
    except Exception as err:  # noqa: BLE001  (whatever its import raises is the plug-in's problem)
        return (f"the implementation {spec.implementation} of the installed method {_SOURCES[key]} cannot be "
                f"imported: {type(err).__name__}: {err}")
    if missing := unimplemented_needs(spec, cls):
        return (f"its spec (installed method {_SOURCES[key]}) declares needs {missing}, but {spec.implementation} "
                f"does not implement {', '.join(NEED_HOOKS[n] + '()' for n in missing)}: its runs would go without "
                "them (no local metrics, no server data); implement it or drop the need")
    return None


def _is_base(c: type) -> bool:
    """Is ``c`` fedbayes.methods.core.base.Method (which the implementation's import imported)?"""
    return c.__name__ == "Method" and c.__module__.endswith(".core.base")


def unimplemented_needs(spec: MethodSpec, cls: type) -> list[str]:
    """The needs ``spec`` declares whose hook (``NEED_HOOKS``) ``cls`` leaves to the base Method, which
    provides nothing (no local model, no server share): the run would silently go without them."""
    def defined_by(hook: str) -> type | None:
        return next((c for c in cls.__mro__ if hook in vars(c)), None)

    return sorted(n for n in spec.needs if (c := defined_by(NEED_HOOKS[n])) is None or _is_base(c))


def hparam_rules(specs: Mapping[str, MethodSpec]) -> dict[str, dict]:
    """name → JSON Schema rule of every hyperparameter any method declares, in declaration order; a name
    declared with different rules by different methods accepts any of them (``rho``: FedLap's
    ``data``/``uniform``, BayesADMM's number), in an order that does not depend on the methods'."""
    rules: dict[str, list[dict]] = {}
    for s in specs.values():
        for f in dataclasses.fields(s.params):
            seen = rules.setdefault(f.name, [])
            if f.metadata["rule"] not in seen:
                seen.append(f.metadata["rule"])
    return {k: v[0] if len(v) == 1 else {"anyOf": sorted(v, key=lambda r: json.dumps(r, sort_keys=True))}
            for k, v in rules.items()}


def _flagged(specs: Mapping[str, MethodSpec], flag: str) -> list[str]:
    return list(dict.fromkeys(f.name for s in specs.values() for f in dataclasses.fields(s.params) if f.metadata[flag]))


def sweepable(specs: Mapping[str, MethodSpec]) -> list[str]:
    """Hyperparameters a sweep grid may vary."""
    return _flagged(specs, "sweep")


def train_keys(specs: Mapping[str, MethodSpec]) -> list[str]:
    """Hyperparameters an experiment's ``train:`` block may set."""
    return _flagged(specs, "train")


def code_defaults(specs: Mapping[str, MethodSpec]) -> dict[str, Any]:
    """name → the default a resolved configuration leaves out (fields with ``code_default``); one
    value per name across methods."""
    out: dict[str, Any] = {}
    for s in specs.values():
        for f in dataclasses.fields(s.params):
            if f.metadata["code_default"]:
                if out.setdefault(f.name, f.default) != f.default:
                    raise ValueError(f"{s.key}: code default of {f.name} is {f.default!r}, another method's "
                                     f"is {out[f.name]!r}; a dropped default must be one value")
    return out
