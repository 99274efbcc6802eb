"""fedbayes.workflow.overrides: Snakemake's --config values read as params.yaml's, and problems in them named."""

from fedbayes.fileio import load_yaml
from fedbayes.workflow.overrides import given_keys, name_given, read_as_params


def test_nested_strings_are_read_as_params_yaml_reads_the_same_text():
    # what Snakemake's parser hands over for seeds=[0,1] and experiments={e: {rounds: 5, lr: 0.5, ...}}
    typed = read_as_params({"scale": "smoke", "seeds": ["0", "1"], "device": "cuda:0",
                            "experiments": {"e": {"rounds": "5", "lr": "0.5", "ood": "null", "flag": "true",
                                                  "dataset": "fmnist", "weird": "a: b: c"}}})
    assert typed == {"scale": "smoke", "seeds": [0, 1], "device": "cuda:0",
                     "experiments": {"e": {"rounds": 5, "lr": 0.5, "ood": None, "flag": True,
                                           "dataset": "fmnist", "weird": "a: b: c"}}}
    for text in ("5", "0.5", "1e-3", "null", "true", "fmnist", "cuda:0", "[1, 2]"):   # one rule for both
        want = load_yaml(text)
        assert read_as_params(text) == (want if not isinstance(want, list) else text)


def test_given_keys_are_the_leaves():
    assert given_keys({"scale": "smoke", "experiments": {"e": {"rounds": 5}}, "seeds": [0]}) == [
        ("scale",), ("experiments", "e", "rounds"), ("seeds",)]


MESSAGE = "params.yaml does not match workflow/schemas/params.schema.yaml:\n"


def test_a_problem_in_a_typed_value_is_marked_and_others_are_not():
    msg = (MESSAGE + "  - seeds.1: 'x' is not of type 'integer'\n"
           "  - experiments.e.lr: -1 is less than the minimum of 0\n"
           "  - <root>: Additional properties are not allowed ('rounds' was unexpected)")
    got = name_given(msg, {"seeds": [0, "x"], "rounds": 5}).splitlines()
    assert got[0].startswith("params.yaml with the command line's --config does not match")
    assert got[1].endswith("(given with --config)") and got[3].endswith("(given with --config)")
    assert not got[2].endswith("(given with --config)")   # from params.yaml itself


def test_a_problem_the_typed_values_caused_elsewhere_lists_them():
    msg = "params.yaml is invalid:\n  - experiments.e.methods.m: seeds [0, 1, 2] must be the first seeds of [0, 1]"
    assert name_given(msg, {"seeds": [0, 1]}) == msg + "\n(the command line's --config set: seeds)"
    assert name_given(msg, {}) == msg and name_given(msg, None) == msg
