"""The study: params.yaml at one scale, validated and resolved into frozen typed objects.

``load_study`` reads, validates and resolves once; what a consumer needs is then a value, not a function
of the whole params dict: an ``Experiment`` (its settings at the scale, the ``MethodPlan`` of each of its
methods, its ``PartitionSpec`` per seed), a ``RunSpec`` (one training run: its configuration, exactly
``run_config``'s, whose hash names the checkpoint, and its rerun key), a ``TableSpec`` (a table: each key
of its block a typed field, with its default where params.yaml leaves it out; what the reports take).
Settings of an experiment, partition or run are held as canonical JSON text, so they cannot be edited; the
``config`` properties give a fresh dict each time. Collections are tuples and read-only mappings.
tests/test_study_keys.py checks every run's record and key against the resolution before these objects
existed."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType

from fedbayes.study.layers import stand_in_size
from fedbayes.study.load import load_params
from fedbayes.study.memo import resolved_once
from fedbayes.study.paths import paths
from fedbayes.study.rerun import config_hash, defaults_key, numerics
from fedbayes.study.resolve import (experiment_config, partition_config, run_config, seeds, selection,
                                    selection_seeds, sweep_points, swept_points)
from fedbayes.study.names import split_variant
from fedbayes.study.tables import table_figures


def _frozen(x) -> str:
    """A JSON value as the text it is kept as (keys in their order: an experiment's methods are ordered)."""
    return json.dumps(x)


@dataclass(frozen=True)
class PartitionSpec:
    """What decides one experiment's split of its data among clients on one seed."""
    experiment: str
    seed: int
    text: str

    @property
    def config(self) -> dict:
        """``partition_config``: dataset, subsample, clients, partition scheme, seed."""
        return json.loads(self.text)


@dataclass(frozen=True)
class RunSpec:
    """One training run: (experiment, method, sweep point, seed) at a scale, resolved. What
    ``engine.loop.run_federated`` trains."""
    experiment: str
    method: str
    point: str
    seed: int
    scale: str
    text: str          # its configuration (``run_config``) as JSON
    # the hash of the partition it trains on, once its job has built it (``on_partition``): recorded
    # beside the configuration (``RECORDED_ONLY``), so a run on another split is another run
    partition_hash: str | None = None

    @classmethod
    def from_config(cls, cfg: Mapping, scale: str | None = None) -> RunSpec:
        """The RunSpec of a configuration that was not resolved from params.yaml: a test's, a benchmark's
        or a numerics golden's own, or a finished run's as its run.json recorded it (a replay; its
        ``partition_hash`` becomes the RunSpec's). A run of the study is ``Study.run``. The run's names
        are read from the configuration (``point``: ``default`` where it has none); ``scale`` is the
        configuration's, else the one given (``paper`` where neither says)."""
        cfg = dict(cfg)
        part = cfg.pop("partition_hash", None)
        if missing := [k for k in ("experiment", "method", "seed") if k not in cfg]:
            raise ValueError(f"a run configuration names its {', '.join(missing)}")
        own = cfg.get("scale")
        if scale is not None and own is not None and own != scale:
            raise ValueError(f"the configuration is of scale {own!r}, not {scale!r}")
        return cls(cfg["experiment"], cfg["method"], cfg.get("point", "default"), cfg["seed"],
                   own or scale or "paper", json.dumps(cfg), part)

    def on_partition(self, partition_hash: str) -> RunSpec:
        """This run on the partition whose hash is ``partition_hash`` (what its job built)."""
        return replace(self, partition_hash=partition_hash)

    @property
    def config(self) -> dict:
        """Everything params.yaml decides of the run's numbers (``run_config``)."""
        return json.loads(self.text)

    @property
    def record(self) -> dict:
        """What run.json records as the run's ``config`` and MLflow logs: its configuration and, once it
        has one, its partition's hash (last)."""
        return {**self.config, **({"partition_hash": self.partition_hash} if self.partition_hash is not None else {})}

    @property
    def hparams(self) -> dict:
        return self.config["hparams"]

    @property
    def hash(self) -> str:
        """The hash of its ``record`` (run.json ``config_hash``; it names the checkpoint): of its
        configuration alone until its partition is known."""
        return config_hash(self.record)

    @property
    def rerun_key(self) -> str:
        """The rerun rule's key beside the configuration: the numerics versions of its method and of the
        core, and the defaults it reads that differ from the frozen record (``rerun.defaults_key``)."""
        changed = defaults_key(self.method, self.hparams)
        return json.dumps({**numerics(self.method), **({"defaults": changed} if changed else {})}, sort_keys=True)


@dataclass(frozen=True)
class MethodPlan:
    """What one method runs in one experiment: its sweep points (grid order), those run before the
    selection (``swept``), and the seeds of each."""
    experiment: str
    method: str
    points: tuple[str, ...]
    swept: tuple[str, ...]
    seeds: tuple[int, ...]
    selection_seeds: tuple[int, ...]

    def runs(self) -> Iterator[tuple[str, int]]:
        """(point, seed) of every run the DAG could ask for: each point on every seed it may run."""
        every = sorted(set(self.seeds) | set(self.selection_seeds))
        return ((pt, s) for pt in self.points for s in every)


@dataclass(frozen=True)
class Experiment:
    name: str
    text: str                                  # its settings at the scale (``experiment_config``) as JSON
    methods: Mapping[str, MethodPlan]
    selection: str                             # how its sweep point is chosen (``selection``) as JSON
    partitions: Mapping[int, PartitionSpec]

    @property
    def config(self) -> dict:
        return json.loads(self.text)


def _mapping(x: Mapping | None, value=lambda v: v) -> Mapping:
    return MappingProxyType({k: value(v) for k, v in (x or {}).items()})


@dataclass(frozen=True)
class TableSpec:
    """One table of params.yaml (``tables.<name>``), resolved: a typed field per key its schema allows
    (workflow/schemas/params.schema.yaml, ``tables``), an optional key absent from params.yaml holding the
    default the reports read it with. Numbers are kept as written (a tolerance of ``1`` prints as ``1``)."""
    name: str
    experiments: tuple[str, ...]               # as listed, ``not_comparable`` ones too (``comparable``: those that run)
    methods: tuple[str, ...]                   # ``<method>`` or ``<method>@<variant>`` (a prediction variant)
    statistic: str                             # mean_last3, max_last3, final, best, rounds_to_target
    metrics: tuple[str, ...]
    title: str = ""
    running: int = 1                           # running-average window of a run's curve before the statistic
    tolerance: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))   # metric -> |Δ| allowed
    published: tuple[str, ...] = ()            # "paper:table" sources of the published values
    notes: str = ""                            # a notes file appended to the table's .md ("": none)
    sweeps: str | None = None                  # "beside": its sweep reports in its own folder
    layout: str = "long"                       # long: a line per (experiment, method, round); paper: the paper's
    rounds: str = "all"                        # all: every report round of an experiment; last: its last
    published_as: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    substitutes: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    not_comparable: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    targets: Mapping[str, tuple[float, ...]] = field(default_factory=lambda: MappingProxyType({}))
    # the keys params.yaml sets, in its order (the others hold their defaults): ``block`` gives the block
    # back, which tests/test_study_keys.py hashes against the fixture written from the raw block
    given: tuple[str, ...] = field(default=(), repr=False)

    @classmethod
    def from_block(cls, name: str, block: Mapping) -> TableSpec:
        """The TableSpec of a validated ``tables.<name>`` block (the front door has checked its keys and
        types; a key the record has no field for is refused here too, naming it)."""
        keys = [f for f in fields(cls) if f.name not in ("name", "given")]
        if unknown := [k for k in block if k not in {f.name for f in keys}]:
            raise ValueError(f"tables.{name}: unknown key {unknown[0]!r} (a table has {sorted(f.name for f in keys)})")
        if missing := [f.name for f in keys if f.name not in block and f.default is MISSING
                       and f.default_factory is MISSING]:
            raise ValueError(f"tables.{name}: no {missing[0]}")
        typed = {"experiments": tuple, "methods": tuple, "metrics": tuple, "published": tuple,
                 "tolerance": _mapping, "published_as": _mapping, "substitutes": _mapping,
                 "not_comparable": _mapping, "targets": lambda x: _mapping(x, tuple)}
        return cls(name=name, given=tuple(block),
                   **{k: typed.get(k, lambda v: v)(v) for k, v in block.items()})

    @property
    def block(self) -> dict:
        """The table's block as params.yaml sets it (its ``given`` keys, as JSON values)."""
        def plain(v):
            if isinstance(v, Mapping):
                return {k: plain(x) for k, x in v.items()}
            return [plain(x) for x in v] if isinstance(v, tuple) else v
        return {k: plain(getattr(self, k)) for k in self.given}

    @property
    def comparable(self) -> tuple[str, ...]:
        """The experiments that run (``comparable_experiments``): a ``not_comparable`` one only carries the
        published numbers."""
        return tuple(x for x in self.experiments if x not in self.not_comparable)

    @property
    def bases(self) -> tuple[str, ...]:
        """The methods whose runs the table reads (a prediction variant ``<method>@<variant>`` -> its
        method), each once, in the table's order."""
        return tuple(dict.fromkeys(split_variant(m)[0] for m in self.methods))

    @property
    def figures(self) -> tuple[str, ...]:
        """The figures it writes under <reports>/figures (``table_figures``)."""
        return tuple(table_figures(self.name, {"experiments": self.experiments, "not_comparable": self.not_comparable,
                                               "metrics": self.metrics}))


@dataclass(frozen=True)
class Study:
    """params.yaml at one scale, resolved. ``params`` is the validated mapping (for the consumers that
    still take it); everything else is resolved from it once, here."""
    scale: str
    params: Mapping = field(repr=False, compare=False)
    paths: Mapping[str, str]
    seeds: tuple[int, ...]
    stand_in: str | None
    experiments: Mapping[str, Experiment]
    tables: Mapping[str, TableSpec]

    @classmethod
    def resolve(cls, params: dict) -> Study:
        """The study of validated params (``load_params``) at their scale."""
        with resolved_once():   # each experiment resolved once; each RunSpec below resolves its own run
            experiments = {e: _experiment(params, e) for e in params["experiments"]}
        tables = {t: TableSpec.from_block(t, spec) for t, spec in (params.get("tables") or {}).items()}
        return cls(params.get("scale", "paper"), params, MappingProxyType(dict(paths(params))), tuple(seeds(params)),
                   stand_in_size(params), MappingProxyType(experiments), MappingProxyType(tables))

    def run(self, experiment: str, method: str, seed: int, point: str) -> RunSpec:
        """One run's RunSpec (resolved on demand: a study plans thousands, a job needs one)."""
        cfg = run_config(self.params, experiment, method, seed, point)
        return RunSpec(experiment, method, point, seed, self.scale, json.dumps(cfg))

    def runs(self) -> Iterator[RunSpec]:
        """Every run the DAG could ask for at this scale, in params.yaml's order."""
        for e, x in self.experiments.items():
            for m, plan in x.methods.items():
                for point, seed in plan.runs():
                    yield self.run(e, m, seed, point)


def _experiment(params: dict, name: str) -> Experiment:
    x = experiment_config(params, name)
    plans = {m: MethodPlan(name, m, tuple(sweep_points(params, name, m)), tuple(swept_points(params, name, m)),
                           tuple(seeds(params, name, m)), tuple(selection_seeds(params, name, m)))
             for m in x["methods"]}
    parts = {s: PartitionSpec(name, s, _frozen(partition_config(params, name, s))) for s in seeds(params)}
    return Experiment(name, _frozen(x), MappingProxyType(plans), _frozen(selection(params, name)),
                      MappingProxyType(parts))


def load_study(path: str | Path = "params.yaml", scale: str | None = None) -> Study:
    """params.yaml (with its overlay) read, validated and resolved at ``scale`` (or its own)."""
    return Study.resolve(load_params(path, scale))
