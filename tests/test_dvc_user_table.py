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


def test_a_users_table_of_a_plugin_depends_on_the_plugins_folder(tmp_path):
    """A plug-in's code decides its runs' numbers as src/fedbayes does (a numerics bump inside it reruns
    them in Snakemake), so the stage of a table that shows it lists the plug-in's folder among its deps;
    before, `dvc status` did not see an edit there."""
    import json
    import subprocess
    import sys

    from pluginutil import installed

    env = installed(ROOT / "examples/fedswag", tmp_path / "site")
    script = f"""
import importlib.util, json, yaml
from fedbayes.study import load_params
spec = importlib.util.spec_from_file_location("dvc_stages", {str(ROOT / "workflow/dvc_stages.py")!r})
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
p = load_params({str(ROOT / "params.yaml")!r})
p["experiments"]["fmnist10-iid-k10"]["methods"]["fedswag"] = None
p["tables"]["mine/swag"] = {{"title": "mine", "experiments": ["fmnist10-iid-k10"], "methods": ["fedavg", "fedswag@mean"],
                            "statistic": "final", "metrics": ["test/acc"]}}
text, _ = mod.generate(open({str(ROOT / "dvc.yaml")!r}).read(), p)
print(json.dumps(yaml.safe_load(text)["stages"]["table_mine_swag"]["deps"]))
"""
    out = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    deps = json.loads(out.stdout.strip().splitlines()[-1])
    assert "examples/fedswag/fedbayes_fedswag" in deps and "src/fedbayes" in deps, deps
