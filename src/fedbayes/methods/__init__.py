"""Federated methods. Each is a package ``fedbayes.methods.<key>``: its torch-free ``MethodSpec`` and
``Params`` in ``__init__`` (``fedbayes.methods.spec``), its tensor math, a ``Method`` subclass
(``fedbayes.methods.core.base``), in ``algorithm``; what several share is in ``fedbayes.methods.core``.
Every method, fedbayes' own and an installed package's, is registered under the entry-point group
``fedbayes.methods``; ``method_specs`` is the registry.

Importing this package imports no torch: ``build_method`` loads an implementation on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedbayes.methods.spec import ENTRY_POINT_GROUP, Hyperparameters, MethodSpec, method_specs

if TYPE_CHECKING:
    from fedbayes.methods.core.base import Method


def build_method(name: str, fm, hp: dict, client_sizes, context=None) -> Method:
    """The method ``name`` (a params.yaml key) on flat model ``fm`` for a run described by ``context``
    (a ``RunContext``: rounds, clients a round, seed, server data), with its spec's prediction variants."""
    from fedbayes.methods.core.base import RunContext

    specs = method_specs()
    if name not in specs:
        raise ValueError(f"unknown method {name!r}; implemented: {sorted(specs)}")
    m = specs[name].load()(fm, hp, client_sizes, context or RunContext())
    m.name, m.spec = name, specs[name]
    m.variants = dict(specs[name].variants)
    missing = m.p.missing()   # its hyperparameters, validated against its Params now, not at first use
    if missing:
        raise ValueError(f"{name} needs {', '.join(missing)} (no default; set it in params.yaml)")
    return m


__all__ = ["ENTRY_POINT_GROUP", "Hyperparameters", "MethodSpec", "build_method", "method_specs"]
