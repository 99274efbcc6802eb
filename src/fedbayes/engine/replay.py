"""Replay the first rounds of a finished run and compare them with its committed ``history.csv``.

This is the guard behind the rerun rule (reruns follow numbers, not file hashes): a finished run is
adopted by new code as long as its configuration and the numerics versions it recorded are current,
so every change that alters a method's numbers must bump that method's (or the core's) version in
``fedbayes.catalog``. ``replay_run`` retrains a run's first rounds with the code at hand, from the
configuration its ``run.json`` recorded, and returns the history columns that differ bit for bit;
``tests/test_replay.py`` runs it on one committed run per method.
"""

from __future__ import annotations

import csv
import json
import math
import tempfile
from pathlib import Path

# history columns that measure the machine, not the numbers (time, wall-clock, evaluation seconds)
TIMING = ("time_s", "wall_s", "eval_s")


def read_history(path: str | Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _same(a: str, b) -> bool:
    """A committed value (its CSV text) against a replayed one: equal as written (``repr`` of a
    float round-trips, so equal text is equal bits); both empty or both NaN also agree."""
    if b is None or b == "":
        return a == ""
    if a == str(b):
        return True
    try:
        return math.isnan(float(a)) and math.isnan(float(b))
    except ValueError:
        return False


def replay_run(run_dir: str | Path, rounds: int = 1, raw: str = "data/raw", device: str = "cpu") -> list[str]:
    """Retrain rounds 0..``rounds`` of the finished run in ``run_dir`` (its recorded configuration, its
    partition rebuilt from that configuration) and return ``round N: column committed != replayed``
    for every value that differs from its ``history.csv``; [] when they agree bit for bit."""
    import torch

    from fedbayes.cli import write_partition
    from fedbayes.engine.data import load_run_data
    from fedbayes.engine.loop import run_federated

    run_dir = Path(run_dir)
    info = json.loads((run_dir / "run.json").read_text())
    cfg = dict(info["config"])
    committed = read_history(run_dir / "history.csv")
    threads = torch.get_num_threads()
    torch.set_num_threads(int(info.get("threads", 1)))  # the thread count the run was trained with
    try:
        with tempfile.TemporaryDirectory() as tmp:
            params = _params_for(cfg, raw)
            parts = write_partition(params, cfg["experiment"], cfg["seed"], f"{tmp}/partition.npz")
            if cfg.get("partition_hash") and parts[1]["hash"] != cfg["partition_hash"]:
                return [f"partition hash {parts[1]['hash']} != recorded {cfg['partition_hash']}"]
            data, _ = load_run_data(params, cfg, parts, torch.device(device))
            replayed = run_federated(cfg, data, f"{tmp}/run", torch.device(device), log=lambda m: None,
                                     stop_after=rounds)
    finally:
        torch.set_num_threads(threads)
    diffs = []
    for old, new in zip(committed[:rounds + 1], replayed[:rounds + 1]):
        for col, value in old.items():
            if col not in TIMING and not _same(value, new.get(col)):
                diffs.append(f"round {old['round']}: {col} {value} != {new.get(col)}")
    return diffs


def _params_for(cfg: dict, raw: str) -> dict:
    """The smallest params dict that ``write_partition`` and ``load_run_data`` need for one recorded run
    configuration: its experiment, as the run recorded it."""
    keys = ("dataset", "subsample", "clients", "partition")
    return {"paths": {"raw": raw}, "scale": cfg.get("scale", "paper"),
            "experiments": {cfg["experiment"]: {k: cfg[k] for k in keys}}}
