"""The newcomer tasks of docs/extending.md, each done once on temporary files: a metric and a dataset (with
its loader and a partition) added from outside the repository, through the one entry each has (the metric
registry, the dataset registry), touching no file of the project."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest
from scipy.special import log_softmax

from fedbayes.eval.fingerprint import metric_codes
from fedbayes.eval.metrics import metric_values
from fedbayes.eval.registry import METRICS, PERCENT, Metric, metric

TOP2 = '''
import numpy as np

def top2(logp, y):
    """Top-2 accuracy: the label among the two most probable classes."""
    return float(np.mean((np.argsort(-logp, axis=1)[:, :2] == y[:, None]).any(axis=1)))
'''


def predictions(seed: int = 0, n: int = 200, c: int = 5):
    rng = np.random.default_rng(seed)
    return log_softmax(rng.normal(scale=2.0, size=(n, c)), axis=1), rng.integers(0, c, size=n)


def test_a_metric_is_one_entry_and_one_function(tmp_path, monkeypatch):
    """Adding a metric: its function (eval/metrics.py, here a module of its own) and its registry entry
    (eval/registry.py, here ``register``). Evaluation computes it, in its kind's place; tables, figures and
    MLflow read its display; validation knows its name; it has a code of its own (the others' stay), so runs
    are evaluated again for it alone (tests/test_evaluate.py)."""
    (tmp_path / "my_metrics.py").write_text(TOP2)
    monkeypatch.syspath_prepend(str(tmp_path))
    before = metric_codes()
    entry = Metric("test/top2", "top-2 accuracy", "%", True, scale=100.0, digits=1, fn="my_metrics:top2")
    monkeypatch.setitem(METRICS, entry.name, entry)     # (= register(entry), undone after the test)

    logp, y = predictions()
    values = metric_values(logp, y, logp_ood=predictions(1)[0])
    assert list(values)[-1] == "test/top2" and list(values)[:2] == ["test/acc", "test/nll"]
    assert values["test/top2"] == np.mean((np.argsort(-logp, axis=1)[:, :2] == y[:, None]).any(axis=1))
    assert values["test/top2"] >= values["test/acc"]
    assert "test/top2" in PERCENT and metric("final/test/top2") is entry     # tables' % and digits, MLflow's unit
    assert metric_codes() == {**before, "test/top2": metric_codes([entry])["test/top2"]}   # its code, the others' kept

    from fedbayes.frontdoor import metric_problems
    params = {"tables": {"t": {"metrics": ["test/top2", "test/top3"]}}, "selection": {}, "experiments": {}}
    assert metric_problems(params) == [
        f"tables.t.metrics: unknown metric 'test/top3'; the metrics are {', '.join(METRICS)} (fedbayes/eval/registry.py)"]


def test_a_metric_refuses_a_kind_it_does_not_have():
    """The kind (where evaluation computes and stores a metric) is the name's first part, one of KINDS."""
    with pytest.raises(ValueError, match="<kind>/<key>"):
        Metric("val/top2", "top-2", "", True, fn="m:f")
    with pytest.raises(ValueError, match="a function"):
        Metric("test/top2", "top-2", "", True)                   # evaluated, but computed by nothing
    with pytest.raises(ValueError, match="has no fn"):
        Metric("local/top2", "top-2", "", True, fn="m:f")          # training measures it


def test_an_installed_package_adds_a_metric_through_its_entry_point(tmp_path):
    """An outside package registers its metric under the entry-point group ``fedbayes.metrics``: no file of
    the project changes."""
    (tmp_path / "my_metrics.py").write_text(TOP2 + textwrap.dedent('''
        from fedbayes.eval.registry import Metric
        TOP2 = Metric("test/top2", "top-2 accuracy", "%", True, scale=100.0, digits=1, fn=top2)
        '''))
    dist = tmp_path / "my_metrics-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-metrics\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[fedbayes.metrics]\ntop2 = my_metrics:TOP2\n")
    code = ("import json, numpy as np; from fedbayes.eval.metrics import metric_values; "
            "lp = np.log(np.array([[0.5, 0.3, 0.2], [0.1, 0.2, 0.7]])); "
            "print(json.dumps(metric_values(lp, np.array([1, 0]))))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    values = json.loads(out.stdout)
    assert values["test/top2"] == 0.5 and values["test/acc"] == 0.0


def toy_files(_name: str) -> bytes:
    """The toy dataset's one file: 3 sites × 40 rows of 4 features, 2 classes, as an .npz."""
    rng = np.random.default_rng(7)
    site = np.repeat(np.arange(3), 40)
    x = (rng.normal(size=(120, 4)) + site[:, None]).astype(np.float32)
    y = (x.sum(1) > np.median(x.sum(1))).astype(np.int64)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for k, a in {"x_train": x[:90], "y_train": y[:90], "x_test": x[90:], "y_test": y[90:], "site": site[:90]}.items():
            member = io.BytesIO()
            np.lib.format.write_array(member, a, allow_pickle=False)
            zf.writestr(zipfile.ZipInfo(f"{k}.npy", date_time=(1980, 1, 1, 0, 0, 0)), member.getvalue())
    return buf.getvalue()


def test_a_dataset_is_one_spec_with_its_loader_and_partition(tmp_path, monkeypatch):
    """Adding a dataset: its spec and loader (one module; the registry's ``BUILTIN`` list or an entry point
    names it), the experiment in params.yaml. Fetched, verified and loaded like any other; its sites are
    the ``natural`` scheme's clients and every label scheme splits it."""
    from fedbayes.data import DATASETS, DatasetSpec, FileSpec, dataset_hash, fetch, load
    from fedbayes.data.registry import load_npz
    from fedbayes.engine.partitions import build_partition

    def sites(root) -> np.ndarray:
        with np.load(Path(root) / "toy" / "toy.npz") as z:
            return z["site"]

    spec = DatasetSpec(name="toy", files=(FileSpec("toy.npz", role="all"),), loader=load_npz, n_classes=2,
                       n_train=90, n_test=30, generator=toy_files, natural_groups=sites)
    monkeypatch.setitem(DATASETS, "toy", spec)          # (= an entry in a module's SPECS, undone after the test)

    root = tmp_path / "raw"
    fetch("toy", root=root)
    a = load("toy", root=root)
    assert a.x_train.shape == (90, 4) and a.n_classes == 2 and len(dataset_hash("toy", root=root)) == 64

    pc = {"dataset": "toy", "subsample": 1.0, "clients": 3, "partition": {"scheme": "natural"}, "seed": 0}
    parts, meta = build_partition(pc, str(root), "toy-sites", tmp_path / "sites.npz")
    assert [sorted(set(sites(root)[p])) for p in parts] == [[0], [1], [2]] and meta["sizes"] == [40, 40, 10]
    pc = {**pc, "clients": 4, "partition": {"scheme": "label_dirichlet", "alpha": 0.5}}
    parts, meta = build_partition(pc, str(root), "toy-dir", tmp_path / "dir.npz")
    assert sum(meta["sizes"]) == 90 and len(parts) == 4


PAPER = """\
paper: mypaper
title: "A Paper of Our Own (MyPaper)"
tables:
  table1:
    caption: "Test accuracy (%), mean over the previous 3 rounds, mean (std) over 3 runs"
    statistic: mean_last3
    rounds: [10, 50]
    rows:
      fmnist10-iid-k10:
        fedavg: {test/acc: [[81.25, 0.5], [86.75, 0.25]]}
"""
NOTES = "MyPaper's notes: the published FedAvg curve, read from its Figure 2.\n"


def test_a_paper_is_one_folder_and_its_tables_in_params(tmp_path):
    """Adding a paper: its folder (``papers/<paper>/``: published values, notes) and its table in params.yaml;
    `make dvc.yaml` writes its DVC stage whole, and `fedbayes table` prints its published values beside ours
    (the committed FedAvg runs of fmnist10-iid-k10, read as they are: nothing trains)."""
    import shutil

    import pandas as pd
    import yaml
    from dagutil import copy_repo, sh

    root = Path(__file__).resolve().parents[1]
    dst = tmp_path / "repo"

    def add_paper(p):
        folder = dst / "papers" / "mypaper"
        folder.mkdir(parents=True)
        (folder / "published.yaml").write_text(PAPER)
        (folder / "NOTES.md").write_text(NOTES)
        p["tables"]["mypaper/table1"] = {
            "title": "MyPaper Table 1: test accuracy (%)", "experiments": ["fmnist10-iid-k10"], "methods": ["fedavg"],
            "statistic": "mean_last3", "metrics": ["test/acc"], "tolerance": {"test/acc": 1.5},
            "published": ["mypaper:table1"], "notes": "papers/mypaper/NOTES.md"}

    copy_repo(root, dst, add_paper, scale="paper")
    runs = "results/runs/fmnist10-iid-k10/fedavg"
    shutil.copytree(root / runs, dst / runs)
    (dst / "work" / "data").mkdir(parents=True)
    for d in ("fmnist", "mnist5k"):   # the data checkpoint's record: obtained on this machine
        (dst / "work" / "data" / f"{d}.json").write_text(json.dumps({"dataset": d, "available": True}))
    copy_src = f"PYTHONPATH={dst / 'src'}"   # the copy's package, which reads the copy's papers/
    sh(f"{copy_src} {sys.executable} workflow/dvc_stages.py", dst)
    sh(f"{copy_src} {sys.executable} workflow/dvc_stages.py --check", dst)

    stages = yaml.safe_load((dst / "dvc.yaml").read_text())["stages"]
    mine = stages["mypaper_tables"]
    assert mine["cmd"] == ("python3 workflow/dvc_stages.py --check && snakemake --cores all "
                           "${reports_dir}/mypaper/table1.csv")
    assert {"data/raw/fmnist", "data/raw/mnist5k", "src/fedbayes", "papers/mypaper/NOTES.md",
            "papers/mypaper/published.yaml", runs} <= set(mine["deps"])
    assert {"tables.mypaper/table1", "experiments.fmnist10-iid-k10", "methods.fedavg"} <= set(
        k for k in mine["params"] if isinstance(k, str))
    assert [next(iter(o)) for o in mine["outs"]] == [
        "${reports_dir}/mypaper/table1.csv", "${reports_dir}/mypaper/table1.md",
        "${reports_dir}/figures/mypaper_table1_curves.png"]
    assert "reports/mypaper/table1.csv" in stages["scorecard"]["deps"]
    assert "papers/mypaper/published.yaml" in stages["scorecard"]["deps"]

    out = sh(f"{copy_src} {sys.executable} -m fedbayes.cli table mypaper/table1 --out reports/mypaper/table1.csv", dst)
    assert "2 published" in out, out
    df = pd.read_csv(dst / "reports/mypaper/table1.csv")
    cells = df[(df.method == "fedavg") & (df.metric == "test/acc")].set_index("round")
    assert cells.loc[10, "published_mean"] == 81.25 and cells.loc[50, "published_mean"] == 86.75
    assert cells.ours_mean.notna().all() and (cells.loc[[10, 50], "published_source"] == "mypaper table1").all()
    assert cells.loc[25, "published_mean"] != cells.loc[25, "published_mean"]   # the paper prints no round 25
    md = (dst / "reports/mypaper/table1.md").read_text()
    for rnd, published in ((10, "81.2 ± 0.5"), (50, "86.8 ± 0.2")):   # ours (3 seeds), then the paper's
        assert re.search(rf"\| fedavg \| \S+ \| {rnd} \| [\d.]+ ± [\d.]+ \(n=3\) \| {published} \|", md), md
    assert NOTES.strip() in md
