"""The commands a person types, as typed: the venv's tools without activating the venv, and the smoke
command asked for a paper-scale path."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from dagutil import copy_repo, require_fmnist
from dagutil import read_params

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def smoke_copy(tmp_path_factory, repo):
    require_fmnist(pytest)
    return copy_repo(repo, tmp_path_factory.mktemp("entry"), scale="smoke")


def bare(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``cmd`` with the system PATH only: the venv is not activated (its bin/ is not on PATH)."""
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if Path(p).resolve() != BIN.resolve())
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=3600,
                          env={**os.environ, "PATH": path, "FEDBAYES_OFFLINE": "1"})


def test_venv_snakemake_works_without_activating_the_venv(smoke_copy):
    r = bare([str(BIN / "snakemake"), "-n", "--cores", "1", "reports/smoke/table1.csv"], smoke_copy)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert "No such file or directory: 'fedbayes'" not in r.stdout + r.stderr


def test_smoke_scale_refuses_a_paper_path_naming_the_smoke_one(smoke_copy):
    r = bare([str(BIN / "snakemake"), "-n", "--cores", "1", "reports/table1.csv"], smoke_copy)
    out = r.stdout + r.stderr
    assert r.returncode != 0 and "MissingRuleException" not in out, out[-3000:]
    assert "reports/table1.csv is a paper-scale output" in out and "ask for reports/smoke/table1.csv" in out, out[-3000:]
    assert not (smoke_copy / "reports/table1.csv").exists()


def test_dvc_yaml_declares_the_headline_metrics_and_plots(repo):
    """dvc.yaml's `metrics:` and `plots:` name what the headline rule writes, each plot draws its file's
    metric, and its outputs follow `reports_dir` (reports, or reports/smoke)."""
    import yaml

    from fedbayes.reports.headline import plot_files

    d = yaml.safe_load((repo / "dvc.yaml").read_text())
    p = read_params(repo)
    root = d["vars"][0]["reports_dir"]
    assert root == p["paths"]["reports"]
    sub = lambda s: s.replace("${reports_dir}", root)  # noqa: E731
    stage = d["stages"]["table1"]
    assert [sub(next(iter(m))) for m in stage["metrics"]] == [f"{root}/metrics"]
    assert f"{root}/metrics" in sub(stage["cmd"]) and "headline" in stage["params"]
    files = {str(f) for f in plot_files(p)}
    assert files <= {sub(next(iter(o))) for o in stage["outs"]}
    lines = {sub(f): cols for plot in d["plots"] for spec in plot.values() for f, cols in spec["y"].items()}
    assert set(lines) == files
    # long format (round, method, <metric>): each plot draws its file's metric column, a line per method
    assert all(f.endswith(f"_{field}.csv") for f, field in lines.items())
