"""What params.yaml may ask beyond its schema's types: names a file system can hold, report names no other
output owns, sizes within a sane bound, keys that are strings, metrics the registry knows, and a device this
machine has. ``fedbayes.study.validate`` calls the torch-free checks; ``check_device`` asks torch, and only
where params name a CUDA device (`fedbayes validate`, the Snakefile when its jobs run here, a training job).

Each check returns one line per problem naming the dotted key and the remedy (``ConfigError`` for the device).
"""

from __future__ import annotations

import os
import re
from typing import Any

from fedbayes.eval.registry import METRICS


class ConfigError(ValueError):
    """params.yaml is malformed or asks for something impossible."""


NAME_MAX = 255     # bytes in one file name (Linux and macOS file systems)
PATH_MAX = 4096    # bytes in a path (Linux)
# bytes the workflow may add to a name inside one file name: sweep_<e>.csv, <table>_reliability.png,
# <e>_seed<k>.png, and a writer's temporary name (<name>.<pid>.tmp)
AFFIX = 40
NAME_BYTES = NAME_MAX - AFFIX

# Sizes past these bounds end in an allocation failure or a run of years, not a result; each is far above
# anything a paper here asks for (the largest: 3,400 clients, 2,000 rounds, hidden width 500, batch 128).
BOUNDS = {
    "clients": 100_000, "rounds": 1_000_000, "hidden": 65_536, "batch_size": 1_000_000,
    "server_batch_size": 1_000_000, "local_epochs": 100_000, "server_epochs": 100_000,
    "pred_samples": 100_000, "mc_samples": 10_000, "teacher_samples": 100_000, "per_client": 10_000_000,
}

# folders under <reports> that other rules write (sweep reports, figures, DVC metrics and plots): a table
# named into one would overwrite or be overwritten by them
REPORT_FOLDERS = {"sweeps": "the sweep reports", "figures": "the figures", "metrics": "the DVC metrics",
                  "plots": "the DVC plots"}
REPORT_FILES = {"summary": "the rehearsal summary (summary.md)"}


def key_problems(params: Any) -> list[str]:
    """Mapping keys that are not strings (YAML reads `7:` as a number): every name in params becomes a
    dotted key, a path component or a table row, all strings."""
    out = []
    for path, node in _walk(params):
        if isinstance(node, dict):
            out += [f"{_dotted(path + (k,))}: the key {k!r} is {_KINDS.get(type(k), 'not a string')}; names in "
                    f"params.yaml are strings (quote it: '{_as_written(k)}')" for k in node if not isinstance(k, str)]
    return out


_KINDS = {int: "a number", float: "a number", bool: "a boolean", type(None): "null"}


def size_problems(params: Any) -> list[str]:
    """Integers past their key's bound (``BOUNDS``), wherever the key sits (an experiment, a method's block,
    a sweep grid, a scale's overlay)."""
    out = []
    for path, node in _walk(params):
        key = next((k for k in reversed(path) if isinstance(k, str)), None)
        if isinstance(node, int) and not isinstance(node, bool) and key in BOUNDS and node > BOUNDS[key]:
            out.append(f"{_dotted(path)}: {node} is past the bound of {key} (at most {BOUNDS[key]:,}); "
                       "a size beyond it cannot be allocated or run")
    return out


def name_problems(params: dict) -> list[str]:
    """Names that become file names: each experiment and table name (and part of one) within ``NAME_BYTES``,
    each output root's components within ``NAME_MAX`` and the root within ``PATH_MAX``."""
    out = [f"experiments.{e}: {_too_long(e)}" for e in params["experiments"] if _too_long(e)]
    for t in params["tables"]:
        parts = [*t.split("/"), t.replace("/", "_")]   # reports/<folder>/<name>.csv; figures/<folder>_<name>_…
        out += [f"tables.{t}: {why}" for why in dict.fromkeys(_too_long(p) for p in parts) if why]
    for k, root in params["paths"].items():
        if k == "mlflow_uri":
            if why := uri_problem(str(root)):
                out.append(f"paths.mlflow_uri {str(root)[:80]!r}: {why}")
            continue
        long = next((c for c in str(root).split("/") if len(c.encode()) > NAME_MAX), None)
        if long is not None:
            out.append(f"paths.{k}: the component {long[:20]}… is {len(long.encode())} bytes; a file name holds "
                       f"at most {NAME_MAX} bytes")
        elif path_too_long(root, AFFIX):
            out.append(f"paths.{k}: {path_too_long(root, AFFIX)}")
    return out


def run_path_problem(roots: dict, experiment: str, method: str, point: str, seed: int) -> str | None:
    """Why the files of one run cannot be written (a path past ``PATH_MAX``), or None: the run directory
    under ``runs`` and its log under ``work/logs/evaluate``, with the longest file name in them."""
    tail = f"/{experiment}/{method}/{point}/seed{seed}"
    if len(point.encode()) > NAME_BYTES:
        return f"the sweep point id {point[:20]}… is {len(point.encode())} bytes; a name holds at most {NAME_BYTES}"
    for root in (roots["runs"], f"{roots['work']}/logs/evaluate"):
        if path_too_long(root + tail, AFFIX):
            return f"its run directory {root}{tail[:40]}…: {path_too_long(root + tail, AFFIX)}"
    return None


def report_name_problems(params: dict) -> list[str]:
    """Table names whose files (reports/<name>.csv, .md) another output writes: a folder another rule
    fills, the rehearsal summary, a toy's report, a sweep report kept beside a table (``sweeps: beside``)."""
    owners = {toy: f"the toy {toy} (toys.{toy})" for toy in params.get("toys") or {}}
    owners |= {f: why for f, why in REPORT_FILES.items()}
    for t, spec in params["tables"].items():
        folder = t.rpartition("/")[0]
        if folder and spec.get("sweeps") == "beside":
            owners |= {f"{folder}/sweep_{e}": f"the sweep report of {e} beside tables.{t}" for e in params["experiments"]}
    out = []
    for t in params["tables"]:
        first = t.split("/")[0]
        owner = REPORT_FOLDERS.get(first) if "/" in t else None
        owner = owner or owners.get(t)
        if owner:
            out.append(f"tables.{t}: reports/{t}.csv is a file of {owner}; name the table otherwise")
    return out


def metric_problems(params: dict) -> list[str]:
    """Metric names checked against the registry (``fedbayes.eval.registry``): a table's metrics and
    tolerances, the headline's metrics and curves, each selection's metric."""
    named = [(f"tables.{t}.metrics", m) for t, s in params["tables"].items() for m in s.get("metrics", [])]
    named += [(f"tables.{t}.tolerance", m) for t, s in params["tables"].items() for m in s.get("tolerance") or {}]
    named += [(f"headline.{k}", m) for k in ("metrics", "curves") for m in (params.get("headline") or {}).get(k, [])]
    named += [("selection.metric", params["selection"].get("metric"))]
    named += [(f"experiments.{e}.selection.metric", (x.get("selection") or {}).get("metric"))
              for e, x in params["experiments"].items()]
    return [f"{where}: unknown metric {m!r}; the metrics are {', '.join(METRICS)} (fedbayes/eval/registry.py)"
            for where, m in named if m is not None and m not in METRICS]


def tolerance_problems(params: dict) -> list[str]:
    """A published number has one tolerance: a table may not set a tolerance for a metric of a published
    source ("paper:table") whose own report table (``tables.<paper>/<table>``) sets one; its cells of that
    source take the paper table's (fedbayes.reports.tables.cell_tolerance)."""
    out = []
    for t, spec in params["tables"].items():
        for ref in spec.get("published") or []:
            own = ref.replace(":", "/")
            if own == t or own not in params["tables"]:
                continue
            theirs = params["tables"][own].get("tolerance") or {}
            for m in spec.get("tolerance") or {}:
                if m in theirs:
                    out.append(f"tables.{t}.tolerance: {m} of {ref} is set by tables.{own}.tolerance "
                               "(a published number has one tolerance); remove it here")
    return list(dict.fromkeys(out))


CUDA = re.compile(r"cuda(?::(\d+))?")


def check_device(params: dict) -> None:
    """Refuse (ConfigError) a CUDA ``device`` this machine does not have, naming the key and what it has.
    Torch is imported only here and only for a CUDA device: `auto` and `cpu` run anywhere."""
    device = str(params.get("device", "auto"))
    m = CUDA.fullmatch(device)
    if m is None:
        return
    n, index = _cuda_devices(), int(m.group(1) or 0)
    if n == 0:
        raise ConfigError(f"device: {device}: this machine has no CUDA device (torch sees none); set device: auto "
                          "(CUDA where there is one, else the CPU) or device: cpu")
    if index >= n:
        raise ConfigError(f"device: {device}: this machine has {n} CUDA devices (cuda:0 to cuda:{n - 1}); "
                          "set one of them, or device: auto")


def _cuda_devices() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def path_too_long(path: str, extra: int = 0) -> str | None:
    """Why ``path`` (made absolute, plus ``extra`` bytes of file name) exceeds ``PATH_MAX``, or None."""
    n = len(os.path.abspath(path).encode()) + extra
    return f"the path is {n} bytes with its file names; a path holds at most {PATH_MAX} bytes" if n > PATH_MAX else None


def _too_long(name: str) -> str | None:
    n = len(name.encode())
    return (f"the name is {n} bytes; a name that becomes a file name holds at most {NAME_BYTES} "
            f"({NAME_MAX} bytes less what the workflow adds to it)") if n > NAME_BYTES else None


def _walk(x: Any, path: tuple = ()):
    """(path, node) of every node of a loaded params tree (``fedbayes.study.schema._value_problems`` has bounded
    its size first)."""
    stack = [(path, x)]
    while stack:
        path, node = stack.pop()
        yield path, node
        if isinstance(node, dict):
            stack.extend((path + (k,), v) for k, v in node.items())
        elif isinstance(node, list | tuple):
            stack.extend((path + (i,), v) for i, v in enumerate(node))


def _as_written(key: Any) -> str:
    """A key as YAML writes it: 7, 1.5, true, null."""
    if key is None:
        return "null"
    return str(key).lower() if isinstance(key, bool) else str(key)


def _dotted(path: tuple) -> str:
    return ".".join(map(str, path)) or "<root>"


# Environment variables fedbayes reads whose value is a choice (docs/workflow.md): a typo would otherwise
# be a traceback in the training job that reads it (FEDBAYES_CUDA_GRAPHS) or silently mean "on"
# (FEDBAYES_COMPILE); every command checks them at its start (fedbayes.cli.main).
ENV_CHOICES = {"FEDBAYES_CUDA_GRAPHS": ("0", "1", "static"), "FEDBAYES_COMPILE": ("0", "1")}
# the params schema's rule for paths.mlflow_uri (workflow/schemas/params.schema.yaml): the URI reaches
# shell commands, so the variable that replaces it takes the same characters
URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:[A-Za-z0-9_./@+,=~:%?-]*")


def environment_problems(env: dict | None = None) -> list[str]:
    """One line per environment variable set to a value fedbayes cannot use, naming it and what it takes."""
    env = os.environ if env is None else env
    out = [f"{k}={env[k]!r}: takes {', '.join(v)}" for k, v in ENV_CHOICES.items() if k in env and env[k] not in v]
    uri = env.get("MLFLOW_TRACKING_URI")
    if uri and not URI.fullmatch(uri):
        out.append(f"MLFLOW_TRACKING_URI={uri[:80]!r}: not a tracking URI (scheme:path, e.g. sqlite:///mlflow.db or "
                   "http://host:5000, without spaces or shell characters); unset it to use params.yaml's paths.mlflow_uri")
    elif uri and (why := uri_problem(uri, env)):
        out.append(f"MLFLOW_TRACKING_URI={uri[:80]!r}: {why}; unset it to use params.yaml's paths.mlflow_uri")
    return out


# the tracking stores MLflow opens (a database through SQLAlchemy, `dialect+driver:`, or a server); its file
# store (`file:`, a bare path) refuses to open unless MLFLOW_ALLOW_FILE_STORE=true
TRACKING_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql", "http", "https", "databricks")


def uri_problem(uri: str, env: dict | None = None) -> str | None:
    """Why MLflow cannot track into ``uri`` (an unknown scheme, its maintenance-mode file store), or None.
    Said before any work: MLflow itself raises a traceback at the first import."""
    env = os.environ if env is None else env
    scheme = uri.partition(":")[0].split("+")[0].lower()
    if scheme == "file" and str(env.get("MLFLOW_ALLOW_FILE_STORE", "")).lower() == "true":
        return None
    if scheme not in TRACKING_SCHEMES:
        return (f"MLflow cannot track into a {scheme}: store; use one of {', '.join(s + ':' for s in TRACKING_SCHEMES)} "
                "(e.g. sqlite:///mlflow.db or http://host:5000)")
    return None
