"""Every run's key is what it was: for every run the DAG could ask for at every scale (paper, smoke,
rehearsal) — each experiment, method, sweep point and seed — the resolved configuration (what run.json
records and MLflow logs; its hash names the checkpoint) and the rerun key (numerics versions and the
defaults that differ from the frozen record), and for every table the experiments and figures it plans,
are compared with a fixture written from the code before the configuration became ``fedbayes.study``
(tests/fixtures/study_keys.json). A refactor of the resolution that moves one byte of one key fails here,
naming the run.

Regenerate (only for a change that means to move keys, which reruns the runs it names):
``python tests/test_study_keys.py``."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "study_keys.json"
SCALES = ("paper", "smoke", "rehearsal")


def digest(x) -> str:
    """The canonical JSON of a value (sorted keys, as run.json's config hash is taken), hashed."""
    return hashlib.sha256(json.dumps(x, sort_keys=True).encode()).hexdigest()[:20]


def current_keys(params_path: Path = REPO / "params.yaml") -> dict:
    """The keys today's functions give every run, partition, selection and table at every scale (the
    code the fixture was written with: kept, so the typed study is checked against them too)."""
    from fedbayes.study import (comparable_experiments, defaults_key, experiment_config, load_params, numerics,
                                overlay_replacements, partition_config, paths, run_config, seeds, selection,
                                selection_seeds, stand_in_size, sweep_points, swept_points, table_figures)

    out: dict = {}
    for scale in SCALES:
        p = load_params(params_path, scale=scale)
        s = out[scale] = {"paths": paths(p), "stand_in": stand_in_size(p), "seeds": seeds(p),
                          "replaced": overlay_replacements(p), "experiments": {}, "runs": {}, "tables": {}}
        for e in p["experiments"]:
            x = experiment_config(p, e)
            s["experiments"][e] = {
                "config": digest(x), "selection": selection(p, e),
                "partitions": {str(seed): digest(partition_config(p, e, seed)) for seed in seeds(p)},
                "methods": {m: {"points": list(sweep_points(p, e, m)), "swept": list(swept_points(p, e, m)),
                                "seeds": seeds(p, e, m), "selection_seeds": selection_seeds(p, e, m)}
                            for m in x["methods"]}}
            for m, plan in s["experiments"][e]["methods"].items():
                for point in plan["points"]:
                    for seed in sorted(set(plan["seeds"]) | set(plan["selection_seeds"])):
                        cfg = run_config(p, e, m, seed, point)
                        changed = defaults_key(m, cfg["hparams"])
                        rerun = json.dumps({**numerics(m), **({"defaults": changed} if changed else {})},
                                           sort_keys=True)
                        s["runs"][f"{e}/{m}/{point}/seed{seed}"] = digest([cfg, rerun])
        for t, spec in p["tables"].items():
            s["tables"][t] = {"experiments": comparable_experiments(spec), "figures": table_figures(t, spec),
                              "spec": digest(spec)}
    return out


def study_keys(params_path: Path = REPO / "params.yaml") -> dict:
    """The same keys, read from the resolved study (``fedbayes.study.model``): its Experiments, MethodPlans,
    PartitionSpecs, RunSpecs and TableSpecs."""
    from fedbayes.study import overlay_replacements
    from fedbayes.study.model import load_study

    out: dict = {}
    for scale in SCALES:
        st = load_study(params_path, scale=scale)
        s = out[scale] = {"paths": dict(st.paths), "stand_in": st.stand_in, "seeds": list(st.seeds),
                          "replaced": overlay_replacements(st.params), "experiments": {}, "runs": {}, "tables": {}}
        for e, x in st.experiments.items():
            s["experiments"][e] = {
                "config": digest(x.config), "selection": json.loads(x.selection),
                "partitions": {str(seed): digest(part.config) for seed, part in x.partitions.items()},
                "methods": {m: {"points": list(plan.points), "swept": list(plan.swept), "seeds": list(plan.seeds),
                                "selection_seeds": list(plan.selection_seeds)} for m, plan in x.methods.items()}}
        for run in st.runs():
            assert run.hash == config_hash_of(run.config)
            s["runs"][f"{run.experiment}/{run.method}/{run.point}/seed{run.seed}"] = digest([run.config, run.rerun_key])
        for t, table in st.tables.items():
            s["tables"][t] = {"experiments": list(table.comparable), "figures": list(table.figures),
                              "spec": digest(table.block)}   # the typed fields give the block back whole
    return out


def config_hash_of(cfg: dict) -> str:
    """run.json's ``config_hash`` as the engine takes it (sha256 of the sorted JSON, 16 hex digits)."""
    return hashlib.sha256(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:16]


@pytest.fixture(scope="module", params=["functions", "study"])
def keys(request):
    """The keys as the resolution functions give them, and as the typed study holds them."""
    made = current_keys() if request.param == "functions" else study_keys()
    return json.loads(json.dumps(made))   # as the fixture went through JSON


@pytest.fixture(scope="module")
def recorded():
    return json.loads(FIXTURE.read_text())


def test_the_fixture_covers_every_scale_every_run_and_every_table(recorded):
    assert set(recorded) == set(SCALES)
    assert {s: len(recorded[s]["runs"]) > n for s, n in zip(SCALES, (2600, 350, 120))} == dict.fromkeys(SCALES, True)
    assert all(len(recorded[s]["tables"]) >= 19 for s in SCALES)


@pytest.mark.parametrize("scale", SCALES)
def test_every_run_key_is_byte_identical(keys, recorded, scale):
    now, then = keys[scale]["runs"], recorded[scale]["runs"]
    assert list(now) == list(then), (f"scale {scale}: runs planned differ: added {sorted(set(now) - set(then))[:5]}, "
                                     f"gone {sorted(set(then) - set(now))[:5]}")
    differ = [f"{r}: {then[r]} -> {now[r]}" for r in then if now[r] != then[r]]
    assert not differ, f"scale {scale}: {len(differ)} run keys moved:\n" + "\n".join(differ[:10])


@pytest.mark.parametrize("scale", SCALES)
def test_every_experiment_partition_selection_and_table_is_what_it_was(keys, recorded, scale):
    for part in ("paths", "stand_in", "seeds", "replaced", "experiments", "tables"):
        now, then = keys[scale][part], recorded[scale][part]
        if isinstance(then, dict):
            differ = [k for k in sorted(set(now) | set(then)) if now.get(k) != then.get(k)]
            assert not differ, f"scale {scale}: {part} differ at {differ[:5]}"
        assert now == then, f"scale {scale}: {part}: {then!r} -> {now!r}"


def write_fixture(keys: dict) -> str:
    """The fixture's text: indented JSON with one line a run (a moved key shows as the lines of its runs)."""
    parts = []
    for scale in SCALES:
        rest = json.dumps({k: v for k, v in keys[scale].items() if k != "runs"}, indent=1)
        runs = ",\n".join(f"{json.dumps(r)}: {json.dumps(v)}" for r, v in keys[scale]["runs"].items())
        parts.append(f"{json.dumps(scale)}: {rest[:-2]},\n\"runs\": {{\n{runs}\n}}\n}}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


if __name__ == "__main__":
    sys.path.insert(0, str(REPO / "src"))
    FIXTURE.write_text(write_fixture(current_keys()))
    print(f"wrote {FIXTURE.relative_to(REPO)}")
