"""Names params.yaml may use, without importing torch: methods with their prediction variants (derived from
the method specs, ``fedbayes.methods.spec``), the hyperparameters' code defaults, and models. Validation
(every CLI command and the Snakefile) reads these; importing the implementations would cost every
non-training job 4 s of torch import. tests/test_config.py checks that the models listed here and the
implementations (``fedbayes.models.MODELS``) agree."""

from __future__ import annotations

from fedbayes.methods.spec import MethodSpec, code_defaults, method_specs
from fedbayes.models import MODEL_KEYS as INDEX_MODEL_KEYS

# Methods are described once each, in their packages (``fedbayes.methods.<key>`` or an installed package's),
# registered under the entry-point group ``fedbayes.methods``; the tables below are derived from those specs.
METHOD_SPECS: dict[str, MethodSpec] = method_specs()


# method → {prediction variant: "point" | "samples"}; "" is the method's own prediction
# (a sampled variant may be evaluated less often, see engine.loop.evaluated_variants)
METHOD_VARIANTS: dict[str, dict[str, str]] = {m: dict(s.variants) for m, s in METHOD_SPECS.items()}


# Hyperparameters with a default in the code: a resolved configuration leaves out a value equal to its
# default, so that declaring the default in params.yaml (or adding a new option) changes no run's
# configuration and reruns nothing (the ``code_default`` fields of the methods' hyperparameters).
HPARAM_DEFAULTS: dict[str, object] = code_defaults(METHOD_SPECS)


# model name -> the options params.yaml may give it (``experiments.<e>.model``, besides ``name``): the torch-free
# models index (fedbayes.models.INDEX, where each model is listed once)
MODEL_KEYS: dict[str, tuple[str, ...]] = dict(INDEX_MODEL_KEYS)
MODEL_NAMES: tuple[str, ...] = tuple(MODEL_KEYS)


def split_variant(name: str) -> tuple[str, str]:
    """``bayesadmm@mean`` → (``bayesadmm``, ``mean``); a plain name has variant ``""``."""
    base, _, variant = name.partition("@")
    return base, variant
