"""The models params.yaml may name, torch-free: one entry each (its builder in ``fedbayes.models.nets``,
whether it takes the flattened input size or the input shape, the options ``experiments.<e>.model`` may
give it besides ``name``). Validation reads the index without importing torch; the builders
(``fedbayes.models.nets.MODELS``) are made from it.

Attributes of ``fedbayes.models.nets`` (``build_model``, ``FlatModel``, ``MODELS`` …) are importable from
here too; the first such import loads torch.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelEntry:
    builder: str                     # a function of fedbayes.models.nets: builder(input, n_classes, **options)
    flat_input: bool = False         # True: it takes the flattened input size, else the input shape
    options: tuple[str, ...] = ()    # the keyword arguments params.yaml may give it


INDEX: dict[str, ModelEntry] = {
    "mlp": ModelEntry("mlp", flat_input=True, options=("hidden", "activation")),
    "logistic": ModelEntry("logistic", flat_input=True),
    "cifar_cnn": ModelEntry("cifar_cnn"),
    "emnist_cnn": ModelEntry("emnist_cnn"),
    "lenet5": ModelEntry("lenet5"),
    "acar_cnn": ModelEntry("acar_cnn"),
    "mcmahan_cnn": ModelEntry("mcmahan_cnn"),
    "resnet20_gn": ModelEntry("resnet20_gn"),
    "resnet18_gn": ModelEntry("resnet18_gn"),
    "cnn_dropout": ModelEntry("cnn_dropout"),
}
MODEL_KEYS: dict[str, tuple[str, ...]] = {name: e.options for name, e in INDEX.items()}   # name → its options


def __getattr__(name: str):
    """``fedbayes.models.build_model`` and the other torch parts, imported from ``nets`` when first asked."""
    if name.startswith("__"):
        raise AttributeError(name)
    nets = importlib.import_module("fedbayes.models.nets")
    try:
        return getattr(nets, name)
    except AttributeError:
        raise AttributeError(f"module 'fedbayes.models' has no attribute {name!r}") from None
