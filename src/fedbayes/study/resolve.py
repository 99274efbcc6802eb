"""Per-run resolution: an experiment's settings at a scale, the seeds and sweep points a method runs, and
the configuration of one training run (``run_config``: what run.json records; its hash names the
checkpoint)."""

from __future__ import annotations

import copy
import itertools
import re

from fedbayes.frontdoor import ConfigError
from fedbayes.study import names
from fedbayes.study.layers import STAND_IN, deep_merge, overlay, stand_in_size
from fedbayes.study.memo import memo


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
    return memo("experiment", params, (name,), lambda: _experiment_config(params, name))


def _experiment_config(params: dict, name: str) -> dict:
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
    return memo("method", params, (experiment, method), lambda: _resolve_method_spec(params, experiment, method))


def _resolve_method_spec(params: dict, experiment: str, method: str) -> tuple[dict, dict]:
    spec = copy.deepcopy(params.get("methods", {}).get(method) or {})
    over = copy.deepcopy(params["experiments"][experiment]["methods"].get(method) or {})
    grid = over.pop("sweep", spec.pop("sweep", None)) or {}
    own = _scale_override(params, experiment, method).get("sweep")
    if own:   # the scale's grid for this run wins whole
        grid = {k: list(v) for k, v in own.items()}
    else:     # else every grid over a key takes the values the scale gives that key
        scale_values = overlay(params).get("sweep") or {}
        grid = {k: list(scale_values.get(k, v)) for k, v in grid.items()}
    over.pop("seeds", None), spec.pop("seeds", None)  # which seeds run (see seeds()), not a hyperparameter
    return deep_merge(spec, over), grid


def _scale_override(params: dict, experiment: str, method: str) -> dict:
    """What the scale's overlay sets for one method in one experiment (``smoke.experiments.<e>.methods.<m>``,
    at rehearsal scale with ``rehearsal.…`` over it): the most specific hyperparameters at that scale."""
    e = (overlay(params).get("experiments") or {}).get(experiment) or {}
    return memo("scale_override", params, (experiment, method),
                lambda: copy.deepcopy((e.get("methods") or {}).get(method) or {}))


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
    HPARAM_DEFAULTS = names.HPARAM_DEFAULTS

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


def _declared(method: str, shared: dict | None) -> dict:
    """The values of a scale's shared ``hparams`` block that ``method``'s spec declares: the block sets
    values for every method, each reading its own, and a key a method does not read would be recorded in
    its runs' configuration (and rerun them when edited) without changing a number."""
    spec = names.METHOD_SPECS.get(method)
    if spec is None or not shared:
        return shared or {}
    takes = set(spec.hparams())
    return {k: v for k, v in shared.items() if k in takes}


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
