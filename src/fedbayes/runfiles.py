"""Reading a run's files back, checked: ``run.json``, ``history.csv``, ``metrics.json`` and a sweep's
``selected.json``. A file that does not parse, lacks what its writer always writes, or disagrees with
the run's other files raises :class:`DamagedFile`, which names the file, what is wrong and the remedy;
the CLI turns it into one line and exit status 2. The workflow asks :func:`run_problems` and
:func:`metrics_problems` before it trusts a finished run, and reruns what they name instead.

Torch-free and pandas-free (the workflow calls it while it builds the DAG)."""

from __future__ import annotations

import csv
import json
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


def read_run_info(run_dir: str | Path) -> dict:
    """run.json: the resolved configuration the run trained with and its code identity."""
    path = Path(run_dir) / "run.json"
    info = _json(path, RETRAIN, ("config", "config_hash"))
    cfg = info["config"]
    if not isinstance(cfg, dict) or not all(k in cfg for k in ("experiment", "method", "seed", "rounds")):
        raise DamagedFile(path, "its config lacks experiment, method, seed or rounds", RETRAIN)
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
    diverged = info.get("diverged")
    want = int(info["config"]["rounds"])
    if diverged is None and last != want:
        raise DamagedFile(path, f"it ends at round {last}; run.json says the run trained {want} rounds", RETRAIN)
    if diverged is not None and not last <= int(diverged.get("round", want)):
        raise DamagedFile(path, f"it goes on to round {last} after the run diverged at round {diverged.get('round')}",
                          RETRAIN)
    return rows


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
    if not isinstance(m["rounds"], dict):
        raise DamagedFile(path, "'rounds' is not an object", remedy)
    info = read_run_info(run_dir) if info is None else info
    cfg = info["config"]
    if m["config_hash"] != info["config_hash"] or any(m.get(k) != cfg[k] for k in ("experiment", "method", "seed")):
        raise DamagedFile(path, "it was computed from another run than run.json records "
                                f"(config hash {m['config_hash']} vs {info['config_hash']})", remedy)
    return m


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


def metrics_problems(run_dir: str | Path) -> list[str]:
    """Why an existing metrics.json cannot be trusted (damaged, or another run's), or [] when it can or
    when it, or the run it belongs to, is absent (the rules that write them handle that)."""
    run_dir = Path(run_dir)
    if not (run_dir / "metrics.json").exists() or run_problems(run_dir):
        return []
    try:
        read_metrics(run_dir)
    except DamagedFile as e:
        return [f"{e.path.name} damaged ({e.why})"]
    except OSError as e:
        return [f"metrics.json unreadable ({e.strerror})"]
    return []

