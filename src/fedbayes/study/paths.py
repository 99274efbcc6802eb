"""Where a scale's files live: partitions, runs, work files and reports, and the stand-in data's folder."""

from __future__ import annotations

import re

from fedbayes.study.layers import STAND_IN, stand_in_size


def raw_root(raw: str, stand_in: str | None) -> str:
    """The datasets' folder: ``raw``, or on stand-in data of size ``stand_in`` ``<raw>-stand-in/<size>``."""
    return f"{raw}-{STAND_IN}/{stand_in}" if stand_in else raw


def recorded_stand_in(cfg: dict) -> str | None:
    """The stand-in size a run configuration (``run_config``, a run.json's) ran on; None: the real data."""
    m = re.fullmatch(rf"{STAND_IN} \((\w+)\)", cfg.get("data") or "")
    return m.group(1) if m else None


def paths(params: dict) -> dict:
    """Output roots; smoke-scale partitions, runs, work files and reports (tables, sweeps, figures) live
    in a ``<root>/smoke`` subfolder (``<root>/rehearsal`` at rehearsal scale), so the smoke command never
    overwrites a paper-scale file; stand-in data lives in ``<raw>-stand-in/<size>``."""
    p = dict(params["paths"])
    p["raw"] = raw_root(p["raw"], stand_in_size(params))  # generated stand-ins, never in the real data's folder
    if params.get("scale", "paper") != "paper":
        sub = params["scale"]
        p["partitions"] = f"{p['partitions']}/{sub}"
        p["runs"] = f"{p['runs']}/{sub}"
        p["reports"] = f"{p['reports']}/{sub}"
        p["work"] = f"{p.get('work', 'work')}/{sub}"
    p.setdefault("work", "work")
    return p
