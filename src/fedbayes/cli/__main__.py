"""``python -m fedbayes.cli``: the ``fedbayes`` command."""

from fedbayes.cli import main

main()
