"""An out-of-tree method package made visible as if `pip install -e` had installed it, without installing
it (a venv and a pip install take minutes): its folder on PYTHONPATH, and a ``.dist-info`` holding the
entry points of its pyproject.toml (``importlib.metadata`` reads them from any dist-info on sys.path)."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def installed(package_root: Path, site: Path) -> dict:
    """An environment (os.environ plus PYTHONPATH) in which the package at ``package_root`` is installed;
    its dist-info goes under ``site``."""
    project = tomllib.loads((package_root / "pyproject.toml").read_text())["project"]
    info = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{name} = {value}\n" for name, value in eps.items()) + "\n"
        for group, eps in project["entry-points"].items()))
    path = [str(package_root), str(site), str(REPO / "src"), os.environ.get("PYTHONPATH")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, path))}


def fedbayes(env: dict, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fedbayes.cli", *args], env=env, cwd=cwd, capture_output=True,
                          text=True)


SYNTH = {"dataset": "synthetic", "subsample": 1.0, "clients": 4, "partition": {"scheme": "iid"}, "rounds": 3,
         "report_rounds": [3], "model": {"name": "mlp", "hidden": [8], "activation": "relu"},
         "input_scale": "unit", "train": {"optimizer": "adam", "lr": 0.003, "batch_size": 32, "local_epochs": 1}}


def synthetic_params(root: Path, methods: dict, edit=None) -> Path:
    """A params.yaml under ``root`` with one small synthetic experiment running ``methods`` (name → its
    block there), every output under ``root``; ``edit`` may change it further."""
    from dagutil import read_params

    p = read_params(REPO)
    p["experiments"] = {"synth": {**SYNTH, "methods": methods}}
    p["seeds"] = [0]
    p["smoke"].pop("experiments", None)
    p["tables"] = {}
    p.pop("headline")
    p["paths"] = {k: str(root / k) for k in ("raw", "partitions", "runs", "reports", "work")}
    p["paths"]["mlflow_uri"] = f"sqlite:///{root / 'mlflow.db'}"
    if edit is not None:
        edit(p)
    (root / "workflow/schemas").mkdir(parents=True, exist_ok=True)
    (root / "workflow/schemas/params.schema.yaml").write_text((REPO / "workflow/schemas/params.schema.yaml").read_text())
    (root / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    return root / "params.yaml"
