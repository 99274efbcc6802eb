"""A plug-in user's mistakes, each one line naming its cause: a method block for a method no installed
package registers, a hyperparameter key another method reads."""

import json
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


# --- an exception inside a plug-in's own code ---------------------------------------------------------

BOOM_SPEC = '''
from fedbayes.methods.fedavg import Params as FedAvgParams
from fedbayes.methods.hyperparameters import POSINT, hparam, hyperparameters
from fedbayes.methods.spec import MethodSpec


@hyperparameters
class Params(FedAvgParams):
    fail_round: int = hparam(2, POSINT, "the round whose client update raises")


SPEC = MethodSpec(key="fedboom", implementation="fedbayes_boom.algorithm:FedBoom", params=Params,
                  variants={"": "point"}, numerics=1, needs=frozenset({"local_models"}), doc="FedAvg that fails")
'''

BOOM_ALGORITHM = '''
from fedbayes.methods.fedavg.algorithm import FedAvg


class FedBoom(FedAvg):
    def client_update(self, k, down, state, data, rng, rnd):
        if rnd >= self.p.fail_round:
            raise RuntimeError(f"boom in round {rnd}")   # RAISES HERE
        return super().client_update(k, down, state, data, rng, rnd)
'''


def boom_env(tmp_path: Path) -> dict:
    """An environment in which the package ``fedbayes_boom`` (FedAvg whose client update raises from round
    ``fail_round`` on) is installed: its directory and a dist-info with its entry point on PYTHONPATH."""
    import os

    pkg = tmp_path / "pkg" / "fedbayes_boom"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(BOOM_SPEC)
    (pkg / "algorithm.py").write_text(BOOM_ALGORITHM)
    info = tmp_path / "site" / "fedbayes_boom-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fedbayes-boom\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[fedbayes.methods]\nfedboom = fedbayes_boom:SPEC\n")
    path = [str(tmp_path / "pkg"), str(tmp_path / "site"), str(REPO / "src"), os.environ.get("PYTHONPATH")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, path))}


def boom_line() -> str:
    n = next(i for i, l in enumerate(BOOM_ALGORITHM.splitlines(), 1) if "RAISES HERE" in l)
    return f"fedbayes_boom/algorithm.py:{n} in client_update"


def boom_params(tmp_path: Path, fail_round: int) -> Path:
    from pluginutil import synthetic_params   # its synthetic experiment: 3 rounds

    return synthetic_params(tmp_path, {"fedboom": {"fail_round": fail_round}})


def boom_train(tmp_path, fail_round: int):
    """The failing plug-in installed, its params (raising in ``fail_round``), and the `fedbayes train`
    command of its one run: (env, params, run folder, partition, argv)."""
    from fedbayes.study import paths

    env = boom_env(tmp_path)
    params = boom_params(tmp_path, fail_round=fail_round)
    p = yaml.safe_load(params.read_text())
    run = Path(paths(p)["runs"]) / "synth" / "fedboom" / "default" / "seed0"
    part = Path(paths(p)["partitions"]) / "synth" / "seed0.npz"
    argv = [sys.executable, "-m", "fedbayes.cli", "train", "--params", str(params), "--experiment", "synth",
            "--method", "fedboom", "--seed", "0", "--partition", str(part), "--out", str(run), "--threads", "1"]
    return env, p, run, part, argv


def test_an_exception_in_a_plugins_client_update_is_one_line_and_leaves_nothing_behind(tmp_path):
    """A plug-in whose client update raises in round 2: the job printed a full traceback and left the
    round-1 checkpoint and kept predictions behind (a rerun resumed onto them and failed again). Now its
    output is one line naming the method, the file and line of the plug-in that raised and the exception;
    the traceback is in the job's log file only; the run's partial files are gone; and the lock files the
    run took (the trainer's, the partition's) are taken again by the next run, which finishes."""
    env, p, run, part, argv = boom_train(tmp_path, fail_round=2)
    r = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    err = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(err) == 1 and "Traceback" not in r.stderr, r.stderr
    assert err[0].startswith("fedbayes train: error: method 'fedboom' raised RuntimeError: boom in round 2 at "), err
    assert boom_line() in err[0], err
    from fedbayes.study import paths

    log = Path(paths(p)["work"]) / "logs/train/synth/fedboom/default/seed0.traceback"
    assert f"traceback in {log}" in err[0], err
    assert "Traceback" in log.read_text() and "boom in round 2" in log.read_text()
    # no checkpoint, no kept predictions: nothing of the failed run is left in its directory
    assert not run.exists(), sorted(run.rglob("*"))
    locks = [run.parent / ".seed0.train.lock", Path(str(part) + ".lock")]
    assert all(f.is_file() for f in locks)   # the locks, git-ignored, are the next run's to take

    boom_params(tmp_path, fail_round=9)    # the plug-in no longer fails in this run's 3 rounds
    r = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert {f.name for f in run.iterdir()} >= {"history.csv", "run.json", "predictions.npz"}
    assert not (run / "checkpoint.pt").exists() and not (run / "predictions.rounds").exists()
    assert not log.exists()   # the failed attempt's traceback went with the run that answered it


def test_a_failed_retraining_leaves_no_earlier_trainings_predictions(tmp_path):
    """A finished run retrained (its configuration changed: the workflow removed its run.json and
    history.csv) whose plug-in now raises: the earlier training's predictions.npz and posterior.pt,
    which no run file records any longer, went with the failed run's partial files (they stayed: a
    folder of predictions of a configuration nothing names)."""
    env, p, run, part, argv = boom_train(tmp_path, fail_round=9)
    r = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert {"predictions.npz", "posterior.pt"} <= {f.name for f in run.iterdir()}
    for f in ("run.json", "history.csv"):   # what Snakemake removes before it runs the train job again
        (run / f).unlink()
    boom_params(tmp_path, fail_round=2)
    r = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 1 and "boom in round 2" in r.stderr, r.stdout + r.stderr
    assert not run.exists(), sorted(f.name for f in run.rglob("*"))


def test_numerics_check_reports_a_plugins_exception_in_one_line(tmp_path):
    """`fedbayes numerics-check` (what the workflow runs before adopting finished runs) on a plug-in that
    raises: one line naming the method, its file and line, never a traceback or an "unreadable golden"."""
    env = boom_env(tmp_path)
    (tmp_path / "goldens").mkdir()
    hp = json.dumps({"fail_round": 1})
    r = subprocess.run([sys.executable, "-m", "fedbayes.cli", "numerics-check", "fedboom", "--goldens",
                        str(tmp_path / "goldens"), "--work", str(tmp_path / "work"), "--hparams", hp],
                       env=env, capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    err = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(err) == 1 and "Traceback" not in r.stderr, r.stderr
    assert err[0].startswith("fedbayes numerics-check: method 'fedboom' raised RuntimeError: boom in round 1 at "), err
    assert boom_line() in err[0] and "replaying its numerics golden" in err[0], err
    assert not (tmp_path / "work" / "numerics" / "fedboom.json").exists()   # no record of a check that failed
