"""fedbayes.workflow, the planning the Snakemake rules call, tested as functions (no snakemake process):
the code a rule runs from the import graph, the rerun markers, staleness, data availability, the numerics
gate, and that no .smk file starts a process."""

from __future__ import annotations

import ast
import itertools
import json
import os
import re
from pathlib import Path

import pytest

from fedbayes.study import method_defaults
from fedbayes.workflow import codes, markers, numerics, plan, staleness

REPO = Path(__file__).resolve().parents[1]
RULES = [REPO / "Snakefile", *sorted((REPO / "workflow/rules").glob("*.smk"))]


def rel(files):
    """The files by their path relative to the package (a paper's data, outside it: ``../../papers/...``)."""
    return {os.path.relpath(f, codes.ROOT) for f in files}


def test_a_rules_code_follows_its_imports_function_level_ones_included(tmp_path):
    pkg = tmp_path / "pk"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub/__init__.py").write_text("")
    (pkg / "a.py").write_text("from pk import b\n\ndef f():\n    from .sub import c\n")
    (pkg / "b.py").write_text("import pk.d\n")
    (pkg / "sub/c.py").write_text("from ..e import x\n")
    (pkg / "d.py").write_text("")
    (pkg / "e.py").write_text("x = 1\n")
    (pkg / "unused.py").write_text("")
    files = {str(f.relative_to(pkg)) for f in codes.closure(["pk.a"], pkg)}
    assert files == {"__init__.py", "a.py", "b.py", "d.py", "sub/__init__.py", "sub/c.py", "e.py"}
    with pytest.raises(ValueError, match="pk.nope"):
        codes.closure(["pk.nope"], pkg)


def _afresh(new_process: bool = True) -> None:
    """The import graph read again: this process's caches cleared, and (``new_process``) the cache file read
    anew, as another Snakemake command would."""
    for f in (codes._modules, codes._imports, codes._closure):
        f.cache_clear()
    if new_process:
        codes._CACHE = codes._ImportsCache()


@pytest.fixture
def imports_cache(tmp_path, monkeypatch):
    """The import graph read afresh, its cache in ``tmp_path``: the cache file's path."""
    path = tmp_path / "cache" / "imports.json"
    monkeypatch.setenv(codes.IMPORTS_CACHE_ENV, str(path))
    monkeypatch.setattr(codes, "_CACHE", codes._ImportsCache())   # the module's own, put back after the test
    _afresh(new_process=False)
    yield path
    _afresh(new_process=False)


def _small_package(tmp_path):
    pkg = tmp_path / "pk"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text('"""from pk import c: a docstring, not an import"""\n')
    (pkg / "c.py").write_text("")
    return pkg


def test_the_import_graph_is_parsed_once_and_then_read_from_the_cache(imports_cache, tmp_path, monkeypatch):
    """Every Snakemake command (dry runs too) read the import graph by parsing about 90 modules, ≈ 0.4 s:
    what a module imports is now remembered by its text's hash, and a second process parses nothing."""
    pkg = _small_package(tmp_path)
    first = codes.closure(["pk.a"], pkg)
    assert {f.name for f in first} == {"__init__.py", "a.py", "b.py"}
    assert len(json.loads(imports_cache.read_text())) == 3
    # a new process: the cache read from its file, no module parsed
    _afresh()
    monkeypatch.setattr(codes, "imported_names", lambda *a: pytest.fail(f"parsed {a[1]} again"))
    assert codes.closure(["pk.a"], pkg) == first


def test_an_edited_module_is_parsed_again_and_a_damaged_cache_is_ignored(imports_cache, tmp_path):
    pkg = _small_package(tmp_path)
    assert {f.name for f in codes.closure(["pk.a"], pkg)} == {"__init__.py", "a.py", "b.py"}
    (pkg / "b.py").write_text("from pk import c\n")   # its text changes, and so its key
    _afresh(new_process=False)
    assert {f.name for f in codes.closure(["pk.a"], pkg)} == {"__init__.py", "a.py", "b.py", "c.py"}
    # garbage, or entries of the wrong shape: parsed as if there were no cache, and the file rewritten
    imports_cache.unlink()
    imports_cache.mkdir()   # a folder where the file belongs: parsed, nothing left beside it
    (imports_cache / "x").write_text("")
    _afresh()
    assert {f.name for f in codes.closure(["pk.a"], pkg)} == {"__init__.py", "a.py", "b.py", "c.py"}
    assert sorted(p.name for p in imports_cache.parent.iterdir()) == ["imports.json"]
    (imports_cache / "x").unlink()
    imports_cache.rmdir()
    for damaged in ("{not json", '{"pk.a 0 x": "not a list"}', "[1, 2]"):
        imports_cache.write_text(damaged)
        _afresh()
        assert {f.name for f in codes.closure(["pk.a"], pkg)} == {"__init__.py", "a.py", "b.py", "c.py"}
        assert all(isinstance(v, list) for v in json.loads(imports_cache.read_text()).values())


def test_the_cached_import_graph_is_the_parsed_one_for_every_module(imports_cache):
    """Each rule's code (and so its hash, a param of its jobs) is the same read from the cache as parsed."""
    parsed = {r: codes.rule_code(*codes.RULE_CODE[r]) for r in codes.RULE_CODE}
    modules = codes.module_files()
    assert len(json.loads(imports_cache.read_text())) >= len({f for fs in parsed.values() for f in fs if f.endswith(".py")})
    _afresh()
    assert {r: codes.rule_code(*codes.RULE_CODE[r]) for r in codes.RULE_CODE} == parsed
    for name, path in modules.items():
        assert codes._CACHE.names(path, name) == codes.imported_names(path.read_text(), name, path.name == "__init__.py")


def test_the_code_lists_hold_the_real_imports():
    """The hand-written lists missed imports: the evaluate rule's code held eval/ but not runfiles.py or
    fileio.py, which evaluate.py imports; the table's missed the configuration and rerun modules."""
    evaluate = rel(codes.rule_code(*codes.RULE_CODE["evaluate"]))
    assert {"eval/evaluate.py", "eval/metrics.py", "runfiles.py", "fileio.py"} <= evaluate
    table = rel(codes.rule_code(*codes.RULE_CODE["table"]))
    assert {"reports/tables.py", "reports/figures.py", "study/resolve.py", "study/rerun.py", "../../papers/fedlap/published.yaml"} <= table
    assert not any(f.startswith("engine/") for f in table)   # a table never trains
    partition = rel(codes.rule_code(*codes.RULE_CODE["partition"]))
    assert {"engine/partitions.py", "partition/schemes.py", "engine/seeds.py"} <= partition


@pytest.mark.parametrize("rule", sorted(codes.RULE_CODE))
def test_each_rules_code_holds_what_its_command_calls(rule):
    """Every module the rule's CLI command (``cmd_<rule>`` in a module of the cli package) calls, by a name
    imported at the top of that module or inside the function, is in the rule's code (but the command
    line's plumbing). The partition rule's hand-written list named partition/ and engine/seeds.py, not
    engine/partitions.py, whose write_partition the command calls."""
    fn = tree = None
    for path in sorted((codes.ROOT / "cli").glob("*.py")):
        tree = ast.parse(path.read_text())
        fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == f"cmd_{rule}"), None)
        if fn is not None:
            break
    top = {a.asname or a.name: n.module for n in tree.body if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("fedbayes")
           for a in n.names}
    if fn is None:   # a rule that runs its entry module itself (python -m …): that module is its code
        entry = codes.RULE_CODE[rule][0]
        assert all(str(codes.module_files()[m]) in set(codes.rule_code(*codes.RULE_CODE[rule])) for m in entry)
        return
    used = {top[n.id] for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id in top}
    used |= {n.module for n in ast.walk(fn) if isinstance(n, ast.ImportFrom)}
    modules = codes.module_files()
    code = set(codes.rule_code(*codes.RULE_CODE[rule]))
    assert used - codes.COMMAND_PLUMBING
    assert sorted(m for m in used - codes.COMMAND_PLUMBING if str(modules[m]) not in code) == []


def test_code_hash_is_of_content_and_relative_paths(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    h = codes.code_hash([tmp_path / "a.py"], tmp_path)
    assert h == codes.code_hash([str(tmp_path / "a.py")], tmp_path) and len(h) == 16
    (tmp_path / "a.py").write_text("x = 2\n")
    assert codes.code_hash([tmp_path / "a.py"], tmp_path) != h


def test_a_marker_is_named_by_its_text_and_its_consumers_state(tmp_path):
    out = tmp_path / "table.csv"
    assert markers.marker(tmp_path / "m.txt", "why: ", ["a"], [out]) is None   # the consumer runs anyway
    out.write_text("1")
    assert markers.marker(tmp_path / "m.txt", "why: ", [], [out]) is None      # nothing to say
    path, text = markers.marker(tmp_path / "m.txt", "why: ", ["a", "b"], [out])
    assert text == "why: a, b" and re.fullmatch(r".*/m\.rerun-[0-9a-f]{12}\.txt", path)
    os.utime(out, ns=(1, 1))   # the consumer rewritten: the same reason is a new marker
    assert markers.marker(tmp_path / "m.txt", "why: ", ["a", "b"], [out])[0] != path


def test_a_forcerun_without_the_forced_rule_is_one_line():
    assert markers.forcerun_problem("p", "t", False, ["marker"]) is None
    assert markers.forcerun_problem("p", "t", True, []) is None
    problem = markers.forcerun_problem("p", "t", False, ["train"], "numerics_check")
    assert "--forcerun numerics_check" in problem and "\n" not in problem


def write_run(d: Path, cfg: dict, numerics_versions=None):
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({"config": cfg, **({"numerics": numerics_versions} if numerics_versions else {})}))
    (d / "history.csv").write_text("round,test/acc\n1,0.5\n")


def test_run_changes(tmp_path, monkeypatch):
    monkeypatch.setattr(staleness, "run_problems", lambda d: [])
    monkeypatch.setattr(staleness, "default_changes", lambda m, hp, ran: {})
    monkeypatch.setattr(staleness, "numerics", lambda m: {"core": 1, "method": 2})
    cfg = {"hparams": {"lr": 0.1}, "rounds": 3}
    assert staleness.run_changes(tmp_path / "never", "m", cfg) == []   # never trained: runs for its outputs
    write_run(tmp_path / "r", cfg, {"core": 1, "method": 2})
    assert staleness.run_changes(tmp_path / "r", "m", cfg) == []
    changed = staleness.run_changes(tmp_path / "r", "m", {**cfg, "rounds": 4})
    assert changed and "rounds" in changed[0]
    write_run(tmp_path / "old", cfg)   # no numerics recorded: version 1 of each
    assert staleness.run_changes(tmp_path / "old", "m", cfg) == ["numerics version of m 1 -> 2"]
    (tmp_path / "old/history.csv").unlink()
    assert staleness.run_changes(tmp_path / "old", "m", cfg) == ["history.csv missing"]


def test_a_rerun_reason_shows_the_default_a_run_read_not_absent(tmp_path, monkeypatch):
    """A run that read a spec default (its configuration leaves the key out, run.json ``defaults`` records
    it) and is now given another value: the reason shows the value the run used, not '<absent>'; and the
    other way round, a setting removed shows the default the run will read."""
    monkeypatch.setattr(staleness, "run_problems", lambda d: [])
    hp = {"lr": 0.001, "batch_size": 32, "local_epochs": 1}
    write_run(tmp_path / "r", {"method": "fedavg", "hparams": hp}, staleness.numerics("fedavg"))
    info = json.loads((tmp_path / "r/run.json").read_text())
    info["defaults"] = method_defaults("fedavg", hp)      # as training records them
    (tmp_path / "r/run.json").write_text(json.dumps(info))
    now = {"method": "fedavg", "hparams": {**hp, "weight_decay": 0.001}}
    assert staleness.run_changes(tmp_path / "r", "fedavg", now) == ["hparams.weight_decay 0.0 (its default) -> 0.001"]

    write_run(tmp_path / "s", now, staleness.numerics("fedavg"))
    info = json.loads((tmp_path / "s/run.json").read_text())
    info["defaults"] = method_defaults("fedavg", now["hparams"])
    (tmp_path / "s/run.json").write_text(json.dumps(info))
    assert staleness.run_changes(tmp_path / "s", "fedavg", {"method": "fedavg", "hparams": hp}) == \
        ["hparams.weight_decay 0.001 -> 0.0 (its default)"]


def test_metrics_changes_name_each_metric_to_evaluate_and_compute_codes_only_where_a_metrics_file_is_met(
        tmp_path, monkeypatch):
    """The evaluate rule's reasons, metric by metric (``eval.fingerprint.changes``): a new metric, a changed
    definition; the code's metric codes are computed only where a metrics.json is met (scipy's import)."""
    calls = []

    def codes():
        calls.append(1)
        return {"test/acc": "a", "test/top2": "t"}

    def recorded(m):
        monkeypatch.setattr(staleness, "metrics_problems", lambda d: ([], m))

    recorded(None)
    assert staleness.metrics_changes(tmp_path, codes) == ("", []) and not calls
    recorded({"metric_codes": {"test/acc": "a", "test/top2": "t"}})
    assert staleness.metrics_changes(tmp_path, codes) == ("changed", [])
    recorded({"metric_codes": {"test/acc": "a"}})
    assert staleness.metrics_changes(tmp_path, codes) == ("changed", ["test/top2 not evaluated (a new metric)"])
    recorded({"metric_codes": {"test/acc": "b", "test/top2": "t"}})
    assert staleness.metrics_changes(tmp_path, codes) == ("changed", ["the definition of test/acc changed (b -> a)"])
    recorded({"metric_codes": {"test/acc": "a"}, "not_evaluated": {"test/top2": "t"}})   # no predictions.npz
    assert staleness.metrics_changes(tmp_path, codes) == ("changed", [])
    (tmp_path / "predictions.npz").write_bytes(b"")
    assert staleness.metrics_changes(tmp_path, codes) == (
        "changed", ["test/top2 not evaluated, and the run's predictions are there now"])
    monkeypatch.setattr(staleness, "metrics_problems", lambda d: (["metrics.json damaged (x)"], None))
    assert staleness.metrics_changes(tmp_path, codes) == ("damaged", ["metrics.json damaged (x)"])


def test_data_availability_is_read_never_fetched(tmp_path):
    (tmp_path / "data").mkdir()
    assert plan.availability(tmp_path, ["a", "b"]) is None   # not recorded: the data step is to run
    assert plan.unrecorded(tmp_path, ["a", "b"]) == [f"{tmp_path}/data/a.json", f"{tmp_path}/data/b.json"]
    (tmp_path / "data/a.json").write_text(json.dumps({"available": True}))
    assert plan.availability(tmp_path, ["a"]) is True and plan.availability(tmp_path, ["a", "b"]) is None
    (tmp_path / "data/b.json").write_text(json.dumps({"available": False}))
    assert plan.availability(tmp_path, ["a", "b"]) is False and plan.unrecorded(tmp_path, ["a", "b"]) == []
    (tmp_path / "data/b.json").write_text("{trunc")   # unreadable: the step runs again
    assert plan.availability(tmp_path, ["b"]) is None


def test_table_pairs_sweeps_and_import_groups():
    from fedbayes.study import load_params

    p = load_params(REPO / "params.yaml")
    spec = p["tables"]["table1"]
    pairs = plan.table_pairs(p, spec)
    assert pairs and all(set(ms) <= set(p["experiments"][e]["methods"]) for e, ms in pairs.items())
    assert plan.sweep_report("reports", "fedlap/table1", {"sweeps": "beside"}, "x") == "reports/fedlap/sweep_x.csv"
    assert plan.sweep_report("reports", "table1", {}, "x") == "reports/sweeps/x.csv"
    groups = plan.import_groups(p, None)
    assert groups["table1"] == pairs and plan.import_rule("fedlap/table1") == "mlflow_fedlap_table1"
    assert plan.job_rule("table", "fedlap/table1") == "table_fedlap_table1"
    with pytest.raises(ValueError, match="may not be named"):
        plan.import_groups(p, "table1")


def test_report_category_and_the_paper_twin_pattern(tmp_path):
    (tmp_path / "fedlap").mkdir()
    (tmp_path / "fedlap" / "published.yaml").write_text("title: FedLap paper\n")
    assert plan.report_category("table1", tmp_path) == "Headline benchmark"
    assert plan.report_category("fedlap/table1", tmp_path) == "FedLap paper"
    assert plan.report_category("other/t", tmp_path) == "other"
    pattern = plan.paper_twin_pattern("reports/smoke", "reports", ["reports/smoke/{t}.csv", "results/x"])
    assert re.fullmatch(pattern, "reports/table1.csv") and not re.fullmatch(pattern, "reports/smoke/table1.csv")
    assert plan.paper_twin_pattern("reports/smoke", "reports", []) == "(?!)"
    assert "ask for reports/smoke/table1.csv" in plan.paper_output_refusal("reports/table1.csv", "reports/smoke", "reports", "smoke")


def test_the_numerics_gate_is_due_only_on_a_change(tmp_path, monkeypatch):
    due = {"m": True, "n": False}
    monkeypatch.setattr(numerics, "check_due", lambda m, record, hp: due[m])
    monkeypatch.setattr(numerics, "run_tag", lambda m, hp: str(hp["x"]))
    hps = [{"x": 1}, {"x": 2}]
    checks = {m: numerics.due_hparams(tmp_path, m, hps) for m in due}
    assert checks == {"m": hps, "n": []}
    path = numerics.gate(tmp_path, checks)
    assert re.fullmatch(rf"{tmp_path}/numerics/gate/check-[0-9a-f]{{12}}\.txt", path)
    record = numerics.record_file(tmp_path, "m")
    record.parent.mkdir(parents=True)
    record.write_text("{}")   # a check made since: a new gate if due again
    assert numerics.gate(tmp_path, checks) != path
    assert numerics.gate(tmp_path, {"m": hps[:1]}) != numerics.gate(tmp_path, checks)   # another set of paths
    due["m"] = False           # unchanged code on the same machine: no gate, no job
    assert numerics.due_hparams(tmp_path, "m", hps) == [] and numerics.gate(tmp_path, {"m": [], "n": []}) is None


def test_one_gate_holds_every_due_check_of_the_study(tmp_path, monkeypatch):
    """The study's due checks run in one job: one gate file, each due method's code paths with it; a
    method whose check is not due is not in it (its jobs wait on nothing)."""
    from fedbayes.study import load_params

    p = load_params(REPO / "params.yaml")
    monkeypatch.setattr(numerics, "check_due", lambda m, record, hp: m in ("fedavg", "fedprox"))
    path, checks = numerics.study_gate(p, tmp_path)
    assert list(checks) == ["fedavg", "fedprox"] and len(checks["fedavg"]) == len(numerics.method_hparams(p, "fedavg"))
    assert all(json.loads(h) for h in checks["fedprox"])
    monkeypatch.setattr(numerics, "check_due", lambda m, record, hp: False)
    assert numerics.study_gate(p, tmp_path) is None


def test_the_method_hparams_are_one_per_code_path():
    from fedbayes.study import load_params
    from fedbayes.engine.goldens import run_tag

    p = load_params(REPO / "params.yaml")
    hps = numerics.method_hparams(p, "fedavg")
    tags = [run_tag("fedavg", hp) for hp in hps]
    assert hps and len(set(tags)) == len(tags)


def smk_python(path: Path) -> str:
    return path.read_text()


def test_planning_starts_no_process():
    """A dataset fetch and the numerics check ran as subprocesses of input functions: now the data step is
    a checkpoint and the numerics check a job (rule numerics_check)."""
    for f in [*RULES, *sorted((codes.ROOT / "workflow").glob("*.py"))]:
        text = f.read_text()
        assert not re.search(r"import subprocess|subprocess\.|os\.system|Popen|\bshell\(", text), f
    text = "\n".join(f.read_text() for f in RULES)
    assert re.search(r"^checkpoint data:", text, re.M) and re.search(r"^rule numerics_check:", text, re.M)


def test_the_rule_files_define_one_statement_input_functions_in_one_file():
    """The .smk files keep rules and one-statement input functions (the planning is fedbayes.workflow's),
    and the functions live in common.smk, which defines no rule (snakemake --lint: no file mixes rules and
    functions)."""
    long, mixed = [], []
    for f in RULES:
        text = f.read_text()
        if re.search(r"^\s*def \w+\(", text, re.M) and (re.search(r"rule .+?:", text) or f.name != "common.smk"):
            mixed.append(f.name)
        lines = text.splitlines()
        for i, line in enumerate(lines):   # each function parsed alone (the rest of the file is Snakemake's)
            if re.match(r"^def \w+\(", line):
                block = [line] + list(itertools.takewhile(lambda l: not l.strip() or l.startswith(" "), lines[i + 1:]))
                [node] = ast.parse("\n".join(block)).body
                body = [n for n in node.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
                if len(body) != 1 or not isinstance(body[0], ast.Return):
                    long.append(f"{f.name}: {node.name} ({len(body)} statements)")
    assert not long, long
    assert not mixed, mixed


class FakeSettings:
    forceall, forcerun = False, ["marker", "numerics_check"]


class FakeWorkflow:
    dag_settings = FakeSettings()


def make_inputs(tmp_path, planning=True, checkpoints=None):
    from fedbayes.study import load_params
    from fedbayes.workflow.inputs import Inputs

    paths = {"work": str(tmp_path / "work"), "runs": str(tmp_path / "runs"), "partitions": str(tmp_path / "p")}
    return Inputs(load_params(REPO / "params.yaml"), paths, FakeWorkflow(), checkpoints, planning)


def test_inputs_markers_record_their_text_and_need_their_forced_rule(tmp_path):
    from snakemake.exceptions import WorkflowError

    inp = make_inputs(tmp_path)
    consumer = tmp_path / "table.csv"
    assert inp.marker_input(tmp_path / "m.txt", "because ", ["x"], [consumer]) == []   # the job runs anyway
    consumer.write_text("t")
    [made] = inp.marker_input(tmp_path / "m.txt", "because ", ["x", "y"], [consumer])
    assert re.fullmatch(rf"{tmp_path}/m\.rerun-[0-9a-f]{{12}}\.txt", made) and inp.marker_text[made] == "because x, y"
    assert inp.marker_input(tmp_path / "m.txt", "because ", [], [consumer]) == []
    inp.workflow.dag_settings.forcerun = ["train"]
    try:
        with pytest.raises(WorkflowError, match="--forcerun marker"):
            inp.marker_input(tmp_path / "m.txt", "because ", ["x"], [consumer])
        job = make_inputs(tmp_path, planning=False)   # a job's own process checks no command line
        assert len(job.marker_input(tmp_path / "m.txt", "because ", ["x"], [consumer])) == 1
    finally:
        inp.workflow.dag_settings.forcerun = ["marker", "numerics_check"]
    inp.marker_input(tmp_path / "o.txt", "x", ["y"], [consumer])
    assert inp.missing_outputs("t", [str(tmp_path / "gone.md")], str(tmp_path / "nope"))(None) == []
    [m] = inp.missing_outputs("t", [str(consumer), str(tmp_path / "gone.md")], str(consumer))(None)
    assert "these outputs are missing: " + str(tmp_path / "gone.md") in inp.marker_text[m]


def test_inputs_gate_only_a_due_method(tmp_path):
    inp = make_inputs(tmp_path)
    inp.__dict__["numerics_gate"] = ("work/numerics/gate/check-abc.txt", {"fedprox": ['{"mu": 1}']})
    assert inp.gate_input("fedavg") == []
    assert inp.gate_input("fedprox") == ["work/numerics/gate/check-abc.txt"]
    inp.__dict__["numerics_gate"] = None
    assert inp.gate_input("fedprox") == []


def test_inputs_a_tables_runs_wait_for_data_status_and_selection(tmp_path):
    from snakemake.exceptions import IncompleteCheckpointException

    class Job:
        output = [str(tmp_path / "runs/fmnist10-iid-k10/fedavg/selected.json")]

    class Select:
        rule = "select"

        def get(self, **wc):
            return Job()

    class Checkpoints:
        select = Select()

    inp = make_inputs(tmp_path, checkpoints=Checkpoints())
    table = tmp_path / "table1.csv"
    table.write_text("t")
    runs = inp.selected_runs("fmnist10-iid-k10", "fedavg", str(table))
    statuses = [f"{tmp_path}/work/data/{d}.json" for d in ("fmnist", "mnist5k")]   # its data and OOD data
    got = runs(None)   # no data status yet: asked for, with a marker
    assert got[:2] == statuses and inp.marker_text[got[2]] == "rebuilt because of: " + ", ".join(statuses)
    Path(statuses[0]).parent.mkdir(parents=True)
    for status in statuses:
        Path(status).write_text(json.dumps({"available": status == statuses[0]}))
    assert runs(None) == []   # data unavailable here: its rows say so
    Path(statuses[1]).write_text(json.dumps({"available": True}))
    got = runs(None)   # no selection yet: asked for, with a marker
    assert got[0] == Job.output[0] and len(got) == 2
    Path(Job.output[0]).parent.mkdir(parents=True)
    Path(Job.output[0]).write_text("{damaged")
    with pytest.raises(IncompleteCheckpointException):
        runs(None)
    Path(Job.output[0]).write_text((REPO / "results/runs/fmnist10-iid-k10/fedavg/selected.json").read_text())
    inp.__dict__["numerics_gate"] = None
    got = runs(None)
    assert f"{tmp_path}/runs/fmnist10-iid-k10/fedavg/local_epochs=5/seed0/metrics.json" in got


def test_run_inputs():
    files, kept = plan.run_inputs(["r/s0", "r/s1"])
    assert files == ["r/s0/metrics.json", "r/s1/metrics.json", "r/s0/history.csv", "r/s1/history.csv"]
    assert kept == files + ["r/s0/run.json", "r/s1/run.json"]
