"""The README's recovery recipes ("When something breaks"), run as written on the real DAG at scale: smoke
(table1 cut to one experiment and FedAvg, as tests/test_scaleout.py cuts it): the lines of its code block
are read from README.md, the table's target given at this scale, and the tracking server named by the
switch recipe stood in for by a second SQLite store (docs/cluster.md's server test runs a real one).

- the MLflow store rebuilt (`rm -rf mlflow.db mlartifacts work/mlflow`, then the target): every run
  imported again, nothing else rerun (it said "Nothing to be done" where the import markers were kept);
- the imports pointed at another store: every run imported into it (the marker stood for any store);
- a garbage mlflow.db: the import fails with one line naming it and the remedy, which the recipe is;
- a run's history.csv replaced by another seed's: the target retrains that run and the table comes back
  identical."""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
from dagutil import sh
from test_scaleout import EXP, narrow_built

pytestmark = [pytest.mark.integration, pytest.mark.full]   # runs the DAG: make test-all

README = Path(__file__).parents[1] / "README.md"
TARGET = "reports/smoke/table1.csv"


def recipes() -> dict[str, list[str]]:
    """The README's recipes: the first comment line of each paragraph of the code block under
    "When something breaks" → its commands, with the table's target at scale smoke."""
    text = README.read_text()
    block = re.search(r"## When something breaks\n.*?```bash\n(.*?)```", text, re.S).group(1)
    out = {}
    for para in block.strip().split("\n\n"):
        lines = para.splitlines()
        name = lines[0].lstrip("# ")
        out[name] = [line.replace("snakemake --cores all reports/table1.csv", f"snakemake --cores 2 {TARGET}")
                     .replace("snakemake --cores all mlflow", "snakemake --cores 2 mlflow_table1")
                     for line in lines if not line.startswith("#")]
    assert len(out) == 4, list(out)
    return out


def recipe(start: str) -> str:
    [(name, cmds)] = [(n, c) for n, c in recipes().items() if n.startswith(start)]
    return "\n".join(cmds)


def store_runs(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as con:
        return sorted(con.execute(
            "SELECT e.name, r.name FROM runs r JOIN experiments e USING (experiment_id) "
            "WHERE r.status = 'FINISHED' AND r.lifecycle_stage = 'active'").fetchall())


def planned(d: Path) -> str:
    out = sh(f"snakemake -n --cores 1 {TARGET} mlflow_table1", d)
    return "" if "Nothing to be done" in out else out[out.index("Job stats:"):]


@pytest.fixture(scope="module")
def built(tmp_path_factory, repo):
    d = narrow_built(tmp_path_factory, repo)   # shared with tests/test_scaleout.py
    sh(f"snakemake --cores 2 {TARGET} mlflow_table1", d)
    return d


def test_the_mlflow_store_is_rebuilt_by_the_recipe(built):
    d = built
    runs, table = store_runs(d / "mlflow.db"), (d / TARGET).read_bytes()
    assert runs and all(e == f"smoke-{EXP}" for e, _ in runs)
    out = sh(recipe("The MLflow store"), d)
    assert "rule mlflow_table1:" in out and not re.search(r"Rule: (train|evaluate|select)\)", out), out[-3000:]
    assert store_runs(d / "mlflow.db") == runs and (d / TARGET).read_bytes() == table
    assert planned(d) == ""


def test_another_store_gets_every_run_by_the_recipe(built):
    d = built
    runs = store_runs(d / "mlflow.db")
    switch = recipe("Another store").replace("http://127.0.0.1:5000", "sqlite:///another.db")
    assert "export MLFLOW_TRACKING_URI=sqlite:///another.db" in switch
    sh(switch, d)
    assert store_runs(d / "another.db") == runs and store_runs(d / "mlflow.db") == runs
    assert "Nothing to be done" in sh(switch, d)   # and then it is trusted there
    sh(recipe("The MLflow store").splitlines()[-1], d)   # back to the local store: re-imported there
    assert planned(d) == ""


def test_a_damaged_store_is_named_and_set_aside_by_the_recipe(built):
    d = built
    runs = store_runs(d / "mlflow.db")
    (d / "mlflow.db").write_bytes(os.urandom(64 * 1024))
    out = sh("snakemake --cores 1 mlflow_table1", d, check=False)
    assert "mlflow.db is not an SQLite database" in out and "move it aside (mv mlflow.db mlflow.db.damaged)" in out, \
        out[-4000:]
    assert "Traceback" not in out.split("is not an SQLite database")[0][-2000:]
    cmds = recipe("A damaged mlflow.db")
    assert cmds.startswith("mv mlflow.db mlflow.db.damaged")
    sh(cmds, d)
    assert store_runs(d / "mlflow.db") == runs and planned(d) == ""


def test_a_run_with_another_seeds_history_is_retrained_by_the_recipe(built):
    d = built
    table = pd.read_csv(d / TARGET)
    point = table.point.iloc[0]
    run = d / f"results/runs/smoke/{EXP}/fedavg/{point}/seed0"
    own = pd.read_csv(run / "history.csv")
    (run / "history.csv").write_bytes((run.parent / "seed1" / "history.csv").read_bytes())
    out = sh(recipe("A damaged or inconsistent run file"), d)
    assert re.search(r"Rule: train\)", out), out[-3000:]
    again = pd.read_csv(run / "history.csv")
    clocks = ["time_s", "wall_s", "eval_s"]   # wall-clock columns: the only ones a retraining changes
    pd.testing.assert_frame_equal(again.drop(columns=clocks), own.drop(columns=clocks))
    pd.testing.assert_frame_equal(pd.read_csv(d / TARGET), table)
    # the table is up to date; its MLflow import (off the table's path) is what is left: the retrained run
    plan = planned(d)
    assert re.findall(r"^rule (\w+):", plan, re.M) == ["mlflow_table1"], plan
    reason = re.search(r"reason: Updated input files: (.*)", plan).group(1).split(", ")
    assert f"results/runs/smoke/{EXP}/fedavg/{point}/seed0/history.csv" in reason, plan
    sh("snakemake --cores 1 mlflow_table1", d)
    assert planned(d) == ""
