"""Subcommands that put a run's inputs in place: ``data`` (fetch, verify, or generate stand-ins) and
``partition`` (one experiment's clients for one seed)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from fedbayes.cli.common import _params
from fedbayes.data import DataUnavailableError
from fedbayes.data.root import fetch_dataset
from fedbayes.engine.partitions import check_partition_target, locked, write_partition
from fedbayes.fileio import write_text_atomic
from fedbayes.ownership import check_outputs, check_own_kind, json_with
from fedbayes.runpaths import partition_figure
from fedbayes.study import ConfigError, paths


def cmd_data(args) -> None:
    if args.status and len(args.names) != 1:
        raise SystemExit("fedbayes data: --status takes exactly one dataset")
    from fedbayes.data import DATASETS

    unknown = [n for n in args.names if n not in DATASETS]
    if unknown:
        raise ConfigError(f"unknown dataset {unknown[0][:80]!r}; known: {', '.join(sorted(DATASETS))}")
    if args.status:   # written over only where it is a data status already (a run's file, a JSON of the user's: never)
        check_own_kind("--status", args.status, ".json", json_with("dataset", "available"),
                       "a data status (fedbayes data --status)")
    root = args.root or (f"data/raw-stand-in/{args.stand_in}" if args.stand_in else "data/raw")
    if args.stand_in:
        check_stand_in_root(root, args.names)
    for name in args.names:
        try:
            path = fetch_dataset(name, root, download=not args.no_download, stand_in=args.stand_in)
        except DataUnavailableError as e:
            if not args.status:
                raise
            # recorded, not raised: tables show this experiment's rows as "not run (data unavailable)"
            write_text_atomic(args.status, json.dumps({"dataset": name, "available": False, "reason": str(e)},
                                                      indent=1) + "\n")
            print(f"{name}: unavailable on this machine (recorded in {args.status}):\n{e}", file=sys.stderr)
            continue
        if args.status:
            write_text_atomic(args.status, json.dumps({"dataset": name, "available": True,
                                                       "manifest": str(path / "manifest.json")}, indent=1) + "\n")
        print(f"{name}: {path}" + (f" (STAND-IN data, generated: size {args.stand_in}; never the real {name})"
                                    if args.stand_in else ""))


def check_stand_in_root(root: str, names: list[str]) -> None:
    """Stand-ins go only where no real dataset lies: a folder with a dataset in it but without the
    stand-ins' sources (``<root>/.source``, fedbayes.data.root.stand_in_sources) holds real data."""
    from fedbayes.data.root import stand_in_sources

    if stand_in_sources(root).is_dir():
        return
    for name in names:
        if (Path(root) / name).is_dir() and any((Path(root) / name).iterdir()):
            raise ConfigError(f"--root {root}: {Path(root) / name} holds real data, which stand-in files would "
                              "replace; give a folder of stand-ins (default data/raw-stand-in/SIZE)")


def cmd_partition(args) -> None:
    p = _params(args)
    check_partition_target(p, args.experiment, args.seed, args.out)
    if args.figure:   # the split's own figure, or one outside the workflow's folders
        own = partition_figure(paths(p), p.get("scale", "paper"), args.experiment, args.seed)
        check_outputs(p, "--figure", [Path(args.figure)], [own], ".png")
    with locked(args.out):
        check_partition_target(p, args.experiment, args.seed, args.out)
        write_partition(p, args.experiment, args.seed, args.out, args.figure)
