"""One validation front door: every params.yaml problem, from the file's encoding and shape down to names a
file system or a device cannot hold, refused by `fedbayes validate` (and the Snakefile) with a line naming
the file or the key, before any job; never a traceback."""

import copy

import pytest
import yaml
from dagutil import read_params

from fedbayes.study import ConfigError, load_params, validate

EXP = "fmnist10-iid-k10"


@pytest.fixture
def params(repo):
    return read_params(repo)


@pytest.fixture(scope="module")
def schema(repo):
    return yaml.safe_load((repo / "workflow/schemas/params.schema.yaml").read_text())


def refused(params, schema, *words) -> str:
    """The ConfigError message of ``validate``; each of ``words`` is on one of its lines."""
    with pytest.raises(ConfigError) as err:
        validate(params, schema)
    msg = str(err.value)
    for w in words:
        assert any(w in line for line in msg.splitlines()), f"{w!r} not in:\n{msg}"
    return msg


def cli(argv, capsys) -> tuple[int, str]:
    """(exit code, stderr) of ``fedbayes <argv>`` run in this process."""
    from fedbayes.cli import main

    try:
        main(argv)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    return code, capsys.readouterr().err


# --- the file: shape, encoding, syntax ---------------------------------------------------------------

@pytest.mark.parametrize("text, what", [
    ("", "empty"), ("# nothing but a comment\n", "empty"), ("[1, 2]\n", "a list"), ("42\n", "a number"),
    ("just words\n", "a string"), ("- seeds: [0]\n", "a list"),
], ids=["empty", "comment", "list", "int", "str", "list-of-maps"])
def test_a_params_file_that_is_not_a_mapping_is_one_line(tmp_path, capsys, text, what):
    f = tmp_path / "params.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=what) as err:
        load_params(f)
    assert str(f) in str(err.value) and "\n" not in str(err.value)
    code, stderr = cli(["validate", "--params", str(f)], capsys)
    assert code == 2 and "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr


def test_a_latin1_params_file_is_one_line_naming_the_file(tmp_path, repo, capsys):
    f = tmp_path / "params.yaml"
    f.write_bytes((repo / "params.yaml").read_bytes() + "notes: café\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"not UTF-8.*line \d+") as err:
        load_params(f)
    assert str(f) in str(err.value) and "\n" not in str(err.value)
    code, stderr = cli(["validate", "--params", str(f)], capsys)
    assert code == 2 and "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr


def test_a_params_path_that_is_a_directory_is_one_line(tmp_path, capsys):
    code, stderr = cli(["validate", "--params", str(tmp_path)], capsys)
    assert code == 2 and "Traceback" not in stderr and str(tmp_path) in stderr, stderr


def test_flow_style_yaml_is_accepted(tmp_path, repo):
    """`{scale: paper, seeds: [0, 1], ...}` is YAML: it was parsed as JSON (it starts with a brace) and
    refused with the JSON parser's message."""
    f = tmp_path / "params.yaml"
    f.write_text(yaml.safe_dump(yaml.safe_load((repo / "params.yaml").read_text()), default_flow_style=True,
                                sort_keys=False))
    (tmp_path / "params.smoke.yaml").write_text((repo / "params.smoke.yaml").read_text())
    assert f.read_text().startswith("{")
    assert load_params(f) == load_params(repo / "params.yaml")


def test_json_with_a_duplicate_key_is_still_refused(tmp_path):
    f = tmp_path / "params.yaml"
    f.write_text('{"seeds": [0], "seeds": [1]}')
    with pytest.raises(ConfigError, match="duplicate key 'seeds'"):
        load_params(f)


# --- names that become files ------------------------------------------------------------------------

def test_an_integer_experiment_key_is_refused_naming_it(params, schema):
    params["experiments"][7] = params["experiments"][EXP]
    refused(params, schema, "experiments.7", "quote it")


@pytest.mark.parametrize("where", ["experiment", "table", "table-part", "path"])
def test_a_name_too_long_for_a_file_name_is_refused(params, schema, where):
    long = "a" * 300
    if where == "experiment":
        params["experiments"][long] = params["experiments"][EXP]
        key = f"experiments.{long}"
    elif where == "table":
        params["tables"][long] = copy.deepcopy(params["tables"]["table1"])
        key = f"tables.{long}"
    elif where == "table-part":
        params["tables"]["fedlap/" + long] = copy.deepcopy(params["tables"]["table1"])
        key = f"tables.fedlap/{long}"
    else:
        params["paths"]["runs"] = "results/" + long
        key = "paths.runs"
    refused(params, schema, key, "255 bytes")


def test_a_path_too_long_for_the_file_system_is_refused(params, schema):
    params["paths"]["runs"] = "/".join(["r" * 200] * 21)   # 4220 bytes: every component fits, the path not
    refused(params, schema, "paths.runs", "4096 bytes")


def test_a_name_with_a_slash_is_refused(params, schema):
    params["experiments"]["a/b"] = params["experiments"][EXP]
    refused(params, schema, "experiments", "'a/b'")


@pytest.mark.parametrize("name", ["sweeps/{e}", "figures/curves", "metrics/x", "plots/x"])
def test_a_table_named_like_another_report_is_refused(params, schema, name):
    name = name.format(e=EXP)
    params["tables"][name] = copy.deepcopy(params["tables"]["table1"])
    refused(params, schema, f"tables.{name}", "reports/")


def test_a_table_named_like_a_toy_is_refused(params, schema):
    toy = next(iter(params["toys"]))
    params["tables"][toy] = copy.deepcopy(params["tables"]["table1"])
    refused(params, schema, f"tables.{toy}", "toys")


# --- the device -------------------------------------------------------------------------------------

@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cuda:7"])
def test_a_cuda_device_on_a_machine_without_one_is_refused_by_validate(tmp_path, repo, capsys, device):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    f = tmp_path / "params.yaml"
    f.write_text((repo / "params.yaml").read_text().replace("\ndevice: auto", f"\ndevice: {device}", 1))
    (tmp_path / "params.smoke.yaml").write_text((repo / "params.smoke.yaml").read_text())
    code, stderr = cli(["validate", "--params", str(f)], capsys)
    assert code == 2 and "Traceback" not in stderr, stderr
    assert f"device: {device}" in stderr and "no CUDA" in stderr and "device: auto" in stderr, stderr


def test_check_device_names_the_missing_index(monkeypatch):
    from fedbayes import frontdoor

    monkeypatch.setattr(frontdoor, "_cuda_devices", lambda: 2)
    frontdoor.check_device({"device": "cuda:1"})
    frontdoor.check_device({"device": "auto"})
    with pytest.raises(ConfigError, match=r"device: cuda:2.*2 CUDA devices \(cuda:0 to cuda:1\)"):
        frontdoor.check_device({"device": "cuda:2"})


# --- sizes ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path, value", [
    (("experiments", EXP, "rounds"), 10**12),
    (("experiments", EXP, "model", "hidden"), [10**9]),
    (("experiments", EXP, "train", "batch_size"), 10**12),
    (("experiments", EXP, "methods", "fedavg", "sweep", "batch_size"), [32, 10**12]),
    (("experiments", EXP, "clients"), 10**9),
    (("methods", "bayesadmm", "pred_samples"), 10**10),
])
def test_a_size_beyond_its_bound_is_refused_naming_the_key(params, schema, path, value):
    node = params
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    refused(params, schema, ".".join(path), "at most")


# --- the gaps of the typed hyperparameters ----------------------------------------------------------

def test_a_run_without_its_required_lr_is_refused(params, schema):
    """`lr` has no default (REQUIRED): a run whose lr is set nowhere validated and failed in its job."""
    e = params["experiments"][EXP]
    del e["train"]["lr"]
    for m in e["methods"]:
        for block in (params["methods"].get(m) or {}, e["methods"][m] or {}):
            block.pop("lr", None)
            for grid in [block.get("sweep") or {}]:
                grid.pop("lr", None)
    refused(params, schema, f"experiments.{EXP}.methods.fedavg", "lr is required")


def test_unset_names_the_required_fields_a_run_reads():
    from fedbayes.study import METHOD_SPECS

    fedavg = METHOD_SPECS["fedavg"].params
    assert {"lr", "batch_size", "local_epochs"} <= set(fedavg.unset({}))
    assert fedavg.unset({"lr": 0.1, "batch_size": 8, "local_epochs": 1}) == []   # mc_every: the engine's
    assert fedavg.unset({"lr": 0.1, "batch_size": 8, "local_epochs": 1, "lr_schedule": "linear_local"}) == ["lr_final"]


@pytest.mark.parametrize("where", ["table", "headline", "selection", "experiment-selection"])
def test_an_unknown_metric_is_refused_against_the_registry(params, schema, where):
    if where == "table":
        params["tables"]["table1"]["metrics"].append("test/brierr")
        key = "tables.table1.metrics"
    elif where == "headline":
        params["headline"]["curves"].append("test/brierr")
        key = "headline.curves"
    elif where == "selection":
        params["selection"]["metric"] = "test/brierr"
        key = "selection.metric"
    else:
        params["experiments"][EXP]["selection"] = {"metric": "test/brierr"}
        key = f"experiments.{EXP}.selection.metric"
    refused(params, schema, key, "test/brierr", "test/brier")


def test_a_schedule_the_method_does_not_honour_is_refused(params, schema):
    """`lr_schedule: cosine_rounds` was accepted by every method and ran as a constant rate outside the
    methods that pass the round to their schedule (BayesADMM, FedIVON)."""
    params["methods"]["fedavg"] = {**(params["methods"]["fedavg"] or {}), "lr_schedule": "cosine_rounds"}
    refused(params, schema, "methods.fedavg", "lr_schedule cosine_rounds", "honours")


def test_the_schedules_the_papers_use_are_accepted(params, schema):
    from fedbayes.study import METHOD_SPECS

    assert "cosine_rounds" in METHOD_SPECS["bayesadmm"].schedules
    assert "cosine_rounds" in METHOD_SPECS["fedivon"].schedules
    assert METHOD_SPECS["scaffold"].schedules == ("constant",)
    validate(params, schema)


# --- the Snakefile: the same front door, before any job ---------------------------------------------

def _latin1(d):
    f = d / "params.yaml"
    f.write_bytes(f.read_bytes() + "notes: café\n".encode("latin-1"))


def _empty(d):
    (d / "params.yaml").write_text("")


def _integer_key(d):
    f = d / "params.yaml"
    p = yaml.safe_load(f.read_text())
    p["experiments"][7] = p["experiments"][EXP]
    f.write_text(yaml.safe_dump(p, sort_keys=False))


def _uninstalled_method(d):
    f = d / "params.yaml"
    p = yaml.safe_load(f.read_text())
    p["methods"]["fedswag"] = {"lr": 0.1}
    f.write_text(yaml.safe_dump(p, sort_keys=False))


@pytest.mark.parametrize("damage, words", [
    (_latin1, ["params.yaml", "not UTF-8"]), (_empty, ["params.yaml", "empty"]), (_integer_key, ["experiments.7"]),
    (_uninstalled_method, ["methods.fedswag", "not installed", "entry point"]),
], ids=["latin1", "empty", "integer-key", "uninstalled-method"])
def test_snakemake_refuses_the_same_problems_before_any_job(tmp_path, repo, damage, words):
    from dagutil import copy_repo, sh

    d = copy_repo(repo, tmp_path / "repo", scale="smoke")
    damage(d)
    before = set(d.rglob("*"))
    out = sh("snakemake --cores 1 -n reports/smoke/table1.csv", d, check=False, timeout=300)
    assert all(w in out for w in words) and "Traceback" not in out, out[-3000:]
    # the problem alone: not Snakemake's "ConfigError in file …/Snakefile, line …" and its frames
    assert "in file" not in out and 'File "' not in out, out[-3000:]
    assert not [f for f in set(d.rglob("*")) - before if ".snakemake" not in f.parts], "wrote files"


def test_snakemake_reads_a_typed_config_value_as_params_yaml_would(tmp_path, repo):
    """`--config "smoke={seeds: [0]}"`: Snakemake keeps a nested value a string ('0'); it is read as
    params.yaml's `seeds: [0]` is, so the plan validates and writes the integer seed."""
    import json

    from dagutil import copy_repo, sh

    d = copy_repo(repo, tmp_path / "repo", scale="smoke")
    out = sh("snakemake --cores 1 -n reports/smoke/table1.csv --config 'smoke={seeds: [0]}'", d, check=False, timeout=300)
    assert "is not of type" not in out and "This was a dry-run" in out, out[-3000:]
    assert json.loads((d / "work/smoke/params.effective.yaml").read_text())["smoke"]["seeds"] == [0]


def test_a_bad_config_value_is_named_as_typed_on_the_command_line(tmp_path, repo):
    """(Which problems are marked, an unknown key's among them: tests/test_overrides.py.)"""
    from dagutil import copy_repo, sh

    d = copy_repo(repo, tmp_path / "repo", scale="smoke")
    before = set(d.rglob("*"))
    out = sh("snakemake --cores 1 -n reports/smoke/table1.csv --config 'seeds=[0,x]' "
             "'experiments={fmnist10-iid-k10: {rounds: 0}}'; echo rc=$?", d, check=False, timeout=300)
    for words in ("params.yaml with the command line's --config", "rc=1",
                  "  - seeds.1: 'x' is not of type 'integer' (given with --config)",
                  "  - experiments.fmnist10-iid-k10.rounds: 0 is less than the minimum of 1 (given with --config)"):
        assert words in out, out[-3000:]
    assert "Traceback" not in out and not [f for f in set(d.rglob("*")) - before if ".snakemake" not in f.parts]
