"""Reading a run's files back, checked: ``run.json``, ``history.csv``, ``metrics.json`` and a sweep's
``selected.json``. A file that does not parse, lacks what its writer always writes, or disagrees with
the run's other files raises :class:`DamagedFile`, which names the file, what is wrong and the remedy;
the CLI turns it into one line and exit status 2. The workflow asks :func:`run_problems` and
:func:`metrics_problems` (and :func:`selection_problems`) before it trusts a finished run, and reruns what they name instead.

Torch-free and pandas-free (the workflow calls it while it builds the DAG)."""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path


class DamagedFile(ValueError):
    """A run file that cannot be trusted: ``path``, what is wrong with it (``why``) and the ``remedy``."""

    def __init__(self, path: str | Path, why: str, remedy: str):
        self.path, self.why, self.remedy = Path(path), why, remedy
        super().__init__(f"{path} is damaged ({why}); {remedy}")


RETRAIN = "retrain the run (Snakemake reruns it; by hand: delete the run directory, then ask for the table again)"
REEVALUATE = "rebuild it with `fedbayes evaluate {run}` (Snakemake re-evaluates it)"
RESELECT = "rebuild it with `fedbayes select` (Snakemake reruns the selection)"


def _json(path: Path, remedy: str, required: tuple[str, ...]) -> dict:
    try:
        data = json.loads(path.read_text())
    except UnicodeDecodeError as e:
        raise DamagedFile(path, f"not text: {e.reason}", remedy) from None
    except ValueError as e:
        raise DamagedFile(path, f"not valid JSON: {e}", remedy) from None
    if not isinstance(data, dict):
        raise DamagedFile(path, f"a JSON {type(data).__name__}, not an object", remedy)
    missing = [k for k in required if k not in data]
    if missing:
        raise DamagedFile(path, "no " + ", ".join(repr(k) for k in missing), remedy)
    return data


# The types of what the readers' users take from run.json and metrics.json (key → accepted kinds; a key
# not listed, or absent, is not checked): a value that parses but has another type ("0.9" for 0.9, a list
# for an object) was imported (float("0.9") is 0.9), tabulated or crashed later naming no file.
RUN_TYPES = {"config": ("object",), "config_hash": ("string",), "numerics": ("object",), "code": ("object", None),
             "wall_s": ("number", None), "started": ("string", None), "finished": ("string", None),
             "device": ("string",), "device_name": ("string",), "torch": ("string",), "diverged": ("object",),
             "replayed": ("object",)}
CONFIG_TYPES = {"experiment": ("string",), "method": ("string",), "point": ("string",), "seed": ("integer",),
                "rounds": ("integer",), "scale": ("string",), "data": ("string",), "partition_hash": ("string",),
                "hparams": ("object",)}
CODE_TYPES = {"commit": ("string", None), "dirty": ("boolean", None), "source": ("string", None)}
REPLAYED_TYPES = {"commit": ("string",), "rounds": ("integer",), "of": ("integer",), "identical": ("boolean",)}
DIVERGED_TYPES = {"round": ("integer",), "reason": ("string",)}
METRICS_TYPES = {"experiment": ("string",), "method": ("string",), "seed": ("integer",), "config_hash": ("string",),
                 "final_round": ("integer", None), "final": ("object",), "rounds": ("object",),
                 "variants": ("object",), "reliability": ("array",), "wall_s": ("number", None),
                 "diverged": ("object",), "from_training": ("array",), "metric_code": ("string",),
                 "metric_codes": ("object",), "not_evaluated": ("object",)}
_KINDS = {"object": dict, "array": list, "string": str, "boolean": bool}


def _is(v, kind) -> bool:
    if kind is None:
        return v is None
    if kind in ("integer", "number"):
        return not isinstance(v, bool) and isinstance(v, int if kind == "integer" else int | float)
    return isinstance(v, _KINDS[kind])


def _typed(path: Path, data: dict, types: dict, remedy: str, where: str = "") -> None:
    """DamagedFile naming ``path`` and the dotted key of the first value whose type ``types`` does not accept."""
    for key, kinds in types.items():
        if key in data and not any(_is(data[key], k) for k in kinds):
            shown = json.dumps(data[key])
            want = " or ".join("null" if k is None else f"{'an' if k[0] in 'aeiou' else 'a'} {k}" for k in kinds)
            raise DamagedFile(path, f"'{where}{key}' holds {shown[:40]}{'…' if len(shown) > 40 else ''}, not {want}",
                              remedy)


def _metric_values(path: Path, table, where: str, remedy: str) -> None:
    """A metric table of metrics.json (metric → number, or null where it is not defined)."""
    if not isinstance(table, dict):
        raise DamagedFile(path, f"'{where}' holds a JSON {type(table).__name__}, not an object", remedy)
    _typed(path, table, dict.fromkeys(table, ("number", None)), remedy, f"{where}.")


def read_run_info(run_dir: str | Path) -> dict:
    """run.json: the resolved configuration the run trained with and its code identity, the types of its
    values checked (``RUN_TYPES``). A run.json in the layout of a run directory
    (``<experiment>/<method>/<point>/seed<seed>``, what ``config.run_dir`` builds) must record that run:
    another run's run.json copied into it is another run's."""
    run_dir = Path(run_dir)
    path = run_dir / "run.json"
    info = _json(path, RETRAIN, ("config", "config_hash"))
    cfg = info["config"]
    if not isinstance(cfg, dict) or not all(k in cfg for k in ("experiment", "method", "seed", "rounds")):
        raise DamagedFile(path, "its config lacks experiment, method, seed or rounds", RETRAIN)
    _typed(path, info, RUN_TYPES, RETRAIN)
    _typed(path, cfg, CONFIG_TYPES, RETRAIN, "config.")
    _typed(path, info.get("code") or {}, CODE_TYPES, RETRAIN, "code.")
    _typed(path, info.get("numerics", {}), dict.fromkeys(info.get("numerics", {}), ("integer",)), RETRAIN, "numerics.")
    _typed(path, info.get("diverged", {}), DIVERGED_TYPES, RETRAIN, "diverged.")
    _typed(path, info.get("replayed", {}), REPLAYED_TYPES, RETRAIN, "replayed.")
    if re.fullmatch(r"seed\d+", run_dir.resolve().name) and len(run_dir.resolve().parts) > 4:
        d = run_dir.resolve()
        found = (d.parent.parent.parent.name, d.parent.parent.name, d.parent.name, d.name)
        says = (cfg["experiment"], cfg["method"], cfg.get("point", d.parent.name), f"seed{cfg['seed']}")
        if found != says:
            raise DamagedFile(path, f"it records the run {'/'.join(says)}, but lies in {run_dir} "
                                    f"({'/'.join(found)}): another run's run.json", RETRAIN)
    return info


def read_history_rows(run_dir: str | Path, info: dict | None = None) -> list[dict[str, str]]:
    """history.csv as its rows (text), checked against run.json: a header with ``round``, rounds 0, 1, …
    without a gap, and as many as the run trained (its ``rounds``, or up to the round it diverged at)."""
    run_dir = Path(run_dir)
    path = run_dir / "history.csv"
    info = read_run_info(run_dir) if info is None else info
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except UnicodeDecodeError as e:
        raise DamagedFile(path, f"not text: {e.reason}", RETRAIN) from None
    except csv.Error as e:
        raise DamagedFile(path, f"not CSV: {e}", RETRAIN) from None
    if not rows or "round" not in rows[0]:
        raise DamagedFile(path, "no header with a 'round' column and rows under it", RETRAIN)
    width = len(rows[0])
    for i, row in enumerate(rows):
        if None in row or None in row.values() or len(row) != width:
            raise DamagedFile(path, f"line {i + 2} has another number of fields than the header", RETRAIN)
        if row["round"] != str(i):
            raise DamagedFile(path, f"line {i + 2} is round {row['round']!r}, expected {i}", RETRAIN)
        for column, value in row.items():   # every cell a number (or empty: not measured that round)
            if value != "" and not _is_number(value):
                raise DamagedFile(path, f"line {i + 2}, column {column!r} holds {value[:40]!r}, not a number", RETRAIN)
    last = len(rows) - 1
    if "wall_s" in info and "wall_s" in rows[0]:   # training writes both from the same number (its last row's)
        cell = rows[-1]["wall_s"]
        if not _same_seconds(float(cell) if cell != "" else None, info["wall_s"]):
            raise DamagedFile(path, f"its last row's wall_s is {cell or 'empty'}, but {run_dir / 'run.json'} records "
                                    f"{info['wall_s']}: the history of another run (or of another training of this "
                                    "one)", RETRAIN)
    diverged = info.get("diverged")
    want = int(info["config"]["rounds"])
    if diverged is None and last != want:
        raise DamagedFile(path, f"it ends at round {last}; run.json says the run trained {want} rounds", RETRAIN)
    if diverged is not None and not last <= int(diverged.get("round", want)):
        raise DamagedFile(path, f"it goes on to round {last} after the run diverged at round {diverged.get('round')}",
                          RETRAIN)
    return rows


def _same_seconds(a: float | None, b: float | None) -> bool:
    """Two records of one run's wall time: equal, up to the last digits a CSV writer may round (pandas
    writes 15 significant digits); another run's (another seed's, another training's) differs by far more."""
    return a is None and b is None or a is not None and b is not None and math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-9)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def open_predictions(run_dir: str | Path):
    """predictions.npz of a run (numpy arrays only, never pickles): DamagedFile naming the file when it
    is not a readable archive of arrays (numpy's own message would advise loading it with pickles)."""
    import zipfile

    import numpy as np

    path = Path(run_dir) / "predictions.npz"
    try:
        pred = np.load(path, allow_pickle=False)
        # (a run that diverged before its first saved round has no test_logp)
        if not hasattr(pred, "files") or not {"y_test", "rounds"} <= set(pred.files):
            raise ValueError("not an archive holding y_test and rounds")
        for k in pred.files:   # each array read once here: a truncated member fails now, naming the file
            pred[k]
    except FileNotFoundError:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError) as e:
        # (numpy's own message would advise loading the file with pickles: never for a file of unknown origin)
        raise DamagedFile(path, f"not a readable archive of prediction arrays ({type(e).__name__})", RETRAIN) from None
    return pred


def read_history(run_dir: str | Path, info: dict | None = None):
    """history.csv as a pandas DataFrame, checked as :func:`read_history_rows`."""
    import pandas as pd

    read_history_rows(run_dir, info)
    return pd.read_csv(Path(run_dir) / "history.csv")


def read_metrics(run_dir: str | Path, info: dict | None = None) -> dict:
    """metrics.json, checked against run.json: the same configuration hash, experiment, method and seed
    (metrics of another run, or of this run before it was retrained, are not this run's)."""
    run_dir = Path(run_dir)
    path = run_dir / "metrics.json"
    remedy = REEVALUATE.format(run=run_dir)
    m = _json(path, remedy, ("config_hash", "final_round", "rounds", "final"))
    _typed(path, m, METRICS_TYPES, remedy)
    tables = [("final", m["final"])] + [(f"rounds.{r}", t) for r, t in m["rounds"].items()]
    for name, variant in m.get("variants", {}).items():
        if not isinstance(variant, dict):
            raise DamagedFile(path, f"'variants.{name}' holds a JSON {type(variant).__name__}, not an object", remedy)
        _typed(path, variant, {"final": ("object",), "rounds": ("object",)}, remedy, f"variants.{name}.")
        tables += [(f"variants.{name}.final", variant.get("final", {}))]
        tables += [(f"variants.{name}.rounds.{r}", t) for r, t in variant.get("rounds", {}).items()]
    for where, table in tables:
        _metric_values(path, table, where, remedy)
    info = read_run_info(run_dir) if info is None else info
    cfg = info["config"]
    if m["config_hash"] != info["config_hash"] or any(m.get(k) != cfg[k] for k in ("experiment", "method", "seed")):
        raise DamagedFile(path, "it was computed from another run than run.json records "
                                f"(config hash {m['config_hash']} vs {info['config_hash']})", remedy)
    if "wall_s" in m and "wall_s" in info and not _same_seconds(m["wall_s"], info["wall_s"]):   # evaluation copies it
        raise DamagedFile(path, f"its wall_s is {m['wall_s']}, but {run_dir / 'run.json'} records {info['wall_s']}: "
                                "it was computed from another training of the run", remedy)
    return m


def read_curves(run_dir: str | Path, info: dict | None = None):
    """A run's metric values at every round, from metrics.json (the one source of metric values:
    eval.evaluate) as a pandas DataFrame in history.csv's layout: ``round`` 0 … the last, a column a
    metric (``test/acc``), a variant's behind its name (``mean/test/acc``); NaN where a round was not
    evaluated. Read only from a whole run: its run.json, history.csv (:func:`read_history_rows`: training's
    log, which the workflow retrains a run for when it is damaged) and metrics.json (:func:`read_metrics`)
    checked against each other."""

    info = read_run_info(run_dir) if info is None else info
    read_history_rows(run_dir, info)
    return curves_of(read_metrics(run_dir, info))


def curves_of(m: dict):
    """:func:`read_curves`' frame of a metrics.json already read (:func:`read_metrics`)."""
    import pandas as pd

    tables = [("", m["rounds"])] + [(f"{v}/", t["rounds"]) for v, t in m.get("variants", {}).items()]
    rows: dict[int, dict] = {}
    for pre, rounds in tables:
        for r, vals in rounds.items():
            rows.setdefault(int(r), {}).update({pre + k: (math.nan if v is None else v) for k, v in vals.items()})
    last = max(rows, default=0)
    cols = list(dict.fromkeys(k for r in sorted(rows) for k in rows[r]))
    frame = pd.DataFrame([{"round": r, **{k: rows.get(r, {}).get(k, math.nan) for k in cols}} for r in range(last + 1)])
    return frame.astype({c: float for c in cols})


def read_selected(path: str | Path) -> dict:
    """A sweep's selected.json: the point it picked and its hyperparameters."""
    sel = _json(Path(path), RESELECT, ("point", "hparams"))
    if not isinstance(sel["point"], str):
        raise DamagedFile(path, "'point' is not a string", RESELECT)
    return sel


def run_problems(run_dir: str | Path) -> list[str]:
    """Why a finished run (run.json and history.csv present) cannot be trusted, or [] when it can."""
    run_dir = Path(run_dir)
    try:
        read_history_rows(run_dir, read_run_info(run_dir))
    except DamagedFile as e:
        return [f"{e.path.name} damaged ({e.why})"]
    except OSError as e:
        return [f"{Path(e.filename or run_dir).name} unreadable ({e.strerror})"]
    return []


def selection_problems(path: str | Path) -> tuple[list[str], dict | None]:
    """(why an existing selected.json cannot be trusted, the selection read when it can): ([], None) when
    it is absent (the selection job writes it)."""
    path = Path(path)
    if not path.exists():
        return [], None
    try:
        return [], read_selected(path)
    except DamagedFile as e:
        return [f"{path} is damaged ({e.why})"], None
    except OSError as e:
        return [f"{path} unreadable ({e.strerror})"], None


def metrics_problems(run_dir: str | Path) -> tuple[list[str], dict | None]:
    """(why an existing metrics.json cannot be trusted (damaged, or another run's), the metrics read when it
    can): ([], None) when it, or the run it belongs to, is absent (the rules that write them handle that)."""
    run_dir = Path(run_dir)
    if not (run_dir / "metrics.json").exists() or run_problems(run_dir):
        return [], None
    try:
        return [], read_metrics(run_dir)
    except DamagedFile as e:
        return [f"{e.path.name} damaged ({e.why})"], None
    except OSError as e:
        return [f"metrics.json unreadable ({e.strerror})"], None

