"""params.yaml validation: the schema and the semantic checks refuse bad input before any work."""

import copy
import subprocess
import sys

import pytest
import yaml

from fedbayes.config import (ConfigError, config_hash, load_params, method_hparams, paths,
                             run_config, save_rounds, seeds, sweep_points, validate)


@pytest.fixture
def params(repo):
    return yaml.safe_load((repo / "params.yaml").read_text())


@pytest.fixture
def schema(repo):
    return yaml.safe_load((repo / "workflow/schemas/params.schema.yaml").read_text())


def test_repo_params_are_valid(params, schema):
    validate(params, schema)


def bad(params, schema, match):
    with pytest.raises(ConfigError, match=match):
        validate(params, schema)


def test_unknown_method(params, schema):
    params["experiments"]["fmnist10-iid-k10"]["methods"] = ["fedavg", "fedmagic"]
    bad(params, schema, r"unknown method 'fedmagic'.*implemented")


def test_unknown_dataset(params, schema):
    params["experiments"]["fmnist10-iid-k10"]["dataset"] = "imagenet"
    bad(params, schema, r"unknown dataset 'imagenet'")


@pytest.mark.parametrize("key", ["alpha1", "alpha2"])
@pytest.mark.parametrize("value", [0, -0.5])
def test_nonpositive_alpha(params, schema, key, value):
    params["experiments"]["fmnist10-dir-k10"]["partition"][key] = value
    bad(params, schema, rf"partition.{key}")


def test_more_clients_than_data(params, schema):
    params["experiments"]["fmnist10-iid-k10"]["clients"] = 7000  # 10% of 60,000 = 6,000 points
    bad(params, schema, r"7000 clients but only 6000 training points")


@pytest.mark.parametrize("seed_list, match", [
    (["a", 1], r"seeds\.0"), ([], r"seeds"), ([1, 1], r"seeds must be unique"), ([-1], r"seeds\.0"), (3, r"seeds"),
])
def test_malformed_seeds(params, schema, seed_list, match):
    params["seeds"] = seed_list
    bad(params, schema, match)


def test_report_round_past_the_end(params, schema):
    params["experiments"]["fmnist10-iid-k10"]["report_rounds"] = [10, 60]
    bad(params, schema, r"report_rounds \[10, 60\] exceed rounds 50")


def test_mc_window_off_needs_final_round_statistics(params, schema):
    """mc_window: false leaves the sampled predictive out of rounds R-2, R-1: a selection or a table
    statistic averaging them is refused before any run, naming what to change."""
    from fedbayes.config import selection

    assert selection(params, "fmnist-shards-k200")["statistic"] == "final"  # the experiment's own
    assert selection(params, "fmnist10-iid-k10")["statistic"] == params["selection"]["statistic"]
    p = copy.deepcopy(params)
    del p["experiments"]["fmnist-shards-k200"]["selection"]
    bad(p, schema, r"fmnist-shards-k200: methods.fedivon has mc_window: false.*selection.statistic: final")
    p = copy.deepcopy(params)
    p["methods"]["fedivon"]["overrides"]["fmnist10-iid-k10"]["mc_window"] = False
    bad(p, schema, r"tables.table1: statistic mean_last3 needs rounds R-2..R of \['fedivon'\] on fmnist10-iid-k10")


def test_unknown_key_is_refused(params, schema):
    params["experiments"]["fmnist10-iid-k10"]["roundz"] = 3
    bad(params, schema, r"roundz")


def test_scale_smoke_overrides(params):
    params["scale"] = "smoke"
    assert seeds(params) == params["smoke"]["seeds"]
    cfg = run_config(params, "fmnist10-iid-k10", "fedavg", 0, "local_epochs=5")
    assert cfg["rounds"] == params["smoke"]["experiment"]["rounds"]
    assert cfg["hparams"]["local_epochs"] == 5 != params["smoke"]["train"]["local_epochs"]  # the sweep point wins
    assert len(sweep_points(params, "fmnist10-iid-k10", "fedavg")) == params["smoke"]["sweep_limit"]
    assert paths(params)["runs"].endswith("/smoke")


def test_sweep_points_and_overrides(params):
    assert list(sweep_points(params, "fmnist10-iid-k10", "fedavg")) == ["local_epochs=5", "local_epochs=10"]
    p = copy.deepcopy(params)
    p["methods"]["fedavg"] = {"sweep": {"local_epochs": [1, 2], "lr": [0.1, 0.01]},
                              "overrides": {"fmnist10-dir-k10": {"sweep": {"lr": [0.5]}}}}
    assert list(sweep_points(p, "fmnist10-iid-k10", "fedavg")) == [
        "local_epochs=1+lr=0.1", "local_epochs=1+lr=0.01", "local_epochs=2+lr=0.1", "local_epochs=2+lr=0.01"]
    assert method_hparams(p, "fmnist10-iid-k10", "fedavg", "local_epochs=2+lr=0.1")["lr"] == 0.1
    assert list(sweep_points(p, "fmnist10-dir-k10", "fedavg")) == ["lr=0.5"]
    p["methods"]["fedavg"] = None
    assert list(sweep_points(p, "fmnist10-dir-k10", "fedavg")) == ["default"]
    with pytest.raises(ConfigError, match="no sweep point 'lr=9'"):
        method_hparams(p, "fmnist10-dir-k10", "fedavg", "lr=9")


def test_unknown_sweep_key_is_refused(params, schema):
    params["methods"]["fedavg"]["sweep"] = {"epochs": [1]}
    bad(params, schema, r"methods.fedavg.sweep")


def test_method_hparams_precedence(params):
    p = copy.deepcopy(params)
    p["experiments"]["fmnist10-iid-k10"]["train"]["lr"] = 0.01
    p["methods"]["fedavg"] = {"local_epochs": 7, "overrides": {"fmnist10-dir-k10": {"local_epochs": 2}}}
    assert method_hparams(p, "fmnist10-iid-k10", "fedavg")["local_epochs"] == 7
    assert method_hparams(p, "fmnist10-iid-k10", "fedavg")["lr"] == 0.01
    assert method_hparams(p, "fmnist10-dir-k10", "fedavg")["local_epochs"] == 2


def test_run_config_hash_tracks_what_matters(params):
    pt = "local_epochs=5"
    a = run_config(params, "fmnist10-iid-k10", "fedavg", 0, pt)
    p = copy.deepcopy(params)
    p["methods"]["fedavg"]["lr"] = 0.01
    assert config_hash(a) != config_hash(run_config(p, "fmnist10-iid-k10", "fedavg", 0, pt))
    p = copy.deepcopy(params)
    p["tables"]["table1"]["tolerance"]["test/acc"] = 3.0  # table settings never retrain
    p["methods"]["fedavg"]["sweep"]["local_epochs"].append(20)  # nor does adding another grid point
    assert config_hash(a) == config_hash(run_config(p, "fmnist10-iid-k10", "fedavg", 0, pt))


def test_save_rounds_cover_report_windows():
    assert save_rounds({"rounds": 50, "report_rounds": [10, 25, 50]}) == [8, 9, 10, 23, 24, 25, 48, 49, 50]
    assert save_rounds({"rounds": 3, "report_rounds": [1]}) == [1, 3]


def test_cli_refuses_bad_params_with_clear_error(tmp_path, repo, params):
    params["experiments"]["fmnist10-dir-k10"]["partition"]["alpha2"] = -1
    bad_file = tmp_path / "params.yaml"
    bad_file.write_text(yaml.safe_dump(params))
    (tmp_path / "workflow/schemas").mkdir(parents=True)
    (tmp_path / "workflow/schemas/params.schema.yaml").write_text((repo / "workflow/schemas/params.schema.yaml").read_text())
    r = subprocess.run([sys.executable, "-m", "fedbayes.cli", "validate", "--params", str(bad_file)],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert "alpha2" in r.stderr and "Traceback" not in r.stderr


def test_load_params_applies_scale(repo):
    assert load_params(repo / "params.yaml", scale="smoke")["scale"] == "smoke"


def test_unknown_published_reference(params, schema):
    params["tables"]["table1"]["published"] = ["bayesadmm:table9"]
    bad(params, schema, r"paper 'bayesadmm' has no table 'table9'")


def test_not_comparable_experiments_must_carry_published_numbers(params, schema):
    t = params["tables"]["fedep/table3"]
    t["not_comparable"]["fmnist10-iid-k10"] = "a defined experiment"
    t["experiments"].append("fmnist10-iid-k10")
    bad(params, schema, r"'fmnist10-iid-k10' is a defined experiment; remove it from not_comparable")
    t["experiments"].remove("fmnist10-iid-k10")
    bad(params, schema, r"not_comparable: 'fmnist10-iid-k10' is not in tables.fedep/table3.experiments")
    del t["not_comparable"]["fmnist10-iid-k10"]
    t["published"] = ["fedep:table2"]
    bad(params, schema, r"not_comparable: 'stackoverflow-tff' has no row in \['fedep:table2'\]")
    del t["not_comparable"]
    bad(params, schema, r"tables.fedep/table3: unknown experiment 'stackoverflow-tff'")


def test_selection_from_reuses_the_source_grid_and_runs_none(params, schema):
    from fedbayes.config import selection, swept_points

    validate(params, schema)
    exp = "fmnist-dir-k100"
    assert params["experiments"][exp]["selection_from"] == "fmnist10-dir-k10"
    assert swept_points(params, exp, "fedlap") == {}
    assert sweep_points(params, exp, "fedlap") == sweep_points(params, "fmnist10-dir-k10", "fedlap")
    assert selection(params, exp) == {"from": "fmnist10-dir-k10", "seed": 0}
    point = next(iter(sweep_points(params, "fmnist10-dir-k10", "fedlap")))
    assert method_hparams(params, exp, "fedlap", point)["delta"] == sweep_points(params, exp, "fedlap")[point]["delta"]
    params["experiments"][exp]["selection_from"] = "nope"
    bad(params, schema, r"selection_from 'nope' must name an experiment")


def test_selection_from_needs_the_methods_in_the_source(params, schema):
    params["experiments"]["fmnist-dir-k100"]["methods"] = ["fedavg", "fedadmm"]
    bad(params, schema, r"selection_from 'fmnist10-dir-k10' lacks methods \['fedadmm'\]")


def test_experiment_seeds_are_a_prefix_of_the_seeds(params, schema):
    assert seeds(params, "fmnist-dir-k100") == [0] and seeds(params, "fmnist10-dir-k10") == [0, 1, 2]
    assert seeds({**params, "scale": "smoke"}, "fmnist-dir-k100") == params["smoke"]["seeds"]
    params["experiments"]["fmnist-dir-k100"]["seeds"] = [2]
    bad(params, schema, r"seeds \[2\] must be the first seeds")


def test_smoke_experiment_and_hparam_overrides(params):
    from fedbayes.config import experiment_config

    smoke = {**params, "scale": "smoke"}
    assert experiment_config(smoke, "fmnist-dir-k100")["clients"] == 10
    assert experiment_config(smoke, "fmnist10-dir-k10")["clients"] == 10
    assert experiment_config(params, "fmnist-dir-k100")["clients"] == 100
    point = next(iter(sweep_points(smoke, "fmnist10-dir-k10", "fedlap_func")))
    assert method_hparams(smoke, "fmnist10-dir-k10", "fedlap_func", point)["server_iters"] == 100
    assert method_hparams(params, "fmnist10-dir-k10", "fedlap_func", point)["server_iters"] == 5000


def test_method_seeds_in_an_experiment(params, schema):
    from fedbayes.config import run_config

    params["methods"]["fedlap_func"]["overrides"]["fmnist10-dir-k10"]["seeds"] = [0, 1]
    validate(params, schema)
    assert seeds(params, "fmnist10-dir-k10", "fedlap_func") == [0, 1]
    assert seeds(params, "fmnist10-dir-k10", "fedlap") == params["seeds"]
    point = next(iter(sweep_points(params, "fmnist10-dir-k10", "fedlap_func")))
    assert "seeds" not in run_config(params, "fmnist10-dir-k10", "fedlap_func", 0, point)["hparams"]
    params["methods"]["fedlap_func"]["overrides"]["fmnist10-dir-k10"]["seeds"] = [1]
    bad(params, schema, r"seeds \[1\] must be the first seeds")


def test_effective_json_config_keeps_small_floats(repo, params, tmp_path):
    """The DAG passes the CLI its configuration as JSON; PyYAML would read JSON's 5e-05 as a string."""
    import json

    (tmp_path / "workflow/schemas").mkdir(parents=True)
    (tmp_path / "workflow/schemas/params.schema.yaml").write_text(
        (repo / "workflow/schemas/params.schema.yaml").read_text())
    params["methods"]["bayesadmm"]["lr"] = 5e-05
    (tmp_path / "params.effective.yaml").write_text(json.dumps(params, indent=1))
    assert load_params(tmp_path / "params.effective.yaml")["methods"]["bayesadmm"]["lr"] == 5e-05


def test_table_variants_must_exist(params, schema):
    params["tables"]["table1"]["methods"] = ["fedavg", "bayesadmm@mean"]
    validate(params, schema)
    params["tables"]["table1"]["methods"] = ["fedavg@mean"]
    bad(params, schema, r"fedavg has no prediction variant 'mean'")
    params["tables"]["table1"]["methods"] = ["bayesadmm@median"]
    bad(params, schema, r"bayesadmm has no prediction variant 'median'")


# ---------------------------------------------------------------------------------------------- bad input
# Each bad value is refused with a message naming its key, by the same check Snakemake runs when it
# parses the workflow — before any job — so nothing is written. ``snakemake`` itself is run on a few of
# them below; the fuzz test drives the validator with many malformed configurations.

def test_nonpositive_rounds(params, schema):
    params["experiments"]["fmnist10-iid-k10"]["rounds"] = 0
    bad(params, schema, r"experiments\.fmnist10-iid-k10\.rounds")


def test_negative_learning_rate(params, schema):
    params["methods"]["fedprox"]["overrides"]["fmnist10-iid-k10"]["lr"] = -0.01
    bad(params, schema, r"methods\.fedprox\.overrides\.fmnist10-iid-k10\.lr")


def test_table_naming_a_run_that_cannot_exist(params, schema):
    params["tables"]["table1"]["experiments"] = ["fmnist10-iid-k10", "fmnist10-dir-k1000"]
    bad(params, schema, r"tables\.table1: unknown experiment 'fmnist10-dir-k1000'")


def test_table_asking_ood_metrics_of_an_experiment_without_ood_set(params, schema):
    del params["experiments"]["fmnist10-iid-k10"]["ood"]
    bad(params, schema, r"tables\.table1: metric ood/auroc_entropy needs an OOD set, experiments\.fmnist10-iid-k10 has none")


def edit_seeds(p):
    p["seeds"] = [0, 1.5]


def edit_alpha(p):
    p["experiments"]["fmnist10-dir-k10"]["partition"]["alpha2"] = 0


def edit_method(p):
    p["experiments"]["fmnist10-dir-k10"]["methods"].append("fedmagic")


def edit_dataset(p):
    p["experiments"]["fmnist10-dir-k10"]["dataset"] = "imagenet"


def edit_clients(p):
    p["experiments"]["fmnist10-dir-k10"]["clients"] = 6001


def edit_rounds(p):
    p["experiments"]["fmnist10-dir-k10"]["rounds"] = -3


def edit_lr(p):
    p["experiments"]["fmnist10-dir-k10"]["train"]["lr"] = -1e-3


def edit_table(p):
    p["tables"]["table1"]["methods"].append("fedavg@mean")


@pytest.mark.parametrize("edit, key", [
    (edit_seeds, "seeds.1"), (edit_alpha, "partition.alpha2"), (edit_method, "fedmagic"),
    (edit_dataset, "imagenet"), (edit_clients, "6001 clients"), (edit_rounds, "fmnist10-dir-k10.rounds"),
    (edit_lr, "train.lr"), (edit_table, "tables.table1: fedavg has no prediction variant 'mean'"),
])
def test_snakemake_refuses_bad_params_before_any_job(tmp_path, repo, edit, key):
    from dagutil import copy_repo, sh

    d = copy_repo(repo, tmp_path / "repo", edit, scale="paper")
    before = {f for f in d.rglob("*")}
    out = sh("snakemake --cores 1 reports/table1.csv", d, check=False, timeout=300)
    assert "params.yaml" in out and key in out, out[-3000:]
    assert "Traceback" not in out.split("params.yaml")[0]  # the message comes first, not a stack trace
    created = {f.relative_to(d) for f in d.rglob("*") if f not in before}
    assert not [f for f in created if f.parts[0] in ("data", "results", "reports", "mlflow.db", "mlartifacts")], created
    assert not (d / "work/mlflow").exists() and not (d / "work/logs").exists()


@pytest.fixture(scope="module")
def pristine(repo):
    return (yaml.safe_load((repo / "params.yaml").read_text()),
            yaml.safe_load((repo / "workflow/schemas/params.schema.yaml").read_text()))


def _leaf_paths(p: dict) -> dict:
    """Mutation sites: (path, kind) for the keys a user edits most."""
    sites = [(("seeds", 0), "int"), (("scale",), "enum"), (("device",), "enum"), (("smoke", "sweep_limit"), "int")]
    for e in p["experiments"]:
        x = ("experiments", e)
        sites += [(x + ("rounds",), "int"), (x + ("clients",), "int"), (x + ("subsample",), "fraction"),
                  (x + ("participation",), "fraction"), (x + ("report_rounds", 0), "int"),
                  (x + ("dataset",), "name"), (x + ("methods", 0), "name"), (x + ("partition", "scheme"), "enum"),
                  (x + ("model", "name"), "name"), (x + ("input_scale",), "enum"), (x + ("train", "lr"), "pos"),
                  (x + ("train", "batch_size"), "int"), (x + ("train", "local_epochs"), "int"),
                  (x + ("train", "optimizer"), "enum")]
        if "alpha2" in p["experiments"][e]["partition"]:
            sites.append((x + ("partition", "alpha2"), "pos"))
    for t in p["tables"]:
        sites += [(("tables", t, "experiments", 0), "name"), (("tables", t, "methods", 0), "name"),
                  (("tables", t, "statistic"), "enum")]
    return dict(sites)


def _malformed(kind):
    from hypothesis import strategies as st

    junk = st.one_of(st.none(), st.booleans(), st.lists(st.integers(), max_size=2),
                     st.dictionaries(st.text(max_size=3), st.integers(), max_size=1))
    word = st.text("abcdefghijklmnopqrstuvwxyz_-0123456789", min_size=1, max_size=12).map(lambda s: "zz" + s)
    return {
        "int": st.one_of(junk, word, st.integers(max_value=0), st.floats(0.01, 1e3).filter(lambda v: v != int(v))),
        "pos": st.one_of(junk, word, st.floats(max_value=0, allow_nan=False), st.integers(max_value=0)),
        "fraction": st.one_of(junk, word, st.floats(max_value=0, allow_nan=False), st.floats(min_value=1.0001)),
        "enum": st.one_of(junk, word),
        "name": st.one_of(junk, word),
    }[kind]


def test_fuzz_malformed_params_get_a_clear_error_naming_the_key(pristine):
    """Many malformed configurations, one bad value each: every one is refused with a ConfigError whose
    message names the key (or, for a name that does not exist, the name), and nothing else escapes."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    base, schema = pristine
    sites = _leaf_paths(base)

    @st.composite
    def mutation(draw):
        path, kind = draw(st.sampled_from(sorted(sites.items(), key=str)))
        return path, kind, draw(_malformed(kind))

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
    @given(mutation())
    def check(m):
        path, kind, value = m
        p = copy.deepcopy(base)
        node = p
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value
        with pytest.raises(ConfigError) as err:
            validate(p, schema)
        msg = str(err.value)
        dotted = ".".join(map(str, path))
        named = dotted in msg or (isinstance(value, str) and repr(value) in msg) or \
            ".".join(map(str, path[:-1])) in msg  # a list item: jsonschema names the item, we the list
        assert named, f"{dotted} = {value!r}: the error does not name it:\n{msg}"

    check()


def test_catalog_matches_the_implementations():
    """Validation reads fedbayes.catalog (no torch import); it must name what the code implements."""
    from fedbayes.catalog import METHOD_VARIANTS, MODEL_NAMES
    from fedbayes.methods import METHODS
    from fedbayes.models import MODELS

    assert {m: cls.variants for m, cls in METHODS.items()} == METHOD_VARIANTS
    assert set(MODELS) == set(MODEL_NAMES)


def test_validation_does_not_import_torch(repo):
    """Every job that only reads params (select, track, tables) would pay torch's import for nothing."""
    import subprocess
    import sys

    code = ("import sys; from fedbayes.config import load_params; load_params('params.yaml'); "
            "import fedbayes.reports.tables; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_config_changes_names_the_changed_keys():
    from fedbayes.config import config_changes

    rec = {"seed": 0, "hparams": {"lr": 0.001, "weight_decay": "1e-05", "rho": 0.1}, "partition_hash": "abc"}
    assert config_changes(rec, {"seed": 0, "hparams": {"lr": 0.001, "weight_decay": 1e-05, "rho": 0.1}}) == []
    assert config_changes(rec, {"seed": 0, "hparams": {"lr": 0.002, "weight_decay": 1e-05, "rho": 0.1,
                                                       "client_stream": "replay"}}) == ["hparams.client_stream", "hparams.lr"]
    assert config_changes(rec, {"seed": 1, "hparams": {"weight_decay": "x", "rho": 0.1, "lr": 0.001}}) == [
        "hparams.weight_decay", "seed"]
    assert config_changes({"model": {"hidden": [200, 100]}}, {"model": {"hidden": (200, 100)}}) == []
