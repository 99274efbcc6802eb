"""Values given on Snakemake's command line (``--config key=value``), read as params.yaml's are.

Snakemake parses a top-level ``--config`` value as an integer, a float or a boolean where it can, and
anything nested (``seeds=[0,1]``, ``"experiments={fmnist10-iid-k10: {rounds: 5}}"``) with YAML's base
loader, which keeps every scalar a string: ``seeds=[0,1]`` arrives as ``['0', '1']`` and fails the schema.
:func:`read_as_params` reads each such string as params.yaml's loader reads the same text (``0`` an
integer, ``0.5`` a float, ``true`` a boolean, ``null`` nothing, ``smoke`` a string), and :func:`name_given`
marks a problem that lies in a value the command line gave, so the error does not send the user to
params.yaml for a value they typed.
"""

from __future__ import annotations

import re

from fedbayes.fileio import load_yaml

_SCALARS = (str, int, float, bool, type(None))


def _scalar(text: str):
    try:
        value = load_yaml(text)
    except Exception:   # not a YAML scalar on its own (e.g. "a: b: c"): the text as given
        return text
    return value if isinstance(value, _SCALARS) else text


def read_as_params(values):
    """``values`` (Snakemake's parsed ``--config``) with every string scalar read as params.yaml reads it."""
    if isinstance(values, dict):
        return {k: read_as_params(v) for k, v in values.items()}
    if isinstance(values, list):
        return [read_as_params(v) for v in values]
    return _scalar(values) if isinstance(values, str) else values


def given_keys(values, prefix: tuple = ()) -> list[tuple]:
    """The key paths ``values`` sets: each leaf (a scalar or a list) as a tuple of keys."""
    if isinstance(values, dict) and values:
        return [k for key, v in values.items() for k in given_keys(v, prefix + (str(key),))]
    return [prefix]


_PROBLEM = re.compile(r"^(\s+- )(<root>|[^\s:]+)(: .*)$")


def name_given(message: str, values) -> str:
    """``message`` (a ConfigError's, one problem a line: ``  - dotted.key: what``) with each problem in a
    key the command line set marked ``(given with --config)``: the key itself or one inside it, or its
    parent where the problem quotes the key's name (an unknown key: "'rounds' was unexpected")."""
    given = given_keys(values) if values else []
    if not given:
        return message
    out, marked = [], False
    for line in message.splitlines():
        m = _PROBLEM.match(line)
        if m:
            key = () if m.group(2) == "<root>" else tuple(m.group(2).split("."))
            if any(key[:len(g)] == g or (g[:len(key)] == key and len(g) > len(key) and f"'{g[len(key)]}'" in m.group(3))
                   for g in given if g):
                line, marked = line + " (given with --config)", True
        out.append(line)
    text = "\n".join(out)
    if marked:
        return text.replace("params.yaml ", "params.yaml with the command line's --config ", 1)
    # a problem the typed values caused elsewhere (seeds=[0, 1] against a method's own three seeds)
    return text + "\n(the command line's --config set: " + ", ".join(".".join(g) for g in given if g) + ")"
