"""The earlier layout of params.yaml upgraded to today's, so an older file still reads."""

from __future__ import annotations

from typing import Any

from fedbayes.frontdoor import ConfigError


def upgrade_layout(params: Any) -> Any:
    """params in the earlier layout (an experiment's ``methods`` a list; the values a method takes in one
    experiment under ``methods.<m>.overrides.<e>``) in today's, in place: ``experiments.<e>.methods`` a
    mapping method -> its values there (None: none). Values for a method the experiment does not run are
    dropped, as the old layout ignored them; a pair set in both places is refused. Today's layout passes
    through unchanged (and so does what is not a mapping: the schema check names it)."""
    if not isinstance(params, dict) or not isinstance(params.get("experiments"), dict):
        return params
    old = {}
    for m, spec in (params.get("methods") or {}).items():
        if isinstance(spec, dict) and "overrides" in spec:
            for e, over in (spec.pop("overrides") or {}).items():
                old[(m, e)] = over
    for e, exp in params["experiments"].items():
        if not isinstance(exp, dict):
            continue
        if isinstance(exp.get("methods"), list):
            exp["methods"] = {m: None for m in exp["methods"]}
        ms = exp.get("methods")
        for m in (ms if isinstance(ms, dict) else ()):
            if (m, e) in old:
                if ms[m] is not None:
                    raise ConfigError(f"experiments.{e}.methods.{m} and methods.{m}.overrides.{e} both set "
                                      f"{m}'s values in {e}; keep experiments.{e}.methods.{m}")
                ms[m] = old[(m, e)]
    return params
