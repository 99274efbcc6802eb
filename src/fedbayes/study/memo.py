"""One validation pass resolves each experiment, overlay and method block once.

Validation resolves every experiment at every scale and every run's hyperparameters (``check_semantics``),
asking for the same overlay and experiment hundreds of times (393 ``experiment_config`` and 1,923
``overlay`` calls, each a deep copy, for today's params.yaml). Within ``resolved_once`` each such
resolution of one params object is computed once and shared: a pass that only reads (validation) gets
the same values and pays for each once. Outside it every call resolves afresh and returns its own copy,
as a caller that edits what it gets needs. A process whose params never change once validated (Snakemake's
planning: its input functions ask for the same experiments thousands of times, once more after each
checkpoint) shares them for good (``share_for_good``), each caller getting its own copy of the value."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_SCOPES: list[dict] = []   # the open passes' resolutions: key -> (params, value); params kept alive so an id is never reused
_FOR_GOOD: dict | None = None   # share_for_good's resolutions (handed out as copies), once it was called


def share_for_good() -> None:
    """From now on in this process, each resolution of a params object is computed once and every caller
    gets a copy of it (so one that edits what it gets changes nothing else). For a process that never edits
    params once validated: an edit would not be seen."""
    global _FOR_GOOD
    if _FOR_GOOD is None:
        _FOR_GOOD = {}


@contextmanager
def resolved_once() -> Iterator[None]:
    """Within: resolutions are shared (params must not change, and what is returned must not be edited)."""
    _SCOPES.append({})
    try:
        yield
    finally:
        _SCOPES.pop()


def memo(kind: str, params: dict, args: tuple, compute: Callable[[], Any]) -> Any:
    """``compute()``, once per (kind, params object, its scale, args) within ``resolved_once`` (or, as a copy,
    after ``share_for_good``); every time otherwise."""
    scope = _SCOPES[-1] if _SCOPES else _FOR_GOOD
    if scope is None:
        return compute()
    key = (kind, id(params), params.get("scale", "paper"), args)
    hit = scope.get(key)
    if hit is None:
        hit = scope[key] = (params, compute())
    return hit[1] if _SCOPES else _copy(hit[1])


_ATOMS = (str, int, float, bool, type(None))


def _copy(value: Any) -> Any:
    """A deep copy of a resolution: dicts, lists and scalars (what they are made of) copied directly, anything
    else by ``copy.deepcopy``. Six times faster than ``copy.deepcopy`` on a whole resolution, which Snakemake's
    planning asks for thousands of times (≈ 0.4 s a plan)."""
    t = type(value)
    if t is dict:
        return {k: _copy(v) for k, v in value.items()}
    if t is list:
        return [_copy(v) for v in value]
    if t in _ATOMS:
        return value
    return copy.deepcopy(value)
