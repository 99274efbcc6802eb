"""The metrics the project shows: one entry each (name, unit, direction, label), read by the tables, the
figures, the MLflow import and the scorecard.

A run stores every metric as computed (``metrics.json``, ``history.csv``: accuracy as a fraction);
``scale`` turns it into the number shown (accuracy in %), ``digits`` is how many decimals a table prints.
``curve``: drawn as a learning curve in a table's figure; ``smooth``: rounds in the running mean a curve
is drawn with (a metric that jumps from round to round), 1 for none. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass


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

    @property
    def axis_label(self) -> str:
        return f"{self.label} ({self.unit})" if self.unit else self.label


_ALL = [
    Metric("test/acc", "accuracy", "%", True, scale=100.0, digits=1),
    Metric("local/acc", "local accuracy", "%", True, scale=100.0, digits=1),
    Metric("test/nll", "NLL", "nats", False),
    Metric("test/ece", "ECE", "", False, smooth=5),
    Metric("test/mce", "MCE", "", False, curve=False),
    Metric("test/brier", "Brier score", "", False),
    Metric("ood/auroc_entropy", "OOD AUROC (entropy)", "", True),
    Metric("ood/auroc_maxprob", "OOD AUROC (max p)", "", True),
    # FedEP Table 3 (StackOverflow tag prediction), printed as the paper prints them
    Metric("test/precision", "precision", "%", True, scale=100.0, digits=2, curve=False),
    Metric("test/recall", "recall", "%", True, scale=100.0, digits=2, curve=False),
    Metric("test/micro_f1", "micro-F1", "%", True, scale=100.0, digits=2, curve=False),
    Metric("test/macro_f1", "macro-F1", "%", True, scale=100.0, digits=2, curve=False),
]
METRICS: dict[str, Metric] = {m.name: m for m in _ALL}
PERCENT = frozenset(n for n, m in METRICS.items() if m.scale == 100.0)   # shown in %


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
