"""A run's configuration holds what its method reads: the committed paper-scale runs keep their keys byte for
byte, and a scale's shared hyperparameter a method does not declare is neither recorded in its runs nor able
to rerun them."""

import json
from pathlib import Path

import pytest

from fedbayes.study import (RECORDED_ONLY, load_params, paths, run_config, seeds, selection_seeds,
                             sweep_points, swept_points)
from fedbayes import runpaths

REPO = Path(__file__).resolve().parents[1]


def planned_runs(p: dict) -> set[tuple]:
    """(experiment, method, point, seed) of every run the paper DAG asks for: each swept point on the
    selection's seeds, the committed selection's point on every seed."""
    out = set()
    where = paths(p)
    for e, x in p["experiments"].items():
        for m in x["methods"]:
            out |= {(e, m, pt, s) for pt in swept_points(p, e, m) for s in selection_seeds(p, e, m)}
            sel = Path(runpaths.selected_file(where, e, m))
            if sel.exists():
                pt = json.loads(sel.read_text())["point"]
                out |= {(e, m, pt, s) for s in seeds(p, e, m)}
    return out


def test_every_committed_run_keeps_its_configuration_byte_for_byte():
    """Today's run_config of every committed paper-scale run the DAG plans is, as JSON with sorted keys, the
    configuration its run.json recorded (less the keys training adds): no committed run reruns or changes
    its MLflow params. A run of a point no longer in its grid (an earlier sweep's) is not planned."""
    p = load_params(REPO / "params.yaml")
    planned = planned_runs(p)
    checked, differ = 0, []
    for f in sorted((REPO / "results/runs").glob("*/*/*/seed*/run.json")):
        c = json.loads(f.read_text())["config"]
        key = (c["experiment"], c["method"], c["point"], c["seed"])
        if key not in planned:
            continue
        recorded = {k: v for k, v in c.items() if k not in RECORDED_ONLY}
        now = run_config(p, key[0], key[1], key[3], key[2])
        checked += 1
        if json.dumps(recorded, sort_keys=True) != json.dumps(now, sort_keys=True):
            differ.append(str(f.relative_to(REPO)))
    assert checked >= 150, f"only {checked} committed runs planned"
    assert not differ, differ


def test_every_committed_run_is_its_run_spec_in_the_resolved_study():
    """The typed study gives each committed run the configuration its run.json recorded (less the keys
    training adds), and that configuration's hash (``RunSpec.hash``); on the partition it recorded, the
    record and hash its training wrote."""
    from fedbayes.study import config_hash
    from fedbayes.study.model import load_study

    study = load_study(REPO / "params.yaml")
    planned = planned_runs(study.params)
    checked, differ = 0, []
    for f in sorted((REPO / "results/runs").glob("*/*/*/seed*/run.json")):
        info = json.loads(f.read_text())
        c = info["config"]
        if (c["experiment"], c["method"], c["point"], c["seed"]) not in planned:
            continue
        run = study.run(c["experiment"], c["method"], c["seed"], c["point"])
        checked += 1
        recorded = {k: v for k, v in c.items() if k not in RECORDED_ONLY}
        if json.dumps(recorded, sort_keys=True) != json.dumps(run.config, sort_keys=True) or run.hash != config_hash(recorded):
            differ.append(str(f.relative_to(REPO)))
        # on its partition, what its training writes: run.json's config (its keys in their order), and the
        # hash of that record (its config_hash, the checkpoint's key)
        trained = run.on_partition(c["partition_hash"])
        if json.dumps(trained.record, sort_keys=True) != json.dumps(c, sort_keys=True) or list(trained.record) != list(c) \
                or trained.hash != config_hash(c):
            differ.append(f"{f.relative_to(REPO)} (record)")
        # … and the hash the run files carry is that one (five runs once said "ood": a text replacement's slip)
        stored = {info["config_hash"], json.loads((f.parent / "metrics.json").read_text())["config_hash"]}
        if stored != {trained.hash}:
            differ.append(f"{f.relative_to(REPO)} (config_hash {sorted(stored)} is not {trained.hash})")
    assert checked >= 150 and not differ, (checked, differ)


@pytest.fixture(scope="module")
def smoke():
    return load_params(REPO / "params.yaml", scale="smoke")


def test_a_shared_scale_key_reaches_only_the_methods_that_declare_it(smoke):
    """smoke.hparams.server_iters is FedLap-Func's: FedAvg's runs neither record it nor change with it;
    FedLap-Func's do. pred_samples reaches the sampled methods and not FedAvg."""
    e = "fmnist-dir-k100"

    def cfg(p, m):
        return run_config(p, e, m, 0, next(iter(sweep_points(p, e, m))))

    avg, func = cfg(smoke, "fedavg")["hparams"], cfg(smoke, "fedlap_func")["hparams"]
    assert "server_iters" not in avg and "pred_samples" not in avg
    assert func["server_iters"] == smoke["smoke"]["hparams"]["server_iters"]
    edited = json.loads(json.dumps(smoke))
    edited["smoke"]["hparams"]["server_iters"] = 7
    assert cfg(edited, "fedavg") == cfg(smoke, "fedavg")
    assert cfg(edited, "fedlap_func")["hparams"]["server_iters"] == 7


def test_a_scale_value_replacing_a_users_own_method_setting_is_said_in_one_line(tmp_path, smoke):
    """The scale's shared value wins over a method block's own (smoke exists to shrink the runs), and
    `fedbayes validate --scale smoke` says so in one line naming the key and both values; at paper scale
    nothing is replaced and nothing is said."""
    import subprocess
    import sys

    import yaml

    from fedbayes.study import load_params_text, overlay_replacements

    text = load_params_text(REPO / "params.yaml")
    text["methods"]["fedivon"]["pred_samples"] = 16
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(text, sort_keys=False))
    (tmp_path / "params.smoke.yaml").write_text((REPO / "params.smoke.yaml").read_text())
    p = load_params(tmp_path / "params.yaml", scale="smoke")
    line = overlay_replacements(p)
    assert line and "\n" not in line and "pred_samples -> 4 over " in line and "methods.fedivon.pred_samples 16" in line
    e = next(e for e, x in p["experiments"].items() if "fedivon" in x["methods"]
             and "pred_samples" not in (x["methods"]["fedivon"] or {}))
    assert run_config(p, e, "fedivon", 0, next(iter(sweep_points(p, e, "fedivon"))))["hparams"]["pred_samples"] == 4
    assert overlay_replacements(load_params(tmp_path / "params.yaml", scale="paper")) is None
    r = subprocess.run([sys.executable, "-m", "fedbayes.cli", "validate", "--params", str(tmp_path / "params.yaml"),
                        "--scale", "smoke"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    said = [l for l in (r.stdout + r.stderr).splitlines() if "methods.fedivon.pred_samples 16" in l]
    assert len(said) == 1, r.stdout + r.stderr
