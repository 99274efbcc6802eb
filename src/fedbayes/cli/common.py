"""What every subcommand shares: params.yaml read for the command (``--params``/``--scale``), or resolved
into the study with a table's name checked, and long names shortened in one-line errors."""

from __future__ import annotations

from fedbayes.engine.partitions import data_root
from fedbayes.study import ConfigError, load_params
from fedbayes.study.model import Study


def _params(args, trust_stamp: bool = True):
    p = load_params(args.params, scale=args.scale, trust_stamp=trust_stamp)
    data_root(p)  # at rehearsal scale: the stand-ins generated so far read in place of the real data
    return p


def _study(args, trust_stamp: bool = True) -> Study:
    """The study of ``--params`` at ``--scale``, resolved once for the command; a command naming a table
    (``args.table``) is refused in one line unless the study has it."""
    study = Study.resolve(_params(args, trust_stamp))
    if getattr(args, "table", None) is not None and args.table not in study.tables:
        raise ConfigError(f"{_abbreviated(args.table)!r}: not a table of params.yaml (its tables: {', '.join(study.tables)})")
    return study


def _abbreviated(name: str, keep: int = 120) -> str:
    return name if len(name) <= keep else f"{name[:keep]}… ({len(name)} characters)"
