"""What an imported run says, read from the run's own files: its code, times, hardware and metric series.

What an imported run says is the training's, not the import's:

- ``git_sha`` / ``mlflow.source.git.commit``: the commit that trained the run (run.json ``code``), with
  ``git_dirty`` (its package sources differed from that commit) and ``source_hash``; a run.json from before
  code identity was recorded gives ``git_sha = unknown`` (never the importer's HEAD) and no
  ``mlflow.source.git.commit``; an installed package's method adds ``plugin``, ``plugin_version`` and
  ``plugin_source`` (run.json ``plugin``: its distribution, version and a hash of its package's files).
- start / end time: run.json ``started`` / ``finished``; where they were not recorded (older runs) the end
  is bounded by when run.json was written (its mtime, or the commit that added it if earlier) and the start
  is the end less the history's training + evaluation seconds. Tag ``times`` says which.
- hardware: the machine class that computed the run's bits (``fedbayes.machine``: ``hardware`` its
  readable id, ``machine_class`` its slug); a run from before the class was recorded says so.
- units: accuracy metrics are logged in % (``ACC_METRICS``), as the tables print them, scaled in decimal
  so 0.7616 is 76.16 and not 76.16000000000001; NLL in nats; ECE, MCE, Brier and AUROC as fractions.
- paths (tags ``run_dir``, ``predictions``) are relative to the repository root (the working directory of
  the workflow), and a path is tagged only where a clone of the repository has the file.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation
from pathlib import Path

from fedbayes.eval.registry import PERCENT as ACC_METRICS  # logged in %, the tables' unit
from fedbayes.machine import class_id, class_slug

NON_METRICS = {"round"}
EVAL_PREFIXES = ("test/", "ood/")  # history columns that belong to one prediction (a variant has its own)


# what an import writes besides the run's files: a change of it (which metrics go on which run, their
# rounding, the tags) makes every run's import stale once, so a store is brought up to it
IMPORT_FORMAT = "2"


def content_hash(run_dir: str | Path, extra: str = "") -> str:
    """What an import of ``run_dir`` holds: a hash of its history.csv, metrics.json and run.json (the
    files it reads and logs as artifacts), of ``extra`` (the published cells' tags, which the tables
    decide) and of ``IMPORT_FORMAT``."""
    h = hashlib.sha256()
    for name in ("history.csv", "metrics.json", "run.json"):
        h.update(name.encode() + b"\0" + (Path(run_dir) / name).read_bytes() + b"\0")
    if extra:
        h.update(b"format " + IMPORT_FORMAT.encode() + b"\0" + extra.encode())
    return h.hexdigest()[:16]


def trained_at(info: dict) -> str:
    """When the run's training finished (run.json ``finished``, UTC ISO), "" where not recorded: which of
    two trainings of one run key is the newer, the same in every clone that holds the run's files."""
    ms = iso_ms(info.get("finished"))
    return "" if ms is None else datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds")


def flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = json.dumps(v) if isinstance(v, (list, tuple)) else v
    return out


def finite(v) -> bool:
    try:
        return math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


def unit_scale(metric: str, variants=()) -> float:
    """100 for an accuracy metric (``test/acc``, ``mean/test/acc``, ``final/mean/test/acc``), else 1."""
    name = metric.removeprefix("final/")
    head, _, rest = name.partition("/")
    if head in variants:
        name = rest
    return 100.0 if name in ACC_METRICS else 1.0


def scaled(value, scale: float) -> float:
    """``value`` × ``scale`` without binary noise: the product of the decimal value as stored (its
    shortest repr), so a fraction 0.7616 logs as 76.16, not 76.16000000000001."""
    v = float(value)
    if scale == 1.0:
        return v
    try:
        return float(Decimal(repr(v)) * Decimal(repr(scale)))
    except InvalidOperation:
        return v * scale


def code_tags(info: dict) -> dict[str, str]:
    """Tags of the code that trained the run, from run.json ``code`` (provenance.code_identity) and, for an
    installed package's method, ``plugin`` (provenance.plugin_identity)."""
    code = info.get("code") or {}
    commit, dirty = code.get("commit"), code.get("dirty")
    tags = {"git_sha": commit or "unknown",
            "git_dirty": "unknown" if dirty is None or not commit else str(bool(dirty)).lower(),
            "source_hash": code.get("source") or "unknown"}
    if commit:  # the UI shows it (6 characters) beside the source name in a run's "Source" row
        tags |= {"mlflow.source.git.commit": commit, "mlflow.source.name": "fedbayes train",
                 "mlflow.source.type": "LOCAL"}
    replayed = info.get("replayed")   # a later clean commit replayed its first rounds (fedbayes replay --record)
    if replayed:
        # bit for bit, or on another machine class the replay's verdict (within round-off, the seed spread, …)
        how = "bit for bit" if replayed.get("identical", True) else str(replayed.get("verdict"))
        on = f" on {replayed['machine']}" if replayed.get("machine") else ""
        tags |= {"replayed_commit": str(replayed.get("commit")),
                 "replayed_rounds": f"{replayed.get('rounds')} of {replayed.get('of')}",
                 "replayed_verdict": how,
                 "provenance": (f"trained from {'a modified tree of ' + commit[:12] if commit and dirty else 'code not recorded'}; "
                                f"rounds 0-{replayed.get('rounds')} of {replayed.get('of')} replayed {how} at the "
                                f"clean commit {str(replayed.get('commit'))[:12]}{on}")}
    plugin = info.get("plugin")   # an installed package's method (provenance.plugin_identity)
    if plugin:
        tags |= {"plugin": str(plugin.get("distribution")), "plugin_version": str(plugin.get("version")),
                 "plugin_source": str(plugin.get("source"))}
    return tags


def hardware_tags(info: dict) -> dict[str, str]:
    """The machine that computed the run's bits, from run.json ``machine`` (fedbayes.machine): ``hardware``
    (class_id: CPU vendor, family/model, vector ISA, torch, NumPy, device) and ``machine_class``
    (class_slug). ``device_name`` is kept only where it names hardware (a GPU), not the CPU architecture."""
    device, name = info.get("device", ""), info.get("device_name", "")
    machine = info.get("machine")
    if isinstance(machine, dict):
        tags = {"hardware": class_id(machine), "machine_class": class_slug(machine)}
        if machine.get("cpu"):
            tags["cpu"] = str(machine["cpu"])
    else:
        tags = {"hardware": f"{device or 'unknown device'}; machine class not recorded (a run from before it was)",
                "machine_class": "not recorded"}
    tags["device"] = device
    if name and device != "cpu":
        tags["device_name"] = name
    return tags


def iso_ms(s) -> int | None:
    try:
        t = datetime.fromisoformat(str(s))
    except (TypeError, ValueError):
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return int(t.timestamp() * 1000)


def _git(args: list[str], cwd: Path) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None


def _written_ms(path: Path) -> tuple[int, str]:
    """An upper bound of when ``path`` was written: its mtime, or the time of the commit that last
    changed it where that is earlier (a fresh clone's files are as new as the checkout)."""
    best, how = int(path.stat().st_mtime * 1000), "run.json mtime"
    status = _git(["status", "--porcelain", "--", path.name], path.parent)
    log = _git(["log", "-1", "--format=%ct", "--", path.name], path.parent)
    if status and log and status.returncode == 0 and not status.stdout.strip() and log.returncode == 0 \
            and log.stdout.strip():
        committed = int(log.stdout.strip()) * 1000
        if committed < best:
            best, how = committed, "date of the last commit of run.json"
    return best, how


def run_times(run_dir: Path, info: dict, history) -> tuple[int, int, list[int], str]:
    """(start ms, end ms, per-row timestamp ms, how they were obtained) of a training run. The per-row
    timestamps add each round's training and evaluation seconds to the start (capped at the end)."""
    seconds = [0.0 if not finite(t) else float(t) for t in history.get("time_s", [0.0] * len(history))]
    evals = [0.0 if not finite(t) else float(t) for t in history.get("eval_s", [0.0] * len(history))]
    elapsed, acc = [], 0.0
    for a, b in zip(seconds, evals):
        acc += a + b
        elapsed.append(acc)
    duration = int(round(1000 * acc))
    start, end = iso_ms(info.get("started")), iso_ms(info.get("finished"))
    if start is not None and end is not None:
        how = "recorded at training (run.json started, finished)"
    elif end is not None:
        start, how = end - duration, "end recorded at training; start = end − history's training + evaluation time"
    else:
        end, bound = _written_ms(run_dir / "run.json")
        start = end - duration
        how = (f"not recorded (run.json from before times were kept): end ≈ {bound} (an upper bound), "
               f"start = end − history's training + evaluation time")
    stamps = [min(end, start + int(round(1000 * e))) for e in elapsed]
    return start, end, stamps, how


def relative(path: Path) -> str:
    """``path`` relative to the repository root (the workflow's working directory) where it lies in it."""
    resolved, root = path.resolve(), Path.cwd().resolve()
    try:
        return resolved.relative_to(root).as_posix()
    except ValueError:
        return os.path.relpath(resolved, root) if not path.is_absolute() else str(path)


def shared_file(path: Path) -> bool:
    """Whether every clone has ``path``: it exists here and, inside a git work tree, git tracks it (an
    ignored or untracked file, such as a run's predictions.npz, is this clone's alone)."""
    if not path.exists():
        return False
    inside = _git(["rev-parse", "--is-inside-work-tree"], path.parent)
    if not inside or inside.returncode != 0 or inside.stdout.strip() != "true":
        return True
    tracked = _git(["ls-files", "--error-unmatch", "--", path.name], path.parent)
    return bool(tracked) and tracked.returncode == 0


def evaluated_history(history, curves):
    """history.csv's training columns (loss, clients, times, bytes) with the metric values from
    metrics.json (``curves``: the one source of metric values, eval.evaluate) in place of training's own."""
    train = history.drop(columns=[c for c in curves.columns if c != "round" and c in history.columns])
    return train.merge(curves, on="round", how="left")


def run_note(experiment, evaluated, point, seed, info, code, how) -> str:
    """mlflow.note.content of a run: what it is, the code and machine that trained it, its units."""
    commit = code["git_sha"] + (" (package sources modified)" if code["git_dirty"] == "true" else "")
    wall = info.get("wall_s")
    return "\n".join([
        f"**{evaluated}** on {experiment}, sweep point `{point}`, seed {seed}.",
        "",
        f"Trained at commit {commit} on {hardware_tags(info)['hardware']}, torch "
        f"{info.get('torch', '?')}" + (f"; {wall:.0f} s of training rounds" if finite(wall) else "") + ".",
        f"Times: {how}.",
        "Accuracy in %, NLL in nats, ECE / Brier / AUROC as fractions (the artifacts keep accuracy as a fraction).",
        "Tags published/<metric> and verdict/<metric>: the published value and the verdict of each table cell "
        "this run is averaged into."])
