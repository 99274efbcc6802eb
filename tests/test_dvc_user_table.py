"""`make dvc.yaml` for a user's own table: a stage of its own, and its method in no paper stage's params
(a table reads only its own methods' runs: workflow/rules/report.smk)."""

import importlib.util
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def generate(p: dict) -> dict:
    spec = importlib.util.spec_from_file_location("dvc_stages", ROOT / "workflow" / "dvc_stages.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    text, _ = mod.generate((ROOT / "dvc.yaml").read_text(), p)
    return yaml.safe_load(text)["stages"]


def test_a_users_table_gets_its_own_stage_and_its_method_stays_out_of_the_paper_stages():
    from fedbayes.study import load_params

    p = load_params(ROOT / "params.yaml")
    p["experiments"]["fmnist10-dir-k10"]["methods"]["fedcurv"] = None   # a method no paper table shows
    p["tables"]["mine/pair"] = {"title": "mine", "experiments": ["fmnist10-dir-k10"], "methods": ["fedavg", "fedcurv"],
                                "statistic": "final", "metrics": ["test/acc"]}
    stages = generate(p)
    mine = [s for s, b in stages.items() if "${reports_dir}/mine/pair.csv" in str(b.get("cmd", ""))]
    assert mine == ["table_mine_pair"], list(stages)
    body = stages["table_mine_pair"]
    assert "methods.fedcurv" in body["params"] and "methods.fedavg" in body["params"]
    assert "tables.mine/pair" in body["params"]
    assert {next(iter(o)) if isinstance(o, dict) else o for o in body["outs"]} >= {
        "${reports_dir}/mine/pair.csv", "${reports_dir}/mine/pair.md"}
    # the paper stages whose tables run fmnist10-dir-k10 and show no fedcurv (the FOLA tables show it)
    for s in ("table1", "fedlap_tables", "bayesadmm_tables"):
        assert "methods.fedcurv" not in stages[s]["params"], s
        assert "experiments.fmnist10-dir-k10" in stages[s]["params"], s
