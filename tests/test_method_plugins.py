"""A method from outside this repository (tests/fixtures/example_method: FedAvg with a server learning
rate, registered under the entry-point group ``fedbayes.methods``) is treated like a built-in one:
params.yaml validation and its schema, the catalogue (variants, numerics version), the engine, and — in
the integration test — the smoke DAG into a table beside FedAvg, with its runs tracked in MLflow.

The fixture is made visible without installing it: its package directory and a ``.dist-info`` built
from its pyproject.toml (``importlib.metadata`` reads entry points from any dist-info on sys.path)."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from dagutil import copy_repo, require_fmnist, sh
from dagutil import read_params

FIXTURE = Path(__file__).parent / "fixtures" / "example_method"
KEY = "fedavg_slr"


def plugin_path(root: Path) -> str:
    """PYTHONPATH entries under which the fixture is an installed distribution: its package directory,
    and ``root/site/<name>-<version>.dist-info`` with the entry points of its pyproject.toml."""
    project = tomllib.loads((FIXTURE / "pyproject.toml").read_text())["project"]
    info = root / "site" / f"fedbayes_example_method-{project['version']}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{name} = {value}\n" for name, value in eps.items()) + "\n"
        for group, eps in project["entry-points"].items()))
    return os.pathsep.join([str(FIXTURE), str(root / "site")])


def with_plugin(root: Path) -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [plugin_path(root), os.environ.get("PYTHONPATH")]))}


def python(code: str, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True)


def add_method(p: dict, experiment: str = "fmnist10-iid-k10") -> None:
    """params.yaml lines of the outside method: its settings (a sweep over its own hyperparameter) and
    the experiment and table that run it beside FedAvg."""
    p["methods"][KEY] = {"client_optimizer": "persistent", "sweep": {"server_step": [0.5, 2.0]}}
    fedavg = p["experiments"][experiment]["methods"]["fedavg"]
    p["experiments"] = {experiment: {**p["experiments"][experiment], "methods": {"fedavg": fedavg, KEY: None}}}
    p["tables"] = {"example": {"title": "FedAvg and FedAvg with a server learning rate", "experiments": [experiment],
                               "methods": ["fedavg", KEY], "statistic": "mean_last3", "metrics": ["test/acc", "test/nll"]}}
    p["headline"] = {"table": "example", "metrics": ["test/acc", "test/nll"], "curves": ["test/acc"]}


def test_an_installed_method_is_registered_validated_and_versioned(tmp_path, repo):
    p = read_params(repo)
    add_method(p)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(p))
    code = ("import json, sys; from fedbayes.study import load_params; "
            f"load_params({str(tmp_path / 'params.yaml')!r}); "
            "from fedbayes.study import rerun, names; from fedbayes.study.schema import _schema_for; "
            "from pathlib import Path; s = _schema_for(Path('params.yaml')); "
            f"print(json.dumps(dict(variants=names.METHOD_VARIANTS[{KEY!r}], numerics=rerun.numerics({KEY!r}), "
            "rule=s['$defs']['hparams']['properties']['server_step'], "
            "sweepable='server_step' in s['$defs']['grid']['propertyNames']['enum'], torch='torch' in sys.modules)))")
    out = python(code, with_plugin(tmp_path), repo)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"variants": {"": "point"}, "numerics": {"core": 1, "method": 1},
                                      "rule": {"$ref": "#/$defs/posnum"}, "sweepable": True, "torch": False}
    # without the package, the same params.yaml has a key no method declares
    out = python(f"from fedbayes.study import load_params; load_params({str(tmp_path / 'params.yaml')!r})",
                 os.environ.copy(), repo)
    assert out.returncode != 0 and (f"methods.{KEY}: unknown method '{KEY}': not installed (no entry point in the "
                                    "fedbayes.methods group") in out.stderr, out.stderr
    # a bad value of its own hyperparameter is refused by the rule its spec declares
    p["methods"][KEY]["sweep"]["server_step"] = [0.5, -1.0]
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(p))
    out = python(f"from fedbayes.study import load_params; load_params({str(tmp_path / 'params.yaml')!r})",
                 with_plugin(tmp_path), repo)
    assert out.returncode != 0 and f"methods.{KEY}.sweep.server_step.1" in out.stderr, out.stderr


def test_an_installed_method_takes_only_its_own_hyperparameters(tmp_path, repo):
    """A plug-in's block was checked against the union of every method's keys: another method's key under
    it (`tau`: BayesADMM's, FedLap-Func's) validated and was ignored by the plug-in. Its own spec is now
    the rule, as for a built-in method: the foreign key and a misspelt sweep key are refused, each naming
    the key, the method and the closest name it takes."""
    p = read_params(repo)
    add_method(p)
    p["methods"][KEY]["tau"] = 0.5
    p["methods"][KEY]["sweep"]["server_stepp"] = [1.0]
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(p))
    out = python(f"from fedbayes.study import load_params; load_params({str(tmp_path / 'params.yaml')!r})",
                 with_plugin(tmp_path), repo)
    assert out.returncode != 0, out.stderr
    # another method's key: no suggestion of an unrelated name of its own (`tau` is not a misspelt `weight_decay`)
    assert f"methods.{KEY}.tau: {KEY} takes no hyperparameter 'tau' (another method's)\n" in out.stderr, out.stderr
    assert (f"methods.{KEY}.sweep.server_stepp: {KEY} takes no hyperparameter 'server_stepp'; the closest it "
            "sweeps is 'server_step'") in out.stderr, out.stderr


def test_a_method_registered_twice_or_misnamed_breaks_only_what_uses_it(tmp_path, repo):
    """A key registered by two packages (or by a package and fedbayes), or an entry point whose spec is
    misnamed or cannot be loaded, made `import fedbayes.study` fail: every command broke, not only the
    configurations that use the method. Now the package's method is left out with one warning naming it,
    and a params.yaml naming its key is refused with that reason."""
    env = with_plugin(tmp_path)
    other = tmp_path / "site" / "other_methods-0.1.dist-info"
    other.mkdir()
    (other / "METADATA").write_text("Metadata-Version: 2.1\nName: other-methods\nVersion: 0.1\n")
    (other / "entry_points.txt").write_text(f"[fedbayes.methods]\n{KEY} = fedbayes_example_method:SPEC\n")
    out = python(f"import fedbayes.study.names as c; print({KEY!r} in c.METHOD_SPECS, 'fedavg' in c.METHOD_SPECS)", env, repo)
    assert out.returncode == 0 and out.stdout.split() == ["False", "True"], out.stderr
    assert f"method '{KEY}' is registered twice" in out.stderr and "left out" in out.stderr, out.stderr
    p = read_params(repo)
    add_method(p)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(p))
    check = f"from fedbayes.study import load_params; load_params({str(tmp_path / 'params.yaml')!r})"
    out = python(check, env, repo)
    assert out.returncode != 0 and f"method '{KEY}': method '{KEY}' is registered twice" in out.stderr, out.stderr
    out = python(f"from fedbayes.study import load_params; load_params({str(repo / 'params.yaml')!r})", env, repo)
    assert out.returncode == 0, out.stderr   # a configuration without it is not concerned
    (other / "entry_points.txt").write_text("[fedbayes.methods]\nfedavg = fedbayes_example_method:SPEC\n"
                                            "broken = no_such_module:SPEC\n")
    out = python("import fedbayes.study.names as c; print(c.METHOD_SPECS['fedavg'].implementation)", env, repo)
    assert out.returncode == 0 and out.stdout.strip() == "fedbayes.methods.fedavg.algorithm:FedAvg", out.stderr
    assert f"its spec's key is '{KEY}'" in out.stderr and "no_such_module" in out.stderr, out.stderr


def test_the_example_method_steps_the_server_towards_the_average(tmp_path, monkeypatch):
    """Its tensor math, through build_method: η = 1 is FedAvg bit for bit; η = 0.5 goes halfway."""
    import fedbayes.study  # noqa: F401  (computed once a process: first here, it kept the plug-in for later files)
    from fedbayes.methods import build_method
    from fedbayes.methods.spec import method_specs
    from fedbayes.models import FlatModel

    plugin_path(tmp_path)
    for entry in (FIXTURE, tmp_path / "site"):
        monkeypatch.syspath_prepend(str(entry))
    method_specs.cache_clear()
    try:
        fm = FlatModel(torch.nn.Linear(2, 2))
        sizes = np.array([1, 3])
        server = {"w": torch.zeros(6)}
        messages = {0: {"w": torch.full((6,), 2.0)}, 1: {"w": torch.full((6,), 4.0)}}
        half = build_method(KEY, fm, {"server_step": 0.5}, sizes)
        assert type(half).__name__ == "FedAvgServerLR" and half.spec.key == KEY and half.variants == {"": "point"}
        assert torch.equal(half.server_update(server, messages, 1)["w"], torch.full((6,), 1.75))
        one = build_method(KEY, fm, {}, sizes).server_update(server, messages, 1)["w"]
        assert torch.equal(one, build_method("fedavg", fm, {}, sizes).server_update(server, messages, 1)["w"])
        with pytest.raises(ValueError, match="server_step"):
            build_method(KEY, fm, {"server_step": 0}, sizes).server_update(server, messages, 1)
    finally:
        monkeypatch.undo()
        method_specs.cache_clear()


@pytest.mark.full
@pytest.mark.integration
def test_smoke_dag_runs_an_outside_method_into_a_table_beside_fedavg(tmp_path, repo):
    require_fmnist(pytest)
    work = copy_repo(repo, tmp_path / "repo", add_method)
    env = {"PYTHONPATH": with_plugin(tmp_path)["PYTHONPATH"]}
    sh("snakemake --cores 2 reports/smoke/example.csv mlflow_example", work, timeout=3000, **env)
    df = pd.read_csv(work / "reports/smoke/example.csv")
    assert set(df.method) == {"fedavg", KEY} and (df.status == "ok").all() and (df.n_seeds == 2).all()
    acc = df[df.metric == "test/acc"].set_index("method").ours_mean
    assert ((acc > 10) & (acc <= 100)).all()
    runs = sorted((work / "results/runs/smoke/fmnist10-iid-k10" / KEY).glob("*/seed*/run.json"))
    assert {r.parent.parent.name for r in runs} == {"server_step=0.5", "server_step=2.0"}
    assert all(json.loads(r.read_text())["numerics"] == {"core": 1, "method": 1} for r in runs)
    with sqlite3.connect(work / "mlflow.db") as db:
        tagged = db.execute("select count(*) from tags where key = 'method' and value = ?", (KEY,)).fetchone()[0]
    assert tagged == len(runs)
    # the built-in runs are untouched by the plugin: without it, nothing of FedAvg's is planned again
    p = read_params(work)
    p["tables"]["example"]["methods"] = ["fedavg"]
    del p["experiments"]["fmnist10-iid-k10"]["methods"][KEY]
    del p["methods"][KEY]
    (work / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    plan = sh("snakemake -n reports/smoke/example.csv", work)
    assert not re.search(r"^train\s", plan, re.M), plan


def test_a_method_whose_implementation_cannot_be_imported_is_refused_at_validation(tmp_path, repo):
    """An installed method whose spec loads but whose implementation does not import (a dependency it
    lacks) validated, and its training jobs failed one by one, each with a traceback, after the DAG had
    started. `fedbayes validate` and the validation the Snakefile runs before building the DAG refuse it,
    naming the method, its implementation and the import error; a configuration without it is not
    concerned (and validation without a plug-in named still imports no torch)."""
    pkg = tmp_path / "pkg" / "broken_impl"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "from fedbayes.methods.fedavg import Params as FedAvgParams\n"
        "from fedbayes.methods.spec import MethodSpec\n"
        "SPEC = MethodSpec(key='fedavg_broken', implementation='broken_impl.algorithm:Algo', params=FedAvgParams)\n")
    (pkg / "algorithm.py").write_text("import no_such_dependency  # not installed\n")
    info = tmp_path / "site" / "broken_impl-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-impl\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[fedbayes.methods]\nfedavg_broken = broken_impl:SPEC\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(tmp_path / "pkg"), str(tmp_path / "site"), os.environ.get("PYTHONPATH")]))}
    p = read_params(repo)
    e = p["experiments"]["fmnist10-iid-k10"]
    p["experiments"] = {"fmnist10-iid-k10": {**e, "methods": {"fedavg": e["methods"]["fedavg"], "fedavg_broken": None}}}
    p["tables"] = {}
    p.pop("headline")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(p))
    why = "'fedavg_broken'"
    out = subprocess.run([sys.executable, "-m", "fedbayes.cli", "validate", "--params", str(tmp_path / "params.yaml")],
                         env=env, cwd=repo, capture_output=True, text=True)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert why in out.stderr and "broken_impl.algorithm:Algo" in out.stderr, out.stderr
    assert "No module named 'no_such_dependency'" in out.stderr, out.stderr
    # the DAG's own validation, before any job: the same refusal
    work = copy_repo(repo, tmp_path / "repo", lambda q: (q.clear(), q.update(p, scale="smoke")))
    r = subprocess.run("snakemake -n --cores 1", shell=True, cwd=work, capture_output=True, text=True,
                       env={**env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"})
    assert r.returncode != 0 and why in r.stderr + r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
    assert "No module named 'no_such_dependency'" in r.stderr + r.stdout
    assert not (work / "work").exists()   # nothing written: no job started
    # the repository's params.yaml names no such method: valid, and torch is still not imported to say so
    out = python(f"import sys; from fedbayes.study import load_params; load_params({str(repo / 'params.yaml')!r}); "
                 "print('torch' in sys.modules)", env, repo)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr


def test_a_plugin_declaring_a_need_it_does_not_implement_is_refused_at_validation(tmp_path, repo):
    """A plug-in whose spec declares ``needs: local_models`` but whose implementation leaves
    ``local_weights()`` to the base Method (which returns None) validated and ran without its local metrics
    and without a word. `fedbayes validate` refuses it, naming the need and the hook; a plug-in that
    inherits the hook (FedAvg's) is not concerned."""
    pkg = tmp_path / "pkg" / "needy_impl"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "from fedbayes.methods.fedavg import Params as FedAvgParams\n"
        "from fedbayes.methods.spec import MethodSpec\n"
        "SPEC = MethodSpec(key='fedavg_needy', implementation='needy_impl.algorithm:Algo', params=FedAvgParams,\n"
        "                  needs=frozenset({'local_models'}))\n"
        "KEPT = MethodSpec(key='fedavg_kept', implementation='needy_impl.algorithm:Kept', params=FedAvgParams,\n"
        "                  needs=frozenset({'local_models'}))\n")
    (pkg / "algorithm.py").write_text(
        "from fedbayes.methods.core.base import Method\n"
        "from fedbayes.methods.fedavg.algorithm import FedAvg\n"
        "class Algo(Method):\n    pass\n"
        "class Kept(FedAvg):\n    pass\n")
    info = tmp_path / "site" / "needy_impl-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: needy-impl\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[fedbayes.methods]\nfedavg_needy = needy_impl:SPEC\n"
                                           "fedavg_kept = needy_impl:KEPT\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(tmp_path / "pkg"), str(tmp_path / "site"), os.environ.get("PYTHONPATH")]))}
    p = read_params(repo)
    e = p["experiments"]["fmnist10-iid-k10"]
    p["tables"] = {}
    p.pop("headline")
    for key, refused in (("fedavg_needy", True), ("fedavg_kept", False)):
        p["experiments"] = {"fmnist10-iid-k10": {**e, "methods": {"fedavg": e["methods"]["fedavg"], key: None}}}
        (tmp_path / "params.yaml").write_text(yaml.safe_dump(p))
        out = subprocess.run([sys.executable, "-m", "fedbayes.cli", "validate", "--params", str(tmp_path / "params.yaml")],
                             env=env, cwd=repo, capture_output=True, text=True)
        assert "Traceback" not in out.stderr, out.stderr
        if refused:
            assert out.returncode == 2, out.stdout[-2000:]
            assert f"'{key}'" in out.stderr and "needs ['local_models']" in out.stderr and "local_weights()" in out.stderr
        else:
            assert out.returncode == 0, out.stderr


def test_a_plugin_is_named_in_its_runs_mlflow_tags_and_resume_key(tmp_path, monkeypatch, synthetic_run_data, cfg_factory):
    """A plug-in's package, version and code were recorded nowhere: run.json, MLflow and the checkpoint's
    resume key (``provenance.resume_key``: fedbayes' own sources) were the same whatever the plug-in's code,
    so a checkpoint was resumed onto an edited plug-in. Now its distribution name, version and a hash of
    its package's files are in run.json (``plugin``), the MLflow tags (``plugin``, ``plugin_version``,
    ``plugin_source``) and the resume key: an edit of its code sets the checkpoint aside. A built-in
    method records nothing new (its runs' files and keys are unchanged)."""
    import importlib
    import shutil

    import fedbayes.study  # noqa: F401  (see test_the_example_method_steps_the_server_towards_the_average)
    from fedbayes import provenance
    from fedbayes.engine import run_federated
    from fedbayes.study.model import RunSpec
    from fedbayes.engine.loop import CHECKPOINT
    from fedbayes.methods.spec import _load, method_specs
    from fedbayes.tracking import code_tags

    copy = tmp_path / "plugin"
    shutil.copytree(FIXTURE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    plugin_path(tmp_path)
    for entry in (copy, tmp_path / "site"):
        monkeypatch.syspath_prepend(str(entry))
    for name in [m for m in sys.modules if m.split(".")[0] == "fedbayes_example_method"]:
        monkeypatch.delitem(sys.modules, name)   # imported from FIXTURE by an earlier test: from the copy now
    method_specs.cache_clear()
    _load.cache_clear()
    provenance.plugin_identity.cache_clear()
    importlib.reload(fedbayes.study.names)   # its tables (specs, variants) with the plug-in
    importlib.reload(fedbayes.study.rerun)   # … and the numerics versions
    try:
        ident = provenance.plugin_identity(KEY)
        assert ident["distribution"] == "fedbayes-example-method" and ident["version"] == "0.1.0"
        assert re.fullmatch(r"[0-9a-f]{16}", ident["source"])
        assert provenance.plugin_identity("fedavg") is None and provenance.resume_key("fedavg") == provenance.resume_key()
        assert provenance.resume_key(KEY).startswith(provenance.resume_key() + "/")
        assert ident["source"] in provenance.resume_key(KEY) and "0.1.0" in provenance.resume_key(KEY)

        cfg = cfg_factory(method=KEY, rounds=3)
        out = tmp_path / "run"
        run_federated(RunSpec.from_config(cfg), synthetic_run_data, tmp_path / "full", torch.device("cpu"), log=lambda m: None)
        info = json.loads((tmp_path / "full" / "run.json").read_text())
        assert info["plugin"] == ident
        tags = code_tags(info)
        assert (tags["plugin"], tags["plugin_version"], tags["plugin_source"]) == (
            "fedbayes-example-method", "0.1.0", ident["source"])
        # a built-in method's run.json and tags: nothing new
        run_federated(RunSpec.from_config(cfg_factory(rounds=1)), synthetic_run_data, tmp_path / "builtin", torch.device("cpu"),
                      log=lambda m: None)
        builtin = json.loads((tmp_path / "builtin" / "run.json").read_text())
        assert "plugin" not in builtin and not any(k.startswith("plugin") for k in code_tags(builtin))

        # killed after round 1; the plug-in's code is edited; the checkpoint is not resumed onto it
        run_federated(RunSpec.from_config(cfg), synthetic_run_data, out, torch.device("cpu"), log=lambda m: None, stop_after=1)
        algo = copy / "fedbayes_example_method" / "algorithm.py"
        algo.write_text(algo.read_text() + "\n# an edit of the plug-in's code\n")
        provenance.plugin_identity.cache_clear()
        assert provenance.plugin_identity(KEY)["source"] != ident["source"]
        logs = []
        run_federated(RunSpec.from_config(cfg), synthetic_run_data, out, torch.device("cpu"), log=logs.append)
        said = [m for m in logs if "set aside" in m]
        assert len(said) == 1 and "other code" in said[0] and not any("resuming" in m for m in logs), logs
        assert (out / (CHECKPOINT + ".set-aside")).exists()
        assert json.loads((out / "run.json").read_text())["plugin"]["source"] == provenance.plugin_identity(KEY)["source"]
    finally:
        monkeypatch.undo()
        method_specs.cache_clear()
        _load.cache_clear()
        provenance.plugin_identity.cache_clear()
        importlib.reload(fedbayes.study.names)
        importlib.reload(fedbayes.study.rerun)
