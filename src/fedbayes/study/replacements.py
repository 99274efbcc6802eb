"""What a scale's shared values replace of a user's own method settings, said in one line."""

from __future__ import annotations

from typing import Any

from fedbayes.study.layers import overlay
from fedbayes.study.resolve import _declared, _method_spec, _scale_override, experiment_config


def overlay_replacements(params: dict, limit: int | None = None) -> str | None:
    """One line naming each value a user set in a method's own block (``methods.<m>``,
    ``experiments.<e>.methods.<m>``) that the scale's shared values (its ``train`` and ``hparams``) replace
    at this scale, with both values (at most ``limit`` places a key, then how many more); None where none
    is (always at paper scale). The scale's value wins: the overlay exists to shrink every run, and a
    method's own value at a scale goes in ``<scale>.methods.<m>`` (which wins over the shared ones, and is
    not named here). A swept key is not replaced (a sweep point wins over both)."""
    scale = params.get("scale", "paper")
    small = overlay(params)
    if not small:
        return None
    found: dict[str, dict[str, Any]] = {}   # key -> {place: the user's value}
    for name, x in params["experiments"].items():
        for m in experiment_config(params, name)["methods"]:
            shared = {**(small.get("train") or {}), **_declared(m, small.get("hparams"))}
            here = {**((small.get("methods") or {}).get(m) or {}), **_scale_override(params, name, m)}
            _, grid = _method_spec(params, name, m)
            for where, block in ((f"methods.{m}", params.get("methods", {}).get(m)),
                                 (f"experiments.{name}.methods.{m}", x["methods"].get(m))):
                for k, v in (block or {}).items():
                    if k in shared and k not in here and k not in grid and shared[k] != v:
                        found.setdefault(k, {})[where] = v
    if not found:
        return None
    shared = {**(small.get("train") or {}), **(small.get("hparams") or {})}
    parts = []
    for k, places in found.items():
        # a method's own block first: the setting a user most likely wrote for every experiment
        names = sorted(places, key=lambda w: not w.startswith("methods."))
        shown = names if limit is None else names[:limit]
        parts.append(f"{k} -> {shared[k]} over " + ", ".join(f"{w}.{k} {places[w]}" for w in shown)
                     + (f" (+{len(names) - len(shown)} more)" if len(shown) < len(names) else ""))
    n = sum(len(v) for v in found.values())
    return (f"scale {scale} replaces {n} of your own method setting{'s' if n != 1 else ''} with its shared values "
            f"(they win; a method's own value at this scale goes in {scale}.methods.<m>): " + "; ".join(parts))
