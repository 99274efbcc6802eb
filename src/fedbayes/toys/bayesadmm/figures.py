"""The figures: Fig. 3b (objective gap vs round, ridge), Fig. 4 (decision boundaries on the outlier data)
and Fig. 3a (variational objective vs round), drawn from the runs of ``experiments``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from fedbayes.fileio import save_figure_atomic
from fedbayes.toys.bayesadmm.experiments import PRIOR_INIT, Fig4Result, objective_gaps
from fedbayes.toys.bayesadmm.numerics import one_blas_thread
from fedbayes.toys.bayesadmm.problems import RidgeProblem, SoftmaxData
from fedbayes.toys.bayesadmm.solvers import DiagRun, Trajectory


@one_blas_thread
def figure3b(path: str | Path, problem: RidgeProblem, runs: dict[str, Trajectory],
             at: str = "server") -> dict[str, np.ndarray]:
    """Fig. 3b: F(θ_r) − F(θ*) vs round (log y) for the runs of ``experiments.fig3b_runs`` (BayesADMM,
    BregmanADMM, federated ADMM, and BayesADMM from the prior dotted where present, i.e. where the others
    start from the code's S̄ = I), with F evaluated at the server mean (``at="server"``) or at client 0's
    mean (``at="client0"``, the code's choice).  Returns the plotted gaps per method."""
    if at not in ("server", "client0"):
        raise ValueError(f"at must be 'server' or 'client0', got {at!r}")
    gaps = {name: objective_gaps(problem, getattr(tr, at)) for name, tr in runs.items()}
    fig = Figure(figsize=(5.0, 3.6), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    styles = {"BayesADMM": ("C3", "o", "-"), "BregmanADMM": ("C2", "s", "-"), "ADMM": ("C0", "^", "-"),
              PRIOR_INIT: ("C3", "", ":")}
    floor = 1e-14 * max(1.0, abs(problem.optimum))  # round-off level; gaps below it are drawn on it
    for name, gap in gaps.items():
        color, marker, ls = styles[name]
        ax.plot(np.arange(len(gap)), np.maximum(gap, floor), color=color, marker=marker, ls=ls, ms=3, label=name)
    ax.set_yscale("log")
    ax.set_xlabel("communication round")
    ax.set_ylabel(r"$F(\theta) - F(\theta^*)$" + (" at server mean" if at == "server" else " at client 1's mean"))
    ax.set_title(f"Ridge regression, K = {len(problem.clients)}, P = {len(problem.solution)}, "
                 f"δ = {problem.delta:g}, S̄ init {'I' if PRIOR_INIT in runs else 'δI'}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save_figure_atomic(fig, path)
    return gaps


def figure4(path: str | Path, data: list, res: Fig4Result) -> None:
    """Fig. 4: both clients' data and the server's decision boundary θᵀ(x₁, x₂, 1) = 0 after each round,
    federated ADMM (left) and BayesADMM (right), the global MAP dashed; ``res`` = ``experiments.fig4_runs``
    on ``data``."""
    pts = np.vstack([X[:, :2] for X, _ in data])
    lo, hi = pts.min(axis=0) - 1.0, pts.max(axis=0) + 1.0
    xs = np.linspace(lo[0], hi[0], 200)
    fig = Figure(figsize=(9.0, 5.0), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2, sharey=True)
    for ax, (title, tr, dist) in zip(axes, (("Federated ADMM", res.admm, res.dist_admm),
                                            ("BayesADMM (full covariance)", res.bayes, res.dist_bayes))):
        for k, (X, y) in enumerate(data):
            marker = "o" if k == 0 else "x"
            for label, color in ((1, "C0"), (0, "C1")):
                sel = y == label
                ax.scatter(X[sel, 0], X[sel, 1], s=10, marker=marker, color=color, alpha=0.6, linewidths=0.8)
        rounds = len(tr.server) - 1
        cmap = [_blend(r / max(rounds, 1)) for r in range(1, rounds + 1)]
        for r in range(1, rounds + 1):
            _boundary(ax, tr.server[r], xs, color=cmap[r - 1], lw=1.4, label=f"round {r} (dist {dist[r]:.2g})")
        _boundary(ax, res.map, xs, color="k", ls="--", lw=1.2, label="global MAP")
        ax.set_xlim(lo[0], hi[0])
        ax.set_ylim(lo[1], hi[1])
        ax.set_title(title, fontsize=10)
        ax.set_xlabel(r"$x_1$")
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3)
    axes[0].set_ylabel(r"$x_2$")
    handles = [Line2D([], [], marker="o", ls="", color="gray", label="client 1"),
               Line2D([], [], marker="x", ls="", color="gray", label="client 2")]
    axes[0].legend(handles=handles + axes[0].get_legend_handles_labels()[0], fontsize=7, loc="upper center",
                   bbox_to_anchor=(0.5, -0.14), ncol=3)
    save_figure_atomic(fig, path)


def _blend(t: float) -> tuple:
    a, b = np.array([0.75, 0.85, 1.0]), np.array([0.55, 0.0, 0.0])
    return tuple((1 - t) * a + t * b)


def _boundary(ax, theta, xs, **kw):
    w1, w2, b = theta
    if abs(w2) > 1e-12:
        ax.plot(xs, -(w1 * xs + b) / w2, **kw)
    elif abs(w1) > 1e-12:
        ax.axvline(-b / w1, **kw)


def figure3a(path: str | Path, data: SoftmaxData, runs: dict[str, DiagRun]) -> None:
    """Fig. 3a: variational objective of q̄ vs round for the runs of ``experiments.fig3a_runs`` on ``data``
    (PVI, damped PVI, BregmanADMM, BayesADMM)."""
    fig = Figure(figsize=(5.0, 3.6), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    styles = {"PVI": "C1", "PVI (damped)": "C4", "BregmanADMM": "C2", "BayesADMM": "C3"}
    finite = []
    for name, run in runs.items():
        ax.plot(np.arange(len(run.objective)), run.objective, marker="o", ms=2.5, color=styles.get(name),
                label=name + (f" (diverged in round {run.diverged})" if run.diverged else ""))
        finite.append(run.objective[np.isfinite(run.objective)])
    vals = np.concatenate(finite)
    # every finite value inside the axes: PVI's undamped oscillation reaches several times the others'
    # objective, so a positive objective is drawn on a log axis (a linear one either clips PVI or flattens the rest)
    lo, hi = vals.min(), vals.max()
    if lo > 0:
        ax.set_yscale("log")
        ax.set_ylim(lo / 1.08, hi * 1.08)
    else:
        pad = 0.05 * (hi - lo or abs(lo) or 1.0)
        ax.set_ylim(lo - pad, hi + pad)
    ax.set_xlabel("communication round")
    ax.set_ylabel("variational objective (MC)" + (", log scale" if lo > 0 else ""))
    ax.set_title(f"Softmax regression, K = {data.x.shape[0]}, N = {int(data.sizes.sum())}, diagonal q",
                 fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save_figure_atomic(fig, path)
