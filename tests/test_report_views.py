"""What a reader sees first: the at-a-glance grid of a table's .md, the pages of Snakemake's report,
and figures whose data stay inside their axes."""

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from fedbayes.study.model import Study
from dagutil import read_params


def _row(exp, method, rnd, metric, ours, pub=float("nan"), within=None, status="ok"):
    return {"experiment": exp, "method": method, "point": "default", "round": rnd, "metric": metric,
            "statistic": "mean_last3", "ours_mean": ours, "ours_std": 0.1, "n_seeds": 3,
            "published_mean": pub, "published_std": 0.0, "published_source": "" if np.isnan(pub) else "p table1",
            "authors_code_mean": float("nan"), "authors_code_std": float("nan"), "authors_code_n": float("nan"),
            "authors_code_source": "", "diff": ours - pub, "tolerance": 1.0, "within_tol": within,
            "scale": "paper", "status": status, "note": ""}


def test_grid_is_first_and_counts_every_published_cell_by_verdict():
    """A table's .md opens with a method × experiment grid of its key metric at each experiment's last
    round (ours / published and the verdict's mark), the smoothing that makes a cell stated there, and
    per method its published cells over every metric and round counted in verdicts.py's words."""
    from fedbayes.reports.tables import render_grid
    from fedbayes.reports.verdicts import MARK

    from fedbayes.study.model import TableSpec

    table = TableSpec.from_block("t", {"experiments": ["e1", "e2"], "metrics": ["test/acc", "test/nll"],
                                       "methods": ["a", "b"], "statistic": "mean_last3"})
    rows = [_row("e1", "a", 10, "test/acc", 70.04, 70.5, True), _row("e1", "a", 10, "test/nll", 0.5, 0.4, False),
            _row("e1", "a", 20, "test/acc", 80.0, 82.0, False), _row("e1", "a", 20, "test/nll", 0.4, 0.4, True),
            _row("e1", "b", 10, "test/acc", 60.0), _row("e1", "b", 10, "test/nll", 0.9),
            _row("e1", "b", 20, "test/acc", 65.0), _row("e1", "b", 20, "test/nll", 0.8),
            _row("e2", "a", 20, "test/acc", float("nan"), 75.0, None, "not run (data unavailable: x)"),
            _row("e2", "a", 20, "test/nll", float("nan"), 0.5, None, "not run (data unavailable: x)"),
            _row("e2", "b", 20, "test/acc", float("nan"), float("nan"), None, "not run (data unavailable: x)"),
            _row("e2", "b", 20, "test/nll", float("nan"), float("nan"), None, "not run (data unavailable: x)")]
    lines = render_grid(pd.DataFrame(rows), table)
    text = "\n".join(lines)
    assert "mean over rounds R−2, R−1, R" in lines[0] and "`test/acc`" in lines[0] and "e1: 20" in lines[0]
    assert "| method | e1 | e2 | published cells |" in lines
    a = next(ln for ln in lines if ln.startswith("| a |"))
    assert a == f"| a | 80.0 / 82.0 {MARK['outside']} | not run / 75.0 | 2 {MARK['within']}, 2 {MARK['outside']}, " \
                "2 not run: no data |"
    assert next(ln for ln in lines if ln.startswith("| b |")) == "| b | 65.0 | not run | none |"
    assert "Whole table: 6 published cells: 2 within, 2 outside, 2 not run: no data." in text


def test_committed_table_files_open_with_the_grid(repo):
    """Every committed table .md has the grid within its first lines (the first screen), before the long
    table."""
    p = read_params(repo)
    for name in p["tables"]:
        lines = (repo / "reports" / f"{name}.md").read_text().splitlines()
        assert lines[2].startswith("**At a glance**"), name
        assert any(ln.startswith("| method |") for ln in lines[3:7]), name


def test_report_pages_render_markdown_tables_and_csv_in_place(tmp_path):
    """A report page is HTML (Snakemake's report shows HTML in place and offers .md/.csv only as
    downloads): Markdown tables become HTML tables, raw HTML in the source stays text, a CSV keeps every
    value as written; any other file is refused with a one-line message."""
    from fedbayes.report_pages import main, render_page

    md = tmp_path / "t.md"
    md.write_text("# t\n\n| a | b |\n|---|---|\n| 1 | <script>x</script> |\n")
    out = render_page(md, tmp_path / "t.md.html")
    page = out.read_text()
    assert "<h1>t</h1>" in page and "<td>1</td>" in page and "<script>" not in page and "&lt;script&gt;" in page
    csv = tmp_path / "t.csv"
    csv.write_text('experiment,ours_mean\ne1,71.5544\n"e,2",0.711156\n')
    page = render_page(csv, tmp_path / "t.csv.html").read_text()
    assert "<td>71.5544</td>" in page and "<td>e,2</td>" in page and "2 rows × 2 columns" in page
    (tmp_path / "x.txt").write_text("x")
    assert main([str(tmp_path / "x.txt"), str(tmp_path / "x.html")]) == 2
    assert not (tmp_path / "x.html").exists()


def test_the_scorecard_category_sorts_first(repo):
    """Snakemake's report lists categories by name (JavaScript localeCompare): the scorecard's comes before
    every paper's, the headline's and the sweeps'."""
    import functools
    import locale

    from fedbayes.report_pages import SCORECARD_CATEGORY
    from fedbayes.workflow.plan import report_category

    p = read_params(repo)
    others = {report_category(t, repo / "papers") for t in [*p["tables"], *p.get("toys", {})]} | {"Sweeps (selection)"}
    key = functools.cmp_to_key(locale.strcoll)
    assert sorted([*others, SCORECARD_CATEGORY], key=key)[0] == SCORECARD_CATEGORY
    assert sorted([*others, SCORECARD_CATEGORY], key=str.casefold)[0] == SCORECARD_CATEGORY


def _captured(monkeypatch, module, name):
    figs = []

    def capture(fig, path, *a, **k):
        figs.append(fig)
        return path

    monkeypatch.setattr(module, name, capture)
    return figs


def test_a_table_with_no_runs_has_a_reliability_figure_of_its_own(repo, tmp_path, monkeypatch):
    """With no run here (FedEP Table 5: no CIFAR-100), the reliability figure is not the curves' ECE panel
    again: it plots the published ECE against the published accuracy, a point per method."""
    from fedbayes.reports import figures

    p = read_params(repo)
    p["paths"] = {**p["paths"], "raw": str(tmp_path / "raw"), "work": str(tmp_path / "work")}
    figs = _captured(monkeypatch, figures, "save_with_data")
    study = Study.resolve(p)
    figures.reliability(study, study.tables["fedep/table5"], tmp_path / "r.png")
    (fig,) = figs
    ax = fig.axes[0]
    assert ax.get_xlabel().startswith("accuracy") and ax.get_ylabel() == "ECE"
    assert len(ax.containers) == len(p["tables"]["fedep/table5"]["methods"])


def test_figure3a_keeps_every_finite_value_inside_the_axes(monkeypatch):
    """Fig. 3a: an undamped PVI whose objective jumps 20× above the others' stays inside the axes."""
    from fedbayes.toys.bayesadmm import figures
    from fedbayes.toys.bayesadmm.solvers import DiagRun

    figs = _captured(monkeypatch, figures, "save_figure_atomic")
    base = np.array([100.0, 80.0, 70.0, 65.0])
    runs = {"PVI": DiagRun(np.array([100.0, 2000.0, 50.0, np.nan]), None, None, 3),
            "BayesADMM": DiagRun(base, None, None, None)}
    figures.figure3a("unused.png", SimpleNamespace(x=np.zeros((5, 2)), sizes=np.full(5, 10)), runs)
    (fig,) = figs
    ax = fig.axes[0]
    lo, hi = ax.get_ylim()
    for line in ax.get_lines():
        y = np.asarray(line.get_ydata(), dtype=float)
        assert (y[np.isfinite(y)] >= lo).all() and (y[np.isfinite(y)] <= hi).all(), line.get_label()


@pytest.mark.parametrize("name", ["fedivon_table1_reliability.png"])
def test_reliability_title_leaves_the_panels_most_of_the_image(repo, name):
    """The committed two-panel reliability figure: its title and key take at most a third of its height
    (the rows above the first and below the last coloured pixel row)."""
    from PIL import Image

    a = np.asarray(Image.open(repo / "reports" / "figures" / name).convert("RGB")).astype(int)
    coloured = np.where(((a.max(-1) - a.min(-1)) > 60).any(1))[0]
    assert (coloured[-1] - coloured[0]) / a.shape[0] > 0.45
