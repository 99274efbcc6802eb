"""The reproduction scorecard (``reports/README.md``): which published numbers come back, from the tables.

A *cell* is one published number: (paper table, experiment, method, round or target, metric). Each
table CSV has one row per cell of ours; a row is a published cell when it names a published source
and the paper gives a value there (in rounds-to-target tables a blank, "never reached", is a value
too). Every published cell gets exactly one verdict (``VERDICTS``, fedbayes.reports.verdicts, the one
vocabulary of every view), decided from the row alone, so the scorecard's counts can be recounted from the CSVs by anyone.

The cells and their counts are fedbayes.reports.tally's, the papers' claims fedbayes.reports.claims'; this
module writes the page.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from fedbayes.fileio import load_yaml, write_text_atomic
from fedbayes.published import load_paper, paper_folder
from fedbayes.reports.claims import FigureClaim, check_claim, paper_claims, toy_results
from fedbayes.reports.tally import (_cause_of, _cell_key, cause_counts, counts, distinct, paper_of, per_number,
                                    published_cells, read_table, substitute_cells, table_order)
from fedbayes.reports.verdicts import MEANING, PER_NUMBER, PER_TABLE, RAN, VERDICTS, _isnan
from fedbayes.runpaths import run_dir
from fedbayes.study import ConfigError
from fedbayes.study.model import Study, TableSpec


def _link(target: str | Path, reports: Path) -> str:
    """A link from the scorecard (``<reports>/README.md``) to ``target``."""
    import os

    return os.path.relpath(target, reports).replace(os.sep, "/")


def causes_of(sc: dict, names: list[str]) -> list[dict]:
    """The causes of cells outside tolerance, first match wins: the scorecard's file (params ``scorecard.causes``:
    cells several papers' tables print), then each paper's own ``papers/<paper>/causes.yaml``, papers in
    the order of their tables."""
    files = [Path(sc["causes"])] if sc.get("causes") else []
    files += [paper_folder(pp) / "causes.yaml" for pp in dict.fromkeys(paper_of(t) for t in names)]
    return [c for f in files if f.exists() for c in load_yaml(f.read_text()).get("causes", [])]


def _fmt(x, digits=2) -> str:
    return "—" if _isnan(x) else f"{x:.{digits}f}".rstrip("0").rstrip(".") if digits else f"{x:g}"


def terminal_line(result: dict) -> str:
    """The scorecard job's line in the terminal: the In short section's counts, in its words."""
    n, (numbers, lo, hi) = result["distinct"], result["per_number"]
    return (f"{PER_TABLE}: {n['within']} of {n['within'] + n['outside']} within ({n['outside']} outside); "
            f"{PER_NUMBER}: {lo}–{hi} of {numbers} within; {n['not run: no data']} not run: no data, "
            f"{n['not run: other']} not run: other, {n['not comparable']} not comparable")


def run_records(study: Study, tables: list[TableSpec]) -> list[Path]:
    """The run.json of every run behind ``tables``: each point of the sweep a table's method selects from
    (``MethodPlan.swept``) and the point in the table, of the tables' experiments and methods, every seed.
    Their device and wall time are the scorecard's hardware and runtime. Read from params, not from the
    sweep reports, which are not a table's inputs (a table built alone may have none, or an old one). Not a
    Snakemake input of the scorecard: a run that is redone changes the tables, which rebuild the
    scorecard, and a finished run's record does not change."""
    reports, found = Path(study.paths["reports"]), set()
    for spec in tables:
        f = reports / f"{spec.name}.csv"
        table = pd.read_csv(f, usecols=["experiment", "method", "point"]).dropna() if f.exists() else None
        for exp in spec.experiments:
            runs = study.experiments[exp].methods if exp in study.experiments else {}
            for m in set(spec.bases) & set(runs):
                points = set(runs[m].swept)
                if table is not None:
                    points |= set(table[(table.experiment == exp) & (table.method == m)].point.astype(str))
                for point in points:
                    found.update(run_dir(study.paths, exp, m, point, 0).parent.glob("seed*/run.json"))
    return sorted(found)


def _committed_runs(study: Study, behind: int) -> str:
    """How many runs are committed beside those behind the tables, and where the others are explained.
    Counted at results/runs/<experiment>/<method>/<point>/seed<s>/ for the params' experiments (a smoke or
    rehearsal folder below it is not an experiment)."""
    runs = [f for f in Path(study.paths["runs"]).glob("*/*/*/seed*/run.json") if f.parts[-5] in study.experiments]
    extra = len(runs) - behind
    return f"; {len(runs)} committed (the other {extra}: docs/results.md)" if extra > 0 else ""


def _runtime(records: list[dict]) -> str:
    if not records:
        return "no runs (nothing here was trained)"
    hw = sorted({f"{r.get('device', '?')} ({r.get('device_name', '?')}), {r.get('threads', '?')} thread"
                 + ("s" if r.get("threads") != 1 else "") for r in records})
    wall = [float(r["wall_s"]) for r in records if r.get("wall_s") is not None]
    return (f"{'; '.join(hw)} per run · {len(records)} runs, {sum(wall) / 3600:.1f} h of compute "
            f"(one run {min(wall) / 60:.0f}–{max(wall) / 60:.0f} min)" if wall else f"{'; '.join(hw)} · {len(records)} runs")


def _dataset_of(status: str) -> str | None:
    import re

    m = re.search(r"dataset '([^']+)'", status)
    return m.group(1) if m else None


def _at(r) -> str:
    """One cell's address and numbers: ``acc R10 73.3 vs 75.3 (−2)``."""
    where = f"R{int(r['round'])}" if not _isnan(r.get("round")) else f"→{_fmt(r.get('target'), 0)}%"
    diff = f" ({'+' if r['diff'] >= 0 else '−'}{_fmt(abs(r['diff']))})" if not _isnan(r.get("diff")) else ""
    return f"{r.metric.split('/')[-1]} {where} {_fmt(r.ours_mean)} vs {_fmt(r.published_mean)}{diff}"


def _and(names) -> str:
    names = list(names)
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else "".join(names)


def _tol(table: TableSpec) -> str:
    return ", ".join(f"{k} ±{v}" for k, v in table.tolerance.items()) or "none"


TITLE = "# Reproduction scorecard"


def build_scorecard(study: Study, out: str | Path) -> dict:
    """Write the scorecard to ``out`` and return its counts ({table: {verdict: n}} plus "distinct")."""
    p, tables = study.params, study.tables
    if study.stand_in:
        raise ConfigError(f"scale {study.scale}: the scorecard scores results on the real data, and a rehearsal "
                          "runs on stand-in data only; its tables say what ran")
    out = Path(out)
    sc = p.get("scorecard", {})
    reports = Path(study.paths["reports"])
    frames, all_cells, subs = {}, [], {}
    names = table_order(tables)
    causes = causes_of(sc, names)
    for name in names:
        df = read_table(study, name)
        if "scale" in df and (df["scale"].astype(str) == "rehearsal").any():
            raise ConfigError(f"{reports}/{name}.csv holds a stand-in rehearsal's cells, which are never scored")
        frames[name] = df
        all_cells.append(published_cells(df))
        subs[name] = substitute_cells(df, tables[name])
    toy_cells, figure_claims = toy_results(p)
    toys = list(dict.fromkeys(toy_cells.table)) if len(toy_cells) else []
    for name in toys:
        subs[name] = toy_cells.iloc[:0]
    cells = pd.concat(all_cells + [toy_cells], ignore_index=True)
    dist = distinct(cells, {n: t.published_as for n, t in tables.items()})
    result = {n: counts(cells[cells.table == n]) for n in names + toys}
    result["distinct"] = counts(dist)
    n = result["distinct"]
    ran = n["within"] + n["outside"]
    numbers, lo, hi, shared = per_number(dist)
    result["per_number"] = (numbers, lo, hi)
    tlink = {name: f"[{name}]({_link(str(reports / (name + '.md')), reports)})" for name in names + toys}

    # the papers' claims, checked once, used at the top, in each paper's block and in their own section
    papers_cited = sorted({r.split(":")[0] for t in tables.values() for r in t.published})
    claims = []
    for paper, claim in paper_claims(papers_cited):
        claims.append((paper, claim, check_claim(frames[claim["table"]], paper, claim,
                                                  tables[claim["table"]].substitutes)))
    claims += figure_claims

    # the outside cells, each distinct (experiment, method, metric, round, statistic, numbers) once, by cause
    outside = cells[cells.verdict == "outside"].copy()
    outside["_cause"] = [(lambda c: causes.index(c) if c is not None else -1)(_cause_of(causes, r))
                         for r in outside.to_dict("records")]
    outside["_key"] = [_cell_key(r) + repr((r["ours_mean"], r["published_mean"])) for r in outside.to_dict("records")]

    def cause_title(i: int) -> str:
        return causes[i].get("short", causes[i]["cause"]) if i >= 0 else "cause not established yet"

    # each cause counts its cells on the headline basis (PER_TABLE: the rows of `dist` outside), so the
    # causes add up to the number outside; a cell outside only in the headline table (a second prediction
    # of a run compared with the paper's, or the headline table's tolerance) is listed and counted apart
    per_cause, extra = cause_counts(outside, dist, causes)
    number = {i: k + 1 for k, i in enumerate(per_cause.index)}

    def cause_count(frame) -> str:
        g = frame.groupby("_cause", sort=False)._key.nunique()
        # the cause's number and the head of its title (before a colon): the full title is listed above
        return "; ".join(f"{number[i]}. {cause_title(i).split(':')[0]} ({k})" for i, k in sorted(g.items(), key=lambda x: number[x[0]]))

    L = [TITLE, "",
         f"Which published numbers come back here, which do not, and why. Built by "
         f"`snakemake --cores all {reports}/README.md` from the table CSVs (scale: {p['scale']}); do not edit "
         "by hand. A **cell** is one number a paper publishes: (table, experiment, method, round or target, "
         "metric); ours is *within* when it differs from the published mean by at most the table's tolerance.", ""]

    # --- in short
    no_cell = [pp for pp in dict.fromkeys(paper_of(t) for t in names) if pp != "headline"
               and sum(result[t][v] for t in names + toys if paper_of(t) == pp for v in RAN) == 0]
    with_sub = [pp for pp in no_cell if sum(len(subs[t]) for t in names if paper_of(t) == pp)]
    headline_methods = {b for t in names if paper_of(t) == "headline" for b in tables[t].bases}
    in_headline = [pp for pp in no_cell if pp not in with_sub and headline_methods & {
        b for t in names if paper_of(t) == pp for b in tables[t].bases}]
    titles = {pp: load_paper(pp).get("title", pp) for pp in dict.fromkeys(paper_of(t) for t in names) if pp != "headline"}
    short_name = {pp: t.rsplit("(", 1)[-1].rstrip(")") if "(" in t else pp for pp, t in titles.items()}
    L += ["## In short", "",
          f"- **{n['within']} of {ran}** {PER_TABLE}, that we ran are *within* the paper table's tolerance "
          f"({n['outside']} *outside*). Counted as {PER_NUMBER} "
          f"— " + "; ".join(f"{k} numbers are printed by both the {' and the '.join(short_name.get(x, x) for x in ps)} "
                            "paper" for ps, k in shared.items()) + " — it is "
          f"**{lo}–{hi} of {numbers}** (a reprinted number can be within one paper's tolerance and outside the "
          "other's: the low end counts it within only when it is within both).",
          f"- *Not run*: {n['not run: no data']} {PER_TABLE}, need datasets this machine cannot obtain, "
          f"{n['not run: other']} are not run for another reason (the table row says which); "
          f"*not comparable*: {n['not comparable']} have no faithful substitute.",
          f"- **{_and(short_name[pp] for pp in no_cell)} have no compared cell here**: every one of their "
          "published cells needs data this machine cannot obtain (or has no faithful substitute). "
          + " ".join(filter(None, [
              f"{_and(short_name[pp] for pp in with_sub)}: our runs on a substitute dataset (Fashion-MNIST), "
              "with no published value to compare." if with_sub else "",
              f"{_and(short_name[pp] for pp in in_headline)}: methods run in the headline table only."
              if in_headline else ""])) if no_cell else "- Every paper has compared cells here.",
          "- Hardware and runtime: " + _runtime([json.loads(f.read_text()) for f in run_records(study, list(tables.values()))])
          + _committed_runs(study, len(run_records(study, list(tables.values())))) + ".", ""]
    failing = [(paper, claim, res) for paper, claim, res in claims if res.ours.startswith("does not hold")]
    if failing:
        L += ["**Claims that do not hold on our numbers** (each holds on the paper's own table unless said):", ""]
        L += [f"- {short_name.get(paper, paper)}: \"{claim['text']}\" — {res.ours}"
              + ("" if res.published.startswith("holds") else f"; on the paper's own table it {res.published}")
              for paper, claim, res in failing if not isinstance(res, FigureClaim)]
        figs = [(paper, claim, res) for paper, claim, res in failing if isinstance(res, FigureClaim)]
        for pp in dict.fromkeys(paper for paper, _, _ in figs):
            L.append(f"- {short_name.get(pp, pp)}, figures: " + "; ".join(
                f"\"{claim['text']}\"" for paper, claim, res in figs if paper == pp) + " (table below)")
        L.append("")
    L += [f"**Why cells are outside tolerance**, each cause with its number of {PER_TABLE} (evidence and "
          "cells in [the section below](#why-cells-are-outside-tolerance)):", ""]
    L += [f"{number[i]}. {cause_title(i)} ({k})" if k else f"{number[i]}. {cause_title(i)} (headline table only: {extra[i]})"
          for i, k in per_cause.items()] or ["None."]
    if len(per_cause):
        L += ["", f"Together {int(per_cause.sum())}: the {n['outside']} *outside* above."
              + (f" The {sum(extra.values())} cells *outside* in the headline table only are counted in its block "
                 "below." if extra else "")]
    L.append("")

    # --- one block per paper
    L += ["## Per paper", ""]
    for pp in dict.fromkeys(paper_of(t) for t in names):
        ts = [t for t in names if paper_of(t) == pp]
        tt = [t for t in toys if paper_of(t) == pp]  # its data-free targets with published cells
        c = {v: sum(result[t][v] for t in ts + tt) for v in VERDICTS}
        got = c["within"] + c["outside"]
        sub = sum(len(subs[t]) for t in ts)
        title = titles.get(pp, "Headline benchmark: every method on the same Fashion-MNIST experiments")
        L += [f"### {title}", ""]
        L.append("- **Command:** `snakemake --cores all " + " ".join(f"{reports}/{t}.md" for t in ts + tt) + "`")
        per_t = [f"{tlink[t]} {result[t]['within']}/{result[t]['within'] + result[t]['outside']}"
                 for t in ts + tt if result[t]["within"] + result[t]["outside"]]
        mine = [(cl, res) for paper, cl, res in claims if paper == pp]
        held = [cl["text"] for cl, res in mine if res.ours.startswith("holds")]
        tested = [cl["text"] for cl, res in mine if not res.ours.startswith("not testable")]
        if got:
            L.append(f"- **Within:** {c['within']} of {got} compared cells "
                     f"({', '.join(per_t)})" + (f"; claims that hold on our numbers: {len(held)} of {len(tested)}" if tested else "") + ".")
            o = outside[outside.table.isin(ts)]
            fail = [cl["text"] for cl, res in mine if res.ours.startswith("does not hold")]
            L.append(f"- **Outside:** {c['outside']} cells"
                     + (f" — causes (cells): {cause_count(o)}" if len(o) else "")
                     + (f"; claims that fail: {len(fail)} (listed above)" if fail else "") + ".")
        else:
            L.append("- **Within / outside:** nothing compared — no published cell of this paper can be run "
                     "here" + (f"; our substitute runs hold {sub} cells without published values" if sub else "")
                     + (f"; on the substitute, claims that hold: {len(held)} of {len(tested)}" if tested else
                        "; its claims cannot be tested here" if mine else "") + ".")
        missing = sorted({d for t in ts for d in map(_dataset_of, cells[(cells.table == t) & (cells.verdict ==
                          "not run: no data")].status) if d})
        rest = [f"{c['not run: no data']} need datasets not obtainable here ({', '.join(missing)})"
                if c["not run: no data"] else "",
                f"{c['not comparable']} have no faithful substitute" if c["not comparable"] else "",
                f"{c['not run: other']} not run for another reason" if c["not run: other"] else ""]
        rest = [rest[0], rest[2], rest[1]]  # not run (no data, other), then not comparable
        if any(rest):
            L.append("- **Not run / not comparable:** " + "; ".join(r for r in rest if r) + ".")
        recs = [json.loads(f.read_text()) for f in run_records(study, [tables[t] for t in ts])]
        L.append("- **Hardware, runtime** (runs behind its tables, every sweep candidate and seed): "
                 + _runtime(recs) + ".")
        links = []
        for t in ts:
            figs = [f"[{f.rsplit('_', 1)[-1].removesuffix('.png')}]({_link(str(reports / 'figures' / f), reports)})"
                    for f in tables[t].figures if (reports / "figures" / f).exists()]
            links.append(tlink[t] + (f" ({', '.join(figs)})" if figs else ""))
        notes = sorted({tables[t].notes for t in ts if tables[t].notes})
        L += ["- **Tables** (figures): " + ", ".join(links)
              + "".join(f"; [notes]({_link(x, reports)})" for x in notes) + ".", ""]

    # --- causes, each once, with its cells
    L += ["## Why cells are outside tolerance", "",
          "Each cause once, with the cells it explains; a cell printed by several tables is listed once, with "
          "the tables where it is outside their tolerance.", ""]
    if outside.empty:
        L += ["None.", ""]
    for i, k in per_cause.items():
        g = outside[outside._cause == i]
        L += [f"### {number[i]}. {cause_title(i)} ({k} cells"
              + (f"; {extra[i]} more in the headline table only" if extra.get(i) else "") + ")", ""]
        if i >= 0:
            c = causes[i]
            L += [c["cause"][0].upper() + c["cause"][1:] + "." + (f" [Notes]({_link(c['notes'], reports)})." if c.get("notes") else ""), ""]
        for (exp, method), cg in g.groupby(["experiment", "method"], sort=False):
            parts = []
            for _, kg in cg.groupby("_key", sort=False):
                parts.append(_at(kg.iloc[0]) + f" [{', '.join(dict.fromkeys(kg.table))}]")
            L.append(f"- {exp} · {method}: " + "; ".join(parts))
        L.append("")

    # --- two tolerances
    both = cells[cells.verdict.isin(RAN)].copy()
    both["_key"] = [_cell_key(r) for r in both.to_dict("records")]
    split = both.groupby("_key").filter(lambda g: g.verdict.nunique() > 1)
    L += ["## One cell, two tolerances", "",
          "A number is judged by its paper table's tolerance (params.yaml `tables.<paper>/<table>.tolerance`: "
          + "; ".join(f"{t} {_tol(tables[t])}" for t in names if tables[t].tolerance
                      and result[t]["within"] + result[t]["outside"]) + "), in table1 too. Two papers "
          "printing one number (BayesADMM reprints FedLap's FMNIST baselines) can disagree; the counts use "
          "each paper's own table."
          + (f" These {split._key.nunique()} cells differ:" if len(split) else " No cell differs."), ""]
    for _, g in split.groupby("_key", sort=False):
        r = g.iloc[0]
        L.append(f"- {r.experiment} · {r.method} {_at(r)}: within in "
                 + ", ".join(g[g.verdict == "within"].table) + "; outside in "
                 + ", ".join(g[g.verdict == "outside"].table))
    L.append("")

    # --- claims
    L += ["## The papers' claims, checked", "",
          "Each claim as the paper states it, tested on our numbers and on the paper's own table. A claim holds "
          "when it holds on every experiment that can be tested here (\"usually\": on more than half); "
          "✓ holds, ✗ does not hold, · not testable here.", ""]
    alternates = sc.get("alternates", [])
    head = ["paper", "claim", "ours", "published"] + [a["label_short"] for a in alternates]
    L += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def mark(state: str) -> str:
        return {"h": "✓ ", "d": "✗ ", "n": "· "}[state[0]] + state

    details = []
    for paper, claim, res in claims:
        alt = []
        statistic = tables[claim["table"]].statistic if claim["table"] in tables else None
        for a in alternates if statistic else ():  # the same cells (same statistic) in a table of runs under another setting
            alt_df = pd.read_csv(a["csv"])
            r2 = check_claim(alt_df[alt_df.statistic == statistic], paper, claim)
            alt.append(mark(r2.ours) if r2.ours != "not testable here" else "·")
        L.append("| " + " | ".join([paper, claim["text"], mark(res.ours), mark(res.published)]
                                   + (alt or ["·"] * len(alternates))) + " |")
        if isinstance(res, FigureClaim):  # its one number is in the row above
            continue
        details += [f"- **{claim['text']}** ({paper}, {claim['table']}, {claim['metric']} at round "
                    f"{claim.get('round', 'last')}" + (f", margin {claim['by']}" if claim.get("by") else "") + "):"]
        details += [f"  - {c.experiment}: {c.detail}" if c.ours != "not testable" or c.published == "does not hold"
                    else f"  - {c.experiment}: not run here; on the paper's table it {c.published}" for c in res.checks]
    L += [""]
    for a in alternates:
        L += [f"Column *{a['label_short']}*: {a['label']} ({_link(a['csv'], reports)})."]
    L += ["", "<details><summary>The numbers behind each claim</summary>", ""] + details + ["", "</details>", ""]

    # --- every table's counts
    L += ["## Counts per table", "",
          "Every published cell has exactly one verdict, from its table row (recount them from the CSVs):", ""]
    L += [f"- **{v}**: {MEANING[v]}." for v in VERDICTS]
    L += ["- **substitute** — our cells on a stand-in dataset (Fashion-MNIST in place of data this machine cannot "
          "obtain): no published value to compare, counted apart.", ""]
    head = ["paper / table", "cells"] + list(VERDICTS) + ["substitute"]
    L += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in names + toys:
        c = result[name]
        L.append("| " + " | ".join([tlink[name], str(sum(c.values()))] + [str(c[v]) if c[v] else "·" for v in VERDICTS]
                                   + [str(len(subs[name])) if len(subs[name]) else "·"]) + " |")
    L.append("| " + " | ".join([f"**{PER_TABLE}**", f"**{sum(n.values())}**"]
                               + [f"**{n[v]}**" for v in VERDICTS] + [f"**{sum(len(s) for s in subs.values())}**"]) + " |")
    L += ["", f"The last row counts {PER_TABLE}: a cell compared in two tables (table1 reprints the papers' "
          "FMNIST cells) once, with the verdict of the paper's own table; the In short section's counts.", ""]

    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out, "\n".join(L))
    return result
