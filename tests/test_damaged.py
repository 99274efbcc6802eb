"""Damaged and deleted workflow files, on the real commands (``snakemake``, ``fedbayes table``,
``fedbayes track``), in a temporary copy of the repository with the fault tests' synthetic experiments:

- a damaged run.json, history.csv, metrics.json or selected.json is named with its remedy (exit 2, no
  traceback) by every command that reads it, and Snakemake rebuilds it (retrains the run, re-evaluates,
  reselects) instead of trusting it; the rebuilt table equals the one before;
- a deleted run file or MLflow store behind an existing table makes the table's plan include what
  rebuilds it (never "Nothing to be done"), and the documented store rebuild recipe (docs/results.md)
  works as written.

The readers' checks themselves are unit-tested at the end (``fedbayes.runfiles``)."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
from pathlib import Path

import pytest
from dagutil import built_copy, copy_repo, sh
from test_faults import LONG, SYNTH_BUILD, synthetic_params

from fedbayes.runfiles import DamagedFile, read_history_rows, read_metrics, read_run_info, read_selected

TABLE = "reports/faults.csv"
RUN = "results/runs/synth-k4/fedavg/local_epochs=1/seed0"
SELECTED = "results/runs/synth-k4/fedavg/selected.json"


@pytest.fixture(scope="module")
def synth(tmp_path_factory, repo):
    d = built_copy(tmp_path_factory, repo, "synth", synthetic_params, "paper", SYNTH_BUILD)   # shared
    sh("snakemake --cores 2 mlflow", d)
    return d


def planned(d: Path, target: str = TABLE) -> dict[str, int]:
    """The jobs ``snakemake -n`` plans for the table (or ``target``): rule -> count."""
    out = sh(f"snakemake -n --cores 1 {target}", d)
    if "Nothing to be done" in out:
        return {}
    jobs = {}
    for line in out[out.index("Job stats:"):].splitlines()[3:]:
        words = line.split()
        if len(words) != 2 or not words[1].isdigit():
            break
        jobs[words[0]] = int(words[1])
    jobs.pop("total", None)
    return jobs


def truncate(f: Path) -> None:
    f.write_bytes(f.read_bytes()[: len(f.read_bytes()) // 2])


DAMAGE = {
    "run.json truncated": (f"{RUN}/run.json", truncate, "train"),
    "run.json without config": (f"{RUN}/run.json", lambda f: f.write_text('{"config_hash": "x"}'), "train"),
    "history.csv truncated": (f"{RUN}/history.csv", truncate, "train"),
    "history.csv missing rounds": (f"{RUN}/history.csv",
                                   lambda f: f.write_text("".join(f.read_text().splitlines(True)[:3])), "train"),
    "history.csv binary": (f"{RUN}/history.csv", lambda f: f.write_bytes(b"\x00\xff\xfe" * 50), "train"),
    "metrics.json garbage": (f"{RUN}/metrics.json", lambda f: f.write_text("{'not json"), "evaluate"),
    "metrics.json of another run": (f"{RUN}/metrics.json",
                                    lambda f: f.write_text(f.read_text().replace('"config_hash": "', '"config_hash": "0')),
                                    "evaluate"),
    # values, not bytes: a wrong type, and files that parse but are another run's
    "metrics.json a string for a number": (f"{RUN}/metrics.json", lambda f: f.write_text(json.dumps(
        {**json.loads(f.read_text()), "final": {k: str(v) for k, v in json.loads(f.read_text())["final"].items()}})),
        "evaluate"),
    "history.csv of another seed": (f"{RUN}/history.csv",
                                    lambda f: f.write_bytes((f.parent.parent / "seed1" / f.name).read_bytes()), "train"),
    "run.json of another seed": (f"{RUN}/run.json",
                                 lambda f: f.write_bytes((f.parent.parent / "seed1" / f.name).read_bytes()), "train"),
}


@pytest.mark.full
@pytest.mark.parametrize("case", list(DAMAGE))
def test_damaged_run_file_is_named_and_planned_for_rebuild(synth, case):
    """Each damage on its own: every command that reads the file names it, with the remedy, and exits 2
    without a traceback; Snakemake plans what rebuilds it (the file is then put back)."""
    rel, damage, rule = DAMAGE[case]
    f = synth / rel
    good, mtime = f.read_bytes(), f.stat().st_mtime_ns
    damage(f)
    try:
        for cmd in (f"fedbayes table faults --out {synth}/elsewhere/t.csv",   # a file of its own, outside the workflow's
                    f"fedbayes track --experiment synth-k4 --method fedavg --point local_epochs=1 --seed 0 "
                    f"--run-dir '{RUN}'"):
            out = sh(cmd + "; echo rc=$?", synth)
            assert "rc=2" in out and f"{rel} is damaged" in out and "Traceback" not in out, out[-2000:]
        assert rule in planned(synth)
    finally:
        f.write_bytes(good)
        os.utime(f, ns=(mtime, mtime))  # as it was
    assert planned(synth) == {}


@pytest.mark.full
def test_damaged_files_are_rebuilt_and_the_table_comes_back(synth):
    """Several files damaged at once (a run's run.json, another's history, a third's metrics, a selection):
    one `snakemake` rebuilds each (retrain, re-evaluate, reselect) and the table equals the one before."""
    table_before = (synth / TABLE).read_text()
    other = RUN.replace("seed0", "seed1")
    prox = "results/runs/synth-k4/fedprox/alpha=0.01/seed1"
    truncate(synth / RUN / "run.json")
    truncate(synth / other / "history.csv")
    (synth / prox / "metrics.json").write_text("{")
    (synth / SELECTED).write_text('{"point": 3}')
    out = sh(f"snakemake --cores 1 {TABLE}", synth)
    # its select job reruns (the marker job's message names the damage)
    assert f"selected again because {SELECTED} is damaged" in out
    read_selected(synth / SELECTED)
    for d in (RUN, other, prox):
        read_metrics(synth / d)
        read_history_rows(synth / d)
    assert planned(synth) == {}
    assert (synth / TABLE).read_text() == table_before


@pytest.mark.full
@pytest.mark.parametrize("name", ["history.csv", "metrics.json", "run.json"])
def test_deleted_run_file_behind_a_table_is_planned(synth, name):
    f = synth / RUN / name
    good, mtime = f.read_bytes(), f.stat().st_mtime_ns
    f.unlink()
    try:
        assert {"history.csv": "train", "run.json": "train", "metrics.json": "evaluate"}[name] in planned(synth)
    finally:
        f.write_bytes(good)
        os.utime(f, ns=(mtime, mtime))
    assert planned(synth) == {}


@pytest.mark.full
def test_deleted_selection_behind_a_table_is_planned(synth):
    """A deleted selected.json (a checkpoint's output) left the table waiting on a checkpoint that Snakemake
    never looked behind: "Nothing to be done". Now the selection reruns (tests/test_edit_loop.py: the same
    for a selection that never existed, a method or experiment new to the table)."""
    f = synth / SELECTED
    good, mtime = f.read_bytes(), f.stat().st_mtime_ns
    f.unlink()
    try:
        assert {"select", "table_faults"} <= set(planned(synth))
    finally:
        f.write_bytes(good)
        os.utime(f, ns=(mtime, mtime))
    assert planned(synth) == {}


def store_runs(d: Path) -> int:
    with sqlite3.connect(d / "mlflow.db") as con:
        return con.execute("SELECT count(*) FROM runs WHERE status = 'FINISHED' AND lifecycle_stage = 'active'").fetchone()[0]


IMPORT = {"mlflow_faults": 1, "mlflow": 1}   # the table's import job, and the target rule


@pytest.mark.full
def test_deleted_mlflow_store_is_reimported(synth):
    n = store_runs(synth)
    assert n > 0
    # the store alone deleted: the import is redone (one job for the table's two methods); the table,
    # which reads the run files and never the store, is not rebuilt; the marker job names the lost import
    (synth / "mlflow.db").unlink()
    assert planned(synth) == {} and planned(synth, "mlflow") == {**IMPORT, "marker": 1}
    sh("snakemake --cores 1 mlflow", synth)
    assert store_runs(synth) == n and planned(synth, "mlflow") == {}
    # the documented rebuild recipe, as written
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    recipe = "rm -rf mlflow.db mlartifacts work/mlflow\nsnakemake --cores all mlflow"
    assert recipe in readme
    sh(recipe.splitlines()[0], synth)
    assert planned(synth, "mlflow") == IMPORT
    sh("snakemake --cores 1 mlflow", synth)
    assert store_runs(synth) == n and planned(synth, "mlflow") == {} and planned(synth) == {}


@pytest.mark.full
def test_a_tables_mlflow_import_trains_and_imports_that_tables_runs_only(tmp_path, repo):
    """The MLflow import was one job per experiment over every table's pairs: asking for one table's
    runs in MLflow trained the other tables' methods of its experiments too. A table's import (rule
    mlflow_<table>) plans that table's runs only; ``mlflow`` plans every table's."""
    def two_tables(p):   # two tables share synth-k4, each with its own method
        synthetic_params(p)
        p["tables"]["other"] = {**p["tables"]["faults"], "title": "FedAvg", "experiments": ["synth-k4", LONG],
                                "methods": ["fedavg"]}
        p["tables"]["faults"]["methods"] = ["fedprox"]

    def trained(target):   # (experiment, method) of the train jobs planned, and the import jobs
        plan = sh(f"snakemake -n --cores 1 {target}", d)
        return (set(re.findall(r"^    wildcards: experiment=([^,]+), method=([^,]+), point=", plan, re.M)),
                set(re.findall(r"^rule (mlflow\w*):", plan, re.M)))

    d = copy_repo(repo, tmp_path / "repo", two_tables, scale="paper")
    sh("snakemake --cores 1 work/data/synthetic.json", d)   # the data status (a checkpoint) before the plan
    assert trained("mlflow_faults") == ({("synth-k4", "fedprox")}, {"mlflow_faults"})
    assert trained("mlflow") == ({("synth-k4", "fedprox"), ("synth-k4", "fedavg"), (LONG, "fedavg")},
                                 {"mlflow_faults", "mlflow_other", "mlflow"})


# --- the readers (fedbayes.runfiles), without a workflow -------------------------------------------

def write_run(d: Path, rounds: int = 3, **info) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    cfg = {"experiment": "e", "method": "fedavg", "seed": 0, "rounds": rounds}
    (d / "run.json").write_text(json.dumps({"config": cfg, "config_hash": "abc", **info}))
    (d / "history.csv").write_text("round,test/acc\n" + "".join(f"{r},0.{r}\n" for r in range(rounds + 1)))
    (d / "metrics.json").write_text(json.dumps({"experiment": "e", "method": "fedavg", "seed": 0, "config_hash": "abc",
                                                "final_round": rounds, "rounds": {}, "final": {}}))
    return d


def test_readers_accept_a_whole_run(tmp_path):
    d = write_run(tmp_path / "run")
    assert read_run_info(d)["config"]["rounds"] == 3
    assert [r["round"] for r in read_history_rows(d)] == ["0", "1", "2", "3"]
    assert read_metrics(d)["final_round"] == 3


def test_a_diverged_run_may_stop_early(tmp_path):
    d = write_run(tmp_path / "run", rounds=10, diverged={"round": 4, "reason": "nan"})
    (d / "history.csv").write_text("round,test/acc\n0,0.1\n1,0.2\n2,0.3\n")
    assert len(read_history_rows(d)) == 3
    (d / "history.csv").write_text("round,test/acc\n" + "".join(f"{r},0.1\n" for r in range(7)))
    with pytest.raises(DamagedFile, match="after the run diverged at round 4"):
        read_history_rows(d)


@pytest.mark.parametrize("text, why", [
    ("", "no header"),
    ("round,test/acc\n0,0.1\n1,0.2\n", "ends at round 1; run.json says the run trained 3 rounds"),
    ("round,test/acc\n0,0.1\n2,0.2\n", "line 3 is round '2', expected 1"),
    ("round,test/acc\n0,0.1\n1,0.2,7\n", "line 3 has another number of fields"),
    ("round,test/acc\n0,0.1\n1\n", "line 3 has another number of fields"),
    ("acc\n0.1\n", "no header with a 'round' column"),
    # a non-numeric cell was imported and tabulated (issue "nothing unchecked", item 3)
    ("round,test/acc\n0,0.1\n1,0.2\n2,oops\n3,0.4\n", "line 4, column 'test/acc' holds 'oops', not a number"),
])
def test_damaged_history_is_named(tmp_path, text, why):
    d = write_run(tmp_path / "run")
    (d / "history.csv").write_text(text)
    with pytest.raises(DamagedFile, match=why) as e:
        read_history_rows(d)
    assert str(d / "history.csv") in str(e.value) and "retrain" in str(e.value)


@pytest.mark.parametrize("name, text, why", [
    ("run.json", "{", "not valid JSON"),
    ("run.json", "[]", "a JSON list, not an object"),
    ("run.json", '{"config": {}, "config_hash": "abc"}', "lacks experiment, method, seed or rounds"),
    ("metrics.json", '{"config_hash": "abc"}', "no 'final_round', 'rounds', 'final'"),
    ("metrics.json", '{"config_hash": "xyz", "final_round": 3, "rounds": {}, "final": {}, "experiment": "e", '
                     '"method": "fedavg", "seed": 0}', "computed from another run"),
    ("metrics.json", '{"config_hash": "abc", "final_round": 3, "rounds": {}, "final": {}, "experiment": "e", '
                     '"method": "fedavg", "seed": 1}', "computed from another run"),
])
def test_damaged_json_is_named(tmp_path, name, text, why):
    d = write_run(tmp_path / "run")
    (d / name).write_text(text)
    with pytest.raises(DamagedFile, match=why) as e:
        read_metrics(d) if name == "metrics.json" else read_run_info(d)
    assert str(d / name) in str(e.value)
    assert ("fedbayes evaluate" if name == "metrics.json" else "retrain") in str(e.value)


@pytest.mark.full
def test_a_damaged_selection_alone_is_rebuilt_from_the_runs_metrics(synth):
    """The dry run names the damage and plans the selection again, writing nothing (planning only looks:
    a file moved aside while the DAG is built would be lost to a dry run); the run rebuilds it."""
    f = synth / SELECTED
    good = json.loads(f.read_text())
    f.write_text("garbage")
    out = sh(f"snakemake -n --cores 1 {TABLE}", synth)
    assert f"selected again because {SELECTED} is damaged" in out and "checkpoint select:" in out
    assert f.read_text() == "garbage" and not (synth / f"{SELECTED}.damaged").exists()
    sh(f"snakemake --cores 1 {TABLE}", synth)
    assert read_selected(f)["point"] == good["point"]
    assert planned(synth) == {}


@pytest.mark.parametrize("content", [b"garbage, not a zip", b"PK\x03\x04truncated"], ids=["text", "truncated-zip"])
def test_a_damaged_predictions_archive_is_named_without_pickle_advice(tmp_path, content, capsys):
    """A garbage predictions.npz earned numpy's "load with allow_pickle" hint (unsafe advice) on every run;
    now one line naming the file, no traceback."""
    from fedbayes import cli

    d = write_run(tmp_path / "run")
    (d / "metrics.json").unlink()   # (a metrics.json of the code's metric definitions: nothing to read them for)
    (d / "predictions.npz").write_bytes(content)
    with pytest.raises(SystemExit) as e:
        cli.main(["evaluate", str(d)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("fedbayes evaluate: error: ") and "predictions.npz" in err, err
    assert "pickle" not in err.lower() and "Traceback" not in err


def test_evaluating_a_run_still_training_says_so(tmp_path, capsys):
    """`fedbayes evaluate` on a run still training advised retraining it; it says the run is training."""
    from fedbayes import cli
    from fedbayes.fileio import try_exclusive_lock

    d = write_run(tmp_path / "run")
    with try_exclusive_lock(cli.train_lock(d)):
        with pytest.raises(SystemExit) as e:
            cli.main(["evaluate", str(d)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "is still training" in err and "retrain" not in err, err


# --- values, not only bytes: types, and sibling files that agree ---------------------------------------

RUN_CFG = {"experiment": "e", "method": "fedavg", "seed": 0, "rounds": 3}
METRICS = {"experiment": "e", "method": "fedavg", "seed": 0, "config_hash": "abc", "final_round": 3, "rounds": {},
           "final": {}}


@pytest.mark.parametrize("name, content, key", [
    ("run.json", {"config": {**RUN_CFG, "seed": "0"}}, "config.seed"),
    ("run.json", {"config": {**RUN_CFG, "rounds": 3.5}}, "config.rounds"),
    ("run.json", {"config": {**RUN_CFG, "method": ["fedavg"]}}, "config.method"),
    ("run.json", {"config": {**RUN_CFG, "point": 5}}, "config.point"),
    ("run.json", {"config_hash": 12}, "config_hash"),
    ("run.json", {"wall_s": "12.5"}, "wall_s"),
    ("run.json", {"diverged": {"round": "2", "reason": "nan"}}, "diverged.round"),
    ("run.json", {"diverged": [2]}, "diverged"),
    ("run.json", {"code": "abc"}, "code"),
    ("run.json", {"device": 0}, "device"),
    ("metrics.json", {"final": {"test/acc": "0.9"}}, "final.test/acc"),
    ("metrics.json", {"final": [0.9]}, "final"),
    ("metrics.json", {"final_round": "3"}, "final_round"),
    ("metrics.json", {"rounds": {"3": [0.9]}}, "rounds.3"),
    ("metrics.json", {"rounds": {"3": {"test/nll": True}}}, "rounds.3.test/nll"),
    ("metrics.json", {"variants": {"mean": {"final": {"test/acc": "x"}, "rounds": {}}}}, "variants.mean.final.test/acc"),
    ("metrics.json", {"variants": ["mean"]}, "variants"),
    ("metrics.json", {"reliability": "none"}, "reliability"),
])
def test_a_value_of_the_wrong_type_is_named_with_its_key(tmp_path, name, content, key):
    """A string where a number is expected, a list where an object is: run.json and metrics.json parsed, and
    the value went on to be imported (float("0.9") is 0.9), tabulated or to crash later with a traceback that
    named no file. Now DamagedFile naming the file and the dotted key."""
    d = write_run(tmp_path / "run")
    if name == "run.json":
        info = json.loads((d / name).read_text())
        (d / name).write_text(json.dumps({**info, **content}))
    else:
        (d / name).write_text(json.dumps({**METRICS, **content}))
    with pytest.raises(DamagedFile) as e:
        read_metrics(d) if name == "metrics.json" else read_run_info(d)
    assert e.value.path == d / name and f"'{key}'" in e.value.why, str(e.value)


def test_sibling_files_that_disagree_are_named_with_both(tmp_path):
    """One seed's history.csv copied over another's parsed, had every round, and was imported and
    tabulated as that seed's. A run's files agree now: run.json records the run its folder names
    (<experiment>/<method>/<point>/seed<seed>), history.csv's last wall_s is the one run.json records
    (training writes both from the same number), and so is metrics.json's (evaluation copies it); a
    disagreement is a DamagedFile naming both files."""
    runs = tmp_path / "runs" / "e" / "fedavg" / "default"
    for seed, wall in ((0, 7.25), (1, 9.5)):
        d = write_run(runs / f"seed{seed}", wall_s=wall)
        info = json.loads((d / "run.json").read_text())
        info["config"] |= {"seed": seed, "point": "default"}
        (d / "run.json").write_text(json.dumps(info))
        (d / "history.csv").write_text("round,test/acc,wall_s\n" + "".join(f"{r},0.{r}{seed},{wall * r / 3}\n"
                                                                          for r in range(4)))
        (d / "metrics.json").write_text(json.dumps({**METRICS, "seed": seed, "wall_s": wall}))
    s0, s1 = runs / "seed0", runs / "seed1"
    for d in (s0, s1):   # as written: they agree
        read_history_rows(d)
        read_metrics(d)
    shutil.copy(s1 / "history.csv", s0 / "history.csv")   # seed 1's history over seed 0's
    with pytest.raises(DamagedFile, match="wall_s") as e:
        read_history_rows(s0)
    assert e.value.path == s0 / "history.csv" and str(s0 / "run.json") in str(e.value) and "retrain" in str(e.value)
    shutil.copy(s1 / "run.json", s0 / "run.json")         # … and its run.json: the folder says seed 0
    with pytest.raises(DamagedFile, match="seed1") as e:
        read_run_info(s0)
    assert e.value.path == s0 / "run.json" and str(s0) in e.value.why
    shutil.copytree(s1, s0, dirs_exist_ok=True)           # the whole run: still not seed 0's
    with pytest.raises(DamagedFile, match="lies in"):
        read_metrics(s0)
    for f in ("run.json", "history.csv", "metrics.json"):
        shutil.copy(s1 / f, tmp_path / f)
    write_run(s0, wall_s=7.25)                             # a metrics.json of an earlier training of the run
    info = json.loads((s0 / "run.json").read_text())
    info["config"] |= {"seed": 0, "point": "default"}
    (s0 / "run.json").write_text(json.dumps(info))
    (s0 / "metrics.json").write_text(json.dumps({**METRICS, "wall_s": 3.0}))
    with pytest.raises(DamagedFile, match="wall_s") as e:
        read_metrics(s0)
    assert e.value.path == s0 / "metrics.json" and str(s0 / "run.json") in str(e.value)
    assert "fedbayes evaluate" in str(e.value)
