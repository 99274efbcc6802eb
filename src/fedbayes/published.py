"""Published numbers of the papers' tables, stored as data in each paper's folder.

A paper is one folder of the repository, ``papers/<paper>/``: its published values and claims
(``published.yaml``), the cells measured with the authors' released code where there are some
(``authors_code.yaml``), its reproduction notes (``NOTES.md``), the causes of its cells outside tolerance
(``causes.yaml``) and the runs and logs behind them (``evidence/``). The folder sits beside ``src/`` rather than
inside the package: notes and evidence are documents the reports link to, not code, and every reader (tables,
scorecard, the workflow, dvc.yaml's generated stages) runs in the repository (the package is installed
editable, ``pip install -e .``)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from fedbayes.fileio import load_yaml

# the repository's papers/ folder: src/fedbayes/published.py → the repository root
PAPERS = Path(__file__).resolve().parents[2] / "papers"


def paper_folder(name: str) -> Path:
    """The folder of paper ``name`` (``papers/<name>/``)."""
    return PAPERS / name


def papers() -> list[str]:
    """The papers with published values (a folder holding ``published.yaml``), by name."""
    return sorted(f.parent.name for f in PAPERS.glob("*/published.yaml"))


@lru_cache
def load_paper(name: str) -> dict:
    """Paper ``name``'s published values (``papers/<name>/published.yaml``); FileNotFoundError if it has none."""
    return load_yaml((paper_folder(name) / "published.yaml").read_text())


@lru_cache
def authors_code_entries() -> tuple[dict, ...]:
    """The cells measured with the authors' released code: every paper's ``authors_code.yaml`` entries,
    papers in name order."""
    return tuple(e for name in papers() if (f := paper_folder(name) / "authors_code.yaml").exists()
                 for e in load_yaml(f.read_text())["entries"])


def authors_code_files() -> list[str]:
    """The papers' ``authors_code.yaml`` files, relative to the repository (the tables name them)."""
    return [f"papers/{name}/authors_code.yaml" for name in papers() if (paper_folder(name) / "authors_code.yaml").exists()]


def published_value(refs: list[str], experiment: str, method: str, metric: str, rnd: int | None = None,
                    target: float | None = None):
    """First match among ``refs`` (``"paper:table"``) → (mean, std, "paper table") or None.

    A cell is addressed by its round (the table's ``rounds``, or the row's own ``rounds``) or, in
    rounds-to-target tables, by its ``target``. A cell the paper leaves blank ("—": the target was
    not reached, or nothing was reported) is stored as null and returned as (None, None, source)."""
    for ref in refs:
        paper, table = ref.split(":")
        t = load_paper(paper)["tables"][table]
        row = t["rows"].get(experiment) or {}
        cells = (row.get(method) or {}).get(metric)
        keys = row.get("targets") if target is not None else row.get("rounds", t.get("rounds", []))
        at = target if target is not None else rnd
        if cells is not None and keys and at in keys:
            cell = cells[keys.index(at)]
            mean, std = cell if cell is not None else (None, None)
            if mean is not None and std is None:  # a single published run: no std
                std = float("nan")
            return mean, std, f"{paper} {table}"
    return None


def published_row(refs: list[str], experiment: str) -> tuple[dict, dict] | None:
    """(table, row) of the first of ``refs`` with a row for ``experiment``, or None. A ref naming no
    stored paper or table is skipped (params validation reports it)."""
    for ref in refs:
        paper, table = ref.split(":")
        try:
            t = load_paper(paper)["tables"][table]
        except (FileNotFoundError, KeyError):
            continue
        if experiment in t["rows"]:
            return t, t["rows"][experiment]
    return None


def published_rounds(refs: list[str], experiment: str) -> list[int]:
    """The rounds at which the first of ``refs`` that has a row for ``experiment`` reports it (the
    row's own ``rounds``, else the table's): the cells of an experiment that runs nowhere (a table's
    ``not_comparable`` experiments) are the published ones."""
    found = published_row(refs, experiment)
    return list(found[1].get("rounds", found[0].get("rounds", []))) if found else []


def authors_code_value(experiment: str, method: str, metric: str, rnd: int, statistic: str, ddof: int = 1):
    """(mean, std over seeds (``ddof``, as the table's), n, source) of the cell measured with the authors' released code
    (a paper's ``authors_code.yaml``), or None."""
    import statistics

    for e in authors_code_entries():
        if (e["experiment"], e["method"], e["statistic"]) != (experiment, method, statistic):
            continue
        vals = (e["cells"].get(metric) or {}).get(rnd)
        if vals:
            std = (statistics.stdev if ddof else statistics.pstdev)(vals) if len(vals) > 1 else float("nan")
            return float(statistics.fmean(vals)), std, len(vals), f"{e['code']} ({e['config']}; seeds {e['seeds']})"
    return None
