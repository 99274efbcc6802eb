"""How a method declares its hyperparameters, torch-free: ``hparam`` fields (a default, a JSON Schema rule,
a doc line, whether a sweep or an experiment's ``train:`` block may set it) of a frozen ``Options``
dataclass, the shared groups every method accepts (``LocalTraining``, ``EngineOptions``, together
``Hyperparameters``, the class a method's ``Params`` extends), and the checks of a run's values against
them (``check_value``; ``Options`` checks each field's rule and the rules across fields).

A method's spec (``fedbayes.methods.spec.MethodSpec``) names its ``Params``; validation of params.yaml, the
engine and the method read a run's hyperparameters through it (docs/adding-a-method.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any, ClassVar

import jsonschema

SCHEDULES = ("constant", "cosine_rounds", "linear_local")   # lr_schedule (methods/core/ivon.py lr_schedule)


class _Required:
    """Default of a hyperparameter the implementation reads without a default (``hp["lr"]``)."""

    def __repr__(self) -> str:
        return "REQUIRED"

    def __reduce__(self):
        return "REQUIRED"


REQUIRED: Any = _Required()

# JSON Schema rules shared by several hyperparameters; DEFS are the params schema's $defs they refer to
DEFS = {"posint": {"type": "integer", "minimum": 1}, "posnum": {"type": "number", "exclusiveMinimum": 0}}
POSNUM = {"$ref": "#/$defs/posnum"}
POSINT = {"$ref": "#/$defs/posint"}
NONNEG = {"type": "number", "minimum": 0}
NONNEG_INT = {"type": "integer", "minimum": 0}
SHARE = {"type": "number", "minimum": 0, "maximum": 1}
BOOL = {"type": "boolean"}


def _strict_integer(checker, x) -> bool:
    """JSON Schema's ``integer`` accepts 4.0; a count, seed or epoch number must be a Python int (4.0 would
    name paths ``seed4.0`` and crash ``range``), and True is not 1."""
    return isinstance(x, int) and not isinstance(x, bool)


Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _strict_integer))


def check_value(value: Any, rule: dict) -> str | None:
    """Why ``value`` breaks a hyperparameter's schema ``rule``, or None."""
    error = next(iter(Validator({"$defs": DEFS, **rule}).iter_errors(value)), None)
    return None if error is None else error.message


def enum(*values) -> dict:
    return {"enum": list(values)}


def hparam(default: Any, rule: dict, doc: str, *, sweep: bool = False, train: bool = False,
           code_default: bool = False) -> Any:
    """A hyperparameter field: ``default`` is the value the implementation uses when params.yaml gives
    none (``REQUIRED``: it must be given); ``rule`` is its JSON Schema rule in params.yaml; ``doc`` what
    it does and where it comes from. ``sweep``: a sweep grid may vary it; ``train``: an experiment's
    ``train:`` block may set it; ``code_default``: a resolved run configuration leaves out a value equal
    to ``default`` (``catalog.HPARAM_DEFAULTS``: declaring a new option reruns nothing)."""
    return field(default=default, metadata={"rule": rule, "doc": doc, "sweep": sweep, "train": train,
                                            "code_default": code_default})


_KEEP: Any = object()


def like(params: type[Hyperparameters], name: str, default: Any = _KEEP, doc: str | None = None) -> Any:
    """The field ``name`` of ``params`` with another default (and doc): one rule, several defaults
    (``server_lr`` is 1.0 for SCAFFOLD, 1e-3 for FedBE)."""
    f = params.field(name)
    meta = dict(f.metadata)
    if doc is not None:
        meta["doc"] = doc
    return field(default=f.default if default is _KEEP else default, metadata=meta)


def hyperparameters(cls: type) -> type:
    """Decorator of a ``Hyperparameters`` subclass: a frozen, keyword-only dataclass."""
    return dataclass(frozen=True, kw_only=True)(cls)


@dataclass(frozen=True, kw_only=True)
class Options:
    """Typed options read from a run's hyperparameter dict: each field's rule checked where it is not its
    default, the rules across fields (``problems``) too."""

    # fields without a default (``REQUIRED``) that every run of the method reads: a method built without
    # one is refused (``missing``; ``build_method``), not stopped later by a value that is not a number
    needed: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not REQUIRED and value != f.default:
                problem = check_value(value, f.metadata["rule"])
                if problem:
                    raise ValueError(f"{self._owner()}: {f.name} {problem}")
        broken = self.problems()
        if broken:
            raise ValueError(f"{self._owner()}: " + "; ".join(broken))

    # REQUIRED fields a run may leave unset, each with the test of the run's values under which it is read
    # after all (``unset``); merged over the bases. Every other REQUIRED field is read by every run.
    read_when: ClassVar[Mapping[str, Callable[[Mapping[str, Any]], bool]]] = {}

    def missing(self) -> list[str]:
        """The ``needed`` fields that no value was given for."""
        return [name for name in self.needed if getattr(self, name) is REQUIRED]

    @classmethod
    def unset(cls, hp: Mapping[str, Any]) -> list[str]:
        """The REQUIRED fields a run with hyperparameters ``hp`` reads and that ``hp`` does not set (validation
        refuses such a run: its method would read REQUIRED where it needs a number)."""
        values = {**defaults(cls), **hp}
        when = _read_when(cls)
        return [k for k in _required(cls) if k not in hp and (k not in when or when[k](values))]

    @classmethod
    def _owner(cls) -> str:
        """How an error names the class: a method package's ``Params`` by its package."""
        return f"{cls.__module__}.Params" if cls.__qualname__ == "Params" else cls.__qualname__

    def problems(self) -> list[str]:
        """Rules across fields (a value valid alone but not beside another), each broken one in a sentence
        naming its keys; [] when none is. Checked for every run when params.yaml is validated, so a run
        never starts to fail on them."""
        return []

    @classmethod
    def field(cls, name: str) -> dataclasses.Field:
        return next(f for f in dataclasses.fields(cls) if f.name == name)

    @classmethod
    def from_hparams(cls, hp: Mapping[str, Any]) -> Hyperparameters:
        """The typed view of a run's hyperparameter dict (keys this method does not read are ignored:
        ``smoke.hparams`` sets values for every method); ValueError naming a bad value's key."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in hp.items() if k in names})




@cache
def defaults(cls: type) -> dict[str, Any]:
    """name → default of every field of an ``Options`` class (``REQUIRED`` where it has none)."""
    return {f.name: f.default for f in dataclasses.fields(cls)}


@cache
def _required(cls: type) -> tuple[str, ...]:
    return tuple(k for k, v in defaults(cls).items() if v is REQUIRED)


@cache
def _read_when(cls: type) -> dict[str, Callable[[Mapping[str, Any]], bool]]:
    out: dict = {}
    for c in reversed(cls.__mro__):
        out.update(vars(c).get("read_when", {}))
    return out


@dataclass(frozen=True, kw_only=True)
class LocalTraining(Options):
    """How a client trains (the shared local loop, ``fedbayes.methods.core.base``)."""

    read_when: ClassVar = {"lr_final": lambda v: v["lr_schedule"] == "linear_local"}

    optimizer: str = hparam("adam", enum("adam", "sgd"), "local optimiser (methods/core/local.py make_optimizer)",
                            sweep=True, train=True)
    lr: float = hparam(REQUIRED, POSNUM, "local learning rate", sweep=True, train=True)
    batch_size: int = hparam(REQUIRED, POSINT, "local minibatch size", sweep=True, train=True)
    local_epochs: int = hparam(REQUIRED, POSINT, "passes over the client's data a round", sweep=True, train=True)
    grad_clip: float | None = hparam(None, {"type": ["number", "null"], "exclusiveMinimum": 0},
                                     "global norm the local gradient is clipped to (null: none)", sweep=True, train=True)
    client_optimizer: str = hparam("fresh", enum("fresh", "persistent"),
                                   "persistent: each client keeps its optimiser state across rounds "
                                   "(FedLap/BayesADMM code)", sweep=True, code_default=True)
    lr_schedule: str = hparam("constant", enum(*SCHEDULES),
                              "learning-rate schedule (methods/core/ivon.py lr_schedule)")
    lr_final: float = hparam(REQUIRED, POSNUM, "final learning rate of a decaying lr_schedule")


@dataclass(frozen=True, kw_only=True)
class EngineOptions(Options):
    """The engine's per-run options (``fedbayes.engine.loop`` reads these, a method never does): set in a
    method's block of params.yaml like its hyperparameters, and recorded with them."""

    read_when: ClassVar = {"mc_every": lambda v: False}   # unset: the experiment's mc_every, else eval_every

    client_stream: str = hparam("independent", enum("independent", "replay"),
                                "replay: one random stream for every client and round (BayesADMM code)")
    client_rows: str = hparam("partition", enum("partition", "by_label"),
                              "by_label: each client's rows grouped by class (BayesADMM code's iid layout)",
                              code_default=True)
    mc_every: int = hparam(REQUIRED, POSINT, "evaluate the sampled predictive every N rounds (+ table rounds); "
                                             "default: the experiment's mc_every, else eval_every")
    mc_round0: bool = hparam(True, BOOL, "also evaluate the sampled predictive at round 0 (the initialisation)")
    mc_window: bool = hparam(True, BOOL, "also in the 3-round windows before reported rounds (mean_last3 tables need it)")


@dataclass(frozen=True, kw_only=True)
class Hyperparameters(EngineOptions, LocalTraining):
    """What every method accepts: local training and the engine's per-run options (``train:`` keys
    can also be set per experiment). A method's ``params`` subclasses this and adds its own fields."""
