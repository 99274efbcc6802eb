"""params.yaml against its schema (workflow/schemas/params.schema.yaml, completed from the method specs),
after the checks every later one relies on (bounded, finite, the methods named installed and their keys
their own); then the semantic checks (``fedbayes.study.semantics``)."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

from fedbayes import frontdoor
from fedbayes.fileio import load_yaml
from fedbayes.frontdoor import ConfigError
from fedbayes.methods.hyperparameters import Validator
from fedbayes.methods.spec import hparam_rules, sweepable, train_keys
from fedbayes.study import names
from fedbayes.study.installed import _foreign_hparams, _left_out_methods, _uninstalled_methods
from fedbayes.study.semantics import check_semantics


SCHEMA_PATH = Path("workflow/schemas/params.schema.yaml")


def schema_file(params_path: Path) -> Path:
    """The schema file a params file is checked against: the one of its repository (or the working
    folder's)."""
    for root in (params_path.resolve().parent, Path.cwd()):
        if (root / SCHEMA_PATH).exists():
            return root / SCHEMA_PATH
    raise ConfigError(f"schema {SCHEMA_PATH} not found next to {params_path}")


def _schema_for(params_path: Path) -> dict:
    return complete_schema(load_yaml(schema_file(params_path).read_text()))


def complete_schema(schema: dict) -> dict:
    """The params schema with what the method specs declare filled in (``fedbayes.methods.spec``): the
    rule of every method hyperparameter (``$defs/hparams``), the keys an experiment's ``train:`` block may
    set (``$defs/train``) and the keys a sweep grid may vary (``$defs/grid``). The schema file holds the
    rest; completing a completed schema changes nothing."""
    METHOD_SPECS = names.METHOD_SPECS

    out = copy.deepcopy(schema)
    defs = out["$defs"]
    rules = hparam_rules(METHOD_SPECS)
    own = defs["hparams"].get("properties") or {}
    clash = sorted(k for k in own if k in rules and own[k] != rules[k])
    if clash:
        raise ConfigError(f"method hyperparameters {clash} clash with the schema's own keys of $defs/hparams")
    defs["hparams"]["properties"] = {**rules, **own}
    defs["train"]["properties"] = {k: rules[k] for k in train_keys(METHOD_SPECS)}
    defs["grid"]["propertyNames"] = {"enum": sweepable(METHOD_SPECS)}
    return out


MAX_PARAMS_VALUES = 100_000  # params.yaml holds ~4,000; more is an alias bomb (aliases share, walks expand)


def _value_problems(params: Any) -> list[str]:
    """Checks over every value, wherever it sits: a number must be finite (YAML's ``.nan``/``.inf`` and
    JSON's ``NaN`` are floats that pass every range check), and the whole must stay small (a loaded alias
    bomb shares its lists; walking or printing them expands them)."""
    problems, count = [], 0
    stack: list[tuple[tuple, Any]] = [((), params)]
    while stack:
        path, x = stack.pop()
        count += 1
        if count > MAX_PARAMS_VALUES:
            return [f"params hold more than {MAX_PARAMS_VALUES} values once aliases are expanded (an alias bomb?)"]
        if isinstance(x, dict):
            stack.extend((path + (k,), v) for k, v in x.items())
        elif isinstance(x, list | tuple):
            stack.extend((path + (i,), v) for i, v in enumerate(x))
        elif isinstance(x, float) and not math.isfinite(x):
            problems.append(f"{'.'.join(map(str, path)) or '<root>'}: {x} is not a finite number")
    return sorted(problems)


def _grids(params: dict):
    """(dotted path, grid) of every sweep grid: ``methods.<m>.sweep``, ``experiments.<e>.methods.<m>.sweep``."""
    for m, spec in (params.get("methods") or {}).items():
        if isinstance(spec, dict):
            yield ("methods", m, "sweep"), spec.get("sweep")
    for e, exp in (params.get("experiments") or {}).items():
        ms = exp.get("methods") if isinstance(exp, dict) else None
        for m, over in (ms.items() if isinstance(ms, dict) else ()):
            if isinstance(over, dict):
                yield ("experiments", e, "methods", m, "sweep"), over.get("sweep")


def _grid_errors(validator, params: dict, schema: dict) -> list[tuple[list, str]]:
    """Each value of a sweep grid against the rule of the hyperparameter it sets (``$defs/hparams``): a
    grid point reaches a run as that hyperparameter does."""
    rules = schema["$defs"]["hparams"]["properties"]
    out = []
    for where, grid in _grids(params):
        for k, values in (grid.items() if isinstance(grid, dict) else ()):
            if k not in rules or not isinstance(values, list):
                continue  # the grid's own schema names an unknown hyperparameter or a non-list
            for i, v in enumerate(values):
                out += [([*where, k, i, *e.path], e.message) for e in validator.descend(v, rules[k])]
    return out


def validate(params: dict, schema: dict) -> None:
    """Refuse, naming each dotted key, whatever params.yaml (or the configuration Snakemake loaded) asks
    that no run could do as written: non-finite numbers, keys a method's block sets that the method does
    not take (``_foreign_hparams``), schema violations (integers strict, every sweep grid value under its
    hyperparameter's rule; the schema completed from the method specs), then the semantic checks."""
    if not isinstance(params, dict):
        raise ConfigError(f"params.yaml: the top level is {'empty' if params is None else type(params).__name__}; "
                          "params hold a mapping of settings (scale:, seeds:, paths:, experiments:, ...)")
    # bounded first (an alias bomb stops it); then keys the later checks join into dotted names
    problems = _value_problems(params) or frontdoor.key_problems(params) + frontdoor.size_problems(params)
    problems = problems or _left_out_methods(params) + _uninstalled_methods(params)
    problems = problems or _foreign_hparams(params)
    if problems:
        raise ConfigError("params.yaml is invalid:\n" + "\n".join(f"  - {p}" for p in problems))
    schema = complete_schema(schema)
    v = Validator(schema)
    errors = [(list(e.path), e.message) for e in v.iter_errors(params)] + _grid_errors(v, params, schema)
    if errors:
        lines = [f"  - {'.'.join(map(str, p)) or '<root>'}: {msg}" for p, msg in sorted(errors, key=lambda e: str(e[0]))]
        raise ConfigError("params.yaml does not match workflow/schemas/params.schema.yaml:\n" + "\n".join(lines))
    check_semantics(params)
