"""Published numbers of the papers' tables, stored as data in ``fedbayes/papers/*.yaml``."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

import yaml


@lru_cache
def load_paper(name: str) -> dict:
    return yaml.safe_load((resources.files("fedbayes") / "papers" / f"{name}.yaml").read_text())


def published_value(refs: list[str], experiment: str, method: str, metric: str, rnd: int):
    """First match among ``refs`` (``"paper:table"``) → (mean, std, "paper table") or None."""
    for ref in refs:
        paper, table = ref.split(":")
        t = load_paper(paper)["tables"][table]
        cells = t["rows"].get(experiment, {}).get(method, {}).get(metric)
        if cells and rnd in t["rounds"]:
            mean, std = cells[t["rounds"].index(rnd)]
            return mean, std, f"{paper} {table}"
    return None
