"""Subcommands about the configuration and the installed methods: ``validate``, ``methods``, ``new-method``."""

from __future__ import annotations

import dataclasses

from fedbayes.cli.common import _params
from fedbayes.frontdoor import check_device
from fedbayes.methods.hyperparameters import REQUIRED
from fedbayes.methods.spec import plugin_origin
from fedbayes.methods.template import new_method
from fedbayes.study import METHOD_SPECS, ConfigError, check_implementations, experiment_config, overlay_replacements, seeds


def cmd_validate(args) -> None:
    p = _params(args, trust_stamp=False)   # asked to validate: a stamp from the planner is not taken for it

    check_implementations(p)  # an installed method that cannot train, before it is planned
    check_device(p)           # a CUDA device this machine lacks (imports torch only for one)

    for name in p["experiments"]:
        e = experiment_config(p, name)
        print(f"{name}: {e['dataset']} × {e['clients']} clients, {e['partition']['scheme']}, "
              f"{e['rounds']} rounds, methods {', '.join(e['methods'])}")
    print(f"params.yaml is valid (scale {p['scale']}, seeds {seeds(p)})")
    if replaced := overlay_replacements(p):
        print(replaced)


def cmd_methods(args) -> None:
    """The methods this installation knows (built-in and installed packages') and, for one, every
    hyperparameter with its code default and what it does: the values params.yaml's `methods.<m>` and
    `experiments.<e>.methods.<m>` override."""
    if args.method is None:
        for key, spec in METHOD_SPECS.items():
            variants = ", ".join(f"@{v}" for v in spec.variants if v)
            origin = plugin_origin(key)   # an installed package's method, not fedbayes' own
            print(f"{key:12s} {spec.doc}" + (f" (predictions: {variants})" if variants else "")
                  + (f"  [outside method, package {origin[0]} {origin[1] or ''}]".replace(" ]", "]") if origin else ""))
        return
    if args.method not in METHOD_SPECS:
        raise ConfigError(f"unknown method {args.method!r}; known: {sorted(METHOD_SPECS)}")
    spec = METHOD_SPECS[args.method]
    print(f"{spec.key}: {spec.doc}\n  implementation {spec.implementation}, numerics version {spec.numerics}"
          + (f", fixed {dict(spec.fixed)}" if spec.fixed else ""))
    for f in dataclasses.fields(spec.params):
        default = "(required)" if f.default is REQUIRED else repr(f.default)
        print(f"  {f.name:18s} {default:12s} {f.metadata['doc']}" + ("  [sweepable]" if f.metadata["sweep"] else ""))


def cmd_new_method(args) -> None:
    root = new_method(args.name, args.out)
    print(f"{root}: the method {args.name!r} as a package (its spec, math, a test); install it with "
          f"`pip install -e {root}`, then `fedbayes methods {args.name}` (docs/adding-a-method.md)")
