"""A plug-in user's mistakes, each one line naming its cause: a method block for a method no installed
package registers, a hyperparameter key another method reads."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fedbayes.study import load_params_text

REPO = Path(__file__).resolve().parents[1]


def validate(tmp_path, edit) -> str:
    """`fedbayes validate` of params.yaml edited by ``edit``: its error output (it must fail)."""
    text = load_params_text(REPO / "params.yaml")
    edit(text)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(text, sort_keys=False))
    (tmp_path / "params.smoke.yaml").write_text((REPO / "params.smoke.yaml").read_text())
    r = subprocess.run([sys.executable, "-m", "fedbayes.cli", "validate", "--params", str(tmp_path / "params.yaml")],
                       capture_output=True, text=True)
    assert r.returncode != 0, r.stdout
    return r.stderr


def own_block(t):
    t["methods"]["fedswag"] = {"swag_steps": 10, "var_floor": 1.0e-6}
    t["experiments"]["fmnist10-dir-k10"]["methods"]["fedswag"] = {}


def no_block(t):
    t["experiments"]["fmnist10-dir-k10"]["methods"]["fedswag"] = {}
    t["tables"]["mine"] = {"title": "mine", "experiments": ["fmnist10-dir-k10"], "methods": ["fedavg", "fedswag"],
                           "statistic": "final", "metrics": ["test/acc"]}


@pytest.mark.parametrize("edit", [own_block, no_block])
def test_a_method_no_package_registers_is_one_line_naming_the_entry_point(tmp_path, edit):
    err = validate(tmp_path, edit)
    lines = [l for l in err.splitlines() if l.strip()]
    said = [l for l in lines if "fedswag" in l]
    assert len(said) == 1, err
    assert "unknown method 'fedswag': not installed (no entry point in the fedbayes.methods group" in said[0]
    assert "Additional properties" not in err and "bayesadmm" not in err   # not the schema, not every method's name
    assert "did you mean" not in said[0] and "pyproject.toml" in said[0]   # fedswag is no misspelt fedavg


def test_a_misspelt_method_gets_the_closest_installed_name(tmp_path):
    err = validate(tmp_path, lambda t: t["experiments"]["fmnist10-dir-k10"]["methods"].update(fedivn={}))
    assert "unknown method 'fedivn': not installed" in err and "did you mean 'fedivon'" in err


def test_the_closest_key_suggested_is_a_close_one(tmp_path):
    """FedIVON's ``ess`` in FedAvg's block: another method's key, and no FedAvg key is like it; a near miss
    still gets its closest name."""
    err = validate(tmp_path, lambda t: t["methods"]["fedavg"].update(ess=100.0, local_epoch=2))
    ess = next(l for l in err.splitlines() if "methods.fedavg.ess" in l)
    assert "another method's" in ess and "closest" not in ess, ess
    near = next(l for l in err.splitlines() if "methods.fedavg.local_epoch:" in l)
    assert "'local_epochs'" in near
