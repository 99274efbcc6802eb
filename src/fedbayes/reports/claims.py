"""The papers' headline claims (``claims:`` of ``papers/<paper>/published.yaml``), checked on our
numbers and on the published ones (:func:`check_claim`): "A beats each of B, C by at least m points of
the metric at round r on experiments X, Y"; and the data-free targets' (params ``toys``) published cells
and figure claims (:func:`toy_results`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from fedbayes.eval.registry import metric as metric_info
from fedbayes.published import load_paper
from fedbayes.reports.tally import paper_of, published_cells
from fedbayes.reports.verdicts import _isnan
from fedbayes.study import paths


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
        """all (default): holds on every experiment tested; most: on more than half of them. The text
        names the experiments it fails on, so "does not hold" is never read as a count of successes."""
        tested = [(c.experiment, s) for c, s in zip(self.checks, states) if s in ("holds", "does not hold")]
        if not tested:
            return "not testable here"
        failed = [e for e, s in tested if s == "does not hold"]
        held, n = len(tested) - len(failed), len(tested)
        most = self.claim.get("quantifier") == "most"
        if (held > n / 2) if most else not failed:
            return (f"holds on {held} of {n} tested experiments (the claim says usually)" if most
                    else f"holds on all {n} tested experiment" + ("s" if n > 1 else ""))
        return f"does not hold: fails on {', '.join(failed)} (holds on {held} of {n} tested)"

    @property
    def ours(self) -> str:
        return self._overall([c.ours for c in self.checks])

    @property
    def published(self) -> str:
        return self._overall([c.published for c in self.checks])


def higher_is_better(metric: str, statistic: str) -> bool:
    """A metric's direction (the metric registry); fewer rounds to a target are better."""

    return statistic != "rounds_to_target" and metric_info(metric).higher_is_better


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



class FigureClaim(ClaimResult):
    """A paper's claim about one of its figures, checked on the toy's own verdict column (the toy reads the
    claim and its threshold from papers/<paper>/published.yaml `figure_claims`)."""

    @property
    def ours(self) -> str:
        c = self.checks[0]
        return "holds" if c.ours == "holds" else "does not hold"

    @property
    def published(self) -> str:
        return "holds"


def toy_results(p: dict) -> tuple[pd.DataFrame, list]:
    """The data-free targets (params `toys`) as the scorecard counts them: a toy whose CSV has published values
    and an acceptable range gives published cells (its verdict: ``within`` the range or ``outside``), one
    whose CSV has a claim and a verdict per row gives figure claims."""
    reports, frames, claims = Path(paths(p)["reports"]), [], []
    for name in p.get("toys", {}):
        f = reports / f"{name}.csv"
        if not f.exists():
            continue
        df = pd.read_csv(f)
        paper = paper_of(name)
        if {"published_mean", "within_range"} <= set(df.columns):
            table = name.split("/", 1)[1]
            experiment, row = next(iter(load_paper(paper)["tables"][table]["rows"].items()))
            frames.append(pd.DataFrame({
                "table": name, "experiment": experiment, "method": df.method,
                "metric": [next(iter(row[m])) for m in df.method], "round": float("nan"), "target": float("nan"),
                "statistic": "mean over draws", "ours_mean": df.ours_mean, "published_mean": df.published_mean,
                "published_source": f"{paper} {table}", "diff": df.ours_mean - df.published_mean,
                "within_tol": df.within_range.astype(bool), "status": "ok"}))
        elif {"paper", "verdict"} <= set(df.columns):
            for r in df[df.verdict.fillna("") != ""].itertuples():
                value = "never" if pd.isna(r.value) else f"{r.value:.4g}"
                claims.append((paper, {"text": f"Fig. {r.figure}: {r.paper}", "table": name},
                               FigureClaim(paper, {"text": r.paper}, [Check(f"Fig. {r.figure}", r.verdict, "holds",
                                                                              f"{r.quantity} is {value}")])))
    cells = published_cells(pd.concat(frames, ignore_index=True)) if frames else pd.DataFrame()
    return cells, claims
