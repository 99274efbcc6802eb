"""dvc.yaml's table stages depend on exactly the params.yaml keys their Snakemake jobs read, generated from
params.yaml by workflow/dvc_stages.py (`make dvc.yaml`): an edit flags in `dvc status` only the stages
whose tables it reruns, the committed dvc.yaml is what the generator writes, and a stage refuses to run
when params.yaml's tables have moved on from dvc.yaml (never a silently skipped edit).

Before: every table stage depended on the whole `experiments` and `methods` sections, so one FedAvg sweep
edit on fmnist10-iid-k10 flagged six table stages where Snakemake reran the tables of three."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
GEN = ROOT / "workflow" / "dvc_stages.py"


def generator():
    spec = importlib.util.spec_from_file_location("dvc_stages", GEN)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def params() -> dict:
    from fedbayes.study import load_params

    return load_params(ROOT / "params.yaml")


def dvc_copy(d: Path, runs: bool = False) -> Path:
    """A copy holding only the DVC files and params (and, with ``runs``, the committed runs and .dvcignore)."""
    d.mkdir(parents=True)
    for f in ("dvc.yaml", "dvc.lock", "params.yaml", "params.smoke.yaml") + ((".dvcignore",) if runs else ()):
        shutil.copy(ROOT / f, d / f)
    if runs:
        tracked = subprocess.run(["git", "ls-files", "-z", "results/runs"], cwd=ROOT, capture_output=True, text=True,
                                 check=True).stdout.split("\0")
        for f in filter(None, tracked):
            (d / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / f, d / f)
    subprocess.run(["dvc", "init", "--no-scm", "-q"], cwd=d, check=True)
    return d


def changed_deps(d: Path, kind: str, under: str = "") -> set[str]:
    """The stages of the copy ``d`` one of whose ``kind`` dependencies (under ``under``) `dvc status` reports
    changed against dvc.lock (DVC's own comparison)."""
    from dvc.repo import Repo

    out = set()
    with Repo(str(d)) as repo:
        for stage in repo.index.stages:
            for dep in stage.deps:
                if type(dep).__name__ == kind and str(dep.def_path).startswith(under) and dep.workspace_status():
                    out.add(stage.name)
    return out


def flagged(tmp_path: Path, edit) -> set[str]:
    """The stages whose params `dvc status` reports changed after ``edit`` of params.yaml (DVC's own
    comparison of the params against dvc.lock, in a copy holding only the DVC files and params)."""
    d = dvc_copy(tmp_path / "repo")
    text = (d / "params.yaml").read_text()
    new = edit(text)
    assert new != text
    (d / "params.yaml").write_text(new)
    return changed_deps(d, "ParamsDependency")


FEDAVG_LINE = "      fedavg: {sweep: {local_epochs: [5, 10]}}\n"


def test_a_fedavg_sweep_edit_flags_only_the_stages_whose_tables_it_reruns(tmp_path):
    # `snakemake -n reports/README.md reports/metrics` after this edit plans, besides its runs, the
    # tables table1, fedlap/table1-3 and 5, bayesadmm/table1 (and the headline, scorecard): the stages
    # table1, fedlap_tables and bayesadmm_tables; the FedIVON, FOLA and FedEP tables do not read it
    def edit(text):
        assert FEDAVG_LINE in text   # the first is fmnist10-iid-k10's
        return text.replace(FEDAVG_LINE, FEDAVG_LINE.replace("[5, 10]", "[5, 20]"), 1)

    assert flagged(tmp_path, edit) == {"table1", "fedlap_tables", "bayesadmm_tables"}


@pytest.mark.full
def test_a_toy_edit_flags_only_its_own_stage(tmp_path):
    assert flagged(tmp_path, lambda t: t.replace("toys:\n", "toys:\n  # edited\n", 1)) == set()  # a comment: nothing
    for toy, stages in (("fedep/table4", {"fedep_toy"}), ("bayesadmm/figures", set())):  # the latter: no DVC stage
        edit = yaml.safe_load((ROOT / "params.yaml").read_text())
        edit["toys"][toy]["edited"] = 1
        assert flagged(tmp_path / toy, lambda t: yaml.safe_dump(edit, sort_keys=False)) == stages, toy


def test_the_committed_dvc_yaml_is_as_generated():
    text = (ROOT / "dvc.yaml").read_text()
    again, changed = generator().generate(text, params())
    assert changed == [], f"run `make dvc.yaml`: stages {changed} differ from params.yaml"
    assert again == text


def test_a_table_gaining_an_experiment_makes_its_stage_stale_and_no_other(tmp_path):
    g, p = generator(), params()
    text = (ROOT / "dvc.yaml").read_text()
    p["tables"]["table1"]["experiments"] = [*p["tables"]["table1"]["experiments"], "fmnist-dir-k100"]
    new, changed = g.generate(text, p)
    assert changed == ["table1"]
    keys = yaml.safe_load(new)["stages"]["table1"]["params"]
    assert "experiments.fmnist-dir-k100" in keys and "experiments.fmnist10-iid-k10" in keys

    # the stage's command checks first: `dvc repro` refuses, naming the stage and the command to run
    d = tmp_path / "repo"
    shutil.copytree(ROOT / "workflow" / "schemas", d / "workflow" / "schemas")
    shutil.copytree(ROOT / "papers", d / "papers")   # the paper folders the stages are generated from
    shutil.copy(GEN, d / "workflow" / "dvc_stages.py")
    for f in ("dvc.yaml", "params.smoke.yaml"):
        shutil.copy(ROOT / f, d / f)
    (d / "params.yaml").write_text((ROOT / "params.yaml").read_text().replace(
        "experiments: [fmnist10-iid-k10, fmnist10-dir-k10]", "experiments: [fmnist10-iid-k10, fmnist10-dir-k10, fmnist-dir-k100]", 1))
    cmd = yaml.safe_load(text)["stages"]["table1"]["cmd"]
    check = cmd.split(" && ")[0]
    assert "dvc_stages.py --check" in check
    r = subprocess.run(check.replace("python3", sys.executable), shell=True, cwd=d, capture_output=True, text=True)
    assert r.returncode != 0 and "table1" in r.stderr and "make dvc.yaml" in r.stderr, r.stderr
    subprocess.run([sys.executable, "workflow/dvc_stages.py"], cwd=d, check=True, capture_output=True)
    assert subprocess.run(check.replace("python3", sys.executable), shell=True, cwd=d).returncode == 0


def test_every_experiment_a_stage_reads_is_one_its_tables_run():
    """Each table stage reads the experiments of its tables (and those they take their selection from),
    its tables' methods those experiments run (a table reads only its own methods' runs), its tables'
    specs; no other experiment, method or table."""
    g, p = generator(), params()
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    for name, body in stages.items():
        tables = g.stage_tables(str(body.get("cmd", "")), p["tables"])
        keys = [k for k in body.get("params", []) if isinstance(k, str)]
        if not tables:
            assert not any(k.startswith(("experiments", "methods", "tables")) for k in keys), name
            continue
        exps = {e for t in tables for e in p["tables"][t]["experiments"] if e in p["experiments"]}
        exps |= {p["experiments"][e]["selection_from"] for e in exps if p["experiments"][e].get("selection_from")}
        assert {g.key("experiments", e, p["experiments"]) for e in exps} == {k for k in keys if k.startswith("experiments.")}, name
        shown = {m.split("@")[0] for t in tables for m in p["tables"][t]["methods"]}
        runs = {m for e in exps for m in p["experiments"][e]["methods"] if m in p["methods"] and m in shown}
        assert {f"methods.{m}" for m in runs} == {k for k in keys if k.startswith("methods.")}, name
        assert {f"tables.{t}" for t in tables} == {k for k in keys if k.startswith("tables.")}, name
        assert "experiments" not in keys and "methods" not in keys and "tables" not in keys, name


@pytest.mark.parametrize("name", ["fmnist10-labeldir0.01-k20"])
def test_an_experiment_name_with_a_dot_is_one_dvc_key(name):
    """DVC splits a params key at its dots; a dot in a name is matched by `?` (DVC reads keys as globs)."""
    import dpath

    p = params()
    k = generator().key("experiments", name, p["experiments"])
    assert dpath.search(p, k, separator=".")["experiments"] == {name: p["experiments"][name]}


@pytest.mark.full
def test_a_deleted_or_edited_committed_run_file_flags_the_stages_whose_tables_read_it(tmp_path):
    """As Snakemake reruns a run whose history.csv was deleted (and the tables that read it), `dvc status`
    names the stages whose tables read that run, and no other. Before: no stage depended on a run, and
    `dvc status` / `dvc repro --dry table1` called everything up to date."""
    d = dvc_copy(tmp_path / "repo", runs=True)
    assert changed_deps(d, "Dependency", "results/runs") == set()   # dvc.lock holds the committed runs
    run = d / "results/runs/fmnist10-iid-k10/fedavg/local_epochs=10/seed0"
    (run / "history.csv").unlink()
    # fmnist10-iid-k10's FedAvg runs: the headline table, the FedLap and BayesADMM tables
    assert changed_deps(d, "Dependency", "results/runs") == {"table1", "fedlap_tables", "bayesadmm_tables"}
    shutil.copy(ROOT / "results/runs/fmnist10-iid-k10/fedavg/local_epochs=10/seed0/history.csv", run / "history.csv")
    assert changed_deps(d, "Dependency", "results/runs") == set()
    sel = d / "results/runs/fmnist10-labeldir0.01-k20/fola/selected.json"   # FOLA's runs: the FOLA tables alone
    sel.write_text(sel.read_text().replace("}", ', "edited": 1}', 1))
    assert changed_deps(d, "Dependency", "results/runs") == {"fola_tables"}
    # a run file git does not keep (its predictions, a lock) is not one the tables read
    (run / "predictions.npz").write_bytes(b"x")
    (run / ".fedavg.train.lock").write_bytes(b"")
    assert changed_deps(d, "Dependency", "results/runs/fmnist10-iid-k10") == set()


def test_a_stage_depends_on_its_tables_committed_runs_only():
    """Each table stage's run deps are the committed <runs>/<experiment>/<method> folders of its
    experiments × its tables' methods: none for an experiment never run here (DVC refuses a stage whose
    dependency is missing after its command), every committed folder in some stage."""
    g, p = generator(), params()
    tracked = subprocess.run(["git", "ls-files", "results/runs"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    committed = {"/".join(f.split("/")[:4]) for f in tracked}
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    seen = set()
    for name, body in stages.items():
        runs = {x for x in body.get("deps", []) if x.startswith("results/runs/")}
        seen |= runs
        assert runs <= committed, (name, runs - committed)
        tables = g.stage_tables(str(body.get("cmd", "")), p["tables"])
        for r in runs:
            _, _, e, m = r.split("/")
            assert any(m in {x.split("@")[0] for x in p["tables"][t]["methods"]} and
                       (e in p["tables"][t]["experiments"] or any(p["experiments"][x].get("selection_from") == e
                                                                   for x in p["tables"][t]["experiments"]))
                       for t in tables), (name, r)
    assert seen == committed
    assert not any("cifar10" in r for r in seen)   # not run here: no data


def test_without_git_the_runs_on_disk_are_the_committed_ones(tmp_path):
    g = generator()
    (tmp_path / "results/runs/e1/fedavg/default/seed0").mkdir(parents=True)
    (tmp_path / "results/runs/e1/fedavg/default/seed0/run.json").write_text("{}")
    (tmp_path / "results/runs/e1/fedprox/default/seed0").mkdir(parents=True)   # no run file yet
    (tmp_path / "results/runs/e1/fedprox/default/seed0/checkpoint.pt").write_text("")
    assert g.committed_runs(tmp_path, "results/runs") == {("e1", "fedavg")}


def test_outs_are_generated_with_the_params(tmp_path):
    """A table whose metrics gain ECE writes a reliability figure; a headline curve added writes its CSVs:
    `make dvc.yaml` lists them in the stage's outs (before: only the params list followed params.yaml)."""
    g, p = generator(), params()
    text = (ROOT / "dvc.yaml").read_text()
    p["tables"]["fedlap/table1"]["metrics"] = [*p["tables"]["fedlap/table1"]["metrics"], "test/ece"]
    p["headline"]["curves"] = [*p["headline"]["curves"], "test/ece"]
    new, changed = g.generate(text, p)
    assert set(changed) == {"table1", "fedlap_tables"}
    stages = yaml.safe_load(new)["stages"]
    outs = lambda s: [next(iter(o)) for o in stages[s]["outs"]]   # noqa: E731
    assert "${reports_dir}/figures/fedlap_table1_reliability.png" in outs("fedlap_tables")
    assert {f"${{reports_dir}}/plots/table1_{e}_test_ece.csv" for e in ("fmnist10-iid-k10", "fmnist10-dir-k10")} <= set(outs("table1"))
    assert all(o == {next(iter(o)): {"cache": False}} for s in stages for o in stages[s].get("outs", [])
               if isinstance(o, dict) and s != "data")


def test_dvc_caches_the_raw_data_and_no_report():
    """The raw data are DVC's to hand over (`dvc push` / `dvc pull`, docs/cluster.md): cached. Reports are
    committed to git and rebuilt by Snakemake: cache: false, so none reads "not in cache" after set-up.
    (A fresh clone once pulled no data at all when the data outs were cache: false.)"""
    import yaml
    from pathlib import Path

    from fedbayes.workflow.plan import dvc_cached_outputs

    root = Path(__file__).resolve().parents[1]
    stages = yaml.safe_load((root / "dvc.yaml").read_text())["stages"]
    data = {next(iter(o)) if isinstance(o, dict) else o for o in stages["data"]["outs"]}
    assert data == {"data/raw/fmnist", "data/raw/mnist5k"}
    assert dvc_cached_outputs(root) == data


@pytest.mark.full
def test_the_data_step_puts_a_fetched_dvc_output_into_the_cache(tmp_path):
    """After a fetch outside DVC, `dvc status` reads "not in cache"; the data step's command (what
    workflow/rules/data.smk runs after `fedbayes data`) caches the folder and `dvc status` reads up to
    date. A folder DVC does not cache gets no command; content unlike dvc.lock is refused, in one line."""
    import subprocess
    import sys

    from fedbayes.workflow.plan import dvc_cache_command, dvc_cached_outputs

    def sh(cmd):
        return subprocess.run(cmd, shell=True, cwd=tmp_path, capture_output=True, text=True, check=True).stdout

    (tmp_path / "dvc.yaml").write_text("stages:\n  data:\n    cmd: 'true'\n    outs:\n      - raw/a:\n"
                                       "          persist: true\n      - raw/b:\n          cache: false\n")
    (tmp_path / "raw/a").mkdir(parents=True)
    (tmp_path / "raw/a/x").write_text("1")
    (tmp_path / "raw/b").mkdir()
    dvc = f"{sys.executable} -m dvc"
    sh(f"git init -q && {dvc} init -q && {dvc} commit -f -q data && rm -rf .dvc/cache")
    assert "not in cache" in sh(f"{dvc} status")
    cached = dvc_cached_outputs(tmp_path)
    assert cached == {"raw/a"} and dvc_cache_command("raw/b", cached, "l", sys.executable) == ":"
    sh(dvc_cache_command("raw/a", cached, str(tmp_path / "lock"), sys.executable))
    assert "up to date" in sh(f"{dvc} status")
    (tmp_path / "raw/a/x").write_text("2")
    lock = (tmp_path / "dvc.lock").read_text()
    out = sh(dvc_cache_command("raw/a", cached, str(tmp_path / "lock"), sys.executable))
    assert "refused" in out and (tmp_path / "dvc.lock").read_text() == lock


def test_the_table_stages_are_generated_whole_from_params_and_the_paper_folders():
    """A paper's stage is written whole by `make dvc.yaml` (its command, deps, params, outs): a hand edit inside
    it is undone and the stage named by --check; a paper whose tables are gone from params.yaml loses its stage
    and the scorecard its tables' CSVs. Before, only the params, run deps and outs were generated."""
    import copy

    g, p = generator(), params()
    text = (ROOT / "dvc.yaml").read_text()
    stages = yaml.safe_load(text)["stages"]
    fedlap = stages["fedlap_tables"]
    assert fedlap["cmd"] == ("python3 workflow/dvc_stages.py --check && snakemake --cores all "
                             + " ".join(f"${{reports_dir}}/fedlap/table{i}.csv" for i in range(1, 6)))
    assert {"papers/fedlap/NOTES.md", "papers/fedlap/published.yaml", "papers/bayesadmm/authors_code.yaml"} <= set(fedlap["deps"])
    assert "papers/fedlap/causes.yaml" in stages["scorecard"]["deps"]   # read by the scorecard, not the tables
    assert "papers/fedlap/causes.yaml" not in fedlap["deps"]

    edited = text.replace("      - papers/fedlap/NOTES.md\n", "      - reports/fedlap/NOTES.md\n", 1)
    assert edited != text
    again, changed = g.generate(edited, p)
    assert changed == ["fedlap_tables"] and again == text

    q = copy.deepcopy(p)
    q["tables"] = {t: s for t, s in q["tables"].items() if not t.startswith("fola/")}
    new, changed = g.generate(text, q)
    assert set(changed) == {"fola_tables", "scorecard"}
    after = yaml.safe_load(new)["stages"]
    assert "fola_tables" not in after and "reports/fola/table2.csv" not in after["scorecard"]["deps"]
