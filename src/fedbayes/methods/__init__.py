"""Federated methods. Each is a package ``fedbayes.methods.<key>``: its torch-free ``MethodSpec`` and
``Params`` in ``__init__`` (``fedbayes.methods.spec``, ``fedbayes.methods.hyperparameters``), its tensor
math, a ``Method`` subclass (``fedbayes.methods.core.base``), in ``algorithm``; what several share is
in ``fedbayes.methods.core``.
Every method, fedbayes' own and an installed package's, is registered under the entry-point group
``fedbayes.methods``; ``method_specs`` is the registry.

Importing this package imports no torch: ``build_method`` loads an implementation on first use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fedbayes.methods.hyperparameters import Hyperparameters
from fedbayes.methods.spec import ENTRY_POINT_GROUP, MethodSpec, method_specs

if TYPE_CHECKING:
    from fedbayes.methods.core.base import Method


def method_spec(key: str) -> MethodSpec:
    """The registered spec of method ``key``; ValueError naming the installed ones for another key."""
    specs = method_specs()
    if key not in specs:
        raise ValueError(f"unknown method {key!r}; implemented: {sorted(specs)}")
    return specs[key]


def build_method(spec: MethodSpec | str, fm, hp: Mapping[str, Any], client_sizes, context=None) -> Method:
    """The method of ``spec`` (its ``MethodSpec``, or the key it is registered under) on flat model ``fm``
    with the run's hyperparameters ``hp`` (params.yaml's, by name), for a run described by ``context`` (a
    ``RunContext``: rounds, clients a round, seed, server data), with its spec's prediction variants.
    ``hp`` is validated against the spec's ``params`` before the method is constructed, and the method
    reads that typed value as ``self.p`` (from ``__init__`` on)."""
    from fedbayes.methods.core.base import RunContext

    if isinstance(spec, str):
        spec = method_spec(spec)
    # its hyperparameters typed by its own spec, with the values the spec fixes (a run that sets them
    # otherwise is refused by the class ``Method.with_fixed`` makes)
    params = spec.params.from_hparams({**hp, **spec.fixed})
    m = spec.load().for_spec(spec, params, fm, hp, client_sizes, context or RunContext())
    m.name = spec.key
    m.variants = dict(spec.variants)
    missing = m.p.missing()   # its hyperparameters, validated against its Params now, not at first use
    if missing:
        raise ValueError(f"{spec.key} needs {', '.join(missing)} (no default; set it in params.yaml)")
    return m


__all__ = ["ENTRY_POINT_GROUP", "Hyperparameters", "MethodSpec", "build_method", "method_spec", "method_specs"]
