"""Where a configuration's datasets live: the real data's folder, or at rehearsal scale the stand-ins'."""

from __future__ import annotations

from pathlib import Path


def data_root(p: dict) -> str:
    """Where this configuration's datasets are fetched to and read from (``paths(p)["raw"]``). At rehearsal
    scale that is the stand-ins' folder, and every stand-in generated there so far is activated in this
    process (fedbayes.data.standin): the real fetch/verify/load code then reads it, verified against the
    checksums recorded beside it, which are used nowhere else."""
    from fedbayes.config import paths, stand_in_size

    root = paths(p)["raw"]
    if stand_in_size(p):
        from fedbayes.data import standin

        standin.activate_all(stand_in_sources(root))
    return root


def stand_in_sources(root: str | Path) -> Path:
    """The generated stand-in files (what a download would serve), beside the fetched copies in ``root``."""
    return Path(root) / ".source"
