"""Replay the first rounds of a finished run and compare them with its committed ``history.csv``.

This is the guard behind the rerun rule (reruns follow numbers, not file hashes): a finished run is
adopted by new code as long as its configuration and the numerics versions it recorded are current,
so every change that alters a method's numbers must bump that method's (or the core's) version in
``fedbayes.study.rerun``. ``replay_run`` retrains a run's first rounds with the code at hand, from the
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

from fedbayes.study import FROZEN_DEFAULTS, METHOD_SPECS, method_defaults, numerics
from fedbayes.study import raw_root, recorded_stand_in
from fedbayes.data import make_synthetic
from fedbayes.data.root import open_data_root
from fedbayes.eval.registry import evaluated_column
from fedbayes.engine.partitions import build_partition
from fedbayes.fileio import write_text_atomic
from fedbayes.partition import make_partition
from fedbayes.machine import class_id, class_slug, machine_class, same_class
from fedbayes.engine import roundoff
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
            replayed = run_federated(cfg, data, f"{tmp}/run", torch.device(device), log=lambda m: None,
                                     stop_after=rounds)
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
SPREAD_COLUMNS = ("train/loss", "test/acc", "test/nll", "test/ece", "test/brier")
# a replayed value may differ from the committed one by this many times the range of the run's seeds: the
# difference of two draws has sd √2·σ and the range of 3 draws averages 1.69σ, so twice the range is
# about 2.4 sd of the difference (a replay that trains like another seed passes ~98 % of the time)
SPREAD_FACTOR = 2.0


def seed_spread(run_dir: str | Path, round_: int) -> dict[str, tuple[float, float, int]]:
    """column → (min, max, seeds) at round ``round_`` over the committed seeds of the run's sweep point
    (its sibling ``seed*`` folders, itself included), for the columns of ``SPREAD_COLUMNS`` that at least
    two seeds give."""
    values: dict[str, list[float]] = {}
    for d in sorted(Path(run_dir).parent.glob("seed*")):
        try:
            row = next((r for r in read_history(d / "history.csv") if r.get("round") == str(round_)), None)
        except OSError:
            continue
        for col in SPREAD_COLUMNS:
            try:
                values.setdefault(col, []).append(float(row[col]))
            except (TypeError, KeyError, ValueError):
                pass
    return {c: (min(v), max(v), len(v)) for c, v in values.items() if len(v) >= 2}


def replay_verdict(run_dir: str | Path, rounds: int = 1, raw: str = "data/raw", device: str = "cpu") -> dict:
    """Replay ``rounds`` rounds of a finished run (``replay_rows``) and judge them by machine class:
    ``{"verdict", "line", "rounds", "machine"}`` where verdict is "bit-identical"; "within round-off"
    (every value within ``engine.roundoff``'s envelope); "within the seed spread" (training amplified
    round-off beyond the envelope: each ``SPREAD_COLUMNS`` value of the last replayed round differs from
    the committed one by no more than ``SPREAD_FACTOR`` × the range of the run's seeds at that round, every round before
    the first training round within round-off); or "differs" (anything else, and anything but
    bit-identical on the run's own recorded machine class). A run with no other seed to compare with is
    judged by ``perturbed_rows`` instead: "within the amplified round-off" when each value outside the
    envelope differs by at most ``AMPLIFIED_FACTOR`` × what another vector width makes here."""
    here = machine_class()
    info = json.loads((Path(run_dir) / "run.json").read_text())
    rows = replay_rows(run_dir, rounds, raw, device)
    base = {"rounds": rounds, "machine": class_id(here)}
    if isinstance(rows, str):
        return {**base, "verdict": "differs", "line": rows}
    committed, replayed = rows
    bits = bit_diffs(committed, replayed)
    if not bits:
        return {**base, "verdict": "bit-identical", "line": f"rounds 0-{rounds} bit-identical"}
    if same_class(info.get("machine"), here):
        return {**base, "verdict": "differs", "line": f"{len(bits)} values differ on the run's own machine class, "
                                                      f"first: {bits[0]}"}
    outside, worst_line, worst = roundoff.compare(committed, replayed, skip=TIMING)
    if not outside:
        return {**base, "verdict": "within round-off",
                "line": f"rounds 0-{rounds} within round-off (largest difference {worst:.2g} of the envelope: {worst_line})"}
    first = min(int(line.split(":")[0].removeprefix("round ")) for line in outside if line.startswith("round "))
    within = (f"round{'s 0-' if first > 1 else ' '}{first - 1} within round-off, " if first >= 1 else "")
    last = committed[-1]
    spread = seed_spread(run_dir, int(last["round"]))
    if first >= 1 and spread:
        shown, ok = [], True
        for col, (lo, hi, n) in spread.items():
            a, b = float(last[col]), float(replayed[-1].get(col) or "nan")
            ok = ok and abs(a - b) <= SPREAD_FACTOR * (hi - lo)
            shown.append(f"{col} {a:.4g} -> {b:.4g} (|Δ| {abs(a - b):.2g}; {n} seeds {lo:.4g}-{hi:.4g})")
        if ok:
            return {**base, "verdict": "within the seed spread",
                    "line": f"{within}round {last['round']} within the seed spread: " + "; ".join(shown)}
        return {**base, "verdict": "differs", "line": f"{len(outside)} values beyond round-off, first: {outside[0]}; "
                f"round {last['round']}: " + "; ".join(shown)}
    # one seed: how much does this run's training amplify round-off here? Replay it again with PyTorch's
    # kernels at another vector width (another class on the same CPU) and allow AMPLIFIED_FACTOR × that
    perturbed = perturbed_rows(run_dir, rounds, raw)
    if first >= 1 and perturbed is not None:
        ratios = []
        for w, g, p in zip(committed, replayed, perturbed):
            for col, value in w.items():
                e = roundoff.excess(col, value, g.get(col))
                if col in TIMING or e <= 1:
                    continue
                here_spread = max(roundoff.excess(col, g.get(col, ""), p.get(col)), 1.0)
                ratios.append((e / here_spread,
                               f"round {w['round']}: {col} {value} != {g.get(col)}"))
        worst = max(ratios)
        if worst[0] <= AMPLIFIED_FACTOR:
            return {**base, "verdict": "within the amplified round-off",
                    "line": f"{within}round {last['round']} within {AMPLIFIED_FACTOR:g}× the difference a replay here "
                            f"at another vector width makes (largest {worst[0]:.2g}×: {worst[1]})"}
        return {**base, "verdict": "differs", "line": f"{len(outside)} values beyond round-off, first: {outside[0]}; "
                f"{worst[0]:.3g}× the difference another vector width makes here ({worst[1]})"}
    return {**base, "verdict": "differs", "line": f"{len(outside)} values beyond round-off, first: {outside[0]}"}


# a one-seed run replayed on another class may differ from its history by this many times what a second
# replay here, at another vector width, differs from the first (how much its training amplifies round-off).
# Measured on an Intel Xeon against runs of the goldens' AMD machine, round 1: FedBE 1×, FedCurv, FedNova and
# FOLA up to 42× (two perturbations of the same size are amplified by unequal amounts); the goldens, not
# this, are what tells a code change from round-off
AMPLIFIED_FACTOR = 100.0


def perturbed_rows(run_dir: str | Path, rounds: int, raw: str) -> list[dict] | None:
    """The run's first rounds replayed in a child process with PyTorch's CPU kernels at another vector
    width than this process's (``ATEN_CPU_CAPABILITY``: default, or AVX2 where this one runs default), as
    written; None where the child fails."""
    import os
    import subprocess
    import sys

    other = "avx2" if machine_class()["aten"] == "DEFAULT" else "default"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        r = subprocess.run([sys.executable, "-m", "fedbayes.cli", "replay", str(run_dir), "--rounds", str(rounds),
                            "--root", str(raw), "--rows-out", str(out)], capture_output=True, text=True,
                           env={**os.environ, "ATEN_CPU_CAPABILITY": other})
        if r.returncode != 0 or not out.exists():
            return None
        return json.loads(out.read_text())


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
    """A numerics golden of the code at hand: its hyperparameters, the spec defaults it read, its history,
    a digest of each round's kept predictions (``prediction_digests``) and the machine class that computed
    it (``fedbayes.machine``: bits are promised within a class)."""
    return {"method": method, "hparams": hp, "defaults": method_defaults(method, hp),
            "history": as_text(golden_history(method, hp, tmp)), "predictions": prediction_digests(tmp),
            "machine": machine_class()}


# the machine class of the goldens that record none (written before classes were recorded): the file of
# that name beside them
GOLDENS_MACHINE = "machine.json"


def golden_class(golden: dict, path: str | Path) -> dict | None:
    """The machine class a golden was computed on: its own record, else its folder's ``machine.json``
    (``{"machine": {...}}``), else unknown (None: compared within round-off everywhere)."""
    if golden.get("machine"):
        return golden["machine"]
    try:
        return json.loads((Path(path).parent / GOLDENS_MACHINE).read_text())["machine"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def roundoff_diffs(golden: dict, tmp: str | Path) -> tuple[list[str], str, float, list[dict]]:
    """A golden of another machine class against the code at hand, every column within the round-off
    envelope (``engine.roundoff``; prediction digests are bits, so the evaluated metrics stand for them):
    (values outside it, the largest difference as a line, its fraction of the envelope, the history
    computed here)."""
    got = as_text(golden_history(golden["method"], golden_hparams_with_defaults(golden), tmp))
    outside, worst_line, worst = roundoff.compare(golden["history"], got)
    return outside, worst_line, worst, got


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
    """What the method's numbers are computed by, and on what: fedbayes' sources (``provenance.source_hash``,
    the shared core and every method: one hash, no import graph to keep right), a plug-in's package
    (``provenance.plugin_identity``), the numerics versions the run would record, and the machine class
    (another class, or the same CPU with another vector width, is checked again)."""
    plugin = plugin_identity(method)
    v = numerics(method)
    return f"{source_hash()}/{plugin['source'] if plugin else '-'}/v{v['core']}.{v['method']}/{class_slug(machine_class())}"


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


def golden_methods(goldens: str | Path) -> list[str]:
    """The installed methods with a committed golden of their current numerics version in ``goldens``."""
    return [m for m in sorted(METHOD_SPECS) if (Path(goldens) / golden_name(m)).exists()]


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


def class_golden(path: Path, goldens: str | Path, slug: str) -> Path | None:
    """A committed golden of this machine's class with the name of ``path``: ``<goldens>/<slug>/<name>``
    (``machine.class_slug``), written on a machine of that class (``python tests/test_replay.py --class``)."""
    own = Path(goldens) / slug / path.name
    return own if own.exists() else None


def check_golden(path: Path, goldens: str | Path, tmp: str | Path) -> tuple[dict, dict]:
    """Replay one golden with the code at hand on this machine. Returns (the golden, the verdict):
    ``{"mode": "bits" | "round-off", "outside": [...], "worst": line, "fraction": float, "class": id,
    "history": rows computed}``. Bit for bit against a golden of this machine's class (the golden itself,
    or a committed one of this class beside it); within the round-off envelope (``engine.roundoff``)
    against one of another class."""
    here = machine_class()
    golden = json.loads(Path(path).read_text())
    own = class_golden(Path(path), goldens, class_slug(here))
    if own is not None:
        path, golden = own, json.loads(own.read_text())
    cls = golden_class(golden, path)
    if same_class(cls, here):
        return golden, {"mode": "bits", "outside": golden_diffs(golden, tmp), "class": class_id(cls), "golden": str(path)}
    outside, worst_line, worst, got = roundoff_diffs(golden, tmp)
    return golden, {"mode": "round-off", "outside": outside, "worst": worst_line, "fraction": worst, "history": got,
                    "class": class_id(cls) if cls else "not recorded", "golden": str(path)}


def numerics_check(method: str, goldens: str | Path, record: str | Path, hparams: dict | None = None) -> str | None:
    """Replay every numerics golden of the method (one per code path its runs take, ``golden_files``) with
    the code at hand (``check_golden``: bit for bit on the golden's machine class, within round-off on
    another). The same numbers → write ``record`` (the code's fingerprint, the machine class, the
    signatures checked and the verdict: the check is not repeated until the code, the class or a run's
    path changes) and return None; within round-off, this machine's goldens are recorded beside
    ``record`` (``<record dir>/<class slug>/``). Otherwise return one line naming the method and the first
    value outside (bits on its own class, the envelope on another), and write nothing.
    The goldens are the committed ones in ``goldens``, and the workflow's own baselines beside
    ``record``: a run whose ``hparams`` take a path no golden covers (a plug-in, a version bumped without
    writing one, a new option) gets one on its first check, from its configuration shrunk to
    ``GOLDEN_SIZES``."""
    record = Path(record)
    here = machine_class()
    files = golden_files(method, goldens, record.parent)
    tag = run_tag(method, hparams) if hparams is not None else None
    with tempfile.TemporaryDirectory() as tmp:
        seen, result, roundoffs = [], "bit-identical", []
        for path in files:
            try:
                golden, v = check_golden(path, goldens, tmp)
            except (ValueError, KeyError, TypeError, OSError) as e:
                return f"{method}: its numerics golden {path} is unreadable ({type(e).__name__}: {e})"
            if v["outside"] and v["mode"] == "bits":
                return (f"{method}'s numbers changed without a numerics version bump: {v['outside'][0]} (golden "
                        f"{v['golden']}, {len(v['outside'])} values differ, bit for bit on its own machine class); "
                        f"bump its spec's numerics (or CORE_NUMERICS in fedbayes/study/rerun.py) and write its golden, "
                        f"or revert the change")
            if v["outside"]:
                return (f"{method}'s numbers changed without a numerics version bump: {v['outside'][0]} (golden "
                        f"{v['golden']}, {len(v['outside'])} values beyond round-off; it was computed on {v['class']}, "
                        f"this machine is {class_id(here)}); if you changed the code: bump its spec's numerics (or "
                        f"CORE_NUMERICS in fedbayes/study/rerun.py) and write its golden, or revert the change; if you "
                        f"changed nothing, this machine rounds beyond the envelope measured on other classes "
                        f"(docs/workflow.md, \"Same numbers on another machine\"): report this line")
            if v["mode"] == "round-off":
                ref = {"golden": v["golden"], "class": v["class"], "largest": v["worst"],
                       "of_envelope": round(v["fraction"], 4)}
                own = {**golden, "history": v["history"], "predictions": prediction_digests(tmp), "machine": here,
                       "reference": ref}
                mine = record.parent / class_slug(here) / Path(path).name
                mine.parent.mkdir(parents=True, exist_ok=True)
                write_text_atomic(mine, json.dumps(own, indent=1) + "\n")
                roundoffs.append({**ref, "recorded": str(mine)})
                result = "within round-off"
            seen.append(signature_tag(golden_hparams_with_defaults(golden)))
        if tag is not None and tag not in seen:
            name = path_golden_name(method, tag) if files else golden_name(method)
            golden = make_golden(method, {**hparams, **GOLDEN_SIZES}, tmp)
            record.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(record.parent / name, json.dumps(golden, indent=1) + "\n")
            seen.append(tag)
            result = "baseline written" if result == "bit-identical" else result
        elif not files:
            return f"{method}: no numerics golden {Path(goldens) / golden_name(method)} and no run configuration to make one"
    record.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(record, json.dumps({"method": method, "fingerprint": code_fingerprint(method),
                                          "machine": class_id(here),
                                          "golden": str(files[0] if files else record.parent / golden_name(method)),
                                          "goldens": [str(f) for f in files], "signatures": seen,
                                          "result": result, **({"roundoff": roundoffs} if roundoffs else {})},
                                         indent=1) + "\n")
    return None


def roundoff_note(records: list[str | Path]) -> str | None:
    """The one line a check within round-off prints (None when every record is bit-identical or none was
    checked within round-off): the goldens' class, this machine's, how many goldens, the largest
    difference as a fraction of the envelope."""
    rows = []
    for r in records:
        try:
            rows += json.loads(Path(r).read_text()).get("roundoff", [])
        except (OSError, ValueError, AttributeError):
            continue
    if not rows:
        return None
    worst = max(rows, key=lambda x: x["of_envelope"])
    classes = sorted({x["class"] for x in rows})
    return (f"this machine rounds differently from the goldens' machine (class {'; '.join(classes)}); runs here "
            f"replay within round-off, not bit for bit ({len(rows)} goldens within the envelope, the largest "
            f"difference {worst['of_envelope']:.2g} of it: {worst['largest'] or 'none'}; this machine is "
            f"{class_id(machine_class())}, its goldens recorded in {Path(worst['recorded']).parent})")
