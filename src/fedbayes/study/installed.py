"""The methods params.yaml names checked against the installed ones before the schema is: an unknown or
left-out method, a key its block sets that it does not take, an implementation that cannot be imported."""

from __future__ import annotations

import difflib
from typing import Any

from fedbayes.frontdoor import ConfigError
from fedbayes.methods.spec import ENTRY_POINT_GROUP, RESERVED, implementation_problem, plugin_problems
from fedbayes.study import names


def _items(x) -> list:
    """The items of a mapping; none of anything else (the schema names what is not a mapping)."""
    return list(x.items()) if isinstance(x, dict) else []


def _named_methods(params: dict) -> set[str]:
    """Every method params.yaml names (``methods.<m>``, ``experiments.<e>.methods``)."""
    named = set(params.get("methods") or {})
    for e in (params.get("experiments") or {}).values():
        if isinstance(e, dict) and isinstance(e.get("methods"), dict | list):
            named |= set(e["methods"])
    return named


def _method_blocks(params: dict):
    """(dotted path, method, block) of every block that sets one method's hyperparameters: ``methods.<m>``,
    ``experiments.<e>.methods.<m>``, ``smoke.methods.<m>``, ``smoke.experiments.<e>.methods.<m>`` and their
    ``rehearsal`` counterparts (what is not a mapping is left for the schema to name)."""
    sites = [(("methods",), params.get("methods"))]
    experiments = params.get("experiments")
    sites += [(("experiments", e, "methods"), x.get("methods"))
              for e, x in (experiments.items() if isinstance(experiments, dict) else ()) if isinstance(x, dict)]
    sites += [((b, "methods"), params[b].get("methods")) for b in ("smoke", "rehearsal") if isinstance(params.get(b), dict)]
    sites += [((b, "experiments", e, "methods"), x.get("methods")) for b in ("smoke", "rehearsal")
              for e, x in _items((params.get(b) or {}).get("experiments") if isinstance(params.get(b), dict) else None)
              if isinstance(x, dict)]
    for where, methods in sites:
        for m, block in (methods.items() if isinstance(methods, dict) else ()):
            if isinstance(block, dict):
                yield ".".join((*where, m)), m, block


def _left_out_methods(params: Any) -> list[str]:
    """The methods params.yaml names that an installed package provides but could not be used (registered
    twice, not loadable: ``plugin_problems``): said first, before the schema's complaints about their keys."""
    left_out = plugin_problems()
    if not left_out or not isinstance(params, dict):
        return []
    return [f"method {m!r}: {left_out[m]}" for m in sorted(_named_methods(params) & set(left_out))]


def _uninstalled_methods(params: Any) -> list[str]:
    """One line for each method params.yaml names (a ``methods.<m>`` block, an experiment's methods, a
    scale's method block, a table's methods) that no installed package registers, at the first place it
    is named: said before the schema, whose complaint about the block's keys and the semantic checks'
    (one a place, each listing every method) would hide the cause."""
    if not isinstance(params, dict):
        return []
    known, left_out = names.METHOD_SPECS, plugin_problems()
    places: dict[str, list[str]] = {}
    for where, m, _ in _method_blocks(params):
        places.setdefault(m, []).append(where)
    for e, x in _items(params.get("experiments")):
        for m in (x.get("methods") if isinstance(x, dict) and isinstance(x.get("methods"), dict | list) else ()):
            places.setdefault(m, []).append(f"experiments.{e}.methods.{m}")
    for t, spec in _items(params.get("tables")):
        for m in (spec.get("methods") if isinstance(spec, dict) and isinstance(spec.get("methods"), list) else ()):
            if isinstance(m, str):
                places.setdefault(names.split_variant(m)[0], []).append(f"tables.{t}.methods")
    out = []
    for m, where in places.items():
        if not isinstance(m, str) or m in known or m in left_out:
            continue
        # a misspelling, not a neighbour: fedswag is not fedavg (0.77), fedivn is fedivon (0.92)
        closest = difflib.get_close_matches(m, list(known), n=1, cutoff=0.85)
        where = list(dict.fromkeys(where))
        out.append(f"{where[0]}: unknown method {m!r}: not installed (no entry point in the {ENTRY_POINT_GROUP} "
                   "group of any installed package names it)"
                   + (f"; did you mean {closest[0]!r}?" if closest else
                      f"; register it in its package's pyproject.toml under [project.entry-points.\"{ENTRY_POINT_GROUP}\"] "
                      "and pip install it (docs/adding-a-method.md); `fedbayes methods` lists the methods implemented here")
                   + (f" (also named at {', '.join(where[1:3])}{', …' if len(where) > 3 else ''})" if len(where) > 1 else ""))
    return out


def check_implementations(params: dict) -> None:
    """Refuse (ConfigError) a params.yaml naming an installed package's method whose implementation cannot
    be imported (``methods.spec.implementation_problem``), naming the method and the import error, so a
    missing dependency stops the DAG before its first job instead of failing every training job of the
    method. Apart from ``validate`` because it imports the implementation, and torch: the DAG runs it
    once, before it is built, and so does ``fedbayes validate``; the jobs' own validation stays torch-free
    (a training job imports the implementation anyway)."""
    problems = [f"method {m!r}: {why}" for m in sorted(_named_methods(params))
                if (why := implementation_problem(m))]
    if problems:
        raise ConfigError("params.yaml is invalid:\n" + "\n".join(f"  - {p}" for p in problems))


def _foreign_hparams(params: Any) -> list[str]:
    """Keys of a method's block (and of its sweep grid) that the method does not take (its spec's
    ``MethodSpec.hparams``), one line each naming the key, the method and the closest name it takes. Said
    before the schema, whose rules are every method's together: another method's key passed it and was
    never read (``methods.fedavg.rho``; a sweep over one ran one run under several names), and a scale's
    ``sweep`` key no method takes. Unknown methods are named by the semantic checks; ``smoke.hparams`` sets
    values for every method, each reading its own."""
    METHOD_SPECS = names.METHOD_SPECS

    if not isinstance(params, dict):
        return []
    anyone = {k for s in METHOD_SPECS.values() for k in s.hparams()}
    out = []
    for where, m, block in _method_blocks(params):
        spec = METHOD_SPECS.get(m)
        if spec is None:
            continue
        grid = block.get("sweep")
        for sweep, keys in ((False, [k for k in block if k not in RESERVED]),
                            (True, list(grid) if isinstance(grid, dict) else [])):
            takes = spec.hparams(sweep)
            for k in keys:
                if k in takes:
                    continue
                closest = difflib.get_close_matches(str(k), takes, n=1)   # a near miss only, not any name
                if k in spec.hparams():
                    why = f"{m} cannot sweep {k!r}"
                else:
                    why = f"{m} takes no hyperparameter {k!r}" + (" (another method's)" if k in anyone else "")
                out.append(f"{where}{'.sweep' if sweep else ''}.{k}: {why}"
                           + (f"; the closest it {'sweeps' if sweep else 'takes'} is {closest[0]!r}" if closest else ""))
    for b in ("smoke", "rehearsal"):   # a scale's values for every grid over a key (``<scale>.sweep``)
        grid = params[b].get("sweep") if isinstance(params.get(b), dict) else None
        out += [f"{b}.sweep.{k}: no installed method takes a hyperparameter {k!r}"
                for k in (grid if isinstance(grid, dict) else ()) if k not in anyone]
    return out
