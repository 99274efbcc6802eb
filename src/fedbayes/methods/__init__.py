"""Federated methods. Each is described once by a torch-free ``MethodSpec`` (``fedbayes.methods.spec``;
the built-in ones in ``fedbayes.methods.builtin``, others from installed packages through the entry-point
group ``fedbayes.methods``); its tensor math is a ``Method`` subclass (``fedbayes.methods.base``).

Importing this package imports no torch: ``METHODS`` (params.yaml name → class), ``Method``,
``ClientData`` and ``build_method`` load the implementations on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fedbayes.methods.spec import ENTRY_POINT_GROUP, Hyperparameters, MethodSpec, method_specs

if TYPE_CHECKING:
    from fedbayes.methods.base import ClientData, Method


def build_method(name: str, fm, hp: dict, client_sizes, context=None) -> Method:
    """The method ``name`` (a params.yaml key) on flat model ``fm`` for a run described by ``context``
    (a ``RunContext``: rounds, clients a round, seed, server data), with its spec's prediction variants."""
    from fedbayes.methods.base import RunContext

    specs = method_specs()
    if name not in specs:
        raise ValueError(f"unknown method {name!r}; implemented: {sorted(specs)}")
    m = specs[name].load()(fm, hp, client_sizes, context or RunContext())
    m.name, m.spec = name, specs[name]
    m.variants = dict(specs[name].variants)
    return m


def __getattr__(name: str) -> Any:
    if name == "METHODS":
        return {k: s.load() for k, s in method_specs().items()}
    if name in ("ClientData", "Method"):
        from fedbayes.methods import base

        return getattr(base, name)
    if name == "split_variant":   # (fedbayes.catalog imports this package's spec module)
        from fedbayes.catalog import split_variant

        return split_variant
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ENTRY_POINT_GROUP", "METHODS", "ClientData", "Hyperparameters", "Method", "MethodSpec", "build_method",
           "method_specs", "split_variant"]
