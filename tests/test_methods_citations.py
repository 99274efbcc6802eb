"""`fedbayes methods` and `fedbayes methods <key>` cite what a reader can find: the papers (authors,
or the paper's name), never the project's internal spec files ("spec 001 §6"), which are not in the repo."""

import re

from fedbayes.cli import main
from fedbayes.study import METHOD_SPECS

INTERNAL = re.compile(r"\bspec \d{3}\b|§")


def test_methods_listing_and_hyperparameters_cite_no_internal_spec(capsys):
    main(["methods"])
    for key in METHOD_SPECS:
        main(["methods", key])
    out = capsys.readouterr().out
    assert len(out.splitlines()) > len(METHOD_SPECS)
    bad = [line for line in out.splitlines() if INTERNAL.search(line)]
    assert not bad, bad
