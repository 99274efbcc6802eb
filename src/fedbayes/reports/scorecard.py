"""The reproduction scorecard (``reports/README.md``): which published numbers come back, from the tables.

A *cell* is one published number: (paper table, experiment, method, round or target, metric). Each
table CSV has one row per cell of ours; a row is a published cell when it names a published source
and the paper gives a value there (in rounds-to-target tables a blank, "never reached", is a value
too). Every published cell gets exactly one verdict (``VERDICTS``), decided by :func:`verdict` from
the row alone, so the scorecard's counts can be recounted from the CSVs by anyone.

The papers' headline claims (``claims:`` of ``fedbayes/papers/<paper>.yaml``) are checked on our
numbers and on the published ones (:func:`check_claim`): "A beats each of B, C by at least m points of
the metric at round r on experiments X, Y".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from fedbayes.config import ConfigError, paths, stand_in_size, table_figures
from fedbayes.fileio import load_yaml, write_text_atomic
from fedbayes.published import load_paper

VERDICTS = ("within tolerance", "outside tolerance", "no tolerance set", "not run (data unavailable)",
            "not run (other)", "diverged", "not comparable")
MEANING = {
    "within tolerance": "ours differs from the published mean by at most the table's tolerance",
    "outside tolerance": "ours differs by more than the tolerance (each listed below with its cause)",
    "no tolerance set": "both numbers present; the table sets no tolerance for this metric",
    "not run (data unavailable)": "the dataset cannot be obtained on the machine that built the table",
    "not run (other)": "the method is not run on this experiment (the table row says why)",
    "diverged": "a seed's run diverged (NaN) before the cell's round",
    "not comparable": "no faithful substitute exists here; the published numbers are printed alone",
}
LOWER_IS_BETTER = ("nll", "ece", "brier")  # metric name endings; rounds-to-target cells too


def _isnan(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def is_published_cell(row) -> bool:
    """A row is a published cell when it has a published source and a published value; a blank
    published value counts only in rounds-to-target tables ("the target was never reached")."""
    if not isinstance(row.get("published_source"), str) or not row["published_source"]:
        return False
    return not _isnan(row.get("published_mean")) or not _isnan(row.get("target", float("nan")))


def verdict(row) -> str:
    """The one verdict of a published cell (a row of a table CSV, as a dict or pandas row)."""
    status = row.get("status") if isinstance(row.get("status"), str) else ""
    if status.startswith("not comparable"):
        return "not comparable"
    if status.startswith("not run (data unavailable"):
        return "not run (data unavailable)"
    if status.startswith("not run"):
        return "not run (other)"
    if status.startswith("diverged"):
        return "diverged"
    within = row.get("within_tol")
    if isinstance(within, str):  # read back from CSV without dtype inference
        within = {"True": True, "False": False}.get(within)
    if within is True or within == 1.0:
        return "within tolerance"
    if within is False or within == 0.0:
        return "outside tolerance"
    return "no tolerance set"


def read_table(p: dict, name: str) -> pd.DataFrame:
    f = Path(paths(p)["reports"]) / f"{name}.csv"
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


def substitute_cells(df: pd.DataFrame, spec: dict) -> pd.DataFrame:
    """Our cells on a table's substitute experiments (stand-ins with no published value)."""
    subs = spec.get("substitutes", {})
    return df[df.experiment.isin(list(subs)) & df.ours_mean.notna()]


def counts(cells: pd.DataFrame) -> dict:
    c = cells.verdict.value_counts().to_dict() if len(cells) else {}
    return {v: int(c.get(v, 0)) for v in VERDICTS}


def table_summary(df: pd.DataFrame, name: str, files: list[str | Path]) -> list[str]:
    """What a person reads after a table job (instead of the frame): what was built, the published
    cells by verdict (the scorecard's classification, :func:`verdict`), and where the files are."""
    c = counts(published_cells(df))
    not_run = c["not run (data unavailable)"] + c["not run (other)"]
    extra = [f"{n} {what}" for n, what in ((c["not comparable"], "not comparable"),
                                           (c["no tolerance set"], "without a tolerance for their metric"),
                                           (c["diverged"], "diverged")) if n]
    if "scale" in df and (df["scale"] == "rehearsal").any():
        return [f"{name}: {len(df)} cells ({int((df['status'].astype(str) == 'ok').sum())} with numbers): "
                "stand-in rehearsal, no verdict"] + [f"  wrote {f}" for f in files]
    lines = [f"{name}: {len(df)} cells ({int((df['status'].astype(str) == 'ok').sum())} with our numbers), "
             f"{sum(c.values())} with a published value: {c['within tolerance']} within tolerance, "
             f"{c['outside tolerance']} outside, {not_run} not run" + "".join(f", {e}" for e in extra)]
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


# --- claims -------------------------------------------------------------------------------------------

@dataclass
class Check:
    experiment: str
    ours: str        # "holds" | "does not hold" | "not testable"
    published: str   # same, on the published numbers ("—" where the paper has none: a substitute)
    detail: str


@dataclass
class ClaimResult:
    paper: str
    claim: dict
    checks: list[Check] = field(default_factory=list)

    def _overall(self, states: list[str]) -> str:
        """all (default): holds on every experiment tested; most: on more than half of them."""
        tested = [s for s in states if s in ("holds", "does not hold")]
        if not tested:
            return "not testable here"
        held = tested.count("holds")
        ok = held > len(tested) / 2 if self.claim.get("quantifier") == "most" else held == len(tested)
        return ("holds" if ok else "does not hold") + f" ({held} of {len(tested)})"

    @property
    def ours(self) -> str:
        return self._overall([c.ours for c in self.checks])

    @property
    def published(self) -> str:
        return self._overall([c.published for c in self.checks])


def higher_is_better(metric: str, statistic: str) -> bool:
    return statistic != "rounds_to_target" and not metric.split("/")[-1].startswith(LOWER_IS_BETTER)


def _value(df: pd.DataFrame, experiment: str, method: str, metric: str, rnd, column: str):
    rows = df[(df.experiment == experiment) & (df.method == method) & (df.metric == metric)]
    if rnd == "last":
        rows = rows[rows["round"] == rows["round"].max()] if len(rows) else rows
    else:
        rows = rows[rows["round"] == rnd]
    if len(rows) != 1 or _isnan(rows.iloc[0][column]):
        return None, rows.iloc[0] if len(rows) == 1 else None
    return float(rows.iloc[0][column]), rows.iloc[0]


def _compare(df, experiment, claim, column) -> tuple[str, str]:
    metric, rnd, margin = claim["metric"], claim.get("round", "last"), float(claim.get("by", 0.0))
    a, row = _value(df, experiment, claim["method"], metric, rnd, column)
    if a is None:
        why = "not run" if row is None or not str(row.status).startswith("ok") else "no value"
        return "not testable", f"{claim['method']}: {why}"
    sign = 1.0 if higher_is_better(metric, str(row.statistic)) else -1.0
    parts, state = [], "holds"
    for other in claim["beats"]:
        b, _ = _value(df, experiment, other, metric, rnd, column)
        if b is None:
            parts.append(f"{other}: no value")
            state = "not testable" if state == "holds" else state
            continue
        gap = sign * (a - b)
        ok = gap >= margin - 1e-9
        state = state if ok else "does not hold"
        parts.append(f"{other} {b:.3g} ({'+' if gap >= 0 else '−'}{abs(gap):.3g}{' ✓' if ok else ' ✗'})")
    return state, f"{claim['method']} {a:.3g} vs " + ", ".join(parts)


def check_claim(df: pd.DataFrame, paper: str, claim: dict, substitutes=()) -> ClaimResult:
    """Evaluate one claim on a table frame: per experiment, on our numbers and on the published ones."""
    res = ClaimResult(paper, claim)
    for exp in claim["experiments"]:
        ours, detail = _compare(df, exp, claim, "ours_mean")
        pub, pub_detail = _compare(df, exp, claim, "published_mean")
        if (df[df.experiment == exp].published_source.fillna("") == "").all():
            pub, pub_detail = "—", "the paper has no values here" + (" (our substitute)" if exp in substitutes else "")
        res.checks.append(Check(exp, ours, pub, f"ours: {detail}; published: {pub_detail}"))
    return res


def paper_claims(papers: list[str]) -> list[tuple[str, dict]]:
    return [(paper, c) for paper in papers for c in load_paper(paper).get("claims", [])]


# --- the page -----------------------------------------------------------------------------------------

def _link(target: str | Path, reports: Path) -> str:
    """A link from the scorecard (``<reports>/README.md``) to ``target``."""
    import os

    return os.path.relpath(target, reports).replace(os.sep, "/")


def _fmt(x, digits=2) -> str:
    return "—" if _isnan(x) else f"{x:.{digits}f}".rstrip("0").rstrip(".") if digits else f"{x:g}"


def _cause_of(causes: list[dict], row: dict) -> dict | None:
    """The first entry of the causes file whose given keys (tables, experiment, method, metrics) all
    match the cell."""
    for c in causes:
        if ("tables" in c and row["table"] not in c["tables"]) or ("metrics" in c and row["metric"] not in c["metrics"]):
            continue
        if all(c[k] == row[k] for k in ("experiment", "method") if k in c):
            return c
    return None


def build_scorecard(p: dict, out: str | Path) -> dict:
    """Write the scorecard to ``out`` and return its counts ({table: {verdict: n}} plus "distinct")."""
    if stand_in_size(p):
        raise ConfigError(f"scale {p['scale']}: the scorecard scores results on the real data, and a rehearsal "
                          "runs on stand-in data only; its tables say what ran")
    out = Path(out)
    sc = p.get("scorecard", {})
    causes = load_yaml(Path(sc["causes"]).read_text()).get("causes", []) if sc.get("causes") and Path(sc["causes"]).exists() else []
    reports = Path(paths(p)["reports"])
    frames, all_cells, subs = {}, [], {}
    names = table_order(p["tables"])
    for name in names:
        spec = p["tables"][name]
        df = read_table(p, name)
        if "scale" in df and (df["scale"].astype(str) == "rehearsal").any():
            raise ConfigError(f"{reports}/{name}.csv holds a stand-in rehearsal's cells, which are never scored")
        frames[name] = df
        all_cells.append(published_cells(df))
        subs[name] = substitute_cells(df, spec)
    cells = pd.concat(all_cells, ignore_index=True)
    dist = distinct(cells, {n: s.get("published_as", {}) for n, s in p["tables"].items()})
    result = {n: counts(cells[cells.table == n]) for n in names}
    result["distinct"] = counts(dist)

    short = {"within tolerance": "within", "outside tolerance": "outside", "no tolerance set": "no tol.",
             "not run (data unavailable)": "no data", "not run (other)": "not run", "diverged": "diverged",
             "not comparable": "not comp."}
    L = ["# Reproduction scorecard", "",
         f"Built by `snakemake --cores all {reports}/README.md` from the table CSVs below "
         f"(scale: {p['scale']}); do not edit by hand.", "",
         "A **cell** is one number a paper publishes: (table, experiment, method, round or target, metric). "
         "Each gets one verdict, from its table row:", ""]
    L += [f"- **{short[v]}** — {v}: {MEANING[v]}." for v in VERDICTS]
    L += ["- **substitute** — our cells on a stand-in dataset (Fashion-MNIST in place of data this machine cannot "
          "obtain): no published value to compare, counted apart.", ""]
    n = result["distinct"]
    ran = n["within tolerance"] + n["outside tolerance"]
    L += ["## Summary", "",
          f"**{n['within tolerance']} of {ran}** distinct published cells that we ran with a tolerance are within it "
          f"({n['outside tolerance']} outside); {n['not run (data unavailable)']} cannot be run here for lack of "
          f"data, {n['not comparable']} have no faithful substitute.", ""]
    head = ["paper / table", "cells"] + [short[v] for v in VERDICTS] + ["substitute"]
    L += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in names:
        c = result[name]
        link = f"[{name}]({_link(str(reports / (name + '.md')), reports)})"
        L.append("| " + " | ".join([link, str(sum(c.values()))] + [str(c[v]) if c[v] else "·" for v in VERDICTS]
                                   + [str(len(subs[name])) if len(subs[name]) else "·"]) + " |")
    L.append("| " + " | ".join(["**distinct cells**", f"**{sum(n.values())}**"]
                               + [f"**{n[v]}**" for v in VERDICTS] + [f"**{sum(len(s) for s in subs.values())}**"]) + " |")
    L += ["", "A cell compared in two tables (the headline table1 repeats the papers' FMNIST cells) counts once in "
          "the last row, with the verdict of the paper's own table (its tolerance).", ""]

    # outside cells, grouped by (table, experiment, method), with their cause
    out_cells = cells[cells.verdict == "outside tolerance"]
    L += ["## Outside tolerance, and why", ""]
    if out_cells.empty:
        L += ["None.", ""]
    for name in names:
        t = out_cells[out_cells.table == name]
        if t.empty:
            continue
        L += [f"**{name}** (tolerance: " + ", ".join(f"{k} {v}" for k, v in p["tables"][name].get("tolerance", {}).items())
              + ")", ""]
        for (exp, method), g in t.groupby(["experiment", "method"], sort=False):
            at = [f"{r.metric.split('/')[-1]} " + (f"R{int(r['round'])}" if not _isnan(r.get("round")) else
                  f"→{_fmt(r.get('target'), 0)}%") + f" {_fmt(r.ours_mean)} vs {_fmt(r.published_mean)}"
                  + (f" ({'+' if r['diff'] >= 0 else '−'}{_fmt(abs(r['diff']))})" if not _isnan(r['diff']) else "")
                  for _, r in g.iterrows()]
            cause = _cause_of(causes, {**g.iloc[0].to_dict(), "table": name})
            why = (f" — {cause['cause']}" + (f" ([notes]({_link(cause['notes'], reports)}))" if cause.get("notes") else "")) \
                if cause else " — cause not established yet" + (
                    f" ([notes]({_link(p['tables'][name]['notes'], reports)}))" if p["tables"][name].get("notes") else "")
            L.append(f"- {exp} · {method}: " + "; ".join(at) + why)
        L.append("")

    # claims
    papers = sorted({r.split(":")[0] for s in p["tables"].values() for r in s.get("published", [])})
    claims = [(paper, c) for paper, c in paper_claims(papers)]
    L += ["## The papers' claims, checked", "",
          "Each claim as the paper states it, checked on our numbers and on the paper's own table "
          "(✓ holds, ✗ does not hold, · not testable here; in brackets: on how many of the experiments that "
          "could be tested). A claim holds when it holds on every tested experiment (\"usually\" claims: on "
          "most of them); the published column applies the same test to the paper's own table.", ""]
    alternates = sc.get("alternates", [])
    head = ["paper", "claim", "ours", "published"] + [a["label_short"] for a in alternates]
    L += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    def mark(state: str) -> str:
        return {"h": "✓ ", "d": "✗ ", "n": "· "}[state[0]] + state
    details = []
    for paper, claim in claims:
        res = check_claim(frames[claim["table"]], paper, claim, p["tables"][claim["table"]].get("substitutes", {}))
        alt = []
        statistic = p["tables"][claim["table"]]["statistic"]
        for a in alternates:  # the same cells (same statistic) in a table of runs under another setting
            alt_df = pd.read_csv(a["csv"])
            r2 = check_claim(alt_df[alt_df.statistic == statistic], paper, claim)
            alt.append(mark(r2.ours) if r2.ours != "not testable here" else "·")
        L.append("| " + " | ".join([paper, claim["text"], mark(res.ours), mark(res.published)] + alt) + " |")
        details += [f"- **{claim['text']}** ({paper}, {claim['table']}, {claim['metric']} at round "
                    f"{claim.get('round', 'last')}" + (f", margin {claim['by']}" if claim.get("by") else "") + "):"]
        details += [f"  - {c.experiment}: {c.detail}" for c in res.checks]
    L += [""]
    for a in alternates:
        L += [f"Column *{a['label_short']}*: {a['label']} ({_link(a['csv'], reports)})."]
    L += ["", "<details><summary>The numbers behind each claim</summary>", ""] + details + ["", "</details>", ""]

    # links
    L += ["## Tables and figures", ""]
    for name in names:
        spec = p["tables"][name]
        figs = [f"[{f}]({_link(str(reports / 'figures' / f), reports)})" for f in table_figures(name, spec)
                if (reports / "figures" / f).exists()]
        notes = [f"[notes]({_link(spec['notes'], reports)})"] if spec.get("notes") else []
        L.append(f"- [{name}]({_link(str(reports / (name + '.md')), reports)}) — {spec.get('title', '')}"
                 + ("; " + ", ".join(figs + notes) if figs or notes else ""))
    L.append("")
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out, "\n".join(L))
    return result
