"""What a table of params.yaml plans: the experiments it runs and the figures it writes."""

from __future__ import annotations


def comparable_experiments(spec: dict) -> list[str]:
    """The table's experiments that are defined in params (``not_comparable`` ones only carry the
    published numbers: the paper's data has no faithful substitute here)."""
    return [x for x in spec["experiments"] if x not in spec.get("not_comparable", {})]


def table_figures(name: str, spec: dict) -> list[str]:
    """The figures a table writes under ``<reports>/figures/``: its learning curves, and reliability
    diagrams where ECE is one of its metrics; none for a table with no experiment of ours."""
    if not comparable_experiments(spec):
        return []
    stem = name.replace("/", "_")
    return [f"{stem}_curves.png"] + ([f"{stem}_reliability.png"] if "test/ece" in spec.get("metrics", []) else [])
