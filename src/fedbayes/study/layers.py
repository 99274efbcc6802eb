"""The scales: how params.yaml's paper-scale settings are shrunk (``scale: smoke``) or run on stand-in
data (``scale: rehearsal``) by the overlay blocks of params.smoke.yaml."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from fedbayes.frontdoor import ConfigError
from fedbayes.study.memo import memo
from fedbayes.study.reading import load_params_text


SCALES = ("paper", "smoke", "rehearsal")
# scale rehearsal: the smoke DAG (params.smoke.yaml's `smoke`, then its `rehearsal` block) on stand-in data
# (fedbayes.data.standin): every experiment, none of it ever mistaken for a result.
STAND_IN = "stand-in"


def deep_merge(base: dict, override: dict | None) -> dict:
    out = copy.deepcopy(base)
    for k, v in (override or {}).items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def _read_merge(base: dict, override: dict | None) -> dict:
    """``deep_merge`` without copying what is not merged: for hyperparameters that are only read."""
    out = dict(base)
    for k, v in (override or {}).items():
        out[k] = _read_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def smoke_overlay_path(params_path: str | Path) -> Path:
    """The smoke overlay beside a params file: params.yaml -> params.smoke.yaml."""
    p = Path(params_path)
    return p.with_name(f"{p.stem}.smoke.yaml")


def with_smoke_overlay(params: Any, params_path: str | Path) -> Any:
    """``params`` with the ``smoke`` block of the overlay file beside it (params.smoke.yaml: how the same
    DAG shrinks to a minute, `scale: smoke`); a ``smoke`` block of params' own is applied on top of it
    (key by key), so a copy of params.yaml that carries its smoke settings inline (the DAG's effective
    configuration, a test's edit) needs no overlay. The overlay may hold ``smoke`` and nothing else."""
    overlay = smoke_overlay_path(params_path)
    if not isinstance(params, dict) or not overlay.exists():
        return params
    extra = load_params_text(overlay)
    if not isinstance(extra, dict) or set(extra) - {"smoke", "rehearsal"}:
        raise ConfigError(f"{overlay}: holds the smoke overlay only (top-level `smoke:` and `rehearsal:` blocks), "
                          f"got {sorted(extra) if isinstance(extra, dict) else type(extra).__name__}")
    for block in ("smoke", "rehearsal"):
        own = params.get(block)
        if (own is None or isinstance(own, dict)) and (own or extra.get(block)):   # a malformed inline block
            params[block] = deep_merge(extra.get(block) or {}, own)           # is left for the schema to name
    return params


def overlay(params: dict) -> dict:
    """What the scale lays over params.yaml: nothing at paper scale; the ``smoke`` block at smoke scale;
    at rehearsal scale the ``smoke`` block with the ``rehearsal`` block over it."""
    scale = params.get("scale", "paper")
    if scale == "paper":
        return {}
    return memo("overlay", params, (), lambda: _overlay(params, scale))


def _overlay(params: dict, scale: str) -> dict:
    out = params.get("smoke") or {}
    if scale == "rehearsal":
        out = deep_merge(out, {k: v for k, v in (params.get("rehearsal") or {}).items() if k != "stand_in_size"})
    return out


def stand_in_size(params: dict) -> str | None:
    """The size of the stand-in data this configuration runs on (fedbayes.data.standin.SIZES), or None
    for the real data: scale rehearsal runs on stand-ins (``rehearsal.stand_in_size``, default tiny)."""
    if params.get("scale", "paper") != "rehearsal":
        return None
    return (params.get("rehearsal") or {}).get("stand_in_size", "tiny")
