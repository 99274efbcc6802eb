"""Building a run's client split: the one place that turns an experiment's partition configuration and its
data into a partition file (``fedbayes partition``, a training job's missing file, a replay). Torch-free."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedbayes import data as ds
from fedbayes.study import ConfigError, partition_config, paths, stand_in_size
from fedbayes.data.root import open_data_root
from fedbayes.engine import seeds
from fedbayes.fileio import exclusive_lock
from fedbayes.partition import (PARTITION_SCHEMES, PartitionIntegrityError, class_counts, load_partition, make_partition,
                                plot_partition, save_partition, subsample)
from fedbayes.runpaths import partition_file


def data_root(p: dict) -> str:
    """Where this configuration's datasets are fetched to and read from (``paths(p)["raw"]``); at rehearsal
    scale the stand-ins' folder, every stand-in generated there so far activated in this process
    (``fedbayes.data.root.open_data_root``)."""
    return open_data_root(paths(p)["raw"], stand_in_size(p))


def locked(path: str | Path):
    """An exclusive lock (``<path>.lock``) while parallel jobs create the same data or partition file."""
    return exclusive_lock(Path(path), read_only_ok=True)


def build_partition(pc: dict, root: str, experiment: str, out: str | Path, figure: str | None = None
                    ) -> tuple[list[np.ndarray], dict]:
    """Split the data under ``root`` into clients by ``pc`` (``config.partition_config``, or a run's
    recorded configuration: dataset, subsample, clients, partition, seed) and save it to ``out``
    (deterministic: the same configuration and data always give the same file). Returns ``(parts, meta)``
    as :func:`fedbayes.partition.load_partition` would read them back."""
    seed = pc["seed"]
    arrays = ds.load(pc["dataset"], root=root)
    rng = seeds.rng(seed, seeds.PARTITION)
    pool = np.arange(len(arrays.y_train))
    if pc["subsample"] < 1.0:
        pool = subsample(len(pool), pc["subsample"], rng)
    scheme = dict(pc["partition"])
    name = scheme.pop("scheme")
    reads = PARTITION_SCHEMES[name].reads if name in PARTITION_SCHEMES else None
    if reads == "natural_groups":  # the dataset's own clients (FLamby-Heart: the four hospitals)
        groups = ds.train_groups(pc["dataset"], root=root)[pool]
        local = [np.flatnonzero(groups == g) for g in np.unique(groups)]
        if len(local) != pc["clients"]:
            raise ConfigError(f"experiments.{experiment}: {pc['dataset']} has {len(local)} natural clients, "
                              f"params.yaml says clients: {pc['clients']}")
    else:
        if reads == "label_groups":  # superclass of each class (CIFAR-100's coarse labels)
            scheme["groups"] = ds.label_groups(pc["dataset"], root=root)
        try:
            local = make_partition(arrays.y_train[pool], pc["clients"], name, rng, **scheme)
        except ValueError as e:   # e.g. a Dirichlet draw that cannot give every client its min_size
            raise ConfigError(f"experiments.{experiment}.partition (seed {seed}): {e}") from None
    parts = [pool[ix] for ix in local]
    meta = {**pc, "dataset_hash": ds.dataset_hash(pc["dataset"], root=root)}
    h = save_partition(out, parts, arrays.y_train, arrays.n_classes, meta)
    counts = class_counts(arrays.y_train, parts, arrays.n_classes)
    if figure:
        plot_partition(counts, figure, title=f"{experiment} seed {seed} ({name})")
    sizes = counts.sum(1)
    print(f"{experiment} seed {seed}: {len(parts)} clients, sizes {sizes.min()}–{sizes.max()} "
          f"(total {sizes.sum()}), hash {h[:12]}")
    return parts, {**meta, "hash": h, "n_clients": len(parts), "class_counts": counts.tolist(),
                   "sizes": sizes.tolist()}


def write_partition(p: dict, experiment: str, seed: int, out: str | Path, figure: str | None = None
                    ) -> tuple[list[np.ndarray], dict]:
    """:func:`build_partition` of (``experiment``, ``seed``) as params.yaml configures it."""
    return build_partition(partition_config(p, experiment, seed), data_root(p), experiment, out, figure)


def check_partition_target(p: dict, experiment: str, seed: int, path: str | Path) -> None:
    """``path`` may receive the partition of (``experiment``, ``seed``): it is that pair's own file under
    ``paths.partitions`` (rewritten when params.yaml changed its configuration: training has no partition
    job upstream), or a file elsewhere that is missing or already holds this configuration. Another
    pair's file, or a file holding another configuration, is refused (ConfigError), never overwritten."""
    path = Path(path)
    own = partition_file(paths(p), experiment, seed)
    if path.resolve() == own.resolve():
        return
    if path.resolve().is_relative_to(Path(p["paths"]["partitions"]).resolve()):
        raise ConfigError(f"--partition {path} is not the partition file of {experiment} seed {seed} ({own}); "
                          "under paths.partitions each file holds its own (experiment, seed)")
    if not path.exists():
        return
    want = partition_config(p, experiment, seed)
    try:
        meta = load_partition(path)[1]
    except PartitionIntegrityError as e:
        raise ConfigError(f"--partition {path} is not a readable partition file ({e}); it is not overwritten") from None
    diff = sorted(k for k, v in want.items() if meta.get(k) != v)
    if diff:
        raise ConfigError(f"--partition {path} holds another configuration ({', '.join(diff)} differ from "
                          f"{experiment} seed {seed}); it is not overwritten: give {own} or remove the file")


def ensure_partition(p: dict, experiment: str, seed: int, path: str | Path) -> tuple[list[np.ndarray], dict]:
    """The partition a run needs, ``(parts, meta)``: the file reused when it holds this configuration,
    else (re)written (only where :func:`check_partition_target` allows). Returned in memory, because the
    file may vanish once the lock is released: Snakemake deletes a partition job's output before it runs
    that job, and the partition rule (for its figure) can start on a file a training job has just written."""
    want = partition_config(p, experiment, seed)
    with locked(path):
        check_partition_target(p, experiment, seed, path)  # again under the lock: another job may have written it
        try:
            parts, meta = load_partition(path)
            if all(meta.get(k) == v for k, v in want.items()):
                return parts, meta
        except FileNotFoundError:
            pass
        return write_partition(p, experiment, seed, path)
