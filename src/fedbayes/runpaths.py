"""Where a run's files live: the one statement of the output layout, read by the CLI, the reports and the
Snakemake rules (workflow/rules/common.smk). ``roots`` is ``fedbayes.study.paths(params)``, the scale's
output roots; a name may be a Snakemake wildcard (``"{seed}"``), which gives the rules their patterns."""

from __future__ import annotations

from pathlib import Path


def run_dir(roots: dict, experiment: str, method: str, point: str, seed: int | str) -> Path:
    """One training run: ``<runs>/<experiment>/<method>/<point>/seed<seed>``."""
    return Path(roots["runs"], experiment, method, point, f"seed{seed}")


def selected_file(roots: dict, experiment: str, method: str) -> Path:
    """The sweep selection of (experiment, method): ``<runs>/<experiment>/<method>/selected.json``."""
    return Path(roots["runs"], experiment, method, "selected.json")


def partition_file(roots: dict, experiment: str, seed: int | str) -> Path:
    """The client split of (experiment, seed): ``<partitions>/<experiment>/seed<seed>.npz``."""
    return Path(roots["partitions"], experiment, f"seed{seed}.npz")


def partition_figure(roots: dict, scale: str, experiment: str, seed: int | str) -> Path:
    """The split's figure: a report figure at paper scale, beside the split at the other scales."""
    if scale == "paper":
        return Path(roots["reports"], "figures", "partitions", f"{experiment}_seed{seed}.png")
    return Path(roots["partitions"], experiment, f"seed{seed}.png")
