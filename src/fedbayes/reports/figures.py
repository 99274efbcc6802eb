"""Figures of a table: learning curves as small multiples and reliability diagrams.

One colour per method across every figure of the project (``method_style``); a prediction variant
(``bayesadmm@mean``) keeps its method's colour with a dashed line. Learning curves: a row of panels per
method family, a column per (experiment, metric), mean ± std over seeds (seaborn; a metric the registry
smooths, ECE, as a running mean without the band), the published
values as filled markers with error bars in the method's colour, one legend per row outside the axes,
axis limits that keep every curve's end in view. Reliability diagrams: per method, the final round's
15 confidence bins pooled over seeds (from metrics.json), with the ECE. A table none of whose experiments
ran here (data unavailable) gets its published values alone (``published_only``; its reliability figure:
the published ECE against the published accuracy, ``published_calibration``), and no figure is saved
with an empty plot area (``save_with_data``).
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from fedbayes.study import split_variant
from fedbayes.study.model import Study, TableSpec
from fedbayes.eval.registry import METRICS as METRIC_INFO
from fedbayes.fileio import save_figure_atomic
from fedbayes.methods.spec import method_specs
from fedbayes.published import published_rounds, published_row, published_value
from fedbayes.reports.cells import experiment_status
from fedbayes.reports.selection import selected_point
from fedbayes.runfiles import read_curves, read_metrics
from fedbayes.runpaths import run_dir

MIN_BIN = 10   # reliability bins with fewer test points are not drawn (their accuracy is noise)
SPARSE = 3     # a curve evaluated at this many rounds or fewer is drawn as markers (a line would not be seen)
# (axis label, scale) of every metric the registry draws as a curve
METRICS = {name: (m.axis_label, m.scale) for name, m in METRIC_INFO.items() if m.curve}

# A method's family (its row of panels) and colour are its spec's (``MethodSpec.family``, ``.colour``); a
# method declaring no colour takes one of these spare ones (by its name, so it is stable).
SPARE = ["#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d", "#31a354", "#ce6dbd"]


def empty_axes(fig: Figure) -> list[str]:
    """The titles (or positions) of the figure's visible axes that draw no data: no line with points,
    no scatter or error-bar collection, no bar, no image (grid lines, reference lines and text are not data)."""
    def visible(ln, ax) -> bool:
        """A line with markers, or one spanning at least 1 % of the x-axis (a line of one point, or over the
        last 2 of 2000 rounds, is not seen)."""
        x = np.asarray(ln.get_xdata(), dtype=float)
        if not len(x) or ln.get_gid() == "reference":
            return False
        if ln.get_marker() not in (None, "None", "", " "):
            return True
        lo, hi = ax.get_xlim()
        return np.nanmax(x) - np.nanmin(x) >= 0.01 * abs(hi - lo)

    def has_data(ax) -> bool:
        lines = [ln for ln in ax.get_lines() if visible(ln, ax)]
        return bool(lines or [c for c in ax.collections if len(c.get_offsets()) or len(c.get_paths())]
                    or [p for p in ax.patches if p.get_height() != 0] or ax.images)
    return [ax.get_title() or f"axes {i}" for i, ax in enumerate(fig.axes)
            if ax.get_visible() and ax.axison and not has_data(ax)]  # a panel with its axis off is a note


def save_with_data(fig: Figure, path: str | Path, dpi: int = 110) -> Path:
    """``save_figure_atomic``, refused (ValueError naming the panels) when a visible panel draws no data
    or the figure has no panel at all: no figure of the project is an empty plot area."""
    empty = empty_axes(fig)
    if empty or not fig.axes:
        raise ValueError(f"{path}: not saved, {'panels without data: ' + '; '.join(empty) if empty else 'no panel'}")
    return save_figure_atomic(fig, path, dpi=dpi)


def _suptitle(fig: Figure, title: str, width_in: float, fontsize: float = 10) -> None:
    """The figure's title wrapped to its width (a long table title is not clipped on both sides)."""
    chars = max(int(width_in * 72 / (0.55 * fontsize)), 20)
    fig.suptitle("\n".join(textwrap.fill(part, chars) for part in title.split("\n")), fontsize=fontsize)


def method_style(name: str) -> dict:
    """``{"color", "ls"}`` of a table method name: the base method's colour, dashed for a variant."""
    base, variant = split_variant(name)
    spec = method_specs().get(base)
    color = (spec.colour if spec else "") or SPARE[sum(map(ord, base)) % len(SPARE)]
    return {"color": color, "ls": "--" if variant else "-"}


def family_of(base: str) -> str:
    """The family (row of panels) of a method, its spec's; a method declaring none has a row of its own."""
    spec = method_specs().get(base)
    return (spec.family if spec else "") or base


def rows_of(methods: list[str]) -> dict[str, str]:
    """The row of panels (family) of each of a figure's methods. FedAvg alone in its family, beside another
    family, is drawn on that family's panels (FOLA's or FedIVON's baseline), not in a row of its own."""
    row = {m: family_of(split_variant(m)[0]) for m in methods}
    fams = list(dict.fromkeys(row.values()))
    home = family_of("fedavg")
    if len(fams) > 1 and {split_variant(m)[0] for m in methods if row[m] == home} == {"fedavg"}:
        other = next(f for f in fams if f != home)
        row = {m: other if f == home else f for m, f in row.items()}
    return row


def curve_metrics(table: TableSpec) -> list[str]:
    """The metrics a table's learning curves draw, in the registry's order: the table's own (at most three,
    in its order), with accuracy and NLL beside a table of one metric."""
    own = [m for m in table.metrics if m in METRICS][:3]
    if len(own) < 2:
        own += ["test/acc", "test/nll"]
    return [m for m in METRICS if m in own]


def _history(study: Study, exp: str, method: str) -> tuple[str, pd.DataFrame]:
    """(selected point, long frame round/seed/metric/value) of a table method on an experiment."""
    base, variant = split_variant(method)
    point = selected_point(study.params, exp, base)
    frames = []
    for s in study.experiments[exp].methods[base].seeds:
        h = read_curves(run_dir(study.paths, exp, base, point, s))
        for metric, (_, mult) in METRICS.items():
            col = f"{variant}/{metric}" if variant else metric
            if col in h:
                keep = h[col].notna()
                frames.append(pd.DataFrame({"round": h["round"][keep], "seed": s, "metric": metric,
                                            "value": h[col][keep] * mult}))
    return point, pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["round", "seed", "metric", "value"])


def _limits(ends: list[float], values: np.ndarray, metric: str) -> tuple[float, float] | None:
    """y-limits from the curves after their first rounds (the initial model would squash the axis),
    widened so that every curve's last value and every published point stays in view."""
    if not len(values):
        return None
    lo, hi = np.nanpercentile(values, [2, 100])
    lo, hi = min(lo, *ends), max(hi, *ends)
    pad = 0.06 * (hi - lo if hi > lo else 1.0)
    return (max(lo - pad, 0.0), hi + pad) if metric != "test/acc" else (max(lo - pad, 0.0), min(hi + pad, 100.0))


def mean_line(ax, h, band: bool, color: str, linestyle: str, label: str) -> None:
    """The mean over seeds of ``h``'s ``value`` at each ``round``, and where ``band`` the mean ± the seeds'
    standard deviation (ddof 1; none for one seed) shaded: what ``seaborn.lineplot(errorbar="sd")`` draws,
    at half a table job's CPU time (its per-call grouping and legend work, 100 lines in Table 1)."""
    g = h.groupby("round")["value"]
    m = g.mean()
    rounds, mean = m.index.to_numpy(), m.to_numpy()
    ax.plot(rounds, mean, color=color, linestyle=linestyle, linewidth=1.2, label=label)
    if band:
        sd = g.std().to_numpy()
        ax.fill_between(rounds, mean - sd, mean + sd, color=color, alpha=0.2, linewidth=0)


def learning_curves(study: Study, table: TableSpec, path: str | Path) -> Path:
    """Small multiples of the table's experiments that ran here (those whose data was unavailable are
    named in the title instead); dashed horizontal lines mark rounds-to-target tables' targets."""
    import seaborn as sns


    ours = table.comparable
    exps = [x for x in ours if experiment_status(study.params, x) == "ok"]
    skipped = [x for x in ours if x not in exps]
    if not exps:  # nothing ran here: the paper's numbers alone, not empty axes
        return published_only(table, path, [m for m in table.metrics if m in METRICS])
    metrics = curve_metrics(table)
    configs = {x: study.experiments[x].config for x in exps}
    methods = {x: [m for m in table.methods if split_variant(m)[0] in configs[x]["methods"]] for x in exps}
    row = rows_of([m for x in exps for m in methods[x]])
    families = list(dict.fromkeys(row.values()))
    data = {(x, m): _history(study, x, m) for x in exps for m in methods[x]}
    # a (experiment, metric) column no run recorded (an ECE the runs did not evaluate) is left out
    cols = [(x, metric) for x in exps for metric in metrics if any((data[(x, m)][1].metric == metric).any()
                                                                    for m in methods[x])]
    with sns.axes_style("whitegrid"), sns.plotting_context("paper"):
        width = 2.9 * max(len(cols), 1) + 3.2
        fig = Figure(figsize=(width, 2.3 * max(len(families), 1) + 0.6), layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(max(len(families), 1), max(len(cols), 1), squeeze=False, sharex="col")
        title = table.title
        if skipped:
            title += ("\n" if title else "") + "not run here (data unavailable): " + ", ".join(skipped)
        _suptitle(fig, title, width)
        for i, fam in enumerate(families):
            for j, (x, metric) in enumerate(cols):
                ax = axes[i][j]
                e = configs[x]
                ends, values = [], []
                for method in [m for m in methods[x] if row[m] == fam]:
                    point, h = data[(x, method)]
                    h = h[h.metric == metric]
                    if h.empty:
                        continue
                    st = method_style(method)
                    smooth = METRIC_INFO[metric].smooth
                    if smooth > 1:  # a metric that jumps from round to round: each seed's running mean
                        h = h.sort_values("round").assign(value=lambda d: d.groupby("seed")["value"].transform(
                            lambda v: v.rolling(smooth, min_periods=1).mean()))
                    if h["round"].nunique() <= SPARSE:  # evaluated at a few rounds (a sampled predictive): markers
                        g = h.groupby("round")["value"]
                        ax.errorbar(g.mean().index, g.mean(), yerr=g.std().fillna(0), fmt="D", ms=5, color=st["color"],
                                    mfc="white" if st["ls"] == "--" else st["color"], capsize=2.5, label=method)
                    else:
                        # a smoothed metric without the seed band: its bands overlap into a tangle
                        mean_line(ax, h, band=smooth == 1, color=st["color"], linestyle=st["ls"], label=method)
                    mean = h.groupby("round")["value"].mean()
                    ends.append(float(mean.iloc[-1]))
                    values.append(mean[mean.index >= min(3, mean.index.max())].to_numpy())
                    pubs = [(r, published_value(list(table.published), x, method, metric, r))
                            for r in e["report_rounds"]] if study.scale == "paper" else []
                    pubs = [(r, v) for r, v in pubs if v and v[0] is not None]
                    if pubs:
                        ys = [v[0] for _, v in pubs]
                        ax.errorbar([r for r, _ in pubs], ys, yerr=[0 if math.isnan(v[1]) else v[1] for _, v in pubs],
                                    fmt="o", ms=4, color=st["color"], mec="black", mew=0.5, capsize=2.5, zorder=5,
                                    label="published (mean ± std), in the method's colour")
                        ends += ys
                if not ends:  # no method of this row on this experiment: a note, not empty axes
                    ax.axis("off")
                    ax.text(0.5, 0.5, f"no {fam.split(' (')[0]} method\non {x}", ha="center", va="center",
                            fontsize=7, transform=ax.transAxes)
                    continue
                if metric == "test/acc":
                    for target in table.targets.get(x, ()):
                        ax.axhline(target, ls=":", lw=0.8, color="grey", gid="reference")
                        ends.append(float(target))  # the axis keeps every target the table measures in view
                lim = _limits(ends, np.concatenate(values) if values else np.array([]), metric)
                if lim:
                    ax.set_ylim(*lim)
                if ax.get_legend():
                    ax.get_legend().remove()
                smooth = METRIC_INFO[metric].smooth
                ax.set_title(f"{x} · {METRICS[metric][0]}" + (f"\n({smooth}-round running mean, no seed band)" if smooth > 1 else "")
                             if i == 0 else "", fontsize=8)
                ax.set_xlabel("round" if i == len(families) - 1 else "")
                ax.set_ylabel(fam.split(" (")[0] if j == 0 else "", fontsize=8)
            handles = {}
            for ax in axes[i]:
                for hnd, lab in zip(*ax.get_legend_handles_labels()):
                    if lab not in handles:
                        handles[lab] = hnd
            pub = "published (mean ± std), in the method's colour"
            if pub in handles:  # one black proxy for every method's published markers
                from matplotlib.lines import Line2D

                handles[pub] = Line2D([], [], ls="", marker="o", ms=4, color="white", mec="black", mew=0.8)
                handles[pub] = handles.pop(pub)
            if handles:
                axes[i][-1].legend(list(handles.values()), list(handles), loc="upper left", bbox_to_anchor=(1.02, 1.0),
                                   fontsize=7, frameon=False, title=fam, title_fontsize=7)
        return save_with_data(fig, path, dpi=110)


def reliability(study: Study, table: TableSpec, path: str | Path) -> Path:
    """Reliability diagrams of every method of the table on each experiment that ran here: the final
    round's 15 equal-width confidence bins (accuracy per bin against its mean confidence), counts
    pooled over seeds, the ECE of the pooled bins in the title. The method's own prediction (the
    stored bins are those of its main variant, e.g. BayesADMM's MC predictive)."""
    import seaborn as sns


    exps = [x for x in table.comparable if experiment_status(study.params, x) == "ok"]
    bases = list(table.bases)
    configs = {x: study.experiments[x].config for x in exps}
    cells = [(x, b) for x in exps for b in bases if b in configs[x]["methods"]]
    if not cells:  # every experiment's data unavailable here: no bins to draw (the curves show the ECE)
        return published_calibration(table, path)
    ncol = min(6, len(bases))
    rows_per_exp = math.ceil(len(bases) / ncol)
    # at least 6.4 in wide: the title and the key below it take two lines each, not half of a 2-panel figure
    width = max(2.1 * ncol, 6.4)
    with sns.axes_style("whitegrid"), sns.plotting_context("paper"):
        fig = Figure(figsize=(width, 2.3 * rows_per_exp * len(exps) + 0.7), layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(rows_per_exp * len(exps), ncol, squeeze=False)
        for ax in axes.flat:
            ax.set_visible(False)
        _suptitle(fig, f"{table.title}: reliability at the final round", width, fontsize=9)
        fig.supxlabel(textwrap.fill(f"bins pooled over seeds; bar = accuracy in the bin, hatched = gap to its mean "
                                    f"confidence, diagonal = perfect calibration; bins of fewer than {MIN_BIN} "
                                    "points not drawn", int(width * 72 / (0.55 * 7))), fontsize=7)
        for xi, x in enumerate(exps):
            placed = [b for b in bases if b in configs[x]["methods"]]
            for k, base in enumerate(placed):
                ax = axes[xi * rows_per_exp + k // ncol][k % ncol]
                ax.set_visible(True)
                point = selected_point(study.params, x, base)
                bins = [read_metrics(run_dir(study.paths, x, base, point, s)).get("reliability", [])
                        for s in study.experiments[x].methods[base].seeds]
                if not bins or not all(bins):
                    ax.axis("off")
                    ax.text(0.5, 0.5, f"{base}\n{x}: no bins", ha="center", va="center", fontsize=7)
                    continue
                lower = np.array([b["lower"] for b in bins[0]])
                upper = np.array([b["upper"] for b in bins[0]])
                n = np.array([[b["count"] for b in bb] for bb in bins], dtype=float).sum(0)
                acc = np.array([[(b["acc"] or 0) * b["count"] for b in bb] for bb in bins]).sum(0)
                conf = np.array([[(b["conf"] or 0) * b["count"] for b in bb] for bb in bins]).sum(0)
                with np.errstate(invalid="ignore", divide="ignore"):
                    acc_b, conf_b = acc / n, conf / n
                ece = float(np.nansum(n / n.sum() * np.abs(acc_b - conf_b)))
                acc_b[n < MIN_BIN], conf_b[n < MIN_BIN] = np.nan, np.nan   # too few points to read
                st = method_style(base)
                ax.bar(lower, np.nan_to_num(acc_b), width=upper - lower, align="edge", color=st["color"], alpha=0.8,
                       edgecolor="white", linewidth=0.4)
                ax.bar(lower, np.nan_to_num(conf_b - acc_b), bottom=np.nan_to_num(acc_b), width=upper - lower,
                       align="edge", color="none", edgecolor="crimson", hatch="///", linewidth=0.4)
                ax.plot([0, 1], [0, 1], color="black", lw=0.8, ls="--", gid="reference")
                ax.set_xlim(0, 1)
                ax.set_ylim(0, 1)
                ax.set_title(f"{base} · {x}\nECE {ece:.3f}", fontsize=7)
                ax.tick_params(labelsize=6)
                if k % ncol == 0:
                    ax.set_ylabel("accuracy", fontsize=7)
                ax.set_xlabel("confidence", fontsize=7)
        return save_with_data(fig, path, dpi=110)


def published_calibration(table: TableSpec, path: str | Path) -> Path:
    """The reliability figure of a table none of whose experiments ran here: no reliability bins exist
    (no run, and the papers print none), so it shows what the paper does print about calibration that the
    learning-curve figure does not: each method's published ECE against its published accuracy at the last
    published round, a panel per experiment (lower right = accurate and calibrated). A table that does not
    publish both falls back to its published ECE alone (``published_only``)."""
    import seaborn as sns

    refs = list(table.published)
    panels = []
    for x in table.comparable:
        rounds = published_rounds(refs, x)
        if not rounds:
            continue
        pts = []
        for method in table.methods:
            acc, ece = (published_value(refs, x, method, m, rounds[-1]) for m in ("test/acc", "test/ece"))
            if acc and ece and acc[0] is not None and ece[0] is not None:
                pts.append((method, acc[0], _nan0(acc[1]), ece[0], _nan0(ece[1])))
        if pts:
            panels.append((x, rounds[-1], pts))
    if not panels:
        return published_only(table, path, ["test/ece"], "no reliability bins: no run here and the paper prints none")
    with sns.axes_style("whitegrid"), sns.plotting_context("paper"):
        width = 6.0 * len(panels) + 0.4
        fig = Figure(figsize=(width, 4.6), layout="constrained")
        FigureCanvasAgg(fig)
        for ax, (x, rnd, pts) in zip(fig.subplots(1, len(panels), squeeze=False)[0], panels):
            for method, acc, acc_sd, ece, ece_sd in pts:
                st = method_style(method)
                ax.errorbar([acc], [ece], xerr=[acc_sd], yerr=[ece_sd], fmt="s" if split_variant(method)[1] else "o",
                            ms=5, capsize=2, color=st["color"], mec="black", mew=0.5, label=method)
            ax.margins(x=0.08, y=0.08)
            ax.legend(fontsize=6.5, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
            ax.set_xlabel(METRICS["test/acc"][0], fontsize=8)
            ax.set_ylabel(METRICS["test/ece"][0], fontsize=8)
            ax.set_title(f"{x}, round {rnd}", fontsize=8)
            ax.tick_params(labelsize=7)
        _suptitle(fig, f"{table.title}\npublished ECE against published accuracy (mean ± std as printed; "
                       "no reliability bins: no run here and the paper prints none; square = a prediction variant)",
                  width, fontsize=9)
        return save_with_data(fig, path, dpi=110)


def _nan0(x) -> float:
    return 0.0 if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def published_only(table: TableSpec, path: str | Path, metrics: list[str], why: str = "") -> Path:
    """The figure of a table none of whose experiments ran here: its published values alone, a panel per
    (experiment, metric) with a published number, the methods down the y-axis in the table's order, one
    marker per published round (or rounds-to-target target) with the paper's ± std, in the method's colour.
    A cell the paper leaves blank ("—", a target not reached) has no marker. ValueError (nothing saved) if
    the table publishes none of ``metrics``."""
    import seaborn as sns


    refs = list(table.published)
    to_target = table.statistic == "rounds_to_target"
    markers = ["o", "s", "^", "D", "v", "P"]
    panels = []
    for x in table.comparable:
        found = published_row(refs, x)
        keys = (found[1].get("targets", []) if to_target else published_rounds(refs, x)) if found else []
        for metric in metrics:
            rows = []
            for method in table.methods:
                for k, key in enumerate(keys):
                    v = published_value(refs, x, method, metric, target=key) if to_target else \
                        published_value(refs, x, method, metric, key)
                    if v and v[0] is not None:
                        rows.append((method, k, key, v[0], 0.0 if math.isnan(v[1]) else v[1]))
            if rows:
                panels.append((x, metric, keys, rows))
    with sns.axes_style("whitegrid"), sns.plotting_context("paper"):
        n_methods = max((len({r[0] for r in rows}) for *_, rows in panels), default=1)
        width = 3.6 * max(len(panels), 1) + 1.6
        fig = Figure(figsize=(width, 0.24 * n_methods + 1.9), layout="constrained")
        FigureCanvasAgg(fig)
        axes = fig.subplots(1, len(panels), squeeze=False)[0] if panels else []
        for ax, (x, metric, keys, rows) in zip(axes, panels):
            names = list(dict.fromkeys(r[0] for r in rows))
            for method, k, key, mean, std in rows:
                y = names.index(method) + (k - (len(keys) - 1) / 2) * 0.18
                ax.errorbar([mean], [y], xerr=[std], fmt=markers[k % len(markers)], ms=4.5, capsize=2,
                            color=method_style(method)["color"], mec="black", mew=0.5)
            ax.set_yticks(range(len(names)), names, fontsize=7)
            ax.invert_yaxis()
            ax.margins(x=0.08, y=0.06)  # a marker at the extremes is not cut by the frame
            ax.set_xlabel(f"rounds to reach the target {METRICS[metric][0].split(' (')[0]}" if to_target
                          else METRICS[metric][0], fontsize=8)
            ax.set_title(x, fontsize=8)
            from matplotlib.lines import Line2D

            what = "target" if to_target else "round"
            unit = " %" if to_target and metric == "test/acc" else ""
            ax.legend([Line2D([], [], ls="", marker=markers[k % len(markers)], color="white", mec="black")
                       for k in range(len(keys))], [f"{what} {key}{unit}" for key in keys], fontsize=7,
                      frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        if not panels:  # no run and no published number (a smoke-scale table): a note with no plot area
            fig.text(0.5, 0.5, textwrap.fill(f"{table.title}: no run here and no published value to "
                                             "draw", 80), ha="center", va="center", fontsize=9)
            return save_figure_atomic(fig, path, dpi=110)
        reason = why or "not run here (data unavailable)"
        _suptitle(fig, f"{table.title}\npublished values alone (mean ± std as printed; "
                       f"{reason}: {', '.join(table.comparable)}; no marker where the paper prints —)",
                  width, fontsize=9)
        return save_with_data(fig, path, dpi=110)
