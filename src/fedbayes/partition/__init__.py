"""Federated client partitions (IID, two-level Dirichlet, label Dirichlet, shards).

All randomness comes from an explicit ``numpy.random.Generator``.
"""

from .io import PartitionIntegrityError, load_partition, partition_hash, plot_partition, save_partition
from .schemes import (
    PARTITION_SCHEMES,
    SCHEMES,
    class_counts,
    dirichlet,
    iid,
    label_dirichlet,
    make_partition,
    shards,
    subsample,
)

__all__ = [
    "PartitionIntegrityError",
    "SCHEMES",
    "PARTITION_SCHEMES",
    "subsample",
    "iid",
    "dirichlet",
    "label_dirichlet",
    "shards",
    "make_partition",
    "class_counts",
    "partition_hash",
    "save_partition",
    "load_partition",
    "plot_partition",
]
