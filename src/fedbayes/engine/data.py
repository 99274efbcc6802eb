"""Inputs of one run: raw arrays and the saved partition → preprocessed tensors on the run's device."""

from __future__ import annotations

import numpy as np
import torch

from fedbayes import data as ds
from fedbayes.engine.loop import RunData, preprocess
from fedbayes.partition import load_partition


def load_run_data(raw: str, cfg: dict, partition: str | tuple[list[np.ndarray], dict], device):
    """Arrays → preprocessed tensors on ``device`` for one run, its datasets read from ``raw`` (a data
    root: ``engine.partitions.data_root``); ``partition`` is a partition file or the ``(parts, meta)``
    already read from one."""
    arrays = ds.load(cfg["dataset"], root=raw)
    parts, meta = partition if isinstance(partition, tuple) else load_partition(partition)
    used = np.concatenate(parts)
    x_used = arrays.x_train[used].astype(np.float32) / 255.0
    stats = (float(x_used.mean()), float(x_used.std()))
    x_ood = None
    if cfg.get("ood"):
        x_ood = preprocess(ds.load(cfg["ood"], root=raw).x_test, cfg["input_scale"], stats).to(device)
    x_test, y_test = arrays.x_test, arrays.y_test
    if cfg.get("test_subsample"):  # smoke scale: a fixed subset of the test and OOD sets (same for every run)
        keep = lambda n: np.sort(np.random.default_rng(0).permutation(n)[:max(1, round(cfg["test_subsample"] * n))])  # noqa: E731
        kt = keep(len(y_test))
        x_test, y_test = x_test[kt], y_test[kt]
        if x_ood is not None:
            x_ood = x_ood[torch.from_numpy(keep(len(x_ood))).to(x_ood.device)]
    data = RunData(
        x_train=preprocess(arrays.x_train, cfg["input_scale"], stats).to(device),
        y_train=torch.from_numpy(arrays.y_train).long().to(device),
        x_test=preprocess(x_test, cfg["input_scale"], stats).to(device),
        y_test=torch.from_numpy(y_test).long().to(device),
        x_ood=x_ood, n_classes=arrays.n_classes, parts=parts)
    return data, meta
