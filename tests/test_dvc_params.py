"""dvc.yaml's table stages depend on the params.yaml keys their tables read, generated from params.yaml
(workflow/dvc_params.py): the committed dvc.yaml is what the generator writes, and an edit of one
experiment marks only the stages whose tables run it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("dvc_params", ROOT / "workflow/dvc_params.py")
dvc_params = importlib.util.module_from_spec(spec)
spec.loader.exec_module(dvc_params)


def params():
    from fedbayes.config import load_params

    return load_params(ROOT / "params.yaml", scale="paper")


def test_the_committed_dvc_yaml_is_as_generated():
    text = (ROOT / "dvc.yaml").read_text()
    again, changed = dvc_params.generate(text, params())
    assert changed == [], f"run python workflow/dvc_params.py: stages {changed} differ"
    assert again == text


def test_a_table_gaining_an_experiment_changes_its_stage_and_no_other():
    p = params()
    text = (ROOT / "dvc.yaml").read_text()
    p["tables"]["table1"]["experiments"] = [*p["tables"]["table1"]["experiments"], "fmnist-dir-k100"]
    new, changed = dvc_params.generate(text, p)
    assert changed == ["table1"]
    keys = yaml.safe_load(new)["stages"]["table1"]["params"]
    assert "experiments.fmnist-dir-k100" in keys and "experiments.fmnist10-iid-k10" in keys


def test_one_experiment_is_read_only_by_the_stages_whose_tables_run_it():
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    reading = {s for s, b in stages.items() for k in b.get("params", []) if k in ("experiments", "experiments.fmnist10-iid-k10")}
    p = params()
    runs = {s for s, b in stages.items()
            if any("fmnist10-iid-k10" in p["tables"][t]["experiments"] or "." in "".join(p["tables"][t]["experiments"])
                   for t in dvc_params.stage_tables(str(b.get("cmd", "")), p["tables"]))}
    assert reading == runs and "scorecard" not in reading and "fedep_toy" not in reading
