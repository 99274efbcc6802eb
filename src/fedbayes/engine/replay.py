"""Replay the first rounds of a finished run and compare them with its committed ``history.csv``.

This is the guard behind the rerun rule (reruns follow numbers, not file hashes): a finished run is
adopted by new code as long as its configuration and the numerics versions it recorded are current,
so every change that alters a method's numbers must bump that method's (or the core's) version in
``fedbayes.catalog``. ``replay_run`` retrains a run's first rounds with the code at hand, from the
configuration its ``run.json`` recorded, and returns the history columns that differ bit for bit;
``tests/test_replay.py`` runs it on one committed run per method.

The workflow enforces the rule itself with the cheaper half of that test (``numerics_check``, the CLI's
``numerics-check``, run by the DAG: workflow/rules/train.smk): a method's numerics golden — 3 rounds of
a tiny synthetic problem, ``tests/golden/numerics/<method>.v<core>.<version>.json`` — replayed whenever
the code (fedbayes' sources, a plug-in's package) differs from the code of the method's last check;
bit-identical numbers adopt the code silently, others stop the DAG with one line naming the method and
the first differing value (docs/workflow.md: cost and cadence).
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from fedbayes.catalog import FROZEN_DEFAULTS, method_defaults, numerics
from fedbayes.config import raw_root, recorded_stand_in
from fedbayes.data import make_synthetic
from fedbayes.data.root import open_data_root
from fedbayes.eval.registry import evaluated_column
from fedbayes.engine.partitions import build_partition
from fedbayes.fileio import write_text_atomic
from fedbayes.partition import make_partition
from fedbayes.provenance import code_identity, plugin_identity, source_hash

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
    partition rebuilt from that configuration, its datasets under ``raw``, or their stand-ins beside it for
    a run on stand-in data) and return ``round N: column committed != replayed`` for every value that
    differs from its ``history.csv``; [] when they agree bit for bit."""
    import torch

    from fedbayes.engine.data import load_run_data  # these two import torch (seconds): only a replay pays it
    from fedbayes.engine.loop import run_federated

    run_dir = Path(run_dir)
    info = json.loads((run_dir / "run.json").read_text())
    cfg = dict(info["config"])
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
                return [f"partition hash {parts[1]['hash']} != recorded {cfg['partition_hash']}"]
            data, _ = load_run_data(root, cfg, parts, torch.device(device))
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


def unrecordable(code: dict) -> str | None:
    """Why the code ``code`` (``provenance.code_identity``) may not record a replay, or None: only a clean
    checkout of a commit may."""
    if code["commit"] and code["dirty"] is False:
        return None
    return ("a replay is recorded only from a clean checkout of a commit: the code at hand is "
            + ("not in git" if not code["commit"] else "a modified tree"))


def record_replay(run_dir: str | Path, rounds: int) -> dict:
    """Record in the run's run.json (``replayed``) that the code at hand, a clean commit, gives its rounds
    0..``rounds`` bit for bit: the provenance of a run trained from a modified tree, or before run.json
    recorded its code. Call it only after ``replay_run`` returned no difference. The record says how
    much was replayed (``rounds`` of the run's ``of``); the run's own ``code`` is left as it was."""
    code = code_identity()
    if (why := unrecordable(code)) is not None:
        raise RuntimeError(why)
    path = Path(run_dir) / "run.json"
    info = json.loads(path.read_text())
    info["replayed"] = {"commit": code["commit"], "source": code["source"], "rounds": int(rounds),
                        "of": int(info["config"]["rounds"]), "identical": True, "torch": code["torch"],
                        "numpy": code["numpy"], "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    write_text_atomic(path, json.dumps(info, indent=2) + "\n")
    return info["replayed"]


# what a golden's run is shrunk to: seconds on a CPU, whatever the method's real settings
GOLDEN_SIZES = dict(local_epochs=2, batch_size=32, server_iters=20, pred_samples=3, mc_every=1, burn_in=1,
                    laplace_epochs=1, ngvi_epochs=1, ngvi_samples=2)


def golden_name(method: str) -> str:
    """``<method>.v<core>.<method version>.json``: a golden holds one numerics version's numbers."""
    v = numerics(method)
    return f"{method}.v{v['core']}.{v['method']}.json"


def golden_history(method: str, hp: dict, tmp: str | Path) -> list[dict]:
    """The method on a tiny synthetic problem: 4 Dirichlet clients, a 32-16 ReLU MLP, 3 rounds, one CPU
    thread (what a numerics golden records)."""
    import torch

    from fedbayes.engine.loop import RunData, preprocess, run_federated  # imports torch (seconds)

    a = make_synthetic()
    idx = np.arange(400)
    parts = [idx[p] for p in make_partition(a["y_train"][idx], 4, "dirichlet", np.random.default_rng(0), min_size=8)]
    noise = np.random.default_rng(1).integers(0, 256, size=(50, 28, 28), dtype=np.uint8)
    data = RunData(x_train=preprocess(a["x_train"], "unit"), y_train=torch.from_numpy(a["y_train"]).long(),
                   x_test=preprocess(a["x_test"][:100], "unit"), y_test=torch.from_numpy(a["y_test"][:100]).long(),
                   x_ood=preprocess(noise, "unit"), n_classes=10, parts=parts)
    cfg = {"experiment": "numerics-golden", "method": method, "point": "default", "seed": 0, "scale": "smoke",
           "dataset": "synthetic", "ood": "noise", "subsample": 1.0, "clients": 4, "partition": {"scheme": "dirichlet"},
           "participation": 1.0, "rounds": 3, "model": {"name": "mlp", "hidden": [32, 16], "activation": "relu"},
           "input_scale": "unit", "hparams": hp, "save_rounds": [1, 2, 3]}
    torch.set_num_threads(1)
    return run_federated(cfg, data, tmp, torch.device("cpu"), log=lambda m: None)


def as_text(history: list[dict]) -> list[dict]:
    """History rows as the CSV writer writes them (``str`` of each value), timing columns left out."""
    return [{k: ("" if v is None else str(v)) for k, v in row.items() if k not in TIMING} for row in history]


def golden_hparams_with_defaults(golden: dict) -> dict:
    """A golden's hyperparameters with the spec defaults it ran under filled in: its ``defaults`` (a golden
    written since they are recorded), else ``catalog.FROZEN_DEFAULTS`` (the defaults when the committed
    goldens were written). An edited default is a configuration change (the rerun rule reruns the runs
    that read it), not a numbers change of the code: the golden is replayed under its own defaults."""
    defaults = golden["defaults"] if "defaults" in golden else FROZEN_DEFAULTS.get(golden["method"], {})
    return {**defaults, **golden["hparams"]}


def make_golden(method: str, hp: dict, tmp: str | Path) -> dict:
    """A numerics golden of the code at hand: its hyperparameters, the spec defaults it read, its history
    and a digest of each round's kept predictions (``prediction_digests``)."""
    return {"method": method, "hparams": hp, "defaults": method_defaults(method, hp),
            "history": as_text(golden_history(method, hp, tmp)), "predictions": prediction_digests(tmp)}


def prediction_digests(run_dir: str | Path) -> dict[str, str]:
    """Round → a digest of every log-probability the run kept at that round (its predictions.npz, every
    key but the labels), bit for bit: what the model predicts, whatever the metrics make of it."""
    with np.load(Path(run_dir) / "predictions.npz", allow_pickle=False) as z:
        keys = sorted(k for k in z.files if k not in ("rounds", "y_test"))
        arrays = {k: z[k] for k in keys}
        return {str(int(r)): hashlib.sha256(b"".join(k.encode() + arrays[k][i].tobytes() for k in keys)).hexdigest()[:16]
                for i, r in enumerate(z["rounds"])}


def golden_diffs(golden: dict, tmp: str | Path) -> list[str]:
    """``round N: column golden != now`` for each value of a golden (``{"method", "hparams", "history"}``,
    ``defaults``, ``predictions``) the code at hand computes otherwise; [] when it gives the golden bit for
    bit. A golden with prediction digests compares them, and training's own columns (loss, bytes, local
    accuracy), not the evaluated metrics: a metric definition change is evaluation's (eval.evaluate
    re-evaluates every kept round), not a numbers change of training. One without (written before
    predictions were digested) compares every column."""
    want, got = golden["history"], as_text(golden_history(golden["method"], golden_hparams_with_defaults(golden), tmp))
    digests = golden.get("predictions")
    diffs = [f"round {w['round']}: {k} {w[k]} != {g.get(k, '<absent>')}" for w, g in zip(want, got) for k in w
             if w[k] != g.get(k, "") and not (digests is not None and evaluated_column(k))]
    if digests is not None:
        now = prediction_digests(tmp)
        diffs += [f"round {r}: predictions {d} != {now.get(r, '<absent>')}" for r, d in digests.items() if now.get(r) != d]
    return diffs + ([f"{len(want)} rounds != {len(got)}"] if len(want) != len(got) else [])


def code_fingerprint(method: str) -> str:
    """What the method's numbers are computed by: fedbayes' sources (``provenance.source_hash``, the
    shared core and every method: one hash, no import graph to keep right), a plug-in's package
    (``provenance.plugin_identity``) and the numerics versions the run would record."""
    plugin = plugin_identity(method)
    v = numerics(method)
    return f"{source_hash()}/{plugin['source'] if plugin else '-'}/v{v['core']}.{v['method']}"


def path_signature(hp: dict) -> dict:
    """The hyperparameters that choose a code path rather than a number: a run's string and boolean values
    (optimizer, client optimizer, schedule, variant, …). A numerics golden checks the paths of its own
    signature, so the check replays one golden per signature the method's runs use."""
    return {k: v for k, v in sorted(hp.items()) if isinstance(v, (str, bool))}


def signature_tag(hp: dict) -> str:
    """8 hex of a path signature: the name of the golden that checks it (``<method>.v<c>.<v>.<tag>.json``)."""
    return hashlib.sha256(json.dumps(path_signature(hp), sort_keys=True).encode()).hexdigest()[:8]


def run_tag(method: str, hparams: dict) -> str:
    """The signature tag of a run's resolved ``hparams`` with the spec defaults it reads filled in (as a
    golden's, ``golden_hparams_with_defaults``): a value left at its default takes the same path."""
    return signature_tag({**method_defaults(method, hparams), **hparams})


def path_golden_name(method: str, tag: str) -> str:
    """``<method>.v<core>.<version>.<tag>.json``: the golden of a further code path (``signature_tag``)."""
    return f"{golden_name(method).removesuffix('.json')}.{tag}.json"


def golden_files(method: str, *dirs: str | Path) -> list[Path]:
    """The method's goldens of its current numerics version in ``dirs``: ``<golden_name>`` first, then one
    ``path_golden_name`` per further path signature."""
    main, other = golden_name(method), len(path_golden_name(method, "0" * 8))
    return [f for d in dirs for f in sorted(Path(d).glob(f"{main.removesuffix('.json')}*.json"),
                                            key=lambda f: (f.name != main, f.name))
            if f.name == main or len(f.name) == other]


def check_due(method: str, record: str | Path, hparams: dict | None = None) -> bool:
    """Whether the code differs from the code of the method's last check (its record ``record``: none,
    unreadable, or another ``code_fingerprint``), or a run's ``hparams`` take a code path (``path_signature``)
    no golden of that check covered. Torch-free, a hash of the sources: the DAG asks it for every method
    with finished runs, each time it is built."""
    try:
        rec = json.loads(Path(record).read_text())
        if rec.get("fingerprint") != code_fingerprint(method):
            return True
        return hparams is not None and "signatures" in rec and run_tag(method, hparams) not in rec["signatures"]
    except (OSError, ValueError, AttributeError):
        return True


def numerics_check(method: str, goldens: str | Path, record: str | Path, hparams: dict | None = None) -> str | None:
    """Replay every numerics golden of the method (one per code path its runs take, ``golden_files``) with
    the code at hand: all bit-identical → write ``record`` (the code's fingerprint and the signatures
    checked: the check is not repeated until the code changes or a run takes another path) and return
    None; otherwise return one line naming the method and the first differing value, and write nothing.
    The goldens are the committed ones in ``goldens``, and the workflow's own baselines beside
    ``record``: a run whose ``hparams`` take a path no golden covers (a plug-in, a version bumped without
    writing one, a new option) gets one on its first check, from its configuration shrunk to
    ``GOLDEN_SIZES``."""
    record = Path(record)
    files = golden_files(method, goldens, record.parent)
    tag = run_tag(method, hparams) if hparams is not None else None
    with tempfile.TemporaryDirectory() as tmp:
        seen, result = [], "bit-identical"
        for path in files:
            try:
                golden = json.loads(path.read_text())
                diffs = golden_diffs(golden, tmp)
            except (ValueError, KeyError, TypeError) as e:
                return f"{method}: its numerics golden {path} is unreadable ({type(e).__name__}: {e})"
            if diffs:
                return (f"{method}'s numbers changed without a numerics version bump: {diffs[0]} (golden {path}, "
                        f"{len(diffs)} values differ); bump its spec's numerics (or CORE_NUMERICS in "
                        f"fedbayes/catalog.py) and write its golden, or revert the change")
            seen.append(signature_tag(golden_hparams_with_defaults(golden)))
        if tag is not None and tag not in seen:
            name = path_golden_name(method, tag) if files else golden_name(method)
            golden = make_golden(method, {**hparams, **GOLDEN_SIZES}, tmp)
            record.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(record.parent / name, json.dumps(golden, indent=1) + "\n")
            seen.append(tag)
            result = "baseline written"
        elif not files:
            return f"{method}: no numerics golden {Path(goldens) / golden_name(method)} and no run configuration to make one"
    record.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(record, json.dumps({"method": method, "fingerprint": code_fingerprint(method),
                                          "golden": str(files[0] if files else record.parent / golden_name(method)),
                                          "goldens": [str(f) for f in files], "signatures": seen,
                                          "result": result}, indent=1) + "\n")
    return None
