"""One verdict per published number: a cell is judged by the tolerance of the paper table that publishes
it, whichever report table prints it (the headline table reprints the papers' cells)."""
from __future__ import annotations

import copy
import math
from pathlib import Path

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
KEY = ["published_source", "experiment", "method", "round", "target", "metric", "published_mean"]


def _params() -> dict:
    return yaml.safe_load((ROOT / "params.yaml").read_text())


def test_committed_reports_give_one_verdict_per_published_number():
    """Every committed table CSV (params.yaml `tables`): the same number of the same paper table at the same address has one
    tolerance and one verdict in every report table that compares it."""
    frames = []
    for name in _params()["tables"]:
        df = pd.read_csv(ROOT / "reports" / f"{name}.csv")
        df = df[df.published_mean.notna() & df.tolerance.notna()].copy()
        df["table"] = name
        frames.append(df)
    cells = pd.concat(frames, ignore_index=True)
    assert cells.table.nunique() > 1
    for col in ("round", "target"):
        cells[col] = cells.get(col, math.nan)
    key = cells[KEY].astype(str).agg("|".join, axis=1)
    split = cells.assign(_k=key).groupby("_k").filter(
        lambda g: g.tolerance.nunique() > 1 or g.within_tol.astype(str).nunique() > 1)
    assert split.empty, split[["table", *KEY, "tolerance", "within_tol"]].to_string()


def test_a_cell_takes_the_tolerance_of_its_paper_table():
    from fedbayes.reports.tables import cell_tolerance
    from fedbayes.study.model import TableSpec

    p = _params()
    tables = {t: TableSpec.from_block(t, spec) for t, spec in p["tables"].items()}
    assert cell_tolerance(tables, tables["table1"], "bayesadmm table1", "test/acc") == \
        p["tables"]["bayesadmm/table1"]["tolerance"]["test/acc"]
    assert cell_tolerance(tables, tables["table1"], "fedlap table1", "test/acc") == \
        p["tables"]["fedlap/table1"]["tolerance"]["test/acc"]
    assert math.isnan(cell_tolerance(tables, tables["fedivon/table1"], "fedivon table1", "test/acc"))


def test_a_second_tolerance_for_a_published_table_is_refused():
    from fedbayes.frontdoor import tolerance_problems

    p = copy.deepcopy(_params())
    assert tolerance_problems(p) == []
    p["tables"]["table1"]["tolerance"] = {"test/acc": 1.5}
    assert tolerance_problems(p) == [
        "tables.table1.tolerance: test/acc of bayesadmm:table1 is set by tables.bayesadmm/table1.tolerance "
        "(a published number has one tolerance); remove it here",
        "tables.table1.tolerance: test/acc of fedlap:table1 is set by tables.fedlap/table1.tolerance "
        "(a published number has one tolerance); remove it here"]
