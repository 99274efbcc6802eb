"""`fedbayes new-method NAME` writes a package that works as it is: registered through its entry point,
its own test passing, validated in params.yaml and training a run; a bad name or a used folder is refused
in one line before anything is written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pluginutil import fedbayes, installed, synthetic_params


@pytest.mark.full
def test_new_method_writes_a_package_that_registers_tests_and_trains(tmp_path):
    import os

    pkg = tmp_path / "fedstep"
    r = fedbayes(os.environ.copy(), "new-method", "fedstep", "--out", str(pkg), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert {str(f.relative_to(pkg)) for f in pkg.rglob("*") if f.is_file()} == {
        "pyproject.toml", "README.md", "fedbayes_fedstep/__init__.py", "fedbayes_fedstep/algorithm.py",
        "tests/test_fedstep.py"}
    env = installed(pkg, tmp_path / "site")

    # registered: `fedbayes methods` lists it as an outside method with its hyperparameter
    r = fedbayes(env, "methods", "fedstep", cwd=tmp_path)
    assert r.returncode == 0 and "server_step" in r.stdout, r.stdout + r.stderr
    # its own test passes
    t = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                        str(pkg / "tests")], env=env, cwd=pkg, capture_output=True, text=True)
    assert t.returncode == 0 and "1 passed" in t.stdout, t.stdout + t.stderr
    # validated and trained at smoke scale beside FedAvg
    params = synthetic_params(tmp_path, {"fedavg": None, "fedstep": {"sweep": {"server_step": [0.5, 1.0]}}})
    r = fedbayes(env, "validate", "--params", str(params), "--scale", "smoke", cwd=tmp_path)
    assert r.returncode == 0 and "methods fedavg, fedstep" in r.stdout, r.stdout + r.stderr
    out = tmp_path / "runs/smoke/synth/fedstep/server_step=0.5/seed0"
    r = fedbayes(env, "train", "--params", str(params), "--scale", "smoke", "--experiment", "synth", "--method",
                 "fedstep", "--point", "server_step=0.5", "--seed", "0", "--partition",
                 str(tmp_path / "partitions/smoke/synth/seed0.npz"), "--out", str(out), "--threads", "1", cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    info = json.loads((out / "run.json").read_text())
    assert info["config"]["hparams"]["server_step"] == 0.5 and info["plugin"]["distribution"] == "fedbayes-fedstep"
    assert info["config"]["scale"] == "smoke"


def test_new_method_refuses_a_bad_name_a_taken_key_and_a_used_folder_in_one_line(tmp_path):
    import os

    env = os.environ.copy()
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "notes.txt").write_text("mine\n")
    for args, says in [(["Fed-Swag"], "a method key is a lowercase identifier"),
                       (["fedavg"], "already an installed method"),
                       (["fedfresh", "--out", str(tmp_path / "used")], "is not an empty folder")]:
        r = fedbayes(env, "new-method", *args, cwd=tmp_path)
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        assert r.returncode == 2 and len(lines) == 1 and says in lines[0], r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["used"]   # nothing written
    assert [p.name for p in (tmp_path / "used").iterdir()] == ["notes.txt"]
    assert not Path(tmp_path / "fedbayes-fedfresh").exists()
