"""The round-off envelope: how far two machine classes' numbers may differ and still be the same code.

Within a machine class (``fedbayes.machine``) a golden or a run is compared bit for bit. Across classes
the same code rounds differently (other vector widths, another BLAS path), and the numerics check and
``fedbayes replay`` compare within this envelope instead:

- a continuous value (a loss, NLL, ECE, Brier, a byte count): ``|a - b| <= RTOL * max(1, |a|, |b|)``;
- a value counted over items (accuracy, AUROC, precision, recall, F1): ``|a - b| <= ITEM_TOL``, one item
  of the golden's 100 test points (or one in-distribution point's rank against every OOD point) moving
  across a decision boundary it sits on within round-off;
- a binned value: ECE within two items' worth (an item moving to the next confidence bin changes two
  bins' gaps), MCE (the largest bin's gap: one item can make or empty a bin) not compared.
A real change moves the continuous values of the same round (loss, NLL, Brier) far outside their
envelope, so these allowances hide nothing the others show.

How RTOL was measured (docs/workflow.md, "Same numbers on another machine"): the 35 committed goldens (3
rounds, 2 local epochs, 4 clients) replayed on an Intel Xeon (family 6, model 207) against the goldens'
AMD machine, with AVX2 (the package's cap), with ``ATEN_CPU_CAPABILITY=default`` and with AVX-512
allowed: the largest difference of a continuous value was 6.2e-7 of its scale (0.062 of the envelope;
float32's epsilon is 1.2e-7). Deliberate changes on the same goldens: a learning rate 0.1 % larger moved
FedAvg's and FedIVON's values 70-80× the envelope (SCAFFOLD's 3×), FedProx's proximal weight 10 % larger
120× and doubled 1,100×, BayesADMM's ρ 1 % larger 1,800×. RTOL = 1e-5 sits between: 16× the largest
round-off seen. What it cannot see is a change that barely acts on the goldens' 3-round problem
(FedProx's proximal weight 1 % larger: 1.0×; FedLap's prior precision or FOLA's prior 1 % larger:
0.07×, 0.001×): on the goldens' own class those are caught bit for bit.
"""

from __future__ import annotations

import math

RTOL = 1e-5
ITEM_TOL = 0.01


def counted(column: str) -> bool:
    """A history column whose value counts items (accuracy, AUROC, precision, recall, F1)."""
    name = column.rsplit("/", 1)[-1]
    return name == "acc" or name.startswith("auroc") or name in ("precision", "recall") or name.endswith("f1")


def allowed(column: str, x: float, y: float) -> float:
    """The envelope of one value of ``column`` (the module's rules)."""
    name = column.rsplit("/", 1)[-1]
    if name == "mce":
        return math.inf
    if name == "ece":
        return 2 * ITEM_TOL
    return ITEM_TOL + 1e-12 if counted(column) else RTOL * max(1.0, abs(x), abs(y))   # 0.25 - 0.24 > 0.01 in floats


def excess(column: str, a: str, b) -> float:
    """How far two written values of ``column`` are apart, as a fraction of their envelope: 0 when equal as
    written, ≤ 1 within round-off, > 1 outside (inf: a number against text, or one side missing)."""
    b = "" if b is None else str(b)
    if a == b:
        return 0.0
    try:
        x, y = float(a), float(b)
    except ValueError:
        return math.inf
    if math.isnan(x) and math.isnan(y):
        return 0.0
    if not (math.isfinite(x) and math.isfinite(y)):
        return math.inf
    return abs(x - y) / allowed(column, x, y)


def compare(want: list[dict], got: list[dict], skip=()) -> tuple[list[str], str, float]:
    """Rows written (``want``) against rows computed (``got``), column by column (``skip``: columns left
    out): (``round N: column want != got`` for each value outside the envelope, the largest difference
    seen as a line, its fraction of the envelope)."""
    outside, worst, worst_line = [], 0.0, ""
    for w, g in zip(want, got):
        for k, v in w.items():
            if k in skip:
                continue
            e = excess(k, v, g.get(k))
            line = f"round {w.get('round')}: {k} {v} != {g.get(k, '<absent>')}"
            if e > 1:
                outside.append(line)
            if e > worst and math.isfinite(e):
                worst, worst_line = e, line
    if len(want) != len(got):
        outside.append(f"{len(want)} rounds != {len(got)}")
    return outside, worst_line, worst
