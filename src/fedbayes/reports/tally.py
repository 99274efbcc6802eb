"""The scorecard's cells and their counts: a table CSV's published cells, each with its verdict
(fedbayes.reports.verdicts), counted per table, per distinct published cell and per distinct published
number, and the cells outside tolerance counted per cause (the causes file)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from fedbayes.reports.verdicts import RAN, VERDICTS, _isnan, is_published_cell, verdict
from fedbayes.study.model import Study, TableSpec


def read_table(study: Study, name: str) -> pd.DataFrame:
    f = Path(study.paths["reports"]) / f"{name}.csv"
    if not f.exists():
        raise FileNotFoundError(f"{f}: table {name!r} has not been built (snakemake --cores all {f})")
    df = pd.read_csv(f, keep_default_na=True)
    df.insert(0, "table", name)
    return df


def published_cells(df: pd.DataFrame) -> pd.DataFrame:
    """The published cells of a table frame, each with its ``verdict``."""
    rows = df[[is_published_cell(r) for r in df.to_dict("records")]].copy()
    rows["verdict"] = [verdict(r) for r in rows.to_dict("records")]
    return rows


def substitute_cells(df: pd.DataFrame, table: TableSpec) -> pd.DataFrame:
    """Our cells on a table's substitute experiments (stand-ins with no published value)."""
    return df[df.experiment.isin(list(table.substitutes)) & df.ours_mean.notna()]


def counts(cells: pd.DataFrame) -> dict:
    c = cells.verdict.value_counts().to_dict() if len(cells) else {}
    return {v: int(c.get(v, 0)) for v in VERDICTS}


def ran_counts(cells: pd.DataFrame) -> tuple[int, int]:
    """(within, compared) of published cells with their ``verdict``: compared = within + outside."""
    c = counts(cells)
    return c["within"], c["within"] + c["outside"]


def table_summary(df: pd.DataFrame, name: str, files: list[str | Path]) -> list[str]:
    """What a person reads after a table job (instead of the frame): what was built, the published
    cells by verdict (the scorecard's classification, :func:`verdict`), and where the files are."""
    c = counts(published_cells(df))
    not_run = c["not run: no data"] + c["not run: other"]
    extra = [f"{n} {what}" for n, what in ((c["not comparable"], "not comparable"),
                                           (c["no tolerance"], "without a tolerance for their metric"),
                                           (c["diverged"], "diverged")) if n]
    if "scale" in df and (df["scale"] == "rehearsal").any():
        return [f"{name}: {len(df)} cells ({int((df['status'].astype(str) == 'ok').sum())} with numbers): "
                "stand-in rehearsal, no verdict"] + [f"  wrote {f}" for f in files]
    lines = [f"{name}: {len(df)} cells ({int((df['status'].astype(str) == 'ok').sum())} with our numbers), "
             f"{sum(c.values())} published: {c['within']} within, "
             f"{c['outside']} outside, {not_run} not run" + "".join(f", {e}" for e in extra)]
    lines += [f"  wrote {f}" for f in files]
    return lines


def table_order(names) -> list[str]:
    """Tables in a fixed order whatever the order of params (the workflow passes it with sorted keys):
    the headline tables (no paper folder) first, then by name."""
    return sorted(names, key=lambda n: ("/" in n, n))


def distinct(cells: pd.DataFrame, published_as: dict[str, dict]) -> pd.DataFrame:
    """One row per distinct published cell. A cell compared in several tables (the headline table
    repeats the papers' cells), or with two predictions of one run (``published_as``), counts once,
    with the verdict of the paper's own table where it is one of them (its tolerance is the paper
    table's), else of the first table in :func:`table_order`, methods in table order."""
    if cells.empty:
        return cells
    key = cells.apply(lambda r: (r.published_source, r.experiment, published_as.get(r.table, {}).get(r.method, r.method),
                                 r.get("round"), r.get("target"), r.metric), axis=1).map(str)
    order = {n: i for i, n in enumerate(table_order(cells.table.unique()))}
    own = cells.table != cells.published_source.str.replace(" ", "/")
    ranked = cells.assign(_key=key, _own=own, _order=cells.table.map(order), _i=range(len(cells)))
    ranked = ranked.sort_values(["_own", "_order", "_i"], kind="stable")
    return ranked.loc[~ranked._key.duplicated()].drop(columns=["_key", "_own", "_order", "_i"])



def _cause_of(causes: list[dict], row: dict) -> dict | None:
    """The first entry of the causes file whose given keys (tables, experiment, method, metrics) all
    match the cell."""
    for c in causes:
        if ("tables" in c and row["table"] not in c["tables"]) or ("metrics" in c and row["metric"] not in c["metrics"]):
            continue
        if all(c[k] == row[k] for k in ("experiment", "method") if k in c):
            return c
    return None


CELL_KEY = ("experiment", "method", "metric", "round", "target", "statistic")


def _cell_key(r) -> str:
    return str(tuple(None if _isnan(r.get(k)) else r.get(k) for k in CELL_KEY))


def per_number(dist: pd.DataFrame) -> tuple[int, int, int, dict]:
    """(numbers, within on every table, within on some table, {papers: numbers printed by all of them})
    over the distinct published cells we ran
    with a tolerance, counted once per distinct published number: a paper that reprints another's cell
    (the BayesADMM paper's FMNIST baselines are the FedLap paper's) prints the same number at the same
    address. A reprinted number can be within one paper's tolerance and outside the other's, hence a range."""
    ran = dist[dist.verdict.isin(RAN)]
    if ran.empty:
        return 0, 0, 0, {}
    key = ran.apply(lambda r: _cell_key(r) + repr(r.published_mean), axis=1)
    groups = ran.assign(_k=key).groupby("_k")
    within = groups.verdict.agg(lambda v: (set(v) == {"within"}, "within" in set(v)))
    shared = groups.published_source.agg(lambda v: tuple(sorted({s.split()[0] for s in v})))
    shared = shared[shared.map(len) > 1].value_counts().to_dict()
    return len(within), sum(a for a, _ in within), sum(b for _, b in within), shared


def cause_counts(outside: pd.DataFrame, dist: pd.DataFrame, causes: list[dict]) -> tuple[pd.Series, dict]:
    """Cells outside per cause on the headline basis (:data:`PER_TABLE`, the rows of ``dist``), most first,
    so that they add up to the number outside; and per cause the cells outside in no paper table's row
    of the basis (``outside`` holds every table's outside cells with their ``_cause`` and ``_key``)."""
    basis = dist[dist.verdict == "outside"]
    ids = pd.Series([(lambda c: causes.index(c) if c is not None else -1)(_cause_of(causes, r))
                     for r in basis.to_dict("records")], dtype=int)
    per = ids.value_counts(sort=False)
    keys = {_cell_key(r) + repr((r["ours_mean"], r["published_mean"])) for r in basis.to_dict("records")}
    rest = outside[~outside._key.isin(keys)]
    extra = {int(i): int(k) for i, k in rest.groupby("_cause")._key.nunique().items()}
    for i in extra:  # a cause whose cells are all outside the basis still gets its number
        per[i] = per.get(i, 0)
    order = sorted(per.index, key=lambda i: (-per[i], -extra.get(i, 0)))
    return per.reindex(order).astype(int), extra


def paper_of(table: str) -> str:
    """The paper a table reproduces (its folder); the headline table has none."""
    return table.split("/")[0] if "/" in table else "headline"
