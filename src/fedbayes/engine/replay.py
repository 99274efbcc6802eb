"""Replay the first rounds of a finished run and compare them with its committed ``history.csv``.

This is the guard behind the rerun rule (reruns follow numbers, not file hashes): a finished run is
adopted by new code as long as its configuration and the numerics versions it recorded are current,
so every change that alters a method's numbers must bump that method's (or the core's) version in
``fedbayes.study.rerun``. ``replay_run`` retrains a run's first rounds with the code at hand, from the
configuration its ``run.json`` recorded, and returns the history columns that differ bit for bit;
``tests/test_replay.py`` runs it on one committed run per method.

How close a replay on another machine class must come is fedbayes.engine.replay_verdict's; the numerics
goldens, the cheaper check the workflow runs, are fedbayes.engine.goldens'.
"""

from __future__ import annotations

import csv
import json
import math
import tempfile
from datetime import datetime, timezone
from pathlib import Path


from fedbayes.study import raw_root, recorded_stand_in
from fedbayes.study.model import RunSpec
from fedbayes.data.root import open_data_root
from fedbayes.engine.partitions import build_partition
from fedbayes.fileio import write_text_atomic
from fedbayes.machine import class_id, machine_class
from fedbayes.provenance import code_identity

# history columns that measure the machine, not the numbers (time, wall-clock, evaluation seconds)
TIMING = ("time_s", "wall_s", "eval_s")


def read_history(path: str | Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def history_gap(run_dir: str | Path, rounds: int) -> str | None:
    """None where the run's history.csv holds rounds 0..``rounds`` as its first rows, in order (what a replay
    of ``rounds`` rounds compares, row by row); else one line naming the file and the rounds it lacks: a
    replay would compare fewer rounds than it claims (none, for a header alone)."""
    path = Path(run_dir) / "history.csv"
    try:
        got = [r.get("round") for r in read_history(path)[:rounds + 1]]
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        return f"{path}: cannot be read ({type(e).__name__}: {e})"
    want = [str(r) for r in range(rounds + 1)]
    if got != want:
        lacks = [r for r in want if r not in got]
        return (f"{path} holds rounds {', '.join(map(str, got)) or 'none'} where a replay of {rounds} rounds compares "
                f"rounds 0-{rounds}" + (f" (it lacks {', '.join(lacks)})" if lacks else "") +
                ": the run is damaged; retrain it (Snakemake reruns it), a replay would compare fewer rounds")
    return None


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


def replay_rows(run_dir: str | Path, rounds: int = 1, raw: str = "data/raw",
                device: str = "cpu") -> tuple[list[dict], list[dict]] | str:
    """Retrain rounds 0..``rounds`` of the finished run in ``run_dir`` (its recorded configuration, its
    partition rebuilt from that configuration, its datasets under ``raw``, or their stand-ins beside it for
    a run on stand-in data): (its committed history rows, the replayed rows as written), or one line when
    the partition rebuilt is not the one it recorded."""
    import torch

    from fedbayes.engine.data import load_run_data  # these two import torch (seconds): only a replay pays it
    from fedbayes.engine.loop import run_federated

    run_dir = Path(run_dir)
    info = json.loads((run_dir / "run.json").read_text())
    cfg = dict(info["config"])
    if gap := history_gap(run_dir, rounds):   # fewer rows than rounds: the comparison would cover less
        return gap
    committed = read_history(run_dir / "history.csv")
    stand_in = recorded_stand_in(cfg)
    root = open_data_root(raw_root(raw, stand_in), stand_in)
    pc = {k: cfg[k] for k in ("dataset", "subsample", "clients", "partition", "seed")}  # config.partition_config's keys
    threads = torch.get_num_threads()
    torch.set_num_threads(int(info.get("threads", 1)))  # the thread count the run was trained with
    try:
        with tempfile.TemporaryDirectory() as tmp:
            parts = build_partition(pc, root, cfg["experiment"], f"{tmp}/partition.npz")
            if cfg.get("partition_hash") and parts[1]["hash"] != cfg["partition_hash"]:
                return f"partition hash {parts[1]['hash']} != recorded {cfg['partition_hash']}"
            data, _ = load_run_data(root, cfg, parts, torch.device(device))
            # its recorded configuration, partition hash included: the checkpoint's key is the recorded one
            replayed = run_federated(RunSpec.from_config(cfg), data, f"{tmp}/run", torch.device(device),
                                     log=lambda m: None, stop_after=rounds)
    finally:
        torch.set_num_threads(threads)
    return committed[:rounds + 1], [{k: ("" if v is None else str(v)) for k, v in r.items()} for r in replayed[:rounds + 1]]


def bit_diffs(committed: list[dict], replayed: list[dict]) -> list[str]:
    """``round N: column committed != replayed`` for every value (timing left out) not equal as written."""
    return [f"round {old['round']}: {col} {value} != {new.get(col)}" for old, new in zip(committed, replayed)
            for col, value in old.items() if col not in TIMING and not _same(value, new.get(col))]


def replay_run(run_dir: str | Path, rounds: int = 1, raw: str = "data/raw", device: str = "cpu") -> list[str]:
    """``replay_rows``, compared bit for bit: every value that differs from the run's ``history.csv``; []
    when they agree."""
    rows = replay_rows(run_dir, rounds, raw, device)
    return [rows] if isinstance(rows, str) else bit_diffs(*rows)


# what a replay across machine classes compares with the spread of the run's seeds, where training has
# amplified round-off beyond its envelope: training's loss and the table metrics of its own prediction

def unrecordable(code: dict) -> str | None:
    """Why the code ``code`` (``provenance.code_identity``) may not record a replay, or None: only a clean
    checkout of a commit may."""
    if code["commit"] and code["dirty"] is False:
        return None
    return ("a replay is recorded only from a clean checkout of a commit: the code at hand is "
            + ("not in git" if not code["commit"] else "a modified tree"))


def record_replay(run_dir: str | Path, rounds: int, verdict: dict | None = None) -> dict:
    """Record in the run's run.json (``replayed``) that the code at hand, a clean commit, gives its rounds
    0..``rounds`` bit for bit, or, with a ``replay_verdict`` from another machine class, within round-off
    or the seed spread: the provenance of a run trained from a modified tree, or before run.json recorded
    its code. Call it only after the replay agreed (bits, or a verdict other than "differs"); ``rounds``
    must be at least 1. The record says how much was replayed (``rounds`` of the run's ``of``), the
    verdict and the machine class; the run's own ``code`` is left as it was."""
    code = code_identity()
    if (why := unrecordable(code)) is not None:
        raise RuntimeError(why)
    if rounds < 1 or (verdict is not None and verdict["verdict"] == "differs"):
        raise ValueError(f"a replay is recorded only when it compared at least one round and agreed (rounds {rounds})")
    if gap := history_gap(run_dir, rounds):   # the rounds recorded are the rounds compared
        raise ValueError(gap)
    path = Path(run_dir) / "run.json"
    info = json.loads(path.read_text())
    identical = verdict is None or verdict["verdict"] == "bit-identical"
    info["replayed"] = {"commit": code["commit"], "source": code["source"], "rounds": int(rounds),
                        "of": int(info["config"]["rounds"]), "identical": identical,
                        **({} if identical else {"verdict": verdict["verdict"], "detail": verdict["line"]}),
                        "machine": class_id(machine_class()), "torch": code["torch"],
                        "numpy": code["numpy"], "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    write_text_atomic(path, json.dumps(info, indent=2) + "\n")
    return info["replayed"]


