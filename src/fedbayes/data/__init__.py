"""Raw datasets: fetch (verified, atomic) into ``data/raw/<name>/`` and load as arrays.

>>> from fedbayes.data import fetch, load
>>> fetch("fmnist")            # doctest: +SKIP
>>> arrays = load("fmnist")    # doctest: +SKIP
"""

from .idx import parse_idx, read_idx, write_idx
from .registry import (
    DATASETS,
    DEFAULT_ROOT,
    Arrays,
    DatasetSpec,
    dataset_hash,
    fetch,
    get_spec,
    load,
    make_synthetic,
    register,
)
from .sources import MIRRORS_ENV, DataIntegrityError, DataUnavailableError, FileSpec

from . import images, registry, tabular  # noqa: E402  (each defines its datasets, SPECS)

# The registry: the datasets of the package's modules (a new module is listed here), then the installed
# packages'. The stand-ins read it (after it is filled: they keep the official specs).
for _spec in (*registry.SPECS, *images.SPECS, *tabular.SPECS, *registry.installed()):
    register(_spec)

from . import standin  # noqa: E402,F401


def train_groups(name: str, root=DEFAULT_ROOT):
    """The natural client (e.g. hospital) of every training row of a federated dataset, for the
    ``natural`` partition scheme (its spec's ``natural_groups``)."""
    spec = get_spec(name)
    if spec.natural_groups is None:
        have = sorted(n for n, s in DATASETS.items() if s.natural_groups is not None)
        raise ValueError(f"dataset {name!r} has no natural clients; natural splits exist for {have}")
    return spec.resolve("natural_groups")(root)


def label_groups(name: str, root=DEFAULT_ROOT):
    """The superclass of every class, (n_classes,) int64, for the ``pachinko`` partition scheme (its
    spec's ``label_groups``)."""
    spec = get_spec(name)
    if spec.label_groups is None:
        have = sorted(n for n, s in DATASETS.items() if s.label_groups is not None)
        raise ValueError(f"dataset {name!r} has no class hierarchy; the pachinko split needs one of {have}")
    return spec.resolve("label_groups")(root)


__all__ = [
    "DATASETS",
    "DEFAULT_ROOT",
    "MIRRORS_ENV",
    "Arrays",
    "DataIntegrityError",
    "DataUnavailableError",
    "DatasetSpec",
    "FileSpec",
    "dataset_hash",
    "fetch",
    "get_spec",
    "load",
    "make_synthetic",
    "parse_idx",
    "read_idx",
    "register",
    "train_groups",
    "write_idx",
]
