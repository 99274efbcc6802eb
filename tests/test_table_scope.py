"""A table asks for exactly the runs it shows: its methods × experiments × seeds and the sweeps those methods
select from, never another method of the same experiments (the sweep reports are their own target)."""

import json
import re
from collections import Counter

import pytest

from dagutil import copy_repo, sh

EXP = "fmnist10-dir-k10"   # an experiment of many methods


def add_table(p):
    p["tables"]["mine/pair"] = {"title": "two methods", "experiments": [EXP], "methods": ["fedavg", "fedivon"],
                                "statistic": "final", "metrics": ["test/acc"]}


def planned(out: str, rule: str) -> Counter:
    """method → the number of ``rule`` jobs a dry run plans."""
    jobs = re.findall(rf"^(?:rule|checkpoint) {rule}:\n(?:    .*\n)*?    wildcards: ([^\n]*)", out, re.M)
    return Counter(re.search(r"method=(\w+)", w).group(1) for w in jobs)


@pytest.fixture(scope="module")
def copy(tmp_path_factory, repo):
    d = copy_repo(repo, tmp_path_factory.mktemp("scope"), add_table)
    data = d / "work/smoke/data"
    data.mkdir(parents=True)
    for ds in ("fmnist", "mnist5k"):   # planning reads whether the data is here; a dry run reads no data
        (data / f"{ds}.json").write_text(json.dumps({"dataset": ds, "available": True}))
    return d


def test_a_two_method_table_plans_only_its_two_methods_runs(copy):
    p = json.loads(json.dumps(__import__("dagutil").read_params(copy)))
    assert len(p["experiments"][EXP]["methods"]) > 2
    out = sh("snakemake -n --cores 1 reports/smoke/mine/pair.csv", copy)
    train = planned(out, "train")
    assert set(train) == {"fedavg", "fedivon"}, dict(train)
    assert set(planned(out, "select")) == {"fedavg", "fedivon"}
    assert "rule sweep_report:" not in out
    # the smoke overlay's shared values that replace params.yaml's own method settings: one line
    said = [l for l in out.splitlines() if l.startswith("scale smoke replaces ")]
    assert len(said) == 1 and "server_iters -> 100 over " in said[0], said


def test_the_sweep_report_is_its_own_target_of_every_method(copy):
    out = sh(f"snakemake -n --cores 1 reports/smoke/sweeps/{EXP}.csv", copy)
    p = __import__("dagutil").read_params(copy)
    assert set(planned(out, "select")) == set(p["experiments"][EXP]["methods"])
