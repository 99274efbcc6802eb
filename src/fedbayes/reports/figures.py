"""Learning curves (test accuracy and NLL per round, mean ± std over seeds, published points overlaid)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from fedbayes.config import comparable_experiments, experiment_config, seeds
from fedbayes.catalog import split_variant
from fedbayes.fileio import atomic_target

PANELS = [("test/acc", "test accuracy (%)", 100.0), ("test/nll", "test NLL (nats)", 1.0)]


def learning_curves(p: dict, spec: dict, path: str | Path) -> None:
    """Curves of the table's experiments that ran here (those whose data was unavailable are listed
    in the figure's title instead); dashed lines mark rounds-to-target tables' targets."""
    from fedbayes.reports.published import published_value
    from fedbayes.reports.selection import run_dir, selected_point
    from fedbayes.reports.tables import experiment_status

    ours = comparable_experiments(spec)
    exps = [x for x in ours if experiment_status(p, x) == "ok"]
    skipped = [x for x in ours if x not in exps]
    fig = Figure(figsize=(5.0 * len(PANELS), 3.4 * max(len(exps), 1)), layout="constrained")
    FigureCanvasAgg(fig)
    if skipped:
        fig.suptitle("not run here (data unavailable): " + ", ".join(skipped), fontsize=9)
    axes = fig.subplots(max(len(exps), 1), len(PANELS), squeeze=False)
    for i, exp in enumerate(exps):
        e = experiment_config(p, exp)
        for target in spec.get("targets", {}).get(exp, []):
            axes[i][0].axhline(target, ls="--", lw=0.8, color="grey")
        ends = [[] for _ in PANELS]   # each curve's last value: the axis limits keep every curve's end in view
        for method in [m for m in spec["methods"] if split_variant(m)[0] in e["methods"]]:
            base, variant = split_variant(method)
            point = selected_point(p, exp, base)
            hist = [pd.read_csv(run_dir(p, exp, base, point, s) / "history.csv") for s in seeds(p, exp, base)]
            for j, (metric, label, mult) in enumerate(PANELS):
                ax = axes[i][j]
                col = f"{variant}/{metric}" if variant else metric
                keep = hist[0][col].notna().to_numpy()  # rounds this prediction was evaluated (eval_every)
                rounds = hist[0]["round"].to_numpy()[keep]
                vals = np.stack([h[col].to_numpy()[keep] for h in hist]) * mult
                mean, std = vals.mean(0), vals.std(0)
                ends[j].append(mean[-1])
                color = f"C{spec['methods'].index(method) % 10}"  # one colour per method in every panel
                line, = ax.plot(rounds, mean, color=color, label=f"{method} {point} (ours, {len(hist)} seeds)")
                ax.fill_between(rounds, mean - std, mean + std, alpha=0.25, color=line.get_color())
                pubs = [(r, published_value(spec.get("published", []), exp, method, metric, r))
                        for r in e["report_rounds"]] if p["scale"] == "paper" else []
                pubs = [(r, v) for r, v in pubs if v and v[0] is not None]
                if pubs:
                    ax.errorbar([r for r, _ in pubs], [v[0] for _, v in pubs], yerr=[v[1] for _, v in pubs],
                                fmt="o", color=line.get_color(), mfc="white", capsize=3,
                                label=f"{method} published ({pubs[0][1][2]})")
                ax.set_title(f"{exp}")
                ax.set_xlabel("round")
                ax.set_ylabel(label)
                ax.grid(alpha=0.3)
        for j, (col, _, _) in enumerate(PANELS):
            lo = {"test/acc": 50}.get(col)
            if lo is not None:
                axes[i][j].set_ylim(bottom=min([lo, *(10 * np.floor(v / 10) - 5 for v in ends[j] if v < lo + 5)]))
            if col == "test/nll":
                axes[i][j].set_ylim(0.3, max([1.5, *(v + 0.2 for v in ends[j])]))
        axes[i][-1].legend(fontsize=7, loc="upper right")  # the NLL panel's upper part is empty
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_target(path, keep_suffix=True) as tmp:
        fig.savefig(tmp, dpi=110)
