"""What an outside method's author reads: `fedbayes methods` marks installed packages' methods, a rerun
reason shows the old and the new value, a table without published numbers says nothing of them."""

import subprocess
import sys

from fedbayes.study import config_changes


def test_fedbayes_methods_marks_an_outside_method_with_its_package(tmp_path, repo):
    from test_method_plugins import KEY, with_plugin

    out = subprocess.run([sys.executable, "-m", "fedbayes.cli", "methods"], env=with_plugin(tmp_path), cwd=repo,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    lines = {l.split()[0]: l for l in out.stdout.splitlines() if l.strip()}
    assert "outside method, package fedbayes-example-method 0.1.0" in lines[KEY], lines[KEY]
    assert "outside" not in lines["fedavg"]


def test_a_rerun_reason_shows_the_old_and_the_new_value():
    then = {"hparams": {"var_floor": 1e-6, "lr": 0.001}, "rounds": 3}
    now = {"hparams": {"var_floor": 1e-5, "lr": 0.001, "swag_steps": 4}, "rounds": 3}
    assert config_changes(then, now) == ["hparams.swag_steps", "hparams.var_floor"]
    assert config_changes(then, now, values=True) == ["hparams.swag_steps <absent> -> 4",
                                                      "hparams.var_floor 1e-06 -> 1e-05"]


def test_the_dag_names_old_and_new_values_in_its_rerun_reason(repo):
    """The train rule's marker text (workflow/rules/train.smk's changed_config: fedbayes.workflow.inputs,
    staleness.run_changes) is config_changes with the values."""
    assert "changed=changed_config" in (repo / "workflow/rules/train.smk").read_text()
    assert "staleness.run_changes(" in (repo / "src/fedbayes/workflow/inputs.py").read_text()
    assert "config_changes(info[\"config\"], cfg, values=True)" in (repo / "src/fedbayes/workflow/staleness.py").read_text()


def test_a_table_without_published_numbers_says_nothing_of_them(repo):
    from fedbayes.reports.tables import _header
    from fedbayes.study.model import TableSpec, load_study

    smoke = load_study(repo / "params.yaml", scale="smoke")
    spec = {"title": "mine", "experiments": ["x"], "methods": ["fedavg"], "statistic": "final", "metrics": ["test/acc"]}
    text = "\n".join(_header(smoke, TableSpec.from_block("mine", spec)))
    assert "Published: ." not in text and "Δ = ours − published" not in text
    with_source = "\n".join(_header(smoke, TableSpec.from_block("mine", {**spec, "published": ["fedlap:table1"]})))
    # the cells of fedlap:table1 are judged by that paper table's tolerance (tables.fedlap/table1)
    assert "Published: fedlap:table1. Δ = ours − published; ✓ within / ✗ outside the tolerance |Δ| ≤ test/acc 1.5." in with_source
