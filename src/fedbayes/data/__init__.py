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

from . import images, tabular  # noqa: E402,F401  (register their datasets)
from . import standin  # noqa: E402,F401  (after them: it snapshots the official specs)


def train_groups(name: str, root=DEFAULT_ROOT):
    """The natural client (e.g. hospital) of every training row of a federated dataset, for the
    ``natural`` partition scheme."""
    groups = {"flamby_heart": lambda r: tabular.flamby_centres(r)[0]}
    if name not in groups:
        raise ValueError(f"dataset {name!r} has no natural clients; natural splits exist for {sorted(groups)}")
    return groups[name](root)

def label_groups(name: str, root=DEFAULT_ROOT):
    """The superclass of every class, (n_classes,) int64, for the ``pachinko`` partition scheme."""
    groups = {"cifar100": images.cifar100_coarse_of_fine}
    if name not in groups:
        raise ValueError(f"dataset {name!r} has no class hierarchy; the pachinko split needs one of {sorted(groups)}")
    return groups[name](root)

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
