"""params.yaml (or the DAG's JSON of it) read as written: one line naming the file (and the line) for a
file that cannot be read, is not UTF-8, does not parse, repeats a key, or holds no mapping."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fedbayes.fileio import YAMLInputError, load_yaml
from fedbayes.frontdoor import ConfigError


def load_params_text(path: str | Path) -> Any:
    """params.yaml (or the DAG's JSON of it) as written, not yet validated: a mapping; ConfigError in one
    line naming the file (and the line) for a file that cannot be read, is not UTF-8, has a syntax error, a
    duplicate key or an alias bomb, or holds no mapping (empty, a list, a scalar)."""
    path = Path(path)
    params = _parse_params(path, _read_utf8(path))
    if not isinstance(params, dict):
        what = "empty" if params is None else f"a {_KINDS.get(type(params), type(params).__name__)}"
        raise ConfigError(f"{path}: the file is {what}; params hold a mapping of settings "
                          "(scale:, seeds:, paths:, experiments:, ...) at the top level")
    return params


_KINDS = {list: "list", str: "string", int: "number", float: "number", bool: "boolean"}


def _read_utf8(path: Path) -> str:
    """The file's text; ConfigError naming the file (and the line of a byte that is not UTF-8)."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"{path}: cannot be read ({e.strerror or e})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise ConfigError(f"{path}: not UTF-8 text (byte 0x{data[e.start]:02x} at line {line}); save it as "
                          "UTF-8") from None


def _parse_params(path: Path, text: str) -> Any:
    """JSON where the text is JSON (the DAG hands the CLI its effective configuration as JSON, whose 5e-05
    YAML 1.1 would read as a string), YAML otherwise: a flow-style YAML mapping starts with a brace too."""
    import yaml

    try:
        if text.lstrip().startswith("{"):
            try:
                return json.loads(text, object_pairs_hook=_unique_keys)
            except json.JSONDecodeError:
                pass   # not JSON: flow-style YAML, read below
        return load_yaml(text)
    except (YAMLInputError, ValueError, yaml.YAMLError) as e:  # YAMLInputError, a JSON duplicate: ValueErrors
        raise ConfigError(f"{path}: {_one_line(e)}") from None


def _one_line(e: Exception) -> str:
    """A parser's message on one line (PyYAML's spans several: the problem, then where)."""
    return " ".join(str(e).split())


def _unique_keys(pairs: list) -> dict:
    out = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}; a JSON object takes each key once")
        out[k] = v
    return out
