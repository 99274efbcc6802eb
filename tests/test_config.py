"""params.yaml validation: the schema and the semantic checks refuse bad input before any work."""

import copy
import re
import subprocess
import sys

import pytest
import yaml

from fedbayes.study import (ConfigError, config_hash, load_params, method_hparams, paths,
                             run_config, save_rounds, seeds, sweep_points, validate)
from dagutil import read_params


@pytest.fixture
def params(repo):
    return read_params(repo)


@pytest.fixture
def schema(repo):
    return yaml.safe_load((repo / "workflow/schemas/params.schema.yaml").read_text())


def test_repo_params_are_valid(params, schema):
    validate(params, schema)


def bad(params, schema, match):
    with pytest.raises(ConfigError, match=match):
        validate(params, schema)


def test_unknown_method(params, schema):
    params["experiments"]["fmnist10-iid-k10"]["methods"] = {"fedavg": None, "fedmagic": None}
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
    from fedbayes.study import selection

    assert selection(params, "fmnist-shards-k200")["statistic"] == "final"  # the experiment's own
    assert selection(params, "fmnist10-iid-k10")["statistic"] == params["selection"]["statistic"]
    p = copy.deepcopy(params)
    del p["experiments"]["fmnist-shards-k200"]["selection"]
    bad(p, schema, r"fmnist-shards-k200: methods.fedivon has mc_window: false.*selection.statistic: final")
    p = copy.deepcopy(params)
    p["experiments"]["fmnist10-iid-k10"]["methods"]["fedivon"]["mc_window"] = False
    bad(p, schema, r"tables.table1: statistic mean_last3 needs rounds R-2..R of \['fedivon'\] on fmnist10-iid-k10")


def test_unknown_key_is_refused(params, schema):
    params["experiments"]["fmnist10-iid-k10"]["roundz"] = 3
    bad(params, schema, r"roundz")


@pytest.mark.parametrize("path", [("fig3b", "roundz"), ("fig4", "von", "stepz"), ("fig3a", "shared", "lrr"),
                                  ("fig3a", "methods", "BayesADMM", "rhoo")])
def test_misspelt_bayesadmm_toy_key_is_refused_by_name(params, schema, path):
    """The BayesADMM toys' settings (passed to their functions as keyword arguments) are checked key by key."""
    node = params["toys"]["bayesadmm/figures"]
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = 1
    where = ".".join(("toys", "bayesadmm/figures") + path[:-1])
    bad(params, schema, rf"- {re.escape(where)}: .*'{path[-1]}' was unexpected")


def test_scale_smoke_overrides(params):
    params["scale"] = "smoke"
    assert seeds(params) == params["smoke"]["seeds"]
    cfg = run_config(params, "fmnist10-iid-k10", "fedavg", 0, "local_epochs=2")   # smoke.sweep's values
    assert cfg["rounds"] == params["smoke"]["experiment"]["rounds"]
    assert cfg["hparams"]["local_epochs"] == 2 != params["smoke"]["train"]["local_epochs"]  # the sweep point wins
    assert len(sweep_points(params, "fmnist10-iid-k10", "fedavg")) == params["smoke"]["sweep_limit"]
    assert paths(params)["runs"].endswith("/smoke")
    # smoke tables, sweeps and figures never share a path with the committed paper-scale ones
    assert paths(params)["reports"] == f"{params['paths']['reports']}/smoke"
    assert paths({**params, "scale": "paper"})["reports"] == params["paths"]["reports"]


def test_sweep_points_and_overrides(params):
    assert list(sweep_points(params, "fmnist10-iid-k10", "fedavg")) == ["local_epochs=5", "local_epochs=10"]
    assert list(sweep_points(params, "mnist-iid-k10", "fedavg"))[:3] == [
        "local_epochs=1+lr=0.001", "local_epochs=1+lr=0.01", "local_epochs=5+lr=0.001"]
    p = copy.deepcopy(params)
    p["methods"]["fedavg"] = {"sweep": {"local_epochs": [1, 2], "lr": [0.1, 0.01]}}
    p["experiments"]["fmnist10-iid-k10"]["methods"]["fedavg"] = None
    p["experiments"]["fmnist10-dir-k10"]["methods"]["fedavg"] = {"sweep": {"lr": [0.5]}}
    assert list(sweep_points(p, "fmnist10-iid-k10", "fedavg")) == [
        "local_epochs=1+lr=0.1", "local_epochs=1+lr=0.01", "local_epochs=2+lr=0.1", "local_epochs=2+lr=0.01"]
    assert method_hparams(p, "fmnist10-iid-k10", "fedavg", "local_epochs=2+lr=0.1")["lr"] == 0.1
    assert list(sweep_points(p, "fmnist10-dir-k10", "fedavg")) == ["lr=0.5"]
    p["methods"]["fedavg"] = p["experiments"]["fmnist10-dir-k10"]["methods"]["fedavg"] = None
    assert list(sweep_points(p, "fmnist10-dir-k10", "fedavg")) == ["default"]
    with pytest.raises(ConfigError, match="no sweep point 'lr=9'"):
        method_hparams(p, "fmnist10-dir-k10", "fedavg", "lr=9")


def test_unknown_sweep_key_is_refused(params, schema):
    params["methods"]["fedavg"]["sweep"] = {"epochs": [1]}
    bad(params, schema, r"methods.fedavg.sweep")


def test_method_hparams_precedence(params):
    p = copy.deepcopy(params)
    p["experiments"]["fmnist10-iid-k10"]["train"]["lr"] = 0.01
    p["methods"]["fedavg"] = {"local_epochs": 7}
    p["experiments"]["fmnist10-iid-k10"]["methods"]["fedavg"] = None
    p["experiments"]["fmnist10-dir-k10"]["methods"]["fedavg"] = {"local_epochs": 2}
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
    p["tables"]["fedlap/table1"]["tolerance"]["test/acc"] = 3.0  # table settings never retrain
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
    from fedbayes.study import selection, swept_points

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
    params["experiments"]["fmnist-dir-k100"]["methods"] = {"fedavg": None, "fedadmm": None}
    bad(params, schema, r"selection_from 'fmnist10-dir-k10' lacks methods \['fedadmm'\]")


def test_experiment_seeds_are_a_prefix_of_the_seeds(params, schema):
    assert seeds(params, "fmnist-dir-k100") == [0] and seeds(params, "fmnist10-dir-k10") == [0, 1, 2]
    assert seeds({**params, "scale": "smoke"}, "fmnist-dir-k100") == params["smoke"]["seeds"]
    params["experiments"]["fmnist-dir-k100"]["seeds"] = [2]
    bad(params, schema, r"seeds \[2\] must be the first seeds")


def test_smoke_experiment_and_hparam_overrides(params):
    from fedbayes.study import experiment_config

    smoke = {**params, "scale": "smoke"}
    assert experiment_config(smoke, "fmnist-dir-k100")["clients"] == 10
    assert experiment_config(smoke, "fmnist10-dir-k10")["clients"] == 10
    assert experiment_config(params, "fmnist-dir-k100")["clients"] == 100
    point = next(iter(sweep_points(smoke, "fmnist10-dir-k10", "fedlap_func")))
    assert method_hparams(smoke, "fmnist10-dir-k10", "fedlap_func", point)["server_iters"] == 100
    paper_point = next(iter(sweep_points(params, "fmnist10-dir-k10", "fedlap_func")))   # smoke.sweep's epochs
    assert method_hparams(params, "fmnist10-dir-k10", "fedlap_func", paper_point)["server_iters"] == 5000


def test_method_seeds_in_an_experiment(params, schema):
    from fedbayes.study import run_config

    params["experiments"]["fmnist10-dir-k10"]["methods"]["fedlap_func"]["seeds"] = [0, 1]
    validate(params, schema)
    assert seeds(params, "fmnist10-dir-k10", "fedlap_func") == [0, 1]
    assert seeds(params, "fmnist10-dir-k10", "fedlap") == params["seeds"]
    point = next(iter(sweep_points(params, "fmnist10-dir-k10", "fedlap_func")))
    assert "seeds" not in run_config(params, "fmnist10-dir-k10", "fedlap_func", 0, point)["hparams"]
    params["experiments"]["fmnist10-dir-k10"]["methods"]["fedlap_func"]["seeds"] = [1]
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
    params["experiments"]["fmnist10-iid-k10"]["methods"]["fedprox"]["lr"] = -0.01
    bad(params, schema, r"experiments\.fmnist10-iid-k10\.methods\.fedprox\.lr")


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
    p["experiments"]["fmnist10-dir-k10"]["methods"]["fedmagic"] = None


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


@pytest.mark.full
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
    return (read_params(repo),
            yaml.safe_load((repo / "workflow/schemas/params.schema.yaml").read_text()))


def _leaf_paths(p: dict) -> dict:
    """Mutation sites: (path, kind) for the keys a user edits most."""
    sites = [(("seeds", 0), "int"), (("scale",), "enum"), (("device",), "enum"), (("smoke", "sweep_limit"), "int")]
    for e in p["experiments"]:
        x = ("experiments", e)
        sites += [(x + ("rounds",), "int"), (x + ("clients",), "int"), (x + ("subsample",), "fraction"),
                  (x + ("participation",), "fraction"), (x + ("report_rounds", 0), "int"),
                  (x + ("dataset",), "name"), (x + ("partition", "scheme"), "enum"),
                  (x + ("methods", next(iter(p["experiments"][e]["methods"]))), "mapping"),
                  (x + ("model", "name"), "name"), (x + ("input_scale",), "enum"), (x + ("train", "lr"), "pos"),
                  (x + ("train", "batch_size"), "int"), (x + ("train", "local_epochs"), "int"),
                  (x + ("train", "optimizer"), "enum")]
        if "alpha2" in p["experiments"][e]["partition"]:
            sites.append((x + ("partition", "alpha2"), "pos"))
    for t in p["tables"]:
        sites += [(("tables", t, "experiments", 0), "name"), (("tables", t, "methods", 0), "name"),
                  (("tables", t, "statistic"), "enum")]
    # sweep-grid values: every item of a grid, fixed or per experiment, gets its hyperparameter's rule
    for m, spec in p["methods"].items():
        grids = [(("methods", m, "sweep"), (spec or {}).get("sweep"))]
        grids += [(("experiments", e, "methods", m, "sweep"), (x["methods"][m] or {}).get("sweep"))
                  for e, x in p["experiments"].items() if m in x["methods"]]
        for where, grid in grids:
            for k, values in (grid or {}).items():
                if k in GRID_KINDS:
                    sites += [(where + (k, i), GRID_KINDS[k]) for i in range(len(values))]
    return dict(sites)


GRID_KINDS = {"local_epochs": "int", "batch_size": "int", "server_iters": "int", "lr": "pos", "delta": "pos",
              "server_lr": "pos", "h0": "pos", "gamma": "pos", "dual_damping": "pos", "alpha": "nonneg",
              "weight_decay": "nonneg", "tau": "nonneg", "lambda_prior": "nonneg", "optimizer": "enum"}


def _malformed(kind):
    from hypothesis import strategies as st

    junk = st.one_of(st.none(), st.booleans(), st.lists(st.integers(), max_size=2),
                     st.dictionaries(st.text(max_size=3), st.integers(), max_size=1))
    word = st.text("abcdefghijklmnopqrstuvwxyz_-0123456789", min_size=1, max_size=12).map(lambda s: "zz" + s)
    nonfinite = st.sampled_from([float("nan"), float("inf"), float("-inf")])
    return {
        "int": st.one_of(junk, word, st.integers(max_value=0), st.floats(0.01, 1e3).filter(lambda v: v != int(v)),
                         st.integers(1, 1000).map(float), nonfinite),  # 4.0 is not an integer
        "pos": st.one_of(junk, word, st.floats(max_value=0, allow_nan=False), st.integers(max_value=0), nonfinite),
        "nonneg": st.one_of(junk, word, st.floats(max_value=-1e-9, allow_nan=False), st.integers(max_value=-1),
                            nonfinite),
        "fraction": st.one_of(junk, word, st.floats(max_value=0, allow_nan=False), st.floats(min_value=1.0001),
                              nonfinite),
        "enum": st.one_of(junk, word),
        "name": st.one_of(junk, word),
        "mapping": st.one_of(st.booleans(), st.lists(st.integers(), max_size=2), word, st.integers()),
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

    assert any(path[2] == "sweep" or path[4:5] == ("sweep",) for path in sites if path[0] == "methods")
    assert {"pos", "int", "nonneg"} <= {kind for path, kind in sites.items() if path[0] == "methods"}

    @settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
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


def _yaml_sites(text: str) -> tuple[list, list]:
    """From params.yaml as written: (line index, key) of block-mapping lines ``key: scalar`` that can be
    repeated, and (start, end, dotted path) of numeric scalars (the first path that reaches them)."""
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    lines, numbers, seen = [], [], set()

    def walk(node, path):
        if id(node) in seen:
            return
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if k.tag == "tag:yaml.org,2002:merge":
                    continue
                if (not node.flow_style and isinstance(v, yaml.ScalarNode) and v.style is None
                        and k.start_mark.line == v.end_mark.line
                        and text.splitlines()[k.start_mark.line].lstrip().startswith(k.value)):  # not `- key: v`
                    lines.append((k.start_mark.line, k.value))
                walk(v, path + (k.value,))
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                walk(v, path + (i,))
        elif node.tag in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float"):
            numbers.append((node.start_mark.index, node.end_mark.index, ".".join(map(str, path))))

    walk(root, ())
    return lines, numbers


def test_fuzz_malformed_yaml_gets_a_clear_error_naming_the_key_or_line(tmp_path, repo):
    """params.yaml as written, one fault each: a repeated key (PyYAML would keep the last silently), a
    non-finite number (``.nan``, ``.inf``) anywhere, an alias bomb anywhere; each is refused at load by a
    ConfigError naming the key and line, the dotted key, or the expansion."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    text = (repo / "params.yaml").read_text()
    f = write_params(tmp_path, repo, text)
    lines, numbers = _yaml_sites(text)
    top = [i for i, ln in enumerate(text.splitlines(keepends=True)) if ln[:1].isalpha()]

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
    @given(st.data())
    def check(data):
        kind = data.draw(st.sampled_from(["duplicate", "nonfinite", "bomb"]))
        src = text.splitlines(keepends=True)
        if kind == "duplicate":
            at, key = data.draw(st.sampled_from(lines))
            src.insert(at + 1, src[at])
            want = rf"duplicate key {re_key(repr(key))} at line {at + 2}"
        elif kind == "nonfinite":
            start, end, dotted = data.draw(st.sampled_from(numbers))
            bad_value = data.draw(st.sampled_from([".nan", ".inf", "-.inf", ".NaN"]))
            src = [text[:start] + bad_value + text[end:]]
            want = re_key(dotted) + r": .* not a finite number"
        else:
            at = data.draw(st.sampled_from(top))
            depth = data.draw(st.integers(5, 9))
            bomb = "zzbomb:\n" + "  l0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
                f"  l{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, depth))
            src.insert(at, bomb)
            want = r"aliases expand to more than \d+ nodes"
        f.write_text("".join(src))
        # bounded by construction, not by the clock (the machine's load is not the loader's): a bomb is
        # refused once its aliases pass the node limit the message names, before anything is expanded
        where = "" if kind == "nonfinite" else rf"{re_key(str(f))}[\s\S]*"  # load errors name the file
        with pytest.raises(ConfigError, match=where + want):
            load_params(f)

    check()


def test_catalog_models_match_the_implementations():
    """Validation reads fedbayes.study.names (no torch import); it must name the models the code implements.
    (Methods: the catalogue is derived from their specs, tests/test_method_specs.py.)"""
    from fedbayes.study import MODEL_NAMES
    from fedbayes.models import MODELS

    assert set(MODELS) == set(MODEL_NAMES)


def test_validation_does_not_import_torch(repo):
    """Every job that only reads params (select, track, tables) would pay torch's import for nothing."""
    import subprocess
    import sys

    code = ("import sys; from fedbayes.study import load_params; load_params('params.yaml'); "
            "import fedbayes.reports.tables; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_config_changes_names_the_changed_keys():
    from fedbayes.study import config_changes

    rec = {"seed": 0, "hparams": {"lr": 0.001, "weight_decay": "1e-05", "rho": 0.1}, "partition_hash": "abc"}
    assert config_changes(rec, {"seed": 0, "hparams": {"lr": 0.001, "weight_decay": 1e-05, "rho": 0.1}}) == []
    assert config_changes(rec, {"seed": 0, "hparams": {"lr": 0.002, "weight_decay": 1e-05, "rho": 0.1,
                                                       "client_stream": "replay"}}) == ["hparams.client_stream", "hparams.lr"]
    assert config_changes(rec, {"seed": 1, "hparams": {"weight_decay": "x", "rho": 0.1, "lr": 0.001}}) == [
        "hparams.weight_decay", "seed"]
    assert config_changes({"model": {"hidden": [200, 100]}}, {"model": {"hidden": (200, 100)}}) == []


def test_default_valued_hparams_are_left_out_of_the_run_configuration(params):
    """Declaring a default (``client_optimizer: fresh``) changes no run's configuration, so it reruns
    nothing; a non-default value is kept."""
    from fedbayes.study import HPARAM_DEFAULTS

    assert HPARAM_DEFAULTS["client_optimizer"] == "fresh"
    p = copy.deepcopy(params)
    before = run_config(p, "fmnist-shards-k200", "fedavg", 0, "local_epochs=2")
    assert "client_optimizer" not in before["hparams"]  # the FedIVON protocol: fresh, declared in its override
    p["experiments"]["fmnist-shards-k200"]["methods"]["fedavg"].pop("client_optimizer")
    p["methods"]["fedavg"].pop("client_optimizer")
    assert run_config(p, "fmnist-shards-k200", "fedavg", 0, "local_epochs=2") == before
    assert run_config(params, "fmnist10-dir-k10", "fedavg", 0, "local_epochs=5")["hparams"]["client_optimizer"] == "persistent"


# ------------------------------------------------------------------ every value that reaches a run is checked
# A value reaches a run fixed, per experiment, through the smoke overlay or as a sweep-grid point: each is
# held to the same rule, and refused before any job with its dotted key.

@pytest.mark.parametrize("where, grid, key", [
    (("methods", "fedavg"), {"lr": [0.1, -0.1]}, r"methods\.fedavg\.sweep\.lr\.1"),
    (("methods", "fedavg"), {"optimizer": ["adamw"]}, r"methods\.fedavg\.sweep\.optimizer\.0"),
    (("methods", "fedavg"), {"local_epochs": [5.0]}, r"methods\.fedavg\.sweep\.local_epochs\.0"),
    (("methods", "fedavg"), {"local_epochs": [0]}, r"methods\.fedavg\.sweep\.local_epochs\.0"),
    (("experiments", "fmnist10-iid-k10", "methods", "fedprox"), {"alpha": [-1.0]},
     r"experiments\.fmnist10-iid-k10\.methods\.fedprox\.sweep\.alpha\.0"),
    (("experiments", "fmnist10-dir-k10", "methods", "fedlap"), {"delta": ["big"]},
     r"experiments\.fmnist10-dir-k10\.methods\.fedlap\.sweep\.delta\.0"),
])
def test_sweep_grid_values_get_the_rule_of_their_hyperparameter(params, schema, where, grid, key):
    node = params
    for k in where:
        node = node.setdefault(k, {})
    node["sweep"] = grid
    bad(params, schema, key)


@pytest.mark.parametrize("path", [
    ("experiments", "fmnist10-iid-k10", "train", "lr"), ("methods", "fedavg", "lr"),
    ("experiments", "fmnist10-dir-k10", "partition", "alpha2"), ("experiments", "fmnist10-iid-k10", "subsample"),
    ("tables", "fedlap/table1", "tolerance", "test/acc"), ("methods", "fedavg", "sweep", "lr"),
])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_numbers_are_refused(params, schema, path, value):
    node = params
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = [value] if path[-1] == "lr" and path[-2] == "sweep" else value
    bad(params, schema, re_key(".".join(path)))


def re_key(dotted):
    import re

    return re.escape(dotted)


@pytest.mark.parametrize("path, value", [
    (("experiments", "fmnist10-iid-k10", "clients"), 4.0), (("seeds",), [0.0, 1]),
    (("experiments", "fmnist10-iid-k10", "train", "local_epochs"), 5.0),
    (("experiments", "fmnist10-iid-k10", "report_rounds"), [10, 50.0]),
    (("methods", "fedlap_func", "server_iters"), 100.0), (("smoke", "sweep_limit"), 2.0),
    (("experiments", "fmnist10-iid-k10", "seeds"), [0.0]),
])
def test_integral_floats_in_integer_fields_are_refused(params, schema, path, value):
    node = params
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    bad(params, schema, re_key(".".join(path)) + r".*not of type 'integer'")


def test_booleans_are_not_integers(params, schema):
    params["experiments"]["fmnist10-iid-k10"]["clients"] = True
    bad(params, schema, r"experiments\.fmnist10-iid-k10\.clients")


@pytest.mark.parametrize("model, key", [
    ({"name": "mlp", "hiddn": [1]}, "hiddn"), ({"name": "mlp", "hidden": [8], "n_classes": 3}, "n_classes"),
    ({"name": "lenet5", "hidden": [8]}, "hidden"),
])
def test_unknown_model_keys_are_refused(params, schema, model, key):
    params["experiments"]["fmnist10-iid-k10"]["model"] = model
    bad(params, schema, rf"experiments\.fmnist10-iid-k10\.model\.{key}: .*{model['name']}.*accepted")


def test_unknown_model_keys_in_the_smoke_overlay_are_refused(params, schema):
    params["smoke"]["experiment"]["model"] = {"name": "mlp", "activaton": "relu"}
    bad(params, schema, r"model\.activaton.*scale smoke")


def test_model_keys_match_the_builders():
    """The torch-free table of model options (validation) is the builders' keyword arguments."""
    import inspect

    from fedbayes import models
    from fedbayes.study import MODEL_KEYS, MODEL_NAMES

    assert set(MODEL_NAMES) == set(models.MODELS) == set(MODEL_KEYS)
    for name in MODEL_NAMES:
        builder = getattr(models, name)
        assert tuple(inspect.signature(builder).parameters)[2:] == MODEL_KEYS[name], name
        defaults = {k: p.default for k, p in inspect.signature(builder).parameters.items() if k in MODEL_KEYS[name]}
        if defaults:  # the MODELS entry passes every option through
            models.build_model(name, (1, 4, 4), 2, **defaults)


@pytest.mark.parametrize("section, name", [
    ("tables", "../evil"), ("tables", "/abs"), ("tables", "a/../../b"), ("tables", "fedlap/x/y"),
    ("tables", "a/"), ("methods", "../fedavg"), ("methods", "fed avg"), ("experiments", "../x"),
    ("experiments", "a/b"),
])
def test_output_names_cannot_leave_their_directory(params, schema, section, name):
    first = next(iter(params[section]))
    params[section][name] = copy.deepcopy(params[section][first])
    bad(params, schema, rf"{section}.*{re_key(repr(name))}")


def test_names_that_would_be_silently_unused_are_refused(params, schema):
    p = copy.deepcopy(params)
    p["methods"]["fedavgg"] = {"lr": 0.1}
    bad(p, schema, r"methods\.fedavgg: unknown method")
    p = copy.deepcopy(params)
    p["smoke"]["hparams"]["sweep"] = {"lr": [0.1]}
    bad(p, schema, r"smoke\.hparams\.sweep")
    p = copy.deepcopy(params)
    p["experiments"]["fmnist10-iid-k10"]["methods"]["fedprox"]["overrides"] = {"fmnist10-dir-k10": {"lr": 0.1}}
    bad(p, schema, r"experiments\.fmnist10-iid-k10\.methods\.fedprox: Additional properties .*'overrides'")


# ------------------------------------------------------------------------------------------ YAML as written
def write_params(tmp_path, repo, text):
    (tmp_path / "workflow/schemas").mkdir(parents=True, exist_ok=True)
    (tmp_path / "workflow/schemas/params.schema.yaml").write_text(
        (repo / "workflow/schemas/params.schema.yaml").read_text())
    f = tmp_path / "params.yaml"
    f.write_text(text)
    return f


def test_duplicate_yaml_keys_are_refused_at_load(tmp_path, repo):
    text = (repo / "params.yaml").read_text()
    lines = text.splitlines(keepends=True)
    at = next(i for i, ln in enumerate(lines) if ln.startswith("    rounds:"))
    lines.insert(at + 1, "    rounds: 3\n")  # a second `rounds` in the same experiment
    f = write_params(tmp_path, repo, "".join(lines))
    with pytest.raises(ConfigError, match=rf"params.yaml.*duplicate key 'rounds' at line {at + 2}"):
        load_params(f)
    f.write_text("seeds: [0]\nscale: paper\nseeds: [1]\n")
    with pytest.raises(ConfigError, match=r"duplicate key 'seeds' at line 3"):
        load_params(f)


def test_duplicate_json_keys_are_refused_at_load(tmp_path, repo):
    f = write_params(tmp_path, repo, '{"seeds": [0], "seeds": [1]}')
    with pytest.raises(ConfigError, match=r"duplicate key 'seeds'"):
        load_params(f)


def test_anchors_aliases_and_merge_keys_load_as_before(repo):
    """params.yaml's own anchors and merge keys (``<<: *fedep``) keep working, key for key."""
    from fedbayes.fileio import load_yaml

    text = (repo / "params.yaml").read_text()
    assert "<<: *" in text and "&" in text
    assert load_yaml(text) == yaml.safe_load(text)
    assert load_yaml("a: &a {x: 1, y: 2}\nb: {<<: *a, y: 3}\nc: *a\n") == {
        "a": {"x": 1, "y": 2}, "b": {"x": 1, "y": 3}, "c": {"x": 1, "y": 2}}


def test_exponent_numbers_without_a_dot_are_numbers(tmp_path, repo):
    """`lr: 1e-3` is a number, as YAML 1.2, DVC and the user read it (PyYAML's YAML 1.1 rules alone left the
    string '1e-3', refused as "'1e-3' is not of type 'number'"); integers, dotted floats and strings as before."""
    from fedbayes.fileio import load_yaml

    assert load_yaml("a: 1e-3\nb: -2E+4\nc: 5\nd: 1.0e-4\ne: '1e-3'\nf: 1_000\ng: e5\nh: .5e1\ni: 0x1f") == {
        "a": 1e-3, "b": -2e4, "c": 5, "d": 1e-4, "e": "1e-3", "f": 1000, "g": "e5", "h": 5.0, "i": 31}
    assert type(load_yaml("x: 7")["x"]) is int
    text = (repo / "params.yaml").read_text()
    assert "lr: 0.001," in text
    f = write_params(tmp_path, repo, text.replace("lr: 0.001,", "lr: 1e-3,", 1))
    validate(load_params(f), yaml.safe_load((repo / "workflow/schemas/params.schema.yaml").read_text()))
    assert load_params(f)["experiments"] == load_params(repo / "params.yaml")["experiments"]   # the same: no rerun


BOMB = ("    lol: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(  # 10^9 strings once expanded
    f"    lol{i}: &{chr(97 + i)} [{', '.join([f'*{chr(96 + i)}'] * 10)}]\n" for i in range(1, 9)))
MERGE_BOMB = "    m0: &m0 {a: 1, b: 2}\n" + "".join(  # merge keys multiply in construction itself
    f"    m{i}: &m{i} {{<<: [{', '.join([f'*m{i - 1}'] * 10)}], k{i}: 1}}\n" for i in range(1, 6))


@pytest.mark.parametrize("bomb", [BOMB, MERGE_BOMB], ids=["aliases", "merge-keys"])
def test_alias_bomb_is_refused_at_load(tmp_path, repo, bomb):
    text = (repo / "params.yaml").read_text()
    assert "\npaths:\n" in text
    text = text.replace("\npaths:\n", "\npaths:\n  notes:\n" + bomb, 1)
    f = write_params(tmp_path, repo, text)
    with pytest.raises(ConfigError, match=r"params.yaml.*aliases expand to more than 10000 nodes"):
        load_params(f)


def test_alias_bomb_in_a_loaded_config_is_refused(params, schema):
    """Snakemake loads params.yaml itself: the expanded size is bounded in validate() too (before the
    schema, whose messages would print the value)."""
    x = ["x"] * 10
    for _ in range(8):
        x = [x] * 10
    params["experiments"]["fmnist10-iid-k10"]["model"]["layers"] = x
    bad(params, schema, r"more than .* values")


def test_loading_params_stays_fast(repo):
    import timeit

    from fedbayes.fileio import load_yaml

    text = (repo / "params.yaml").read_text()
    fast = min(timeit.repeat(lambda: yaml.load(text, Loader=yaml.CSafeLoader), number=1, repeat=7))
    ours = min(timeit.repeat(lambda: load_yaml(text), number=1, repeat=7))
    assert ours < 2 * fast + 0.005, (ours, fast)


@pytest.mark.parametrize("fault, message", [
    ("    rounds: 3\n", r"duplicate key 'rounds' at line"), (BOMB, r"aliases expand to more than 10000 nodes"),
], ids=["duplicate-key", "alias-bomb"])
def test_snakemake_refuses_malformed_yaml_before_reading_it(tmp_path, repo, fault, message):
    """Snakemake's own loader would keep the last key silently (and build the bomb): the Snakefile reads
    params.yaml through fedbayes' loader first."""
    import re

    from dagutil import copy_repo, sh

    d = copy_repo(repo, tmp_path / "repo", scale="smoke")
    lines = (d / "params.yaml").read_text().splitlines(keepends=True)
    at = next(i for i, ln in enumerate(lines) if ln.startswith("    rounds:"))
    if fault is BOMB:
        at, fault = next(i for i, ln in enumerate(lines) if ln.startswith("smoke:")), "  notes:\n" + BOMB
    lines.insert(at + 1, fault)
    (d / "params.yaml").write_text("".join(lines))
    before = set(d.rglob("*"))
    out = sh("snakemake --cores 1 -n reports/smoke/table1.csv", d, check=False, timeout=300)
    assert re.search(message, out) and "params.yaml" in out, out[-3000:]
    assert not [f for f in set(d.rglob("*")) - before if ".snakemake" not in f.parts], "wrote files"


def test_headline_names_a_table_and_its_metrics(params, schema):
    params["headline"]["table"] = "table9"
    bad(params, schema, r"headline.table: 'table9' is not in tables")


def test_headline_metric_must_be_the_tables(params, schema):
    params["headline"]["metrics"] = ["test/acc", "test/mce"]
    bad(params, schema, r"headline.metrics: test/mce is not a metric of tables.table1")


def test_the_earlier_layout_is_read_as_todays(params, schema):
    """A params.yaml written before experiments held their methods' values (an experiment's methods a list,
    per-experiment values under methods.<m>.overrides.<e>) loads as the same configuration; a pair set in
    both places is refused, naming both keys."""
    from fedbayes.study import upgrade_layout

    old = copy.deepcopy(params)
    for e, x in old["experiments"].items():
        for m, over in x["methods"].items():
            if over is not None:
                old["methods"][m] = dict(old["methods"][m] or {})
                old["methods"][m].setdefault("overrides", {})[e] = over
        x["methods"] = list(x["methods"])
    assert any("overrides" in (s or {}) for s in old["methods"].values())
    upgrade_layout(old)
    validate(old, schema)
    for e in params["experiments"]:
        assert old["experiments"][e]["methods"] == params["experiments"][e]["methods"]
        for m in params["experiments"][e]["methods"]:
            for point in sweep_points(params, e, m):
                assert run_config(old, e, m, 0, point) == run_config(params, e, m, 0, point)
    both = copy.deepcopy(params)
    both["methods"]["fedavg"]["overrides"] = {"fmnist10-iid-k10": {"lr": 0.1}}
    with pytest.raises(ConfigError, match=r"experiments\.fmnist10-iid-k10\.methods\.fedavg and "
                                          r"methods\.fedavg\.overrides\.fmnist10-iid-k10"):
        upgrade_layout(both)


def test_smoke_settings_come_from_the_overlay_file(repo, tmp_path):
    """params.smoke.yaml beside params.yaml holds the smoke scale; a `smoke:` block of params.yaml's own wins
    key by key; an overlay that holds anything but `smoke` is refused, naming the file."""
    overlay = yaml.safe_load((repo / "params.smoke.yaml").read_text())
    assert "smoke" not in yaml.safe_load((repo / "params.yaml").read_text())
    assert load_params(repo / "params.yaml")["smoke"] == overlay["smoke"]
    p = yaml.safe_load((repo / "params.yaml").read_text())
    p["smoke"] = {"seeds": [0]}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(p, sort_keys=False))
    (tmp_path / "params.smoke.yaml").write_text((repo / "params.smoke.yaml").read_text())
    smoke = load_params(tmp_path / "params.yaml", scale="smoke")
    assert seeds(smoke) == [0] and smoke["smoke"]["sweep_limit"] == overlay["smoke"]["sweep_limit"]
    (tmp_path / "params.smoke.yaml").write_text(yaml.safe_dump({**overlay, "seeds": [5]}))
    with pytest.raises(ConfigError, match=r"params\.smoke\.yaml: holds the smoke overlay only.*'seeds'"):
        load_params(tmp_path / "params.yaml")


def test_a_rule_across_hyperparameters_is_checked_at_validation_for_every_scale(params, schema):
    """Rehearsal bug: FedEP-M / FedSEP-M crashed in their first round at smoke scale (the smoke overlay's
    local_epochs: 1; variant M needs two samples, one an epoch), found by no validation. Every run's
    resolved hyperparameters now pass through the method's spec (Hyperparameters.problems) when params.yaml
    is validated; the smoke overlay gives the two methods their two epochs (smoke.methods)."""
    validate(copy.deepcopy(params), schema)
    del params["smoke"]["methods"]
    with pytest.raises(ConfigError, match=r"experiments\.cifar100-pachinko-k500\.methods\.fedep_m \(scale smoke\)"
                                          r".*local_epochs must be at least 2, got 1"):
        validate(params, schema)


def test_smoke_methods_names_a_known_method(params, schema):
    params["smoke"]["methods"]["fedepp_m"] = {"local_epochs": 2}
    bad(params, schema, r"smoke\.methods\.fedepp_m: unknown method")


def test_a_string_sweep_value_that_cannot_name_a_run_is_refused(params):
    """A sweep value that names no run directory (the DAG's point wildcard: a plug-in's free string with a
    space or a slash) passed validation and failed in the DAG: refused when params.yaml is checked, naming
    the experiment, method and point (the schema's enums keep the built-in methods' strings safe)."""
    from fedbayes.study import experiment_config
    from fedbayes.study.semantics import _hparam_problems

    params["experiments"]["fmnist10-iid-k10"]["methods"]["fedavg"] = {"sweep": {"optimizer": ["adam", "my sgd/2"]}}
    problems = _hparam_problems(params, "fmnist10-iid-k10", experiment_config(params, "fmnist10-iid-k10"))
    assert problems == ["experiments.fmnist10-iid-k10.methods.fedavg: sweep point 'optimizer=my sgd/2' cannot name "
                        "a run (its values must be numbers, booleans or words of letters, digits and _ . -)"]


@pytest.mark.parametrize("path, value, line", [   # a closest name only for a near miss (weight_decy)
    (("methods", "fedavg", "rho"), 0.1, "methods.fedavg.rho: fedavg takes no hyperparameter 'rho' (another method's)"),
    (("methods", "fedavg", "weight_decy"), 0.1, "methods.fedavg.weight_decy: fedavg takes no hyperparameter "
                                                "'weight_decy'; the closest it takes is 'weight_decay'"),
    (("methods", "fedavg", "sweep", "delta"), [0.1, 1.0],
     "methods.fedavg.sweep.delta: fedavg takes no hyperparameter 'delta' (another method's)"),
    (("methods", "fedavg", "sweep", "lr_schedule"), ["constant", "cosine_rounds"],
     "methods.fedavg.sweep.lr_schedule: fedavg cannot sweep 'lr_schedule'"),
    (("experiments", "fmnist10-iid-k10", "methods", "fedavg", "tau"), 1.0,
     "experiments.fmnist10-iid-k10.methods.fedavg.tau: fedavg takes no hyperparameter 'tau' (another method's)"),
    (("experiments", "fmnist10-iid-k10", "methods", "fedavg", "sweep", "alpha"), [0.1, 0.01],
     "experiments.fmnist10-iid-k10.methods.fedavg.sweep.alpha: fedavg takes no hyperparameter 'alpha' (another "
     "method's)"),
    (("smoke", "methods", "fedep_m", "rho"), 0.1, "smoke.methods.fedep_m.rho: fedep_m takes no hyperparameter 'rho' "
                                                  "(another method's)"),
    (("rehearsal", "methods", "fedavg", "beta1"), 0.5, "rehearsal.methods.fedavg.beta1: fedavg takes no "
                                                       "hyperparameter 'beta1' (another method's)"),
])
def test_a_methods_block_takes_only_that_methods_hyperparameters(params, schema, path, value, line):
    """A method's block (its own, an experiment's, the smoke and rehearsal overlays', their sweeps) was
    checked against the union of every method's keys: `methods.fedavg.rho: 0.1` validated, planned runs
    and changed nothing (a sweep over such a key ran one run under several names). Each key is now one
    line naming the key, the method and the closest name the method takes (its spec's fields)."""
    node = params
    for k in path[:-1]:
        node = node.setdefault(k, {})
    node[path[-1]] = value
    with pytest.raises(ConfigError) as err:
        validate(params, schema)
    assert f"  - {line}\n" in f"{err.value}\n", str(err.value)


def test_a_shared_training_key_is_taken_by_every_method(params, schema):
    """What every method reads (Hyperparameters: local training, evaluation cadence) passes in any
    method's block; smoke.hparams still sets values for every method, each reading its own."""
    params["methods"]["fola"]["mc_every"] = 5
    params["experiments"]["fmnist10-iid-k10"]["methods"]["fedavg"]["sweep"]["grad_clip"] = [1.0, 10.0]
    params["smoke"]["hparams"]["rho"] = 0.5
    validate(params, schema)


def test_a_scales_per_experiment_method_block_is_read(params, schema):
    """`smoke.experiments.<e>.methods.<m>` validated and was never read: a run at smoke scale trained with
    the values of methods.<m>. It is now the most specific block at its scale (after smoke.methods.<m>),
    its sweep replaces the grid, and a rehearsal block lies over it."""
    from fedbayes.study import method_hparams, sweep_points

    params["smoke"].setdefault("experiments", {}).setdefault("fmnist10-iid-k10", {})["methods"] = {
        "fedavg": {"lr": 0.005, "sweep": {"local_epochs": [3]}}}
    validate(copy.deepcopy(params), schema)
    small = {**params, "scale": "smoke"}
    assert list(sweep_points(small, "fmnist10-iid-k10", "fedavg")) == ["local_epochs=3"]   # over smoke.sweep's
    hp = method_hparams(small, "fmnist10-iid-k10", "fedavg", "local_epochs=3")
    assert hp["lr"] == 0.005 and hp["local_epochs"] == 3
    params.setdefault("rehearsal", {}).setdefault("experiments", {})["fmnist10-iid-k10"] = {
        "methods": {"fedavg": {"lr": 0.002}}}
    hp = method_hparams({**params, "scale": "rehearsal"}, "fmnist10-iid-k10", "fedavg", "local_epochs=3")
    assert hp["lr"] == 0.002
    assert method_hparams(params, "fmnist10-iid-k10", "fedavg", "local_epochs=5")["lr"] == 0.001   # paper scale


def test_a_scales_sweep_values_replace_every_grids_values_of_that_key(params, schema):
    """`rehearsal.sweep: {local_epochs: [2]}`: every grid over local_epochs runs 2 at that scale (40 local
    epochs of a CNN were a quarter of the rehearsal's training); other scales and grids keep theirs; a key
    no method takes is refused, naming it (one no grid sweeps is harmless: a study of other experiments)."""
    from fedbayes.study import sweep_points

    params.setdefault("rehearsal", {})["sweep"] = {"local_epochs": [2]}
    params.setdefault("smoke", {})["sweep"] = {"local_epochs": [1, 2]}
    validate(copy.deepcopy(params), schema)
    assert list(sweep_points({**params, "scale": "rehearsal"}, "cifar10-labeldir0.01-k20", "fedavg")) == ["local_epochs=2"]
    assert list(sweep_points({**params, "scale": "smoke"}, "cifar10-labeldir0.01-k20", "fedavg")) == [
        "local_epochs=1", "local_epochs=2"]
    assert list(sweep_points({**params, "scale": "smoke"}, "fmnist10-dir-k10", "fedlap"))[:2] == [
        "delta=0.0001+local_epochs=1", "delta=0.0001+local_epochs=2"]   # the grid's other keys keep theirs
    del params["smoke"]["sweep"]
    assert list(sweep_points({**params, "scale": "smoke"}, "cifar10-labeldir0.01-k20", "fedavg"))[0] == "local_epochs=40"
    assert "local_epochs=40" in sweep_points(params, "cifar10-labeldir0.01-k20", "fedavg")
    params["rehearsal"]["sweep"] = {"local_epoch": [2]}
    with pytest.raises(ConfigError, match=r"rehearsal\.sweep\.local_epoch: no installed method takes a hyperparameter 'local_epoch'"):
        validate(params, schema)


@pytest.mark.parametrize("block, line", [
    ({"fedavg": {"rho": 0.1}}, "smoke.experiments.fmnist10-iid-k10.methods.fedavg.rho: fedavg takes no "
                               "hyperparameter 'rho' (another method's)"),
    ({"scaffold": {"lr": 0.1}}, "smoke.experiments.fmnist10-iid-k10.methods.scaffold: experiment fmnist10-iid-k10 "
                                "does not run scaffold"),
    ({"fedavg": {"seeds": [0]}}, "smoke.experiments.fmnist10-iid-k10.methods.fedavg.seeds: at scale smoke every "
                                 "run uses smoke.seeds"),
])
def test_a_scales_per_experiment_method_block_is_checked(params, schema, block, line):
    params["smoke"].setdefault("experiments", {}).setdefault("fmnist10-iid-k10", {})["methods"] = block
    with pytest.raises(ConfigError) as err:
        validate(params, schema)
    assert f"  - {line}" in str(err.value), str(err.value)
