"""The resolved study: frozen typed objects, each experiment resolved once a validation, and the same
values as the resolution functions (every run's, at every scale: tests/test_study_keys.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from fedbayes.study import experiment_config, load_params, overlay, run_config
from fedbayes.study.memo import resolved_once
from fedbayes.study.model import RunSpec, Study, load_study

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def smoke() -> Study:
    return load_study(REPO / "params.yaml", scale="smoke")


def test_a_study_and_its_parts_are_frozen(smoke):
    e = next(iter(smoke.experiments.values()))
    plan = next(iter(e.methods.values()))
    run = smoke.run(e.name, plan.method, plan.seeds[0], plan.points[0])
    for obj, name in ((smoke, "scale"), (e, "name"), (plan, "points"), (run, "seed")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(obj, name, None)
    with pytest.raises(TypeError):
        smoke.experiments["new"] = e          # a read-only mapping
    cfg = run.config
    cfg["hparams"]["lr"] = -1.0                # a copy: the run is unchanged
    assert run.config["hparams"]["lr"] != -1.0 and hash(run) == hash(RunSpec(**dataclasses.asdict(run)))


def test_a_run_spec_is_run_config(smoke):
    e, x = next(iter(smoke.experiments.items()))
    m, plan = next(iter(x.methods.items()))
    run = smoke.run(e, m, plan.seeds[-1], plan.points[-1])
    assert run.config == run_config(smoke.params, e, m, plan.seeds[-1], plan.points[-1])
    assert json.loads(run.text) == run.config and run.scale == "smoke" == run.config["scale"]
    assert run.rerun_key.startswith('{"core": ')


def test_a_run_spec_on_its_partition_is_what_run_json_records(smoke):
    """Training records the run's configuration and, last, its partition's hash (run.json ``config``), and
    names its checkpoint by their hash: ``on_partition`` gives that ``record`` and ``hash``; before it, both
    are the configuration's alone."""
    from fedbayes.study import config_hash

    e, x = next(iter(smoke.experiments.items()))
    m, plan = next(iter(x.methods.items()))
    run = smoke.run(e, m, plan.seeds[0], plan.points[0])
    assert run.partition_hash is None and run.record == run.config and run.hash == config_hash(run.config)
    on = run.on_partition("0123abcd")
    assert list(on.record) == [*run.config, "partition_hash"] and on.record["partition_hash"] == "0123abcd"
    assert on.hash == config_hash(on.record) != run.hash and on.config == run.config and on != run


def test_a_configuration_not_read_from_params_yaml_is_a_run_spec_by_its_own_constructor(smoke):
    """``RunSpec.from_config``: a test's, a golden's or a recorded configuration. A recorded one (run.json)
    gives back its record and hash; one missing what names the run, or of another scale, is refused."""
    e, x = next(iter(smoke.experiments.items()))
    m, plan = next(iter(x.methods.items()))
    run = smoke.run(e, m, plan.seeds[0], plan.points[0]).on_partition("0123abcd")
    again = RunSpec.from_config(run.record)
    assert again == run and again.record == run.record and again.hash == run.hash
    assert RunSpec.from_config(run.config, scale="smoke") == smoke.run(e, m, plan.seeds[0], plan.points[0])
    ad_hoc = {"experiment": "x", "method": "fedavg", "seed": 3, "rounds": 2, "hparams": {"lr": 0.1}}
    r = RunSpec.from_config(ad_hoc)
    assert (r.experiment, r.method, r.point, r.seed, r.scale, r.config) == ("x", "fedavg", "default", 3, "paper", ad_hoc)
    assert RunSpec.from_config(ad_hoc, scale="smoke").scale == "smoke"
    with pytest.raises(ValueError, match="of scale 'smoke', not 'paper'"):
        RunSpec.from_config(run.config, scale="paper")
    with pytest.raises(ValueError, match="names its experiment, seed"):
        RunSpec.from_config({"method": "fedavg"})


def test_within_one_pass_each_resolution_is_computed_once_and_outside_each_call_gets_its_own(monkeypatch):
    """Validation resolves the same experiment and overlay hundreds of times: within ``resolved_once`` it
    is computed once (the same object comes back); outside, every call gets a fresh copy to edit."""
    from fedbayes.study import layers, resolve

    p = load_params(REPO / "params.yaml", scale="rehearsal")
    e = next(iter(p["experiments"]))
    calls = {"experiment": 0, "overlay": 0}
    real_e, real_o = resolve._experiment_config, layers._overlay

    def count(kind, real):
        def f(*a):
            calls[kind] += 1
            return real(*a)
        return f

    monkeypatch.setattr(resolve, "_experiment_config", count("experiment", real_e))
    monkeypatch.setattr(layers, "_overlay", count("overlay", real_o))
    a, b = experiment_config(p, e), experiment_config(p, e)
    assert a == b and a is not b and calls["experiment"] == 2
    with resolved_once():
        c, d = experiment_config(p, e), experiment_config(p, e)
        o1, o2 = overlay(p), overlay(p)
    assert c is d and c == a and o1 is o2 and calls["experiment"] == 3 and calls["overlay"] == 3   # (2 for a, b; 1 here)
    q = dict(p, scale="smoke")                # another params object (another scale) is resolved on its own
    with resolved_once():
        experiment_config(q, e)
        experiment_config(p, e)               # a new pass: resolved anew
    assert calls["experiment"] == 5


def test_shared_for_good_each_resolution_is_computed_once_and_each_caller_gets_a_copy(monkeypatch):
    """Snakemake's planning (share_for_good): an experiment asked for again is not resolved again, and a
    caller that edits what it got changes what no other caller gets."""
    from fedbayes.study import memo, resolve

    monkeypatch.setattr(memo, "_FOR_GOOD", None)   # this process's planning mode, undone after the test
    p = load_params(REPO / "params.yaml", scale="smoke")
    e = next(iter(p["experiments"]))
    calls = []
    real = resolve._experiment_config
    monkeypatch.setattr(resolve, "_experiment_config", lambda *a: calls.append(a) or real(*a))
    memo.share_for_good()
    a = experiment_config(p, e)
    a["rounds"] = -1
    nested = next(k for k, v in a.items() if isinstance(v, dict) and v)   # a copy all the way down
    a[nested].clear()
    listed = next(k for k, v in a.items() if isinstance(v, list) and v)
    a[listed].append("edited")
    b = experiment_config(p, e)
    assert len(calls) == 1 and b["rounds"] != -1 and b[nested] and "edited" not in b[listed] and b == real(p, e)


def test_validation_resolves_each_experiment_once_a_scale(monkeypatch):
    """load_params validates at every scale: each experiment is resolved once per scale (69 resolutions for
    23 experiments; 393 before the pass shared them)."""
    from fedbayes.study import resolve

    n = {"calls": 0}
    real = resolve._experiment_config

    def counted(*a):
        n["calls"] += 1
        return real(*a)

    monkeypatch.setattr(resolve, "_experiment_config", counted)
    p = load_params(REPO / "params.yaml")
    assert n["calls"] == 3 * len(p["experiments"])


def test_a_table_spec_is_typed_frozen_and_has_a_field_per_key_of_the_schema(smoke):
    """A TableSpec holds each key the table schema allows as a typed field (collections as tuples and
    read-only mappings, no dict to edit); the schema's required keys are the fields without a default; a
    key params.yaml leaves out reads as its default; a key the schema does not allow is refused."""
    import yaml

    from fedbayes.study.model import TableSpec

    schema = yaml.safe_load((REPO / "workflow/schemas/params.schema.yaml").read_text())
    table_schema = schema["properties"]["tables"]["additionalProperties"]
    own = {f.name: f for f in dataclasses.fields(TableSpec) if f.name not in ("name", "given")}
    assert set(own) == set(table_schema["properties"])
    no_default = {k for k, f in own.items()
                  if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    assert no_default == set(table_schema["required"])

    table = smoke.tables["table1"]
    assert isinstance(table.methods, tuple) and isinstance(table.metrics, tuple) and isinstance(table.experiments, tuple)
    with pytest.raises(dataclasses.FrozenInstanceError):
        table.methods = ("fedavg",)
    with pytest.raises(TypeError):
        table.tolerance["test/acc"] = 99.0           # a read-only mapping
    assert table.block == smoke.params["tables"]["table1"]

    least = {"experiments": ["e"], "methods": ["fedavg@mean"], "statistic": "final", "metrics": ["test/acc"]}
    t = TableSpec.from_block("mine", least)
    assert (t.title, t.running, t.published, t.notes, t.sweeps, t.layout, t.rounds) == ("", 1, (), "", None, "long", "all")
    assert t.tolerance == t.published_as == t.substitutes == t.not_comparable == t.targets == {}
    assert t.bases == ("fedavg",) and t.comparable == ("e",) and t.block == least
    # the schema's enums: a default is one of its values
    for key in ("layout", "rounds"):
        assert getattr(t, key) in table_schema["properties"][key]["enum"]
    with pytest.raises(ValueError, match=r"tables.mine: unknown key 'colour'"):
        TableSpec.from_block("mine", {**least, "colour": "red"})
    with pytest.raises(ValueError, match=r"tables.mine: no metrics"):
        TableSpec.from_block("mine", {k: v for k, v in least.items() if k != "metrics"})
