"""The method specs (fedbayes.methods.spec; each method's package, fedbayes.methods.<key>) are the one place a method is
declared. What used to be written by hand beside them (catalog.METHOD_VARIANTS, METHOD_NUMERICS,
HPARAM_DEFAULTS, the params schema's hyperparameter rules and sweepable keys) is now derived from them,
and must be what it was when it was hand-kept (pinned below, as of the commit that derived it): the
derivation changes no run's configuration, no rerun key and no validation rule."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
import yaml

from fedbayes.methods.hyperparameters import REQUIRED
from fedbayes.methods.spec import MethodSpec

POINT = {"": "point"}
EP = {"": "point", "mc": "samples"}
METHOD_VARIANTS = {
    "fedavg": POINT, "fedprox": POINT, "fedadmm": POINT, "feddyn": {"": "point", "avg": "point"}, "fedlap": POINT,
    "fedlap_cov": POINT, "fedlap_func": POINT, "bayesadmm": {"": "samples", "mean": "point"},
    "fedivon": {"": "samples", "mean": "point"}, "fola": POINT, "fedcurv": POINT, "fedavgm": POINT, "fedpa": POINT,
    "fedep": EP, "fedsep": EP, "scaffold": POINT, "fednova": POINT, "fedbe": POINT,
    **{f"{m}_{v}": EP for m in ("fedep", "fedsep") for v in "imlv"},
}
METHOD_NUMERICS = {m: 1 for m in METHOD_VARIANTS} | {"fedprox": 2, "fedadmm": 2, "fedlap": 2, "fedlap_cov": 2, "feddyn": 2}
HPARAM_DEFAULTS = {"client_optimizer": "fresh", "prox_norm": "squared", "client_rows": "partition"}
HPARAM_RULES = {
    'optimizer': {"enum": ["adam", "sgd"]}, 'lr': {"$ref": "#/$defs/posnum"},
    'batch_size': {"$ref": "#/$defs/posint"}, 'local_epochs': {"$ref": "#/$defs/posint"},
    'grad_clip': {"type": ["number", "null"], "exclusiveMinimum": 0}, 'alpha': {"type": "number", "minimum": 0},
    'weight_decay': {"type": "number", "minimum": 0}, 'delta': {"$ref": "#/$defs/posnum"},
    'rho': {"anyOf": [{"$ref": "#/$defs/posnum"}, {"enum": ["data", "uniform"]}]},   # alternatives sorted
    'rho_switch_round': {"$ref": "#/$defs/posint"}, 'tau': {"type": "number", "minimum": 0},
    'memory_per_class': {"type": "integer", "minimum": 0}, 'server_iters': {"type": "integer", "minimum": 0},
    'server_lr': {"$ref": "#/$defs/posnum"}, 'dual_damping': {"$ref": "#/$defs/posnum"},
    'h0': {"$ref": "#/$defs/posnum"}, 'ess': {"$ref": "#/$defs/posnum"},
    'beta1': {"type": "number", "minimum": 0, "maximum": 1},
    'beta2': {"type": "number", "minimum": 0, "maximum": 1}, 'mc_samples': {"$ref": "#/$defs/posint"},
    'clip_radius': {"type": ["number", "null"], "exclusiveMinimum": 0},
    'lr_schedule': {"enum": ["constant", "cosine_rounds", "linear_local"]},
    'lr_final': {"$ref": "#/$defs/posnum"}, 'ivon_reset': {"enum": ["code", "paper"]},
    'pred_samples': {"$ref": "#/$defs/posint"}, 'pred_var': {"enum": ["posterior", "code_quirk"]},
    'mc_every': {"$ref": "#/$defs/posint"}, 'mc_round0': {"type": "boolean"}, 'mc_window': {"type": "boolean"},
    'client_stream': {"enum": ["independent", "replay"]}, 'client_rows': {"enum": ["partition", "by_label"]},
    'prox_norm': {"enum": ["squared", "unsquared"]}, 'client_optimizer': {"enum": ["fresh", "persistent"]},
    'lambda_prior': {"type": "number", "minimum": 0}, 'gamma': {"$ref": "#/$defs/posnum"},
    'fisher_norm': {"enum": ["code", "paper", "ggn"]}, 'prior_loss': {"enum": ["paper", "released"]},
    'anchor': {"enum": ["clients", "global"]}, 'variant': {"enum": ["I", "M", "L", "V"]},
    'momentum': {"type": "number", "minimum": 0, "maximum": 1},
    'server_momentum': {"type": "number", "minimum": 0, "maximum": 1},
    'server_optimizer': {"enum": ["sgdm", "adagrad"]}, 'adagrad_eps': {"$ref": "#/$defs/posnum"},
    'cov_scale': {"$ref": "#/$defs/posnum"}, 'init_scale': {"type": "number", "minimum": 0},
    'shrinkage': {"$ref": "#/$defs/posnum"}, 'laplace_epochs': {"$ref": "#/$defs/posint"},
    'ngvi_epochs': {"$ref": "#/$defs/posint"}, 'ngvi_samples': {"$ref": "#/$defs/posint"},
    'ngvi_beta': {"type": "number", "minimum": 0, "exclusiveMaximum": 1},
    'clip': {"type": ["number", "null"], "exclusiveMinimum": 0},
    'damping': {"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 1},
    'burn_in': {"type": "integer", "minimum": 0}, 'mixin_epochs': {"type": "integer", "minimum": 0},
    'server_unlabeled': {"type": "number", "minimum": 0, "exclusiveMaximum": 1},
    'teacher_samples': {"type": "integer", "minimum": 0}, 'var_scale': {"$ref": "#/$defs/posnum"},
    'teacher_clients': {"type": "boolean"}, 'temperature': {"$ref": "#/$defs/posnum"},
    'server_weight_decay': {"type": "number", "minimum": 0}, 'server_epochs': {"type": "integer", "minimum": 0},
    'server_batch_size': {"$ref": "#/$defs/posint"},
}
SWEEPABLE = ['optimizer', 'lr', 'batch_size', 'local_epochs', 'grad_clip', 'alpha', 'delta', 'weight_decay', 'tau', 'memory_per_class', 'server_iters', 'server_lr', 'rho', 'dual_damping', 'h0', 'lambda_prior', 'gamma', 'prox_norm', 'client_optimizer']


def test_derived_catalogue_is_what_was_hand_kept():
    from fedbayes import study as catalog

    # the registry lists fedbayes' methods by key (installed entry points are sorted)
    assert catalog.METHOD_VARIANTS == METHOD_VARIANTS and list(catalog.METHOD_VARIANTS) == sorted(METHOD_VARIANTS)
    assert catalog.METHOD_NUMERICS == METHOD_NUMERICS
    assert catalog.HPARAM_DEFAULTS == HPARAM_DEFAULTS


def test_derived_schema_is_what_was_hand_kept(repo):
    from fedbayes.study import complete_schema

    raw = yaml.safe_load((repo / "workflow/schemas/params.schema.yaml").read_text())
    defs = complete_schema(raw)["$defs"]
    own = {"sweep", "seeds"}   # the schema file's own keys of methods.<m>
    assert {k: v for k, v in defs["hparams"]["properties"].items() if k not in own} == HPARAM_RULES
    assert set(defs["hparams"]["properties"]) - set(HPARAM_RULES) == own
    assert set(defs["grid"]["propertyNames"]["enum"]) == set(SWEEPABLE)
    assert defs["train"]["properties"] == {k: HPARAM_RULES[k] for k in ("optimizer", "lr", "batch_size", "local_epochs",
                                                                         "grad_clip")}
    assert complete_schema(complete_schema(raw)) == complete_schema(raw)   # completing twice changes nothing
    from fedbayes.methods.hyperparameters import DEFS

    assert {k: raw["$defs"][k] for k in DEFS} == DEFS   # the rules' $refs mean the same in both


def test_methods_package_and_specs_import_no_torch():
    code = ("import sys, fedbayes.methods, fedbayes.study; from fedbayes.methods.spec import method_specs; "
            "[s.params() for s in method_specs().values()]; print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("key", sorted(METHOD_VARIANTS))
def test_each_spec_names_its_implementation_and_needs(key):
    """The class loads and is a Method; it returns local models exactly when it declares that need."""
    from fedbayes.study import METHOD_SPECS
    from fedbayes.methods.core.base import Method

    spec = METHOD_SPECS[key]
    cls = spec.load()
    assert issubclass(cls, Method) and spec.load() is cls
    assert ("local_models" in spec.needs) == (cls.local_weights is not Method.local_weights)


def test_hyperparameter_defaults_obey_their_rules():
    """A default is REQUIRED, None (off) or a value its own rule accepts."""
    from fedbayes.study import METHOD_SPECS
    from fedbayes.methods.hyperparameters import check_value

    for spec in METHOD_SPECS.values():
        for f in dataclasses.fields(spec.params):
            assert f.metadata["doc"], (spec.key, f.name)
            if f.default is not REQUIRED and f.default is not None:
                assert check_value(f.default, f.metadata["rule"]) is None, (spec.key, f.name, f.default)


@pytest.mark.parametrize("key, hp, match", [
    ("fedprox", {"alpha": -1.0}, "alpha"), ("fedlap", {"rho": 0.5}, "rho"), ("bayesadmm", {"rho": "data"}, "rho"),
    ("fedavg", {"batch_size": 4.0}, "batch_size"), ("fedep", {"variant": "X"}, "variant"),
    ("fedbe", {"server_unlabeled": 1.0}, "server_unlabeled"),
])
def test_params_refuse_a_bad_value_naming_it(key, hp, match):
    from fedbayes.study import METHOD_SPECS

    with pytest.raises(ValueError, match=match):
        METHOD_SPECS[key].params.from_hparams(hp)
    # keys the method does not read are ignored (smoke.hparams sets values for every method)
    assert METHOD_SPECS[key].params.from_hparams({"server_iters": 100}) is not None


@pytest.mark.parametrize("kw, match", [
    ({"key": "FedX"}, "key must match"), ({"implementation": "fedx"}, "module:Class"),
    ({"variants": {"mean": "point"}}, "variants"), ({"variants": {"": "posterior"}}, "variants"),
    ({"numerics": 0}, "numerics"), ({"needs": {"gpu"}}, "needs"), ({"params": dict}, "params"),
])
def test_a_malformed_spec_is_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        MethodSpec(**{"key": "fedx", "implementation": "fedx:FedX", **kw})


def test_fixed_hyperparameters_are_enforced():
    """fedep_i is FedEP with variant I: the spec's ``fixed`` (was fedep.with_variant)."""
    import numpy as np
    import torch

    from fedbayes.methods import build_method
    from fedbayes.models import FlatModel

    fm = FlatModel(torch.nn.Linear(2, 2))
    m = build_method("fedsep_m", fm, {"optimizer": "sgd"}, np.array([3]))
    assert m.hp["variant"] == "M" and type(m).__name__ == "FedSEPM" and m.variants == EP and m.p.variant == "M"
    with pytest.raises(ValueError, match="fedsep_m: variant is fixed to 'M', got 'I'"):
        build_method("fedsep_m", fm, {"optimizer": "sgd", "variant": "I"}, np.array([3]))


def test_a_method_reads_its_own_specs_typed_hyperparameters_from_init(monkeypatch):
    """build_method types the run's hyperparameters by the spec it is given, before the method's __init__
    runs, loading that spec's implementation only: two specs sharing FedBE's class with different
    defaults each get their own (a lookup of the class among the registered specs found fedbe's, whose
    default server_unlabeled 0 FedBE's __init__ refuses), and a Method made without build_method has no
    ``p`` to read."""
    import numpy as np
    import torch

    from fedbayes.methods import build_method, method_specs
    from fedbayes.methods.fedbe import Params as FedBEParams
    from fedbayes.methods.hyperparameters import hyperparameters, like
    from fedbayes.models import FlatModel

    @hyperparameters
    class Half(FedBEParams):
        server_unlabeled: float = like(FedBEParams, "server_unlabeled", 0.5)

    half = dataclasses.replace(method_specs()["fedbe"], key="fedbe_half", params=Half)
    loaded = []
    real = MethodSpec.load
    monkeypatch.setattr(MethodSpec, "load", lambda self: loaded.append(self.key) or real(self))
    fm, sizes = FlatModel(torch.nn.Linear(2, 2)), np.array([3, 5])
    m = build_method(half, fm, {"optimizer": "sgd"}, sizes)
    assert loaded == ["fedbe_half"] and type(m.p) is Half and m.p.server_unlabeled == 0.5 and m.name == "fedbe_half"
    assert m.spec is half and dict(m.hp) == {"optimizer": "sgd"}
    with pytest.raises(ValueError, match="fedbe needs unlabeled server data"):
        build_method("fedbe", fm, {"optimizer": "sgd"}, sizes)   # the registered spec: its default, 0
    with pytest.raises(ValueError, match="server_unlabeled"):
        build_method(half, fm, {"server_unlabeled": 2}, sizes)   # validated by the spec's own rule
    with pytest.raises(AttributeError, match="build it with fedbayes.methods.build_method"):
        type(m)(fm, {}, sizes).p
    with pytest.raises(ValueError, match="unknown method 'fedbee'"):
        build_method("fedbee", fm, {}, sizes)


def test_fedbayes_methods_lists_the_specs_and_one_methods_defaults(capsys):
    """`fedbayes methods [KEY]`: the defaults params.yaml overrides, read from the method's spec."""
    from fedbayes import cli
    from fedbayes.study import METHOD_SPECS

    cli.main(["methods"])
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == list(METHOD_SPECS)
    cli.main(["methods", "fedprox"])
    out = capsys.readouterr().out
    alpha = METHOD_SPECS["fedprox"].params.field("alpha")
    assert "alpha" in out and alpha.metadata["doc"] in out and "[sweepable]" in out
    with pytest.raises(SystemExit):
        cli.main(["methods", "fedmagic"])


def test_stale_fedbayes_metadata_is_named_not_an_empty_registry(tmp_path):
    """fedbayes' methods are its own entry points: a stale copy of its metadata first on sys.path (an
    egg-info written before the table, carried into a copied source tree) gave an empty registry, and
    every params.yaml key was refused as unknown. The registry names the metadata and the fix."""
    import os

    info = tmp_path / "fedbayes-0.0.egg-info"
    info.mkdir()
    (info / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: fedbayes\nVersion: 0.0\n")
    out = subprocess.run([sys.executable, "-c", "from fedbayes.methods import method_specs; print(len(method_specs()))"],
                         env={**os.environ, "PYTHONPATH": str(tmp_path)}, capture_output=True, text=True)
    assert out.returncode != 0, out.stdout
    assert "fedbayes' own methods are not registered" in out.stderr and str(info) in out.stderr, out.stderr
