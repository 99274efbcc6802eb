"""The metrics of the project: one entry each (name, kind, function, unit, direction, label), read by the
evaluation (which metrics it computes, and where they go: ``test/`` or ``ood/``), each metric's code (fedbayes.eval.fingerprint),
the tables, the figures, the MLflow import and the scorecard.

A metric's kind is its name's first part: ``test`` (computed from the test set's predictive log-probabilities
and labels: ``fn(logp, y) -> float``), ``ood`` (from the test set's and the OOD set's: ``fn(logp_in,
logp_out) -> float``) or ``local`` (measured in training, on models that are not kept: no ``fn``). ``fn`` is
a callable or a ``"module:function"`` imported when first used (so reading the registry imports neither
numpy nor scipy). ``published_only``: a paper's metric printed from its published values alone, which the
project computes nowhere (no ``fn``): a table may list it, evaluation skips it.

A run stores every metric as computed (``metrics.json``, ``history.csv``: accuracy as a fraction);
``scale`` turns it into the number shown (accuracy in %), ``digits`` is how many decimals a table prints.
``curve``: drawn as a learning curve in a table's figure; ``smooth``: rounds in the running mean a curve
is drawn with (a metric that jumps from round to round), 1 for none. Torch-free.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Iterator, Set
from dataclasses import dataclass

ENTRY_POINT_GROUP = "fedbayes.metrics"   # an installed package's metrics: a Metric or a list of them

KINDS = {"test": "computed from the test set's predictions and labels",
         "ood": "computed from the test set's and the OOD set's predictions",
         "local": "measured in training (the clients' own models, not kept)"}


@dataclass(frozen=True)
class Metric:
    name: str                 # as stored: "test/acc"
    label: str                # "accuracy"
    unit: str                 # "%", "nats", "" (a fraction or a count)
    higher_is_better: bool
    scale: float = 1.0        # stored value × scale = shown value
    digits: int = 3           # decimals in the tables
    curve: bool = True
    smooth: int = 1
    fn: Callable[..., float] | str | None = None   # "module:function" or a callable (see the module's doc)
    published_only: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS or not self.key:
            raise ValueError(f"metric {self.name!r}: the name is <kind>/<key> with a kind of {sorted(KINDS)}")
        evaluated = self.kind in ("test", "ood") and not self.published_only
        if evaluated != (self.fn is not None):
            raise ValueError(f"metric {self.name!r}: " + ("a function (fn) computes it" if evaluated else
                                                          "a training-measured or published-only metric has no fn"))

    @property
    def kind(self) -> str:
        """``test``, ``ood`` or ``local`` (``KINDS``): where the metric is computed and stored."""
        return self.name.split("/", 1)[0]

    @property
    def key(self) -> str:
        """The name without its kind (``acc``)."""
        return self.name.partition("/")[2]

    @property
    def evaluated(self) -> bool:
        """Computed by evaluation, from predictions (``fn``)."""
        return self.fn is not None

    def function(self) -> Callable[..., float]:
        """``fn``, imported when it is a ``"module:function"``."""
        if callable(self.fn):
            return self.fn
        module, _, name = str(self.fn).partition(":")
        return getattr(importlib.import_module(module), name)

    @property
    def axis_label(self) -> str:
        return f"{self.label} ({self.unit})" if self.unit else self.label


_M = "fedbayes.eval.metrics:"   # the definitions (eval/metrics.py)
_ALL = [   # (evaluation computes them in this order: a history.csv's and a metrics.json's column order)
    Metric("test/acc", "accuracy", "%", True, scale=100.0, digits=1, fn=_M + "accuracy"),
    Metric("local/acc", "local accuracy", "%", True, scale=100.0, digits=1),
    Metric("test/nll", "NLL", "nats", False, fn=_M + "nll"),
    Metric("test/ece", "ECE", "", False, smooth=5, fn=_M + "ece"),
    Metric("test/mce", "MCE", "", False, curve=False, fn=_M + "mce"),
    Metric("test/brier", "Brier score", "", False, fn=_M + "brier"),
    Metric("ood/auroc_entropy", "OOD AUROC (entropy)", "", True, fn=_M + "auroc_entropy"),
    Metric("ood/auroc_maxprob", "OOD AUROC (max p)", "", True, fn=_M + "auroc_maxprob"),
    # FedEP Table 3 (StackOverflow tag prediction), printed as the paper prints them: multi-label tag metrics,
    # which no single-label softmax prediction of this project gives (the table's experiment is not comparable)
    Metric("test/precision", "precision", "%", True, scale=100.0, digits=2, curve=False, published_only=True),
    Metric("test/recall", "recall", "%", True, scale=100.0, digits=2, curve=False, published_only=True),
    Metric("test/micro_f1", "micro-F1", "%", True, scale=100.0, digits=2, curve=False, published_only=True),
    Metric("test/macro_f1", "macro-F1", "%", True, scale=100.0, digits=2, curve=False, published_only=True),
]
METRICS: dict[str, Metric] = {}


def register(m: Metric, overwrite: bool = False) -> Metric:
    """Adds ``m`` to the registry (after the others: evaluation computes in the registry's order); a name
    registered already is refused unless ``overwrite``."""
    if m.name in METRICS and not overwrite:
        raise ValueError(f"metric {m.name!r} is registered already (fedbayes.eval.registry)")
    METRICS[m.name] = m
    return m


for _m in _ALL:
    register(_m)


def _installed() -> None:
    """The metrics installed packages register under ``ENTRY_POINT_GROUP`` (after the project's own; one
    that cannot be loaded, or whose name is taken, is left out with a warning naming it)."""
    from importlib.metadata import entry_points

    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        try:
            obj = ep.load()
            for m in obj if isinstance(obj, list | tuple) else [obj]:
                if not isinstance(m, Metric):
                    raise TypeError(f"{type(m).__name__} is not a fedbayes.eval.registry.Metric")
                register(m)
        except Exception as err:  # noqa: BLE001  (a plug-in's own problem: it is left out, not every command)
            warnings.warn(f"fedbayes: metric entry point {ep.name} = {ep.value}: {type(err).__name__}: {err}; "
                          "left out", RuntimeWarning, stacklevel=2)


_installed()


def evaluated() -> list[Metric]:
    """The metrics evaluation computes from predictions, in the registry's order."""
    return [m for m in METRICS.values() if m.evaluated]


class _Percent(Set):
    """The names of the metrics shown in % (``scale`` 100), read from the registry when asked (a metric
    registered after this module was imported is among them)."""

    def _names(self) -> list[str]:
        return [n for n, m in METRICS.items() if m.scale == 100.0]

    def __contains__(self, name: object) -> bool:
        return name in METRICS and METRICS[name].scale == 100.0   # type: ignore[index]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    def __repr__(self) -> str:
        return f"PERCENT{set(self._names())}"


PERCENT: Set[str] = _Percent()   # shown in %


def metric(name: str) -> Metric:
    """The entry of ``name`` (``test/acc``; a variant's ``mean/test/acc`` or a ``final/`` prefix resolves
    to its metric); KeyError naming the known metrics."""
    key = name.removeprefix("final/")
    if key not in METRICS and key.count("/") > 1:
        key = key.split("/", 1)[1]
    if key not in METRICS:
        raise KeyError(f"metric {name!r} is not in fedbayes.eval.registry (known: {', '.join(METRICS)})")
    return METRICS[key]


EVALUATED = ("test/", "ood/")   # a metric computed from predictions (a variant's behind its "<variant>/")


def evaluated_column(column: str) -> bool:
    """A history column holding an evaluated metric (``test/nll``, ``ood/auroc_entropy``, ``mean/test/acc``):
    its value is the metric code's definition applied to the predictions, not a number training computes."""
    return any(column.startswith(p) or f"/{p}" in column for p in EVALUATED)
