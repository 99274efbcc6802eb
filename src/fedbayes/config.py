"""params.yaml: loading, schema validation, scale overrides and per-run resolution.

params.yaml is the one place a number lives. This module turns it into fully resolved
configurations (one per experiment, one per (experiment, method, seed) run) that the CLI, the
Snakefile and the tests all share, and refuses bad input before any work starts.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import re
from pathlib import Path
from typing import Any

from fedbayes import catalog, frontdoor
from fedbayes.frontdoor import ConfigError  # noqa: F401  (fedbayes.config.ConfigError: the name every caller imports)
from fedbayes.data import DATASETS
from fedbayes.fileio import YAMLInputError, load_yaml
from fedbayes.methods.spec import Validator
from fedbayes.published import load_paper, published_row

SCHEMA_PATH = Path("workflow/schemas/params.schema.yaml")
SCALES = ("paper", "smoke", "rehearsal")
# scale rehearsal: the smoke DAG (params.smoke.yaml's `smoke`, then its `rehearsal` block) on stand-in data
# (fedbayes.data.standin): every experiment, none of it ever mistaken for a result.
STAND_IN = "stand-in"


def deep_merge(base: dict, override: dict | None) -> dict:
    out = copy.deepcopy(base)
    for k, v in (override or {}).items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def _schema_for(params_path: Path) -> dict:
    for root in (params_path.resolve().parent, Path.cwd()):
        if (root / SCHEMA_PATH).exists():
            return complete_schema(load_yaml((root / SCHEMA_PATH).read_text()))
    raise ConfigError(f"schema {SCHEMA_PATH} not found next to {params_path}")


def complete_schema(schema: dict) -> dict:
    """The params schema with what the method specs declare filled in (``fedbayes.methods.spec``): the
    rule of every method hyperparameter (``$defs/hparams``), the keys an experiment's ``train:`` block may
    set (``$defs/train``) and the keys a sweep grid may vary (``$defs/grid``). The schema file holds the
    rest; completing a completed schema changes nothing."""
    METHOD_SPECS = catalog.METHOD_SPECS
    from fedbayes.methods.spec import hparam_rules, sweepable, train_keys

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


def load_params(path: str | Path = "params.yaml", scale: str | None = None) -> dict:
    """Read, schema-check and semantically check params.yaml with its smoke overlay (``with_smoke_overlay``);
    apply ``scale`` (or params' own)."""
    path = Path(path)
    params = as_read(load_params_text(path), path)
    validate(params, _schema_for(path))
    if scale is not None:
        params["scale"] = scale
    return params


def as_read(params: Any, params_path: str | Path) -> Any:
    """params as every reader takes them (``load_params``, the Snakefile's ``config``), in place: the
    earlier layout upgraded (``upgrade_layout``) and the smoke overlay laid in (``with_smoke_overlay``)."""
    return with_smoke_overlay(upgrade_layout(params), params_path)


def smoke_overlay_path(params_path: str | Path) -> Path:
    """The smoke overlay beside a params file: params.yaml -> params.smoke.yaml."""
    p = Path(params_path)
    return p.with_name(f"{p.stem}.smoke.yaml")


def with_smoke_overlay(params: Any, params_path: str | Path) -> Any:
    """``params`` with the ``smoke`` block of the overlay file beside it (params.smoke.yaml: how the same
    DAG shrinks to a minute, `scale: smoke`); a ``smoke`` block of params' own is applied on top of it
    (key by key), so a copy of params.yaml that carries its smoke settings inline (the DAG's effective
    configuration, a test's edit) needs no overlay. The overlay may hold ``smoke`` and nothing else."""
    overlay = smoke_overlay_path(params_path)
    if not isinstance(params, dict) or not overlay.exists():
        return params
    extra = load_params_text(overlay)
    if not isinstance(extra, dict) or set(extra) - {"smoke", "rehearsal"}:
        raise ConfigError(f"{overlay}: holds the smoke overlay only (top-level `smoke:` and `rehearsal:` blocks), "
                          f"got {sorted(extra) if isinstance(extra, dict) else type(extra).__name__}")
    for block in ("smoke", "rehearsal"):
        own = params.get(block)
        if (own is None or isinstance(own, dict)) and (own or extra.get(block)):   # a malformed inline block
            params[block] = deep_merge(extra.get(block) or {}, own)           # is left for the schema to name
    return params


def overlay(params: dict) -> dict:
    """What the scale lays over params.yaml: nothing at paper scale; the ``smoke`` block at smoke scale;
    at rehearsal scale the ``smoke`` block with the ``rehearsal`` block over it."""
    scale = params.get("scale", "paper")
    if scale == "paper":
        return {}
    out = params.get("smoke") or {}
    if scale == "rehearsal":
        out = deep_merge(out, {k: v for k, v in (params.get("rehearsal") or {}).items() if k != "stand_in_size"})
    return out


def stand_in_size(params: dict) -> str | None:
    """The size of the stand-in data this configuration runs on (fedbayes.data.standin.SIZES), or None
    for the real data: scale rehearsal runs on stand-ins (``rehearsal.stand_in_size``, default tiny)."""
    if params.get("scale", "paper") != "rehearsal":
        return None
    return (params.get("rehearsal") or {}).get("stand_in_size", "tiny")


def load_params_text(path: str | Path) -> Any:
    """params.yaml (or the DAG's JSON of it) as written, not yet validated: a mapping; ConfigError in one
    line naming the file (and the line) for a file that cannot be read, is not UTF-8, has a syntax error, a
    duplicate key or an alias bomb, or holds no mapping (empty, a list, a scalar)."""
    path = Path(path)
    params = _parse_params(path, _read_utf8(path))
    if not isinstance(params, dict):
        what = "empty" if params is None else f"a {_KINDS.get(type(params), type(params).__name__)}"
        raise ConfigError(f"{path}: the file is {what}; params hold a mapping of settings "
                          "(scale:, seeds:, paths:, experiments:, ...) at the top level")
    return params


_KINDS = {list: "list", str: "string", int: "number", float: "number", bool: "boolean"}


def _read_utf8(path: Path) -> str:
    """The file's text; ConfigError naming the file (and the line of a byte that is not UTF-8)."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"{path}: cannot be read ({e.strerror or e})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise ConfigError(f"{path}: not UTF-8 text (byte 0x{data[e.start]:02x} at line {line}); save it as "
                          "UTF-8") from None


def _parse_params(path: Path, text: str) -> Any:
    """JSON where the text is JSON (the DAG hands the CLI its effective configuration as JSON, whose 5e-05
    YAML 1.1 would read as a string), YAML otherwise: a flow-style YAML mapping starts with a brace too."""
    import yaml

    try:
        if text.lstrip().startswith("{"):
            try:
                return json.loads(text, object_pairs_hook=_unique_keys)
            except json.JSONDecodeError:
                pass   # not JSON: flow-style YAML, read below
        return load_yaml(text)
    except (YAMLInputError, ValueError, yaml.YAMLError) as e:  # YAMLInputError, a JSON duplicate: ValueErrors
        raise ConfigError(f"{path}: {_one_line(e)}") from None


def _one_line(e: Exception) -> str:
    """A parser's message on one line (PyYAML's spans several: the problem, then where)."""
    return " ".join(str(e).split())


def _unique_keys(pairs: list) -> dict:
    out = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}; a JSON object takes each key once")
        out[k] = v
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


def upgrade_layout(params: Any) -> Any:
    """params in the earlier layout (an experiment's ``methods`` a list; the values a method takes in one
    experiment under ``methods.<m>.overrides.<e>``) in today's, in place: ``experiments.<e>.methods`` a
    mapping method -> its values there (None: none). Values for a method the experiment does not run are
    dropped, as the old layout ignored them; a pair set in both places is refused. Today's layout passes
    through unchanged (and so does what is not a mapping: the schema check names it)."""
    if not isinstance(params, dict) or not isinstance(params.get("experiments"), dict):
        return params
    old = {}
    for m, spec in (params.get("methods") or {}).items():
        if isinstance(spec, dict) and "overrides" in spec:
            for e, over in (spec.pop("overrides") or {}).items():
                old[(m, e)] = over
    for e, exp in params["experiments"].items():
        if not isinstance(exp, dict):
            continue
        if isinstance(exp.get("methods"), list):
            exp["methods"] = {m: None for m in exp["methods"]}
        ms = exp.get("methods")
        for m in (ms if isinstance(ms, dict) else ()):
            if (m, e) in old:
                if ms[m] is not None:
                    raise ConfigError(f"experiments.{e}.methods.{m} and methods.{m}.overrides.{e} both set "
                                      f"{m}'s values in {e}; keep experiments.{e}.methods.{m}")
                ms[m] = old[(m, e)]
    return params


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


def check_semantics(params: dict) -> None:
    """Checks the schema cannot express: names that must exist, sizes that must fit."""
    METHODS = catalog.METHOD_VARIANTS
    MODEL_KEYS = catalog.MODEL_KEYS
    MODELS = catalog.MODEL_NAMES

    problems = []
    if params.get("scale", "paper") not in SCALES:
        problems.append(f"scale must be one of {SCALES}, got {params.get('scale')!r}")
    for scale in SCALES:
        p = dict(params, scale=scale)
        for name in params["experiments"]:
            e = experiment_config(p, name)
            where = f"experiments.{name} (scale {scale})"
            for key in ("dataset", "ood"):
                if e.get(key) and e[key] not in DATASETS:
                    problems.append(f"{where}: unknown {key} {e[key]!r}; known: {sorted(DATASETS)}")
            for m in e["methods"]:
                if m not in METHODS:
                    problems.append(f"{where}: {_unknown_method(m, METHODS)}")
            model = e["model"]
            if model["name"] not in MODELS:
                problems.append(f"{where}: unknown model {model['name']!r}; known: {sorted(MODELS)}")
            else:  # an option the builder does not take would crash the run (training, not here)
                own = params["experiments"][name].get("model", {})
                for k in sorted(set(model) - {"name"} - set(MODEL_KEYS[model["name"]])):
                    if scale == "paper" or k not in own:
                        problems.append(f"experiments.{name}.model.{k}{'' if scale == 'paper' else ' (scale smoke)'}: "
                                        f"model {model['name']!r} has no option {k!r}; accepted: "
                                        f"{sorted(MODEL_KEYS[model['name']])}")
            ds = DATASETS.get(e["dataset"])
            n_train = getattr(ds, "n_train", None)
            if n_train:
                n = round(n_train * e.get("subsample", 1.0))
                if e["clients"] > n:
                    problems.append(f"{where}: {e['clients']} clients but only {n} training points")
            src = e.get("selection_from")
            if src and (src not in params["experiments"] or params["experiments"][src].get("selection_from")):
                problems.append(f"{where}: selection_from {src!r} must name an experiment that runs its own sweep")
            elif src and not set(e["methods"]) <= set(experiment_config(p, src)["methods"]):
                problems.append(f"{where}: selection_from {src!r} lacks methods "
                                f"{sorted(set(e['methods']) - set(experiment_config(p, src)['methods']))}")
            if e.get("seeds") and e["seeds"] != seeds(p)[:len(e["seeds"])] and scale == "paper":
                problems.append(f"{where}: seeds {e['seeds']} must be the first seeds of {seeds(p)}")
            for m in e["methods"]:
                ms = seeds(p, name, m)
                if scale == "paper" and ms != seeds(p)[:len(ms)]:
                    problems.append(f"experiments.{name}.methods.{m}: seeds {ms} must be the first seeds of {seeds(p)}")
            if any(r > e["rounds"] for r in e["report_rounds"]):
                problems.append(f"{where}: report_rounds {e['report_rounds']} exceed rounds {e['rounds']}")
            problems += _window_problems(p, name, e)
            problems += _hparam_problems(p, name, e)
        for s in seeds(p):
            if s < 0:
                problems.append(f"seeds must be non-negative, got {s}")
    problems += _unused_name_problems(params, METHODS)
    problems += frontdoor.name_problems(params) + frontdoor.report_name_problems(params)
    problems += frontdoor.metric_problems(params)
    split_variant = catalog.split_variant

    h = params.get("headline")
    if h:  # DVC's metrics.json and curves come from one table's cells and runs
        spec = params.get("tables", {}).get(h["table"])
        if spec is None:
            problems.append(f"headline.table: {h['table']!r} is not in tables")
        else:
            for m in sorted(set(h["metrics"]) - set(spec["metrics"])):
                problems.append(f"headline.metrics: {m} is not a metric of tables.{h['table']} {spec['metrics']}")
    for t, spec in params.get("tables", {}).items():
        apart = spec.get("not_comparable", {})
        for key in ("not_comparable", "substitutes"):
            for name in sorted(set(spec.get(key, {})) - set(spec["experiments"])):
                problems.append(f"tables.{t}.{key}: {name!r} is not in tables.{t}.experiments")
        for name in spec["experiments"]:
            if name in apart:  # published numbers only: there must be some to print
                if name in params["experiments"]:
                    problems.append(f"tables.{t}.not_comparable: {name!r} is a defined experiment; "
                                    "remove it from not_comparable to run it")
                elif published_row(spec.get("published", []), name) is None:
                    problems.append(f"tables.{t}.not_comparable: {name!r} has no row in {spec.get('published', [])}")
            elif name not in params["experiments"]:
                problems.append(f"tables.{t}: unknown experiment {name!r}")
            else:  # a cell that no run can fill: an OOD metric of an experiment without an OOD set
                for metric in spec.get("metrics", []):
                    if metric.startswith("ood/") and not params["experiments"][name].get("ood"):
                        problems.append(f"tables.{t}: metric {metric} needs an OOD set, "
                                        f"experiments.{name} has none (set experiments.{name}.ood)")
        for name in spec["methods"]:
            base, variant = split_variant(name)
            if base not in METHODS:
                problems.append(f"tables.{t}: unknown method {base!r}; implemented: {sorted(METHODS)}")
            elif variant not in METHODS[base]:
                problems.append(f"tables.{t}: {base} has no prediction variant {variant!r} "
                                f"(it has {sorted(v for v in METHODS[base] if v)})")
        for name, as_ in spec.get("published_as", {}).items():  # (a name the table does not list is unused)
            if split_variant(as_)[0] not in METHODS:
                problems.append(f"tables.{t}.published_as.{name}: unknown method {as_!r}")
        for ref in spec.get("published", []):
            paper, table = ref.split(":")
            try:
                if table not in load_paper(paper)["tables"]:
                    problems.append(f"tables.{t}.published: paper {paper!r} has no table {table!r}")
            except FileNotFoundError:
                problems.append(f"tables.{t}.published: no published numbers for paper {paper!r}")
    seed_list = params["seeds"]
    if len(set(seed_list)) != len(seed_list):
        problems.append(f"seeds must be unique, got {seed_list}")
    if problems:
        raise ConfigError("params.yaml is invalid:\n" + "\n".join(f"  - {p}" for p in dict.fromkeys(problems)))


def _left_out_methods(params: Any) -> list[str]:
    """The methods params.yaml names that an installed package provides but could not be used (registered
    twice, not loadable: ``plugin_problems``): said first, before the schema's complaints about their keys."""
    from fedbayes.methods.spec import plugin_problems

    left_out = plugin_problems()
    if not left_out or not isinstance(params, dict):
        return []
    return [f"method {m!r}: {left_out[m]}" for m in sorted(_named_methods(params) & set(left_out))]


def _uninstalled_methods(params: Any) -> list[str]:
    """One line for each method params.yaml names (a ``methods.<m>`` block, an experiment's methods, a
    scale's method block, a table's methods) that no installed package registers, at the first place it
    is named: said before the schema, whose complaint about the block's keys and the semantic checks'
    (one a place, each listing every method) would hide the cause."""
    import difflib

    from fedbayes.methods.spec import ENTRY_POINT_GROUP, plugin_problems

    if not isinstance(params, dict):
        return []
    known, left_out = catalog.METHOD_SPECS, plugin_problems()
    places: dict[str, list[str]] = {}
    for where, m, _ in _method_blocks(params):
        places.setdefault(m, []).append(where)
    for e, x in _items(params.get("experiments")):
        for m in (x.get("methods") if isinstance(x, dict) and isinstance(x.get("methods"), dict | list) else ()):
            places.setdefault(m, []).append(f"experiments.{e}.methods.{m}")
    for t, spec in _items(params.get("tables")):
        for m in (spec.get("methods") if isinstance(spec, dict) and isinstance(spec.get("methods"), list) else ()):
            if isinstance(m, str):
                places.setdefault(catalog.split_variant(m)[0], []).append(f"tables.{t}.methods")
    out = []
    for m, where in places.items():
        if not isinstance(m, str) or m in known or m in left_out:
            continue
        # a misspelling, not a neighbour: fedswag is not fedavg (0.77), fedivn is fedivon (0.92)
        closest = difflib.get_close_matches(m, list(known), n=1, cutoff=0.85)
        where = list(dict.fromkeys(where))
        out.append(f"{where[0]}: unknown method {m!r}: not installed (no entry point in the {ENTRY_POINT_GROUP} "
                   "group of any installed package names it)"
                   + (f"; did you mean {closest[0]!r}?" if closest else
                      f"; register it in its package's pyproject.toml under [project.entry-points.\"{ENTRY_POINT_GROUP}\"] "
                      "and pip install it (docs/adding-a-method.md); `fedbayes methods` lists the methods implemented here")
                   + (f" (also named at {', '.join(where[1:3])}{', …' if len(where) > 3 else ''})" if len(where) > 1 else ""))
    return out


def _named_methods(params: dict) -> set[str]:
    """Every method params.yaml names (``methods.<m>``, ``experiments.<e>.methods``)."""
    named = set(params.get("methods") or {})
    for e in (params.get("experiments") or {}).values():
        if isinstance(e, dict) and isinstance(e.get("methods"), dict | list):
            named |= set(e["methods"])
    return named


def check_implementations(params: dict) -> None:
    """Refuse (ConfigError) a params.yaml naming an installed package's method whose implementation cannot
    be imported (``methods.spec.implementation_problem``), naming the method and the import error, so a
    missing dependency stops the DAG before its first job instead of failing every training job of the
    method. Apart from ``validate`` because it imports the implementation, and torch: the DAG runs it
    once, before it is built, and so does ``fedbayes validate``; the jobs' own validation stays torch-free
    (a training job imports the implementation anyway)."""
    from fedbayes.methods.spec import implementation_problem

    problems = [f"method {m!r}: {why}" for m in sorted(_named_methods(params))
                if (why := implementation_problem(m))]
    if problems:
        raise ConfigError("params.yaml is invalid:\n" + "\n".join(f"  - {p}" for p in problems))


def _method_blocks(params: dict):
    """(dotted path, method, block) of every block that sets one method's hyperparameters: ``methods.<m>``,
    ``experiments.<e>.methods.<m>``, ``smoke.methods.<m>``, ``smoke.experiments.<e>.methods.<m>`` and their
    ``rehearsal`` counterparts (what is not a mapping is left for the schema to name)."""
    sites = [(("methods",), params.get("methods"))]
    experiments = params.get("experiments")
    sites += [(("experiments", e, "methods"), x.get("methods"))
              for e, x in (experiments.items() if isinstance(experiments, dict) else ()) if isinstance(x, dict)]
    sites += [((b, "methods"), params[b].get("methods")) for b in ("smoke", "rehearsal") if isinstance(params.get(b), dict)]
    sites += [((b, "experiments", e, "methods"), x.get("methods")) for b in ("smoke", "rehearsal")
              for e, x in _items((params.get(b) or {}).get("experiments") if isinstance(params.get(b), dict) else None)
              if isinstance(x, dict)]
    for where, methods in sites:
        for m, block in (methods.items() if isinstance(methods, dict) else ()):
            if isinstance(block, dict):
                yield ".".join((*where, m)), m, block


def _foreign_hparams(params: Any) -> list[str]:
    """Keys of a method's block (and of its sweep grid) that the method does not take (its spec's
    ``MethodSpec.hparams``), one line each naming the key, the method and the closest name it takes. Said
    before the schema, whose rules are every method's together: another method's key passed it and was
    never read (``methods.fedavg.rho``; a sweep over one ran one run under several names). Unknown methods
    are named by the semantic checks; ``smoke.hparams`` sets values for every method, each reading its own."""
    import difflib

    METHOD_SPECS = catalog.METHOD_SPECS
    from fedbayes.methods.spec import RESERVED

    if not isinstance(params, dict):
        return []
    anyone = {k for s in METHOD_SPECS.values() for k in s.hparams()}
    out = []
    for where, m, block in _method_blocks(params):
        spec = METHOD_SPECS.get(m)
        if spec is None:
            continue
        grid = block.get("sweep")
        for sweep, keys in ((False, [k for k in block if k not in RESERVED]),
                            (True, list(grid) if isinstance(grid, dict) else [])):
            takes = spec.hparams(sweep)
            for k in keys:
                if k in takes:
                    continue
                closest = difflib.get_close_matches(str(k), takes, n=1)   # a near miss only, not any name
                if k in spec.hparams():
                    why = f"{m} cannot sweep {k!r}"
                else:
                    why = f"{m} takes no hyperparameter {k!r}" + (" (another method's)" if k in anyone else "")
                out.append(f"{where}{'.sweep' if sweep else ''}.{k}: {why}"
                           + (f"; the closest it {'sweeps' if sweep else 'takes'} is {closest[0]!r}" if closest else ""))
    return out


def _unknown_method(m: str, methods: dict) -> str:
    """Why ``m`` is not a method here: an installed package's method left out (its reason), or unknown."""
    from fedbayes.methods.spec import plugin_problems

    why = plugin_problems().get(m)
    return f"method {m!r}: {why}" if why else f"unknown method {m!r}; implemented: {sorted(methods)}"


def _items(x) -> list:
    """The items of a mapping; none of anything else (the schema names what is not a mapping)."""
    return list(x.items()) if isinstance(x, dict) else []


def _unused_name_problems(params: dict, methods: dict) -> list[str]:
    """Settings no run would read (a misspelt name is otherwise silently ignored, its values lost). Settings
    for an experiment that is not defined (smoke.experiments.<e>) are kept: a configuration may leave
    experiments out and keep the smoke overlay (the fault tests do)."""
    out = []
    for m, spec in params.get("methods", {}).items():
        if m not in methods:
            out.append(f"methods.{m}: unknown method; implemented: {sorted(methods)}")
    for block in ("smoke", "rehearsal"):
        for m in (params.get(block) or {}).get("methods") or {}:
            if m not in methods:
                out.append(f"{block}.methods.{m}: unknown method; implemented: {sorted(methods)}")
    for block in ("smoke", "rehearsal"):   # a scale's per-experiment method block: a method the experiment runs
        for e, x in _items((params.get(block) or {}).get("experiments")):
            runs = (params.get("experiments", {}).get(e) or {}).get("methods") or {}
            for m, b in _items(x.get("methods") if isinstance(x, dict) else None):
                where = f"{block}.experiments.{e}.methods.{m}"
                if e in params.get("experiments", {}) and m in methods and m not in runs:
                    out.append(f"{where}: experiment {e} does not run {m} (its methods: {sorted(runs)}); a scale "
                               "overrides the methods an experiment runs, it does not add one")
                if isinstance(b, dict) and "seeds" in b:
                    out.append(f"{where}.seeds: at scale {block} every run uses {block}.seeds")
    for block in ("smoke", "rehearsal"):
        for k in ("sweep", "seeds"):
            if k in ((params.get(block) or {}).get("hparams") or {}):
                out.append(f"{block}.hparams.{k}: not a hyperparameter ({block}.hparams sets values for every method; "
                           f"a {k} belongs under methods.<m> or experiments.<e>.methods.<m>"
                           f"{f'; {block} seeds are {block}.seeds' if k == 'seeds' else ''})")
    return out


def _hparam_problems(params: dict, name: str, e: dict) -> list[str]:
    """Every run's hyperparameters (each sweep point, at this scale) as its method reads them (``_run_problems``)
    and the path its files would have: named here, not found by a training job. A problem every point of a
    method shares is said once, without the point."""
    METHOD_SPECS = catalog.METHOD_SPECS

    out = []
    if e.get("selection_from") and e["selection_from"] not in params["experiments"]:
        return out   # its grid is another experiment's, which is not there: check_semantics says so
    roots, seed, scale = paths(params), max(seeds(params)), params.get("scale", "paper")
    for m in e["methods"]:
        spec = METHOD_SPECS.get(m)
        if spec is None:
            continue   # unknown names are reported by check_semantics
        fixed, grid = _method_spec(params, name, m)
        points = sweep_points(params, name, m) if grid or e.get("selection_from") else {DEFAULT_POINT: {}}
        hp = _fixed_hparams(params, e, m, fixed, _read_merge)   # as method_hparams, read only
        found: dict[str, list[str]] = {}
        for point, values in points.items():
            if not POINT_ID.fullmatch(point):   # a string value with a space or a slash names no run directory
                out.append(f"experiments.{name}.methods.{m}: sweep point {point!r} cannot name a run (its values "
                           "must be numbers, booleans or words of letters, digits and _ . -)")
            why = _run_problems(spec, {**hp, **values, **spec.fixed})
            why.append(frontdoor.run_path_problem(roots, name, m, point, seed))
            for w in filter(None, why):
                found.setdefault(w, []).append(point)
        out += _said_once(f"experiments.{name}.methods.{m}" + (f" (scale {scale})" if scale != "paper" else ""),
                          found, len(points))
    return sorted(set(out))


def _said_once(where: str, found: dict[str, list[str]], n_points: int) -> list[str]:
    """A line per problem (``found``: problem -> the sweep points that have it), naming the point unless every
    point of several has it."""
    out = []
    for why, at in found.items():
        if n_points > 1 and len(at) == n_points:
            out.append(f"{where}: {why}")
        else:
            out += [f"{where}" + (f", sweep point {point}" if point != DEFAULT_POINT else "") + f": {why}" for point in at]
    return out


def _run_problems(spec, hp: dict) -> list[str]:
    """What one run's method cannot train with: a required hyperparameter set nowhere (``Options.unset``), a
    learning-rate schedule the method does not honour (``MethodSpec.schedules``), a rule of its spec broken (a value valid alone but not beside another,
    ``Options.problems``)."""
    from fedbayes.methods.spec import Hyperparameters, defaults

    out = [f"{k} is required (it has no default) and set nowhere for this run; set it in the experiment's "
            f"train: block or in methods.{spec.key}" for k in spec.params.unset(hp)]
    schedule = hp.get("lr_schedule", defaults(spec.params)["lr_schedule"])
    if schedule not in spec.schedules:
        out.append(f"lr_schedule {schedule} is not honoured by {spec.key} (its training honours "
                   f"{', '.join(spec.schedules)}); set one of those for {spec.key}")
    if spec.params.problems is not Hyperparameters.problems:   # (single values are checked by the schema)
        try:
            spec.params.from_hparams(hp)
        except ValueError as err:
            out.append(str(err))
    return out


def _window_problems(params: dict, name: str, e: dict) -> list[str]:
    """A method with ``mc_window: false`` has its sampled predictive only at the last reported round:
    a statistic over the rounds before it (selection, or a table cell of that prediction) has no values."""
    METHOD_VARIANTS, split_variant = catalog.METHOD_VARIANTS, catalog.split_variant

    out = []
    for m in e["methods"]:
        spec = params.get("methods", {}).get(m) or {}
        over = params["experiments"][name]["methods"][m] or {}
        grid = over.get("sweep") or spec.get("sweep") or {}
        smoke = overlay(params).get("hparams") or {}
        # read, not resolved (method_hparams deep-copies: this runs at every job's start, for every pair)
        if m not in METHOD_VARIANTS or False not in (spec.get("mc_window"), over.get("mc_window"),
                                                     smoke.get("mc_window"), *grid.get("mc_window", [])):
            continue
        sampled = {v for v, kind in METHOD_VARIANTS[m].items() if kind == "samples"}
        sel = selection(params, name)
        if "" in sampled and sel.get("statistic", "final") != "final":
            out.append(f"experiments.{name}: methods.{m} has mc_window: false, but the sweep selection averages "
                       f"rounds ({sel['statistic']}); set experiments.{name}.selection.statistic: final")
        for t, table in params.get("tables", {}).items():
            if name in table["experiments"] and table.get("statistic") in ("mean_last3", "max_last3"):
                bad = [n for n in table["methods"] if split_variant(n) in {(m, v) for v in sampled}]
                if bad:
                    out.append(f"tables.{t}: statistic {table['statistic']} needs rounds R-2..R of {bad} on {name}, "
                               f"which methods.{m} (mc_window: false) does not evaluate")
    return out


def comparable_experiments(spec: dict) -> list[str]:
    """The table's experiments that are defined in params (``not_comparable`` ones only carry the
    published numbers: the paper's data has no faithful substitute here)."""
    return [x for x in spec["experiments"] if x not in spec.get("not_comparable", {})]

def table_figures(name: str, spec: dict) -> list[str]:
    """The figures a table writes under ``<reports>/figures/``: its learning curves, and reliability
    diagrams where ECE is one of its metrics; none for a table with no experiment of ours."""
    if not comparable_experiments(spec):
        return []
    stem = name.replace("/", "_")
    return [f"{stem}_curves.png"] + ([f"{stem}_reliability.png"] if "test/ece" in spec.get("metrics", []) else [])


def selection(params: dict, experiment: str) -> dict:
    """How a sweep point is chosen: the table metric/statistic at the experiment's last reported
    round (``params.selection``, updated by the experiment's own ``selection``), on the first seed, or
    (``seeds: all``) as the mean over every seed the method runs, each grid point running on all of
    them (the FedLap paper's criterion: the best 3-seed mean); or, for an experiment with
    ``selection_from``, the point that experiment selected (its grid does not run again)."""
    e = experiment_config(params, experiment)
    if e.get("selection_from"):
        return {"from": e["selection_from"], "seed": seeds(params)[0]}
    sel = {**params["selection"], **e.get("selection", {})}
    sel["round"] = e["report_rounds"][-1]
    sel["seed"] = seeds(params)[0]
    if sel.get("seeds", "first") == "first":
        sel.pop("seeds", None)  # the default: the criterion reads as before
    return sel


def selection_seeds(params: dict, experiment: str, method: str) -> list[int]:
    """The seeds a sweep point of (experiment, method) runs before the selection: the first, or all."""
    sel = selection(params, experiment)
    return seeds(params, experiment, method) if sel.get("seeds") == "all" else [sel["seed"]]


def seeds(params: dict, experiment: str | None = None, method: str | None = None) -> list[int]:
    """The run seeds: ``seeds`` (or ``smoke.seeds``); at paper scale a prefix of them can be set for
    runs too costly for every seed: per experiment (``experiments.<e>.seeds``) or per method in an
    experiment (``experiments.<e>.methods.<m>.seeds``, which wins)."""
    if params.get("scale", "paper") != "paper":
        return list(overlay(params).get("seeds", params["seeds"]))
    if method is not None and experiment is not None:
        over = params["experiments"][experiment]["methods"].get(method) or {}
        if over.get("seeds"):
            return list(over["seeds"])
    if experiment is not None and params["experiments"][experiment].get("seeds"):
        return list(params["experiments"][experiment]["seeds"])
    return list(params["seeds"])


def experiment_config(params: dict, name: str) -> dict:
    """The experiment's settings with the scale's overrides applied."""
    if name not in params["experiments"]:
        raise ConfigError(f"unknown experiment {name!r}; params.yaml defines {sorted(params['experiments'])}")
    e = copy.deepcopy(params["experiments"][name])
    if params.get("scale", "paper") != "paper":
        smoke = overlay(params)
        e = deep_merge(deep_merge(e, smoke.get("experiment")), (smoke.get("experiments") or {}).get(name))
        if isinstance(e.get("methods"), dict):   # a scale overrides the methods an experiment runs, adds none
            e["methods"] = {m: b for m, b in e["methods"].items() if m in params["experiments"][name]["methods"]}
    e["name"] = name
    return e


DEFAULT_POINT = "default"
POINT_ID = re.compile(r"[A-Za-z0-9_.=+-]+")   # a run directory's name (the DAG's {point} wildcard)


def _method_spec(params: dict, experiment: str, method: str) -> tuple[dict, dict]:
    """(fixed hyperparameters, sweep grid) of a method in an experiment: its block under ``methods``, then
    what the experiment sets for it (``experiments.<e>.methods.<m>``)."""
    spec = copy.deepcopy(params.get("methods", {}).get(method) or {})
    over = copy.deepcopy(params["experiments"][experiment]["methods"].get(method) or {})
    grid = over.pop("sweep", spec.pop("sweep", None)) or {}
    grid = _scale_override(params, experiment, method).get("sweep") or grid   # the scale's own grid wins
    over.pop("seeds", None), spec.pop("seeds", None)  # which seeds run (see seeds()), not a hyperparameter
    return deep_merge(spec, over), grid


def _scale_override(params: dict, experiment: str, method: str) -> dict:
    """What the scale's overlay sets for one method in one experiment (``smoke.experiments.<e>.methods.<m>``,
    at rehearsal scale with ``rehearsal.…`` over it): the most specific hyperparameters at that scale."""
    e = (overlay(params).get("experiments") or {}).get(experiment) or {}
    return copy.deepcopy((e.get("methods") or {}).get(method) or {})


def swept_points(params: dict, experiment: str, method: str) -> dict[str, dict]:
    """The grid points that run on the first seed: the sweep, or none when the experiment takes its
    selection from another experiment (``selection_from``)."""
    if experiment_config(params, experiment).get("selection_from"):
        return {}
    return sweep_points(params, experiment, method)


def sweep_points(params: dict, experiment: str, method: str) -> dict[str, dict]:
    """The grid of a method's sweep as {point id: hyperparameter values}, in grid order.

    A point id names its values (``local_epochs=5``, keys sorted, joined by ``+``); a method without
    a sweep has the single point ``default``. At smoke scale only the first ``smoke.sweep_limit``
    points run. An experiment with ``selection_from`` has the grid of that experiment."""
    source = experiment_config(params, experiment).get("selection_from")
    if source:
        return sweep_points(params, source, method)
    _, grid = _method_spec(params, experiment, method)
    if not grid:
        return {DEFAULT_POINT: {}}
    keys = sorted(grid)
    points = {"+".join(f"{k}={v}" for k, v in zip(keys, vals)): dict(zip(keys, vals))
              for vals in itertools.product(*(grid[k] for k in keys))}
    if params.get("scale", "paper") != "paper":
        limit = overlay(params).get("sweep_limit")
        points = dict(list(points.items())[:limit]) if limit else points
    return points


def method_hparams(params: dict, experiment: str, method: str, point: str = DEFAULT_POINT) -> dict:
    """Local-training settings of the experiment, then the method's own values, then its
    per-experiment overrides, then (at smoke scale) the smoke overrides (``train``, ``hparams``, then the
    method's own ``methods.<m>``), then the sweep point."""
    e = experiment_config(params, experiment)
    fixed, _ = _method_spec(params, experiment, method)
    hp = _fixed_hparams(params, e, method, fixed)
    points = sweep_points(params, experiment, method)
    if point not in points:
        raise ConfigError(f"{experiment}/{method}: no sweep point {point!r}; the grid has {list(points)}")
    HPARAM_DEFAULTS = catalog.HPARAM_DEFAULTS

    hp = deep_merge(hp, points[point])
    return {k: v for k, v in hp.items() if not (k in HPARAM_DEFAULTS and v == HPARAM_DEFAULTS[k])}


def _fixed_hparams(params: dict, e: dict, method: str, fixed: dict, merge=None) -> dict:
    """A method's hyperparameters before the sweep point: the experiment's ``train``, the method's own
    values (``fixed``, from _method_spec), then the scale's overlay (``train``, ``hparams``, then the
    method's own ``methods.<m>``). ``merge``: ``deep_merge`` (default), or ``_read_merge`` for a result that
    is only read (validation: no copies)."""
    merge = merge or deep_merge
    hp = merge(e["train"], fixed)
    small = overlay(params)
    if small:
        hp = merge(merge(hp, small.get("train")), _declared(method, small.get("hparams")))
        hp = merge(hp, (small.get("methods") or {}).get(method))   # one method's value at this scale
        here = _scale_override(params, e["name"], method)           # … in this experiment
        hp = merge(hp, {k: v for k, v in here.items() if k != "sweep"})
    return hp


def overlay_replacements(params: dict, limit: int | None = None) -> str | None:
    """One line naming each value a user set in a method's own block (``methods.<m>``,
    ``experiments.<e>.methods.<m>``) that the scale's shared values (its ``train`` and ``hparams``) replace
    at this scale, with both values (at most ``limit`` places a key, then how many more); None where none
    is (always at paper scale). The scale's value wins: the overlay exists to shrink every run, and a
    method's own value at a scale goes in ``<scale>.methods.<m>`` (which wins over the shared ones, and is
    not named here). A swept key is not replaced (a sweep point wins over both)."""
    scale = params.get("scale", "paper")
    small = overlay(params)
    if not small:
        return None
    found: dict[str, dict[str, Any]] = {}   # key -> {place: the user's value}
    for name, x in params["experiments"].items():
        for m in experiment_config(params, name)["methods"]:
            shared = {**(small.get("train") or {}), **_declared(m, small.get("hparams"))}
            here = {**((small.get("methods") or {}).get(m) or {}), **_scale_override(params, name, m)}
            _, grid = _method_spec(params, name, m)
            for where, block in ((f"methods.{m}", params.get("methods", {}).get(m)),
                                 (f"experiments.{name}.methods.{m}", x["methods"].get(m))):
                for k, v in (block or {}).items():
                    if k in shared and k not in here and k not in grid and shared[k] != v:
                        found.setdefault(k, {})[where] = v
    if not found:
        return None
    shared = {**(small.get("train") or {}), **(small.get("hparams") or {})}
    parts = []
    for k, places in found.items():
        # a method's own block first: the setting a user most likely wrote for every experiment
        names = sorted(places, key=lambda w: not w.startswith("methods."))
        shown = names if limit is None else names[:limit]
        parts.append(f"{k} -> {shared[k]} over " + ", ".join(f"{w}.{k} {places[w]}" for w in shown)
                     + (f" (+{len(names) - len(shown)} more)" if len(shown) < len(names) else ""))
    n = sum(len(v) for v in found.values())
    return (f"scale {scale} replaces {n} of your own method setting{'s' if n != 1 else ''} with its shared values "
            f"(they win; a method's own value at this scale goes in {scale}.methods.<m>): " + "; ".join(parts))


def _declared(method: str, shared: dict | None) -> dict:
    """The values of a scale's shared ``hparams`` block that ``method``'s spec declares: the block sets
    values for every method, each reading its own, and a key a method does not read would be recorded in
    its runs' configuration (and rerun them when edited) without changing a number."""
    spec = catalog.METHOD_SPECS.get(method)
    if spec is None or not shared:
        return shared or {}
    takes = set(spec.hparams())
    return {k: v for k, v in shared.items() if k in takes}


def _read_merge(base: dict, override: dict | None) -> dict:
    """``deep_merge`` without copying what is not merged: for hyperparameters that are only read."""
    out = dict(base)
    for k, v in (override or {}).items():
        out[k] = _read_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def partition_config(params: dict, experiment: str, seed: int) -> dict:
    e = experiment_config(params, experiment)
    return {"dataset": e["dataset"], "subsample": e.get("subsample", 1.0), "clients": e["clients"],
            "partition": e["partition"], "seed": seed}


def run_config(params: dict, experiment: str, method: str, seed: int, point: str = DEFAULT_POINT) -> dict:
    """Everything that determines one training run's numbers (its hash names the checkpoint)."""
    e = experiment_config(params, experiment)
    return {
        "experiment": experiment, "method": method, "point": point, "seed": seed,
        "scale": params.get("scale", "paper"),
        "dataset": e["dataset"], "ood": e.get("ood"), "subsample": e.get("subsample", 1.0),
        "clients": e["clients"], "partition": e["partition"], "participation": e.get("participation", 1.0),
        "rounds": e["rounds"], "model": e["model"], "input_scale": e["input_scale"],
        "hparams": method_hparams(params, experiment, method, point),
        "save_rounds": save_rounds(e),
        # evaluation cadence, only where an experiment sets it (keeps older runs' configurations unchanged)
        **{k: e[k] for k in ("eval_every", "mc_every", "test_subsample", "local_eval", "keep_predictions")
           if k in e},
        # stand-in data: recorded in the run (run.json, MLflow), never mistaken for a result on the real data
        **({"data": f"{STAND_IN} ({stand_in_size(params)})"} if stand_in_size(params) else {}),
    }


def save_rounds(e: dict) -> list[int]:
    """Rounds whose predictions are kept: the 3-round window ending at each reported round, and the last."""
    keep = {e["rounds"]}
    for r in e["report_rounds"]:
        keep.update(range(max(1, r - 2), r + 1))
    return sorted(keep)


def config_hash(cfg: Any) -> str:
    return hashlib.sha256(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:16]


def raw_root(raw: str, stand_in: str | None) -> str:
    """The datasets' folder: ``raw``, or on stand-in data of size ``stand_in`` ``<raw>-stand-in/<size>``."""
    return f"{raw}-{STAND_IN}/{stand_in}" if stand_in else raw


def recorded_stand_in(cfg: dict) -> str | None:
    """The stand-in size a run configuration (``run_config``, a run.json's) ran on; None: the real data."""
    m = re.fullmatch(rf"{STAND_IN} \((\w+)\)", cfg.get("data") or "")
    return m.group(1) if m else None


def paths(params: dict) -> dict:
    """Output roots; smoke-scale partitions, runs, work files and reports (tables, sweeps, figures) live
    in a ``<root>/smoke`` subfolder (``<root>/rehearsal`` at rehearsal scale), so the smoke command never
    overwrites a paper-scale file; stand-in data lives in ``<raw>-stand-in/<size>``."""
    p = dict(params["paths"])
    p["raw"] = raw_root(p["raw"], stand_in_size(params))  # generated stand-ins, never in the real data's folder
    if params.get("scale", "paper") != "paper":
        sub = params["scale"]
        p["partitions"] = f"{p['partitions']}/{sub}"
        p["runs"] = f"{p['runs']}/{sub}"
        p["reports"] = f"{p['reports']}/{sub}"
        p["work"] = f"{p.get('work', 'work')}/{sub}"
    p.setdefault("work", "work")
    return p


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
