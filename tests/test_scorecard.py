"""The reproduction scorecard (reports/README.md): verdicts, counts recounted from the CSVs, claims."""

import csv
import math

import pandas as pd
import pytest
import yaml

from fedbayes.published import load_paper
from fedbayes.reports.claims import check_claim
from fedbayes.reports.scorecard import build_scorecard, causes_of
from fedbayes.reports.tally import table_order
from fedbayes.reports.verdicts import VERDICTS, verdict
from fedbayes.study.model import Study
from fedbayes.reports.cells import within
from dagutil import read_params


def row(**kw):
    base = {"status": "ok", "within_tol": None, "published_source": "p t", "published_mean": 1.0}
    return {**base, **kw}


@pytest.mark.parametrize("kw, expected", [
    ({"within_tol": True}, "within"),
    ({"within_tol": False}, "outside"),
    ({"within_tol": "True"}, "within"),      # as read back by the csv module
    ({"within_tol": float("nan")}, "no tolerance"),
    ({"status": "not run (data unavailable: Could not obtain dataset 'mnist')"}, "not run: no data"),
    ({"status": "not run (fedlap_func is not in experiments.x.methods)"}, "not run: other"),
    ({"status": "diverged (seed 1 at round 7)", "within_tol": False}, "diverged"),
    ({"status": "not comparable (no faithful substitute: ...)"}, "not comparable"),
])
def test_verdict_of_a_cell(kw, expected):
    assert verdict(row(**kw)) == expected


def test_rounds_to_target_cells_have_a_verdict_when_a_side_never_reached():
    """A blank in a rounds-to-target cell means "never reached": both blank agree, one blank does not
    (these cells had no verdict before)."""
    nan = float("nan")
    assert within(False, nan, nan, 5, target_cell=True) is True            # neither reached the target
    assert within(True, nan, nan, 5, target_cell=True) is False            # paper reached it, we did not
    assert within(False, 32.0, nan, 5, target_cell=True) is False          # we reached it, the paper did not
    assert within(True, 20.0, 3.0, 5, target_cell=True) is True
    assert within(True, 20.0, 6.0, 5, target_cell=True) is False
    assert within(True, 20.0, 6.0, None, target_cell=True) is None         # no tolerance, no verdict
    assert within(False, nan, nan, 5, target_cell=False) is None           # a blank published accuracy: no cell


def _recount(path):
    """Independent recount with the csv module: verdict of every published cell of one table CSV."""
    out = {v: 0 for v in VERDICTS}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if not r["published_source"] or (not r["published_mean"] and not r.get("target")):
                continue
            st = r["status"]
            key = ("not comparable" if st.startswith("not comparable") else
                   "not run: no data" if st.startswith("not run (data unavailable") else
                   "not run: other" if st.startswith("not run") else
                   "diverged" if st.startswith("diverged") else
                   {"True": "within", "False": "outside"}.get(r["within_tol"], "no tolerance"))
            out[key] += 1
    return out


def test_scorecard_counts_equal_a_recount_of_the_committed_tables(repo, tmp_path, monkeypatch):
    monkeypatch.chdir(repo)
    p = read_params(repo)
    counts = build_scorecard(Study.resolve(p), tmp_path / "README.md")
    for name in p["tables"]:
        assert counts[name] == _recount(repo / "reports" / f"{name}.csv"), name
    total = {v: sum(counts[n][v] for n in p["tables"]) for v in VERDICTS}
    assert all(counts["distinct"][v] <= total[v] for v in VERDICTS)
    text = (tmp_path / "README.md").read_text()
    d = counts["distinct"]
    ran = d["within"] + d["outside"]
    assert f"**{d['within']} of {ran}**" in text


def test_committed_scorecard_is_built_from_the_committed_tables(repo, tmp_path, monkeypatch):
    """reports/README.md is what the committed tables give (rebuild: snakemake --cores all reports/README.md)."""
    monkeypatch.chdir(repo)
    p = read_params(repo)
    build_scorecard(Study.resolve(p), tmp_path / "README.md")
    expected = (tmp_path / "README.md").read_text()
    assert (repo / "reports" / "README.md").read_text() == expected


def _frame(rows):
    return pd.DataFrame([{"experiment": e, "method": m, "metric": k, "round": r, "statistic": "mean_last3",
                          "ours_mean": o, "published_mean": pub, "published_source": "p t", "status": st}
                         for e, m, k, r, o, pub, st in rows])


def test_claim_checks_direction_margin_and_what_cannot_be_tested():
    nan = math.nan
    df = _frame([("a", "new", "test/acc", 50, 80.0, 81.0, "ok"), ("a", "old", "test/acc", 50, 78.5, 78.0, "ok"),
                 ("b", "new", "test/acc", 50, 75.0, 77.0, "ok"), ("b", "old", "test/acc", 50, 74.5, 74.0, "ok"),
                 ("c", "new", "test/acc", 50, nan, 70.0, "not run (data unavailable: x)"),
                 ("c", "old", "test/acc", 50, nan, 60.0, "not run (data unavailable: x)"),
                 ("a", "new", "test/nll", 50, 0.50, 0.5, "ok"), ("a", "old", "test/nll", 50, 0.60, 0.4, "ok")])
    claim = {"text": "new beats old by 1 point", "table": "t", "metric": "test/acc", "round": "last", "by": 1.0,
             "method": "new", "beats": ["old"], "experiments": ["a", "b", "c"]}
    res = check_claim(df, "p", claim)
    assert [c.ours for c in res.checks] == ["holds", "does not hold", "not testable"]
    # a failing claim names where it fails: "does not hold (1 of 2)" read as "one failure" or "one success"
    assert res.ours == "does not hold: fails on b (holds on 1 of 2 tested)"
    assert res.published == "holds on all 3 tested experiments"
    assert check_claim(df, "p", {**claim, "quantifier": "most", "experiments": ["a", "b"], "by": 0.0}).ours \
        == "holds on 2 of 2 tested experiments (the claim says usually)"
    assert check_claim(df, "p", {**claim, "experiments": ["c"]}).ours == "not testable here"
    nll = check_claim(df, "p", {**claim, "metric": "test/nll", "by": 0.05, "experiments": ["a"]})   # lower is better
    assert nll.ours == "holds on all 1 tested experiment" and nll.published == "does not hold: fails on a (holds on 0 of 1 tested)"


def test_every_claim_names_cells_of_its_table(repo):
    p = read_params(repo)
    papers = sorted({r.split(":")[0] for s in p["tables"].values() for r in s.get("published", [])})
    n = 0
    for paper in papers:
        for c in load_paper(paper).get("claims", []):
            n += 1
            spec = p["tables"][c["table"]]
            assert c["metric"] in spec["metrics"], c["id"]
            assert {c["method"], *c["beats"]} <= set(spec["methods"]), c["id"]
            assert set(c["experiments"]) <= set(spec["experiments"]), c["id"]
            assert c.get("round", "last") == "last" or isinstance(c["round"], int), c["id"]
            assert c.get("quantifier", "all") in ("all", "most"), c["id"]
    assert n >= 5


def test_scorecard_does_not_depend_on_the_order_of_the_tables_in_params(repo, tmp_path, monkeypatch):
    """The workflow hands the CLI params with sorted keys: the scorecard (distinct cells' verdicts
    included) must not change with the order of `tables` (it did: 164 vs 149 cells within)."""
    monkeypatch.chdir(repo)
    p = read_params(repo)
    a = build_scorecard(Study.resolve(p), tmp_path / "a.md")
    b = build_scorecard(Study.resolve({**p, "tables": dict(reversed(list(p["tables"].items())))}), tmp_path / "b.md")
    assert a == b and (tmp_path / "a.md").read_text() == (tmp_path / "b.md").read_text()


def test_scorecard_reads_in_two_minutes(repo, tmp_path, monkeypatch):
    """The page opens with the answer: both counts (per table cell and per distinct published number),
    the papers with no compared cell, the failing claims, then one block per paper; each cause's text
    is written once (the FedDyn paragraph was printed 12 times) with its cells under it."""
    monkeypatch.chdir(repo)
    p = read_params(repo)
    numbers, lo, hi = build_scorecard(Study.resolve(p), tmp_path / "README.md")["per_number"]
    text = (tmp_path / "README.md").read_text()
    top = text[:text.index("## Per paper")]
    assert f"**{lo}–{hi} of {numbers}**" in top and "60 numbers are printed by both the BayesADMM and the FedLap paper" in top
    assert "FedIVON and FOLA have no compared cell here" in top
    assert "BayesADMM beats every FedLap-family baseline" in top and "fails on fmnist-dir-k100" in top
    blocks = text[text.index("## Per paper"):text.index("## Why cells")]
    assert blocks.count("- **Command:** `snakemake --cores all") == len({n.split("/")[0] if "/" in n else "" for n in p["tables"]})
    assert blocks.count("- **Hardware, runtime**") == blocks.count("- **Command:**")
    # the scorecard's causes and each paper's own (papers/<paper>/causes.yaml: FedLap Table 3's cells)
    causes = causes_of(p["scorecard"], table_order(p["tables"]))
    assert len(causes) > len(yaml.safe_load((repo / "reports" / "causes.yaml").read_text())["causes"])
    for c in causes:
        assert text.count(c["cause"][1:]) <= 1, c["short"]
    assert "cause not established yet" not in text
    assert "(1 of 3)" not in text and len(text.split()) < 5000


def test_one_counting_basis_and_one_vocabulary_in_every_view(repo, tmp_path, monkeypatch):
    """The scorecard, its terminal line, the tables and the `dvc metrics` files count on the bases named in
    fedbayes.reports.verdicts and print its verdict words; the causes add up to the cells outside (they
    once gave 48 against 49: a cell two papers print counted once, table1-only cells counted in)."""
    import json
    import re

    from fedbayes.reports.scorecard import terminal_line
    from fedbayes.reports.verdicts import MARK, PER_NUMBER, PER_TABLE

    monkeypatch.chdir(repo)
    p = read_params(repo)
    result = build_scorecard(Study.resolve(p), tmp_path / "README.md")
    text = (tmp_path / "README.md").read_text()
    n = result["distinct"]
    numbers, lo, hi = result["per_number"]
    short = text.split("## Per paper")[0]
    assert f"**{n['within']} of {n['within'] + n['outside']}** {PER_TABLE}" in short
    assert f"{PER_NUMBER}" in short and f"**{lo}–{hi} of {numbers}**" in short
    # the causes' cells add up to the number outside, on the same basis
    listed = [int(k) for k in re.findall(r"^\d+\. .* \((\d+)\)$", short, re.M)]
    assert sum(listed) == n["outside"], (listed, n["outside"])
    assert f"Together {n['outside']}: the {n['outside']} *outside* above." in short
    # one vocabulary: no view's own words for a verdict
    for old in ("distinct cells", "Reproduces:", "Does not reproduce", "not compared", "per distinct number",
                "not run (data unavailable)", "no tolerance set"):
        assert old not in text, old
    line = terminal_line(result)
    assert f"{PER_TABLE}: {n['within']} of {n['within'] + n['outside']} within" in line
    assert f"{PER_NUMBER}: {lo}–{hi} of {numbers} within" in line
    assert f"{MARK['within']} within / {MARK['outside']} outside" in (repo / "reports" / "table1.md").read_text()
    front = " ".join((repo / "README.md").read_text().split())  # the project README quotes the same counts
    assert f"{PER_TABLE}: **{n['within']} of {n['within'] + n['outside']}**" in front
    assert f"{PER_NUMBER} (" in front and f"**{lo}–{hi} of {numbers}**" in front
    words = {v["verdict"] for f in (repo / "reports" / "metrics").rglob("*.json")
             for v in json.loads(f.read_text()).values() if "verdict" in v}
    assert words and words <= set(VERDICTS), words


def test_every_reproduced_number_is_in_the_scorecard(repo, tmp_path, monkeypatch):
    """The data-free targets count: FedEP Table 4's toy cells are published cells with a verdict (their
    range), and the BayesADMM convex figures' claims are checked (the scorecard once said FedEP had no
    compared cell, and the figures' claims had a paper column and no verdict)."""
    from fedbayes.reports.claims import toy_results

    monkeypatch.chdir(repo)
    p = read_params(repo)
    toy = pd.read_csv(repo / "reports" / "fedep" / "table4.csv")
    figs = pd.read_csv(repo / "reports" / "bayesadmm" / "figures.csv")
    claims = load_paper("bayesadmm")["figure_claims"]
    assert set(figs.verdict.dropna()) <= {"holds", "does not hold"}
    assert figs.verdict.notna().sum() == len(claims) and set(figs.paper.dropna()) == {c["text"] for c in claims}
    cells, fig_claims = toy_results(p)
    assert len(cells[cells.table == "fedep/table4"]) == len(toy)
    assert len(fig_claims) == len(claims)
    result = build_scorecard(Study.resolve(p), tmp_path / "README.md")
    text = (tmp_path / "README.md").read_text()
    assert result["fedep/table4"]["within"] == int(toy.within_range.sum())
    assert result["fedep/table4"]["within"] + result["fedep/table4"]["outside"] == len(toy)
    assert "FedEP, " not in text.split("have no compared cell here")[0].rsplit("\n", 1)[-1]
    for c in claims:
        assert c["text"] in text
