"""What every subcommand shares: params.yaml read for the command (``--params``/``--scale``, a table's
name checked), and long names shortened in one-line errors."""

from __future__ import annotations

from fedbayes.engine.partitions import data_root
from fedbayes.study import ConfigError, load_params


def _params(args, trust_stamp: bool = True):
    p = load_params(args.params, scale=args.scale, trust_stamp=trust_stamp)
    if getattr(args, "table", None) is not None and args.table not in p["tables"]:
        raise ConfigError(f"{_abbreviated(args.table)!r}: not a table of params.yaml (its tables: {', '.join(p['tables'])})")
    data_root(p)  # at rehearsal scale: the stand-ins generated so far read in place of the real data
    return p



def _abbreviated(name: str, keep: int = 120) -> str:
    return name if len(name) <= keep else f"{name[:keep]}… ({len(name)} characters)"

