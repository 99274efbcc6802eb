"""The ``fedbayes`` command. ``main`` hands the command to a warm job server where a workflow started one
(``fedbayes.cli.warm``: the heavy libraries already imported, the same result), else runs it here
(``fedbayes.cli.app``, which holds the parser and the subcommands)."""

from __future__ import annotations

import sys

from fedbayes.cli.warm import delegate


def main(argv=None) -> None:
    if argv is None:   # the console command (a call with arguments is a test's, in its own process)
        if (code := delegate(sys.argv[1:])) is not None:
            sys.exit(code)
    from fedbayes.cli.app import main as run

    run(argv)


def __getattr__(name: str):
    """``from fedbayes.cli import build_parser`` (and the other names of ``fedbayes.cli.app``)."""
    import importlib

    app = importlib.import_module("fedbayes.cli.app")
    try:
        return getattr(app, name)
    except AttributeError:
        raise AttributeError(f"module 'fedbayes.cli' has no attribute {name!r}") from None
