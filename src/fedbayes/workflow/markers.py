"""The rerun markers: a job that must rerun for a reason Snakemake's own checks miss (a changed
configuration, a damaged or missing file, a lost MLflow import) gets an input that the ``marker`` job
writes, named by a hash of its text and of the state of the files of the job that reads it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


def file_state(files) -> list[tuple[str, int, int]]:
    """(path, size, mtime) of each of ``files`` that exists."""
    out = []
    for f in files:
        try:
            st = Path(f).stat()
        except OSError:
            continue
        out.append((str(f), st.st_size, st.st_mtime_ns))
    return out


def marker(path, why: str, reasons, consumer) -> tuple[str, str] | None:
    """The marker (file, text) that makes a job rerun, or None where none is needed: no ``reasons``, or
    none of the job's files ``consumer`` exists (it runs anyway, for its outputs). The file is named by a
    hash of its text and of the state (size, mtime) of ``consumer``: the same reason after the job has
    rerun (its outputs rewritten) is a new marker, not an old file older than the outputs."""
    state = file_state(consumer)
    if not reasons or not state:
        return None
    text = why + ", ".join(reasons)
    key = hashlib.sha256(json.dumps([text, state]).encode()).hexdigest()[:12]
    return f"{str(path).removesuffix('.txt')}.rerun-{key}.txt", text


def forcerun_problem(path, text: str, forceall: bool, forcerun, rule: str = "marker") -> str | None:
    """The one-line error where a marker is needed while the command line's --forcerun replaced the
    default profile's list (the marker job would not run: Snakemake runs the job of a missing
    intermediate file only when a job that reads it must run anyway)."""
    if forceall or rule in set(forcerun or ()):
        return None
    return (f"{path}: {text}; this rerun needs its {rule} job forced, and this command's --forcerun replaced "
            f"the default profile's list: add {rule} to it (--forcerun {rule} …)")


def missing(files) -> list[str]:
    """The ``files`` that do not exist, as given."""
    return [str(f) for f in files if not Path(f).exists()]
