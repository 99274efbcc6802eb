"""The federated training engine. Names resolve on first use (PEP 562): jobs that never train, such as
partitioning (``fedbayes.engine.seeds``, numpy only), do not pay torch's import (4 s a process)."""

import importlib

_WHERE = {"load_run_data": "fedbayes.engine.data", "RunData": "fedbayes.engine.loop",
          "pick_device": "fedbayes.engine.loop", "preprocess": "fedbayes.engine.loop",
          "run_federated": "fedbayes.engine.loop"}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
