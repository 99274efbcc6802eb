"""Which files a report command may write: its own output, or a file outside the workflow's folders.

A command's ``--out`` names where it writes, but every file under the workflow's folders (runs,
partitions, datasets, reports, work) belongs to one rule, and a run's files to its training job: a report
command given one of them would overwrite it. :func:`check_outputs` refuses such an ``--out`` before any
work, in one line naming the file and what is accepted.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from fedbayes.study import ConfigError, paths

# what a training or evaluation job writes into its run directory (fedbayes.runfiles reads them)
RUN_FILES = frozenset({"history.csv", "run.json", "metrics.json", "predictions.npz", "posterior.pt", "selected.json"})
TREES = ("runs", "partitions", "raw", "reports", "work")


def _trees(p: dict) -> list[tuple[str, Path]]:
    """The workflow's folders, at every scale (the paper-scale root holds the smoke and rehearsal ones)."""
    roots = [(k, p["paths"].get(k)) for k in TREES] + list(paths(p).items())
    roots.append(("raw", f"{p['paths']['raw']}-stand-in"))
    return [(k, Path(v).resolve()) for k, v in roots if k in TREES and v]


def check_outputs(p: dict, option: str, files: list[Path], own: list[Path], suffix: str) -> None:
    """Refuse writing ``files`` (what ``option`` makes the command write; ``files[0]`` is the option's
    value) unless each is one of ``own`` (the command's outputs in the workflow) or lies outside the
    workflow's folders, is not named like a run file, and ``files[0]`` ends with ``suffix``."""
    own_set = {Path(f).resolve() for f in own}
    if Path(files[0]).suffix != suffix:
        raise ConfigError(f"{option} {files[0]}: the command writes a {suffix} file; give a path ending in {suffix}")
    for f in files:
        where = Path(f).resolve()
        if where in own_set:
            continue
        what = f"{option} {files[0]}" + (f" (it also writes {f})" if f != files[0] else "")
        if where.is_dir():
            raise ConfigError(f"{what}: a directory; give a file path")
        if where.name in RUN_FILES:
            raise ConfigError(f"{what}: {where.name} is a run's file, which belongs to a workflow rule (train, "
                              f"evaluate or select); give a path of your own")
        for key, root in _trees(p):
            if where.is_relative_to(root):
                raise ConfigError(f"{what}: under paths.{key} ({root}) every file belongs to a workflow rule; "
                                  f"give {own[0]} or a path outside the workflow's folders")


def check_output_dir(p: dict, option: str, out: Path, own: Path) -> None:
    """Refuse a directory ``out`` for a command's outputs unless it is ``own`` (its directory in the workflow)
    or lies outside the workflow's folders and is not a file: under them every file belongs to one rule."""
    where = Path(out).resolve()
    if where == Path(own).resolve():
        return
    if where.exists() and not where.is_dir():
        raise ConfigError(f"{option} {out}: a file; give a directory")
    for key, root in _trees(p):
        if where.is_relative_to(root) or root.is_relative_to(where):
            raise ConfigError(f"{option} {out}: {'under' if where.is_relative_to(root) else 'holds'} paths.{key} "
                              f"({root}), where every file belongs to a workflow rule; give {own} or a directory "
                              "outside the workflow's folders")


def check_own_kind(option: str, path: str | Path, suffix: str, ours: Callable[[str], bool], what: str) -> None:
    """Refuse writing the file ``path`` unless it ends with ``suffix``, is not named like a run's file and,
    where it exists, holds ``what`` the command writes (``ours(text)``): for commands that read no params
    (so cannot tell the workflow's folders), a file of another kind is never overwritten."""
    path = Path(path)
    if path.suffix != suffix:
        raise ConfigError(f"{option} {path}: the command writes a {suffix} file; give a path ending in {suffix}")
    where = path.resolve()
    if where.name in RUN_FILES:
        raise ConfigError(f"{option} {path}: {where.name} is a run's file, which belongs to a workflow rule (train, "
                          "evaluate or select); give a path of your own")
    if where.is_dir():
        raise ConfigError(f"{option} {path}: a directory; give a file path")
    if where.exists():
        try:
            mine = ours(where.read_text())
        except (OSError, ValueError):
            mine = False
        if not mine:
            raise ConfigError(f"{option} {path}: exists and is not {what}; it is left as it is: give a new path "
                              "or one of its own")


def json_with(*keys: str, damaged_ok: bool = False) -> Callable[[str], bool]:
    """``ours`` for :func:`check_own_kind`: a JSON object holding ``keys``; with ``damaged_ok``, also a file
    that is not JSON at all (a record of ours cut short, in a folder of ours: written again, as before)."""
    def ours(text: str) -> bool:
        try:
            d = json.loads(text)
        except ValueError:
            return damaged_ok
        return isinstance(d, dict) and all(k in d for k in keys)
    return ours


def starts_with(first_line: str | tuple[str, ...], whole_line: bool = True) -> Callable[[str], bool]:
    """``ours`` for :func:`check_own_kind`: a text whose first line is ``first_line``; a tuple: a CSV header
    whose first columns are these (with ``whole_line`` False, the line may go on)."""
    head = ",".join(first_line) if isinstance(first_line, tuple) else first_line

    def ours(text: str) -> bool:
        line = text.split("\n", 1)[0].rstrip()
        return line == head or not whole_line and line.startswith(head + ",")
    return ours
