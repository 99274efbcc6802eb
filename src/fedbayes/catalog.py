"""Names params.yaml may use, without importing torch: methods with their prediction variants and
source modules, and models. Validation (every CLI command and the Snakefile) reads these; importing the implementations
would cost every non-training job 4 s of torch import. tests/test_config.py checks that this catalogue
and the implementations (``fedbayes.methods.METHODS``, ``fedbayes.models.MODELS``) agree."""

from __future__ import annotations

# method → {prediction variant: "point" | "samples"}; "" is the method's own prediction
# (``Method.variants``; a sampled variant may be evaluated less often, see engine.loop.evaluated_variants)
POINT = {"": "point"}
METHOD_VARIANTS: dict[str, dict[str, str]] = {
    "fedavg": POINT,
    "fedprox": POINT,
    "fedadmm": POINT,
    "feddyn": POINT,
    "fedlap": POINT,
    "fedlap_cov": POINT,
    "fedlap_func": POINT,
    "bayesadmm": {"": "samples", "mean": "point"},
    "fedivon": {"": "samples", "mean": "point"},
    "fola": POINT,
    "fedcurv": POINT,
    "fedavgm": POINT,
    "fedpa": POINT,
    "fedep": {"": "point", "mc": "samples"},
    "fedsep": {"": "point", "mc": "samples"},
    "scaffold": POINT,
    "fednova": POINT,
    "fedbe": POINT,
    **{f"{m}_{v}": {"": "point", "mc": "samples"} for m in ("fedep", "fedsep") for v in "imlv"},
}

# method → the fedbayes/methods/ modules its training runs: those defining its class and base classes,
# and the fedbayes.methods modules they import from (not the registry in __init__.py). The Snakefile's
# code hash of a training job reads these files; a test checks them against the classes (inspect).
METHOD_MODULES: dict[str, tuple[str, ...]] = {
    "fedavg": ("base.py", "fedavg.py"),
    "fedprox": ("base.py", "fedavg.py", "prox.py"),
    "fedadmm": ("admm.py", "base.py"),
    "feddyn": ("admm.py", "base.py"),
    "fedlap": ("base.py", "curvature.py", "fedlap.py"),
    "fedlap_cov": ("base.py", "curvature.py", "fedlap.py"),
    "fedlap_func": ("base.py", "curvature.py", "fedlap.py", "fedlap_func.py"),
    "bayesadmm": ("base.py", "bayesadmm.py", "ivon.py"),
    "fedivon": ("base.py", "fedivon.py", "ivon.py"),
    "fola": ("base.py", "fola.py"),
    "fedcurv": ("base.py", "curvature.py", "fedcurv.py", "fola.py"),
    "fedavgm": ("base.py", "fedep.py", "ivon.py"),
    "fedpa": ("base.py", "fedep.py", "ivon.py"),
    "fedep": ("base.py", "fedep.py", "ivon.py"),
    "fedsep": ("base.py", "fedep.py", "ivon.py"),
    "scaffold": ("base.py", "scaffold.py"),
    "fednova": ("base.py", "fednova.py"),
    "fedbe": ("base.py", "fedavg.py", "fedbe.py"),
    **{f"{m}_{v}": ("base.py", "fedep.py", "ivon.py") for m in ("fedep", "fedsep") for v in "imlv"},
}

MODEL_NAMES: tuple[str, ...] = ("mlp", "logistic", "cifar_cnn", "emnist_cnn", "lenet5", "acar_cnn", "mcmahan_cnn", "resnet20_gn",
                               "resnet18_gn", "cnn_dropout")


def split_variant(name: str) -> tuple[str, str]:
    """``bayesadmm@mean`` → (``bayesadmm``, ``mean``); a plain name has variant ``""``."""
    base, _, variant = name.partition("@")
    return base, variant
