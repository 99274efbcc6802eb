"""The checks the schema cannot express, at every scale: names that must exist, sizes that must fit, every
run's hyperparameters as its method reads them."""

from __future__ import annotations

from fedbayes import frontdoor
from fedbayes.data import DATASETS
from fedbayes.frontdoor import ConfigError
from fedbayes.methods.hyperparameters import Hyperparameters, defaults
from fedbayes.methods.spec import plugin_problems
from fedbayes.published import load_paper, published_row
from fedbayes.study import names
from fedbayes.study.installed import _items
from fedbayes.study.layers import SCALES, _read_merge, overlay
from fedbayes.study.memo import resolved_once
from fedbayes.study.paths import paths
from fedbayes.study.resolve import (DEFAULT_POINT, POINT_ID, _fixed_hparams, _method_spec, experiment_config, seeds,
                                    selection, sweep_points)


def check_semantics(params: dict) -> None:
    """Checks the schema cannot express: names that must exist, sizes that must fit."""
    with resolved_once():   # every resolution below only read: each computed once
        _check_semantics(params)


def _check_semantics(params: dict) -> None:
    METHODS = names.METHOD_VARIANTS
    MODEL_KEYS = names.MODEL_KEYS
    MODELS = names.MODEL_NAMES

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
    problems += frontdoor.tolerance_problems(params)
    split_variant = names.split_variant

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


def _unknown_method(m: str, methods: dict) -> str:
    """Why ``m`` is not a method here: an installed package's method left out (its reason), or unknown."""
    why = plugin_problems().get(m)
    return f"method {m!r}: {why}" if why else f"unknown method {m!r}; implemented: {sorted(methods)}"


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
    METHOD_SPECS = names.METHOD_SPECS

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
    METHOD_VARIANTS, split_variant = names.METHOD_VARIANTS, names.split_variant

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
