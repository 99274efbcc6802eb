"""Reruns follow numbers, not file hashes (fedbayes.study.rerun), on the real ``snakemake`` command in a
temporary copy of the repository (the synthetic experiments of tests/test_faults.py) whose package
sources the workflow runs (``PYTHONPATH=<copy>/src``), so that the tests can edit them:

- a behaviour-preserving edit of method and engine code plans no training job;
- a numerics version bump of one method plans exactly that method's runs, with Snakemake's own
  record of the params (the same working copy) and without it (a fresh clone: the run.json marker);
- a core numerics bump plans every run;
- an edit of a default a method reads from its spec plans exactly the runs that read it (with and
  without Snakemake's record), which then record the new default and plan nothing;
- a change of a method's numbers without a numerics version bump stops the DAG naming the method (the
  numerics check: its golden replayed when the code changed since the last check; a refactor is adopted).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from dagutil import built_copy, mtimes, sh
from test_faults import SYNTH_BUILD, synthetic_params
from dagutil import read_params

TABLE = "reports/faults.csv"
TRAIN_OUT = re.compile(r"results/runs/([^/\s]+)/(\w+)/([^/\s]+)/seed(\d+)/history\.csv")


def run(cmd: str, d: Path, **kw) -> str:
    return sh(cmd, d, PYTHONPATH=str(d / "src"), **kw)


def planned_training(d: Path, plan: str | None = None) -> set[tuple[str, str, str, str]]:
    """(experiment, method, point, seed) of every train job ``snakemake -n`` plans for the table (or
    ``plan``, its output)."""
    plan = run(f"snakemake -n --cores 2 {TABLE}", d) if plan is None else plan
    jobs = set()
    for block in plan.split("rule ")[1:]:
        if block.startswith("train:"):
            out = block.split("output:")[1].splitlines()[0]
            jobs |= {m.groups() for m in TRAIN_OUT.finditer(out)}
    return jobs


def pure_plan(d: Path) -> str:
    """``snakemake -n`` for the table, checked to leave work/ and results/ as they were: planning only
    looks (a rerun marker written while the DAG is built would be written by a dry run too); the numerics
    check is a job (rule numerics_check) that planning only plans. The one file planning writes besides the
    effective configuration (docs/workflow.md) is its stamp, the record of what the planner validated:
    rewritten when the code changes, as in these tests."""
    def files():
        return {str(f.relative_to(d)): f.stat().st_mtime_ns for top in ("work", "results") for f in (d / top).rglob("*")
                if not f.relative_to(d).as_posix().startswith("work/numerics")
                and f.name != "params.effective.yaml.validated"}

    before = files()
    plan = run(f"snakemake -n --cores 2 {TABLE}", d)
    after = files()
    assert after == before, sorted(set(after.items()) ^ set(before.items()))
    return plan


@pytest.fixture
def built(tmp_path_factory, repo) -> Path:
    """The synthetic table built once a session, copied fresh for each test (edits stay in their test)."""
    return built_copy(tmp_path_factory, repo, "synth", synthetic_params, "paper", SYNTH_BUILD)


def all_runs(d: Path) -> set[tuple[str, str, str, str]]:
    return {m.groups() for p in (d / "results/runs").rglob("history.csv")
            if (m := TRAIN_OUT.search(str(p.relative_to(d))))}


@pytest.mark.full
def test_a_refactor_of_method_and_engine_code_retrains_nothing(built):
    assert planned_training(built) == set()
    checked = mtimes(built, "work/numerics/*.json")
    records = {f for f in checked if re.fullmatch(r"work/numerics/\w+\.json", f)}   # besides baselines of new paths
    # every method of the table is checked by its numerics_check job in the first build
    assert {"work/numerics/fedavg.json", "work/numerics/fedprox.json"} <= records
    assert planned_training(built) == set() and mtimes(built, "work/numerics/*.json") == checked  # no edit: no check
    for rel in ("src/fedbayes/methods/fedavg/algorithm.py", "src/fedbayes/methods/core/base.py", "src/fedbayes/engine/loop.py",
                "src/fedbayes/eval/metrics.py"):
        f = built / rel
        f.write_text(f.read_text() + "\n\ndef _a_refactor_helper():  # behaviour-preserving edit\n    return None\n")
    assert planned_training(built) == set()
    run(f"snakemake --cores 2 {TABLE}", built)   # the numerics_check jobs run before the table reads the runs
    assert planned_training(built) == set()
    # the numerics check ran again on the edited code, found the same numbers and adopted it silently
    from fedbayes.engine.goldens import golden_name

    from fedbayes.machine import class_slug, machine_class, same_class

    record = json.loads((built / "work/numerics/fedavg.json").read_text())
    goldens_class = json.loads((built / "tests/golden/numerics/machine.json").read_text())["machine"]
    # bit for bit on the goldens' machine class; on another (or emulated: ATEN_CPU_CAPABILITY=default), within round-off
    own = (built / "tests/golden/numerics" / class_slug(machine_class())).is_dir()   # this class's committed goldens
    expected = "bit-identical" if own or same_class(goldens_class, machine_class()) else "within round-off"
    assert mtimes(built, "work/numerics/*.json") != checked and record["result"] == expected
    assert record["golden"] == str(built / "tests/golden/numerics" / golden_name("fedavg"))   # the committed one


@pytest.mark.full
def test_a_numbers_change_without_a_bump_stops_the_dag_naming_the_method(built):
    """The numerics rule was enforced by the test suite only: a change of FedAvg's arithmetic without a
    numerics version bump left its finished runs adopted, tabulated beside runs of the new code with
    nothing said. The DAG now replays the method's numerics golden (3 rounds of a tiny problem, about a
    second) when the code has changed since its last check, and stops with one line naming the method
    and the first differing value; with the bump, the method's runs are planned instead."""
    assert planned_training(built) == set()
    f = built / "src/fedbayes/methods/fedprox/algorithm.py"   # FedProx's client (FedAvg's server, which FedProx runs too)
    old = 'w_g, alpha = down["w"], float(self.p.alpha)'
    assert f.read_text().count(old) == 2   # the sequential client (a CPU's) first, then the batched one
    # the proximal weight doubled (μ for μ/2, a convention slip): bits on the goldens' class, and far beyond
    # round-off on another (1,100× the envelope), so the DAG stops on every class
    f.write_text(f.read_text().replace(old, old + " * 2", 1))
    assert planned_training(built) == set()   # planning only plans the check (rule numerics_check)
    out = run(f"snakemake --cores 2 {TABLE}", built, check=False)
    said = [line for line in out.splitlines() if "changed without a numerics version bump" in line]
    assert said and len(set(said)) == 1, out[-3000:]
    assert re.search(r"fedprox's numbers changed without a numerics version bump: round \d+: \S+ \S+ != \S+", said[0]), said
    assert "fedavg" not in said[0] and not re.search(r"^rule train:", out, re.M)
    catalog = built / "src/fedbayes/study/rerun.py"
    catalog.write_text(catalog.read_text() + '\nMETHOD_NUMERICS["fedprox"] += 1\n')
    planned = planned_training(built)
    assert planned and {r[1] for r in planned} == {"fedprox"}


@pytest.mark.full
def test_on_another_machine_class_the_dag_adopts_runs_within_round_off_and_trains_what_is_due(built):
    """The DAG on another machine class, emulated (``ATEN_CPU_CAPABILITY=default``: PyTorch's kernels
    without vector instructions round differently on the same CPU): the goldens replay within round-off,
    one line says so, no finished run is retrained, and a deleted run trains and its table builds under
    that class (its run.json records it); a real change of FedProx's numbers still stops the DAG there."""
    other = {"ATEN_CPU_CAPABILITY": "default"}
    plan = run(f"snakemake -n --cores 2 {TABLE}", built, **other)
    assert planned_training(built, plan) == set()
    out = run(f"snakemake --cores 2 {TABLE}", built, **other)   # the numerics_check jobs, within round-off
    said = {line for line in out.splitlines() if line.startswith("fedbayes numerics-check: ")}
    assert said and all("rounds differently from the goldens' machine" in s and "DEFAULT" in s for s in said), out[-3000:]
    victim = sorted((built / "results/runs").rglob("history.csv"))[0].parent
    shutil.rmtree(victim)
    run(f"snakemake --cores 2 {TABLE}", built, **other)
    info = json.loads((victim / "run.json").read_text())
    assert info["machine"]["aten"] == "DEFAULT" and (built / TABLE).exists()
    assert planned_training(built) == set()   # back on this machine's class: the run is adopted, nothing trains
    f = built / "src/fedbayes/methods/fedprox/algorithm.py"
    old = 'w_g, alpha = down["w"], float(self.p.alpha)'
    f.write_text(f.read_text().replace(old, old + " * 2", 1))
    out = run(f"snakemake --cores 2 {TABLE}", built, check=False, **other)
    assert re.search(r"fedprox's numbers changed without a numerics version bump: round \d+: \S+ \S+ != \S+ .*"
                     r"beyond round-off", out), out[-3000:]


@pytest.mark.full
@pytest.mark.parametrize("metadata", ["snakemake record", "fresh clone"])
def test_a_numerics_bump_reruns_exactly_that_method(built, metadata):
    if metadata == "fresh clone":  # no record of the params the runs were made with: run.json decides
        shutil.rmtree(built / ".snakemake")
    from fedbayes.study import METHOD_NUMERICS

    catalog = built / "src/fedbayes/study/rerun.py"
    catalog.write_text(catalog.read_text() + '\nMETHOD_NUMERICS["fedprox"] += 1\n')
    now = METHOD_NUMERICS["fedprox"]
    want = {r for r in all_runs(built) if r[1] == "fedprox"}
    # the plan holds the sweep's runs (first seed); the other seeds wait behind the selection checkpoint
    plan = pure_plan(built)
    planned = planned_training(built, plan)
    assert planned and planned <= want and {r for r in want if r[3] == "0"} <= planned
    assert f"numerics version of fedprox {now} -> {now + 1}" in plan   # the marker job's message
    before = mtimes(built, "results/runs/*/*/*/*/history.csv")
    run(f"snakemake --cores 2 {TABLE}", built)
    after = mtimes(built, "results/runs/*/*/*/*/history.csv")
    assert {k for k in before if after[k] != before[k]} == {k for k in before if "/fedprox/" in k}
    assert planned_training(built) == set()


@pytest.mark.full
def test_a_core_numerics_bump_reruns_every_run(built):
    catalog = built / "src/fedbayes/study/rerun.py"
    catalog.write_text(catalog.read_text().replace("CORE_NUMERICS = 1", "CORE_NUMERICS = 2"))
    # the sweep's runs; where the selection reads the first seed only, the other seeds wait behind it
    sel_all = read_params(built)["experiments"]["synth-k4"].get(
        "selection", {}).get("seeds") == "all"
    assert planned_training(built) == {r for r in all_runs(built) if sel_all or r[3] == "0"}
    before = mtimes(built, "results/runs/*/*/*/*/history.csv")
    run(f"snakemake --cores 2 {TABLE}", built)
    after = mtimes(built, "results/runs/*/*/*/*/history.csv")
    assert before and all(after[k] != before[k] for k in before)


@pytest.mark.full
@pytest.mark.parametrize("metadata", ["snakemake record", "fresh clone"])
def test_an_edited_spec_default_reruns_the_runs_that_read_it(built, metadata):
    """The defaults a method reads from its spec (``self.p``) were in no run's record: editing one changed
    the numbers of the next run and reran none. FedProx's prox_norm (squared → unsquared, a default its
    runs here do not set; FedAvg does not read it) plans FedProx's runs only, naming the default; once
    rerun, their run.json records it and nothing is planned."""
    if metadata == "fresh clone":
        shutil.rmtree(built / ".snakemake")
    assert planned_training(built) == set()
    spec = built / "src/fedbayes/methods/core/params.py"
    text = spec.read_text()
    assert text.count('hparam("squared", enum("squared", "unsquared")') == 1
    spec.write_text(text.replace('hparam("squared", enum("squared", "unsquared")', 'hparam("unsquared", enum("squared", "unsquared")'))
    want = {r for r in all_runs(built) if r[1] == "fedprox"}
    plan = pure_plan(built)
    planned = planned_training(built, plan)
    assert planned and planned <= want and {r for r in want if r[3] == "0"} <= planned
    assert "default of fedprox's prox_norm 'squared' -> 'unsquared'" in plan   # the marker job's message
    if metadata == "fresh clone":
        return
    run(f"snakemake --cores 2 {TABLE}", built)
    runs = sorted((built / "results/runs/synth-k4/fedprox").glob("*/seed*/run.json"))
    assert runs and all(json.loads(r.read_text())["defaults"]["prox_norm"] == "unsquared" for r in runs)
    assert planned_training(built) == set()
    shutil.rmtree(built / ".snakemake")   # a clone of the rerun runs: their record decides, and agrees
    assert planned_training(built) == set()


def test_a_runs_defaults_are_compared_with_its_record_or_the_frozen_one(monkeypatch):
    """The rule behind the DAG test, per case: a run without a record was trained under the frozen
    defaults; a recorded default compares with today's; an option added since, or a value the
    configuration now sets, is no change of a default; a method without a frozen record (a plug-in)
    keys every default it reads."""
    from fedbayes.study import rerun as catalog

    hp = {"lr": 0.1, "batch_size": 32, "local_epochs": 1}
    now = catalog.method_defaults("fedprox", hp)
    assert now["prox_norm"] == "squared" and "lr" not in now and "alpha" not in now   # alpha: REQUIRED
    assert catalog.default_changes("fedprox", hp) == {} and catalog.defaults_key("fedprox", hp) == {}
    assert catalog.default_changes("fedprox", hp, now) == {}
    assert catalog.default_changes("fedprox", hp, {**now, "prox_norm": "unsquared"}) == {
        "prox_norm": ("unsquared", "squared")}
    assert catalog.default_changes("fedprox", hp, {k: v for k, v in now.items() if k != "weight_decay"}) == {}
    assert catalog.default_changes("fedprox", {**hp, "prox_norm": "unsquared"}, now) == {}
    monkeypatch.setitem(catalog.FROZEN_DEFAULTS, "fedprox", {**now, "weight_decay": 0.5})
    assert catalog.default_changes("fedprox", hp) == {"weight_decay": (0.5, 0.0)}
    assert catalog.defaults_key("fedprox", hp) == {"weight_decay": 0.0}
    monkeypatch.delitem(catalog.FROZEN_DEFAULTS, "fedprox")
    assert catalog.defaults_key("fedprox", hp) == now
    # fixed hyperparameters are defaults too (fedep_i is FedEP with variant I)
    assert catalog.method_defaults("fedep_i", {})["variant"] == "I"


@pytest.mark.full
def test_a_metric_added_to_a_table_and_its_curves_rebuilds_them_with_their_new_outputs(built):
    """ECE added to a table's metrics adds its reliability diagram to the table job's outputs (and a metric
    added to the headline's curves a curve CSV to the headline job's). Snakemake checks only the requested
    output of a target job and skips the params check of a job with an output it has no record of: the
    edit was answered "Nothing to be done" and the table kept its old metrics. A marker naming the missing
    outputs now reruns the job."""
    run("snakemake --cores 2 reports/faults.csv reports/metrics", built)
    p = read_params(built)
    p["tables"]["faults"]["metrics"] = ["test/acc", "test/nll", "test/ece"]
    p["headline"]["curves"] = ["test/acc", "test/ece"]
    (built / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    out = run("snakemake --cores 2 reports/faults.csv reports/metrics", built)
    assert not re.search(r"\(Rule: (train|evaluate)\)", out), out[-2000:]
    table = pd.read_csv(built / "reports/faults.csv")
    assert set(table["metric"]) == {"test/acc", "test/nll", "test/ece"}
    assert (built / "reports/figures/faults_reliability.png").exists()
    assert (built / "reports/plots/faults_synth-k4_test_ece.csv").exists()
    assert "Nothing to be done" in run("snakemake -n --cores 2 reports/faults.csv reports/metrics", built)


@pytest.mark.full
@pytest.mark.parametrize("metadata", ["snakemake record", "fresh clone"])
def test_a_metric_definition_change_re_evaluates_every_cell_and_curve_and_retrains_nothing(built, metadata):
    """Issue 34 item 4, one source of metric values: a table's statistics over rounds (``best``), its learning
    curves and the headline's DVC curves read history.csv, training's own evaluation, while its other cells
    read metrics.json; a metric definition change (here NLL in bits instead of nats) re-evaluated
    metrics.json and left the rest on the old definition. Every run now keeps every evaluated round's
    predictions and every reader reads metrics.json: the change plans an evaluate job for every run and no
    training, and every cell, curve and figure that shows NLL follows it, the accuracy ones unchanged. Also
    without Snakemake's record of the evaluate jobs' code (a fresh clone): each metrics.json records the metric
    definitions it was computed with (``metric_codes``, per metric a fingerprint of numbers), compared when the DAG is built."""
    import numpy as np
    from fedbayes.eval.metrics import nll

    p = read_params(built)
    p["tables"]["faults_best"] = {**p["tables"]["faults"], "title": "best over rounds", "statistic": "best"}
    p["headline"]["curves"] = ["test/acc", "test/nll"]
    (built / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    targets = "reports/faults.csv reports/faults_best.csv reports/metrics"
    run(f"snakemake --cores 2 {targets}", built)
    runs = sorted((built / "results/runs").rglob("history.csv"))
    assert len(runs) == 4   # synth-k4 × {fedavg, fedprox} × seeds 0, 1
    histories = {f: f.read_bytes() for f in runs}
    tables = {t: pd.read_csv(built / f"reports/{t}.csv") for t in ("faults", "faults_best")}
    shown = {f: f.read_bytes() for f in [*(built / "reports/plots").glob("*.csv"), *(built / "reports/figures").glob("faults*")]}
    assert {f.name for f in shown} >= {"faults_synth-k4_test_nll.csv", "faults_curves.png", "faults_best_curves.png"}

    if metadata == "fresh clone":
        shutil.rmtree(built / ".snakemake")
        assert "Nothing to be done" in run(f"snakemake -n --cores 2 {targets}", built)
    metrics = built / "src/fedbayes/eval/metrics.py"
    nats = "return float(-np.mean(logp[np.arange(len(y)), y]))"
    assert metrics.read_text().count(nats) == 1
    metrics.write_text(metrics.read_text().replace(nats, nats[:-1] + " / np.log(2))"))
    plan = run(f"snakemake -n --cores 2 {targets}", built)
    assert not re.search(r"^rule train:", plan, re.M), plan[-3000:]
    assert len(re.findall(r"^rule evaluate:", plan, re.M)) == len(runs), plan[-3000:]
    run(f"snakemake --cores 2 {targets}", built)

    assert {f: f.read_bytes() for f in runs} == histories   # nothing retrained
    for f in runs:   # every round of every run re-evaluated from its kept predictions
        m = json.loads((f.parent / "metrics.json").read_text())
        pred = np.load(f.parent / "predictions.npz")
        assert "from_training" not in m and [int(r) for r in m["rounds"]] == pred["rounds"].tolist()
        assert [m["rounds"][str(r)]["test/nll"] for r in pred["rounds"]] == \
            pytest.approx([nll(lp, pred["y_test"]) / np.log(2) for lp in pred["test_logp"]], rel=1e-12)
    for t, before in tables.items():
        after = pd.read_csv(built / f"reports/{t}.csv")
        ours = {k: {m: f[f["metric"] == m]["ours_mean"].to_numpy() for m in ("test/acc", "test/nll")}
                for k, f in (("before", before), ("after", after))}
        np.testing.assert_array_equal(ours["after"]["test/acc"], ours["before"]["test/acc"])
        was, now = ours["before"]["test/nll"], ours["after"]["test/nll"]
        assert np.isfinite(was).any(), t
        np.testing.assert_allclose(now[np.isfinite(was)], was[np.isfinite(was)] / np.log(2), rtol=1e-3)
    now = {f: f.read_bytes() for f in shown}
    assert {f.name for f in shown if now[f] != shown[f]} == {f.name for f in shown if "acc" not in f.name}


TOP2 = '''

def top2(logp, y):
    """Top-2 accuracy: the label among the two most probable classes."""
    logp, y = _check(logp, y)
    return float(np.mean((np.argsort(-logp, axis=1)[:, :2] == y[:, None]).any(axis=1)))
'''


def values_but(m: dict, name: str) -> str:
    """A metrics.json's values but those of the metric ``name`` and the record of codes, as text."""
    def strip(t):
        return {k: v for k, v in t.items() if k != name}

    out = {k: v for k, v in m.items() if k not in ("metric_code", "metric_codes", "not_evaluated")}
    out["final"], out["rounds"] = strip(m["final"]), {r: strip(t) for r, t in m["rounds"].items()}
    out["variants"] = {v: {"final": strip(t["final"]), "rounds": {r: strip(x) for r, x in t["rounds"].items()}}
                       for v, t in m.get("variants", {}).items()}
    return json.dumps(out, indent=1)


@pytest.mark.full
def test_an_added_metric_re_evaluates_only_itself_and_retrains_nothing(built):
    """A metric added as docs/extending.md says (its function in eval/metrics.py, its entry in
    eval/registry.py), in a fresh clone (no record of Snakemake's): the DAG plans an evaluate job for every
    run, each naming the metric, and no training; each computes that metric alone from the run's kept
    predictions, every other value byte for byte as it was, also in a metrics.json recording one code for
    all its metrics. A run without predictions (as a committed one) records it as not evaluated, and the
    table listing it says so in that run's cells. Then nothing is to be done."""
    p = read_params(built)
    exp, method = "synth-k4", "fedavg"
    point = json.loads((built / f"results/runs/{exp}/{method}/selected.json").read_text())["point"]
    bare = built / f"results/runs/{exp}/{method}/{point}/seed0"
    (bare / "predictions.npz").unlink()   # as a committed run: predictions are not committed
    runs = sorted((built / "results/runs").rglob("metrics.json"))
    one_code = next(f for f in runs if f.parent != bare)   # as written before codes were recorded per metric
    m = json.loads(one_code.read_text())
    m.pop("metric_codes", None)
    one_code.write_text(json.dumps(m, indent=1))
    before = {f: json.loads(f.read_text()) for f in runs}
    shutil.rmtree(built / ".snakemake")

    metrics, registry = built / "src/fedbayes/eval/metrics.py", built / "src/fedbayes/eval/registry.py"
    metrics.write_text(metrics.read_text() + TOP2)
    anchor = '    Metric("ood/auroc_entropy"'
    assert registry.read_text().count(anchor) == 1
    registry.write_text(registry.read_text().replace(
        anchor, '    Metric("test/top2", "top-2 accuracy", "%", True, scale=100.0, digits=1, fn=_M + "top2"),\n' + anchor))
    p["tables"]["faults"]["metrics"] = [*p["tables"]["faults"]["metrics"], "test/top2"]
    (built / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    plan = run(f"snakemake -n --cores 2 {TABLE}", built)
    assert not re.search(r"^rule train:", plan, re.M), plan[-3000:]
    assert len(re.findall(r"^rule evaluate:", plan, re.M)) == len(runs), plan[-3000:]
    assert len(re.findall(r"re-evaluated because test/top2 not evaluated \(a new metric\)$", plan, re.M)) == len(runs)
    run(f"snakemake --cores 2 {TABLE}", built)

    import numpy as np
    for f in runs:
        after = json.loads(f.read_text())
        assert values_but(after, "test/top2") == values_but(before[f], ""), f
        if f.parent == bare:
            assert set(after["not_evaluated"]) == {"test/top2"} and "test/top2" not in after["final"]
            continue
        pred = np.load(f.parent / "predictions.npz")
        y = pred["y_test"]
        assert [after["rounds"][str(r)]["test/top2"] for r in pred["rounds"]] == [
            float(np.mean((np.argsort(-lp, axis=1)[:, :2] == y[:, None]).any(axis=1))) for lp in pred["test_logp"]]
        assert "not_evaluated" not in after and "test/top2" in after["metric_codes"]
    table = pd.read_csv(built / TABLE)
    top2 = table[table.metric == "test/top2"]
    assert set(top2[(top2.experiment == exp) & (top2.method == method)].status) == {
        "not evaluated (seed 0: no predictions were kept when test/top2 was added; retrain the run to compute it)"}
    others = top2[(top2.experiment != exp) | (top2.method != method)]
    assert len(others) and not others.status.str.startswith("not evaluated").any()   # (fedprox: diverged)
    assert "Nothing to be done" in run(f"snakemake -n --cores 2 {TABLE}", built)
