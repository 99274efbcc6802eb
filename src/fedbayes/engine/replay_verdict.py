"""The verdict on a replay (fedbayes.engine.replay) by machine class: bit-identical on the run's own
class; on another, within round-off (measured by a second replay at another vector width) or within the
spread of the run's committed seeds; else it differs.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path


from fedbayes.machine import class_id, machine_class, same_class
from fedbayes.engine import roundoff

from fedbayes.engine.replay import read_history, replay_rows, bit_diffs, TIMING

# amplified round-off beyond its envelope: training's loss and the table metrics of its own prediction
SPREAD_COLUMNS = ("train/loss", "test/acc", "test/nll", "test/ece", "test/brier")
# a replayed value may differ from the committed one by this many times the range of the run's seeds: the
# difference of two draws has sd √2·σ and the range of 3 draws averages 1.69σ, so twice the range is
# about 2.4 sd of the difference (a replay that trains like another seed passes ~98 % of the time)
SPREAD_FACTOR = 2.0


def seed_spread(run_dir: str | Path, round_: int) -> dict[str, tuple[float, float, int]]:
    """column → (min, max, seeds) at round ``round_`` over the committed seeds of the run's sweep point
    (its sibling ``seed*`` folders, itself included), for the columns of ``SPREAD_COLUMNS`` that at least
    two seeds give."""
    values: dict[str, list[float]] = {}
    for d in sorted(Path(run_dir).parent.glob("seed*")):
        try:
            row = next((r for r in read_history(d / "history.csv") if r.get("round") == str(round_)), None)
        except OSError:
            continue
        for col in SPREAD_COLUMNS:
            try:
                values.setdefault(col, []).append(float(row[col]))
            except (TypeError, KeyError, ValueError):
                pass
    return {c: (min(v), max(v), len(v)) for c, v in values.items() if len(v) >= 2}


def replay_verdict(run_dir: str | Path, rounds: int = 1, raw: str = "data/raw", device: str = "cpu") -> dict:
    """Replay ``rounds`` rounds of a finished run (``replay_rows``) and judge them by machine class:
    ``{"verdict", "line", "rounds", "machine"}`` where verdict is "bit-identical"; "within round-off"
    (every value within ``engine.roundoff``'s envelope); "within the seed spread" (training amplified
    round-off beyond the envelope: each ``SPREAD_COLUMNS`` value of the last replayed round differs from
    the committed one by no more than ``SPREAD_FACTOR`` × the range of the run's seeds at that round, every round before
    the first training round within round-off); or "differs" (anything else, and anything but
    bit-identical on the run's own recorded machine class). A run with no other seed to compare with is
    judged by ``perturbed_rows`` instead: "within the amplified round-off" when each value outside the
    envelope differs by at most ``AMPLIFIED_FACTOR`` × what another vector width makes here."""
    here = machine_class()
    info = json.loads((Path(run_dir) / "run.json").read_text())
    rows = replay_rows(run_dir, rounds, raw, device)
    base = {"rounds": rounds, "machine": class_id(here)}
    if isinstance(rows, str):
        return {**base, "verdict": "differs", "line": rows}
    committed, replayed = rows
    bits = bit_diffs(committed, replayed)
    if not bits:
        return {**base, "verdict": "bit-identical", "line": f"rounds 0-{rounds} bit-identical"}
    if same_class(info.get("machine"), here):
        return {**base, "verdict": "differs", "line": f"{len(bits)} values differ on the run's own machine class, "
                                                      f"first: {bits[0]}"}
    outside, worst_line, worst = roundoff.compare(committed, replayed, skip=TIMING)
    if not outside:
        return {**base, "verdict": "within round-off",
                "line": f"rounds 0-{rounds} within round-off (largest difference {worst:.2g} of the envelope: {worst_line})"}
    first = min(int(line.split(":")[0].removeprefix("round ")) for line in outside if line.startswith("round "))
    within = (f"round{'s 0-' if first > 1 else ' '}{first - 1} within round-off, " if first >= 1 else "")
    last = committed[-1]
    spread = seed_spread(run_dir, int(last["round"]))
    if first >= 1 and spread:
        shown, ok = [], True
        for col, (lo, hi, n) in spread.items():
            a, b = float(last[col]), float(replayed[-1].get(col) or "nan")
            ok = ok and abs(a - b) <= SPREAD_FACTOR * (hi - lo)
            shown.append(f"{col} {a:.4g} -> {b:.4g} (|Δ| {abs(a - b):.2g}; {n} seeds {lo:.4g}-{hi:.4g})")
        if ok:
            return {**base, "verdict": "within the seed spread",
                    "line": f"{within}round {last['round']} within the seed spread: " + "; ".join(shown)}
        return {**base, "verdict": "differs", "line": f"{len(outside)} values beyond round-off, first: {outside[0]}; "
                f"round {last['round']}: " + "; ".join(shown)}
    # one seed: how much does this run's training amplify round-off here? Replay it again with PyTorch's
    # kernels at another vector width (another class on the same CPU) and allow AMPLIFIED_FACTOR × that
    perturbed = perturbed_rows(run_dir, rounds, raw)
    if first >= 1 and perturbed is not None:
        ratios = []
        for w, g, p in zip(committed, replayed, perturbed):
            for col, value in w.items():
                e = roundoff.excess(col, value, g.get(col))
                if col in TIMING or e <= 1:
                    continue
                here_spread = max(roundoff.excess(col, g.get(col, ""), p.get(col)), 1.0)
                ratios.append((e / here_spread,
                               f"round {w['round']}: {col} {value} != {g.get(col)}"))
        worst = max(ratios)
        if worst[0] <= AMPLIFIED_FACTOR:
            return {**base, "verdict": "within the amplified round-off",
                    "line": f"{within}round {last['round']} within {AMPLIFIED_FACTOR:g}× the difference a replay here "
                            f"at another vector width makes (largest {worst[0]:.2g}×: {worst[1]})"}
        return {**base, "verdict": "differs", "line": f"{len(outside)} values beyond round-off, first: {outside[0]}; "
                f"{worst[0]:.3g}× the difference another vector width makes here ({worst[1]})"}
    return {**base, "verdict": "differs", "line": f"{len(outside)} values beyond round-off, first: {outside[0]}"}


# a one-seed run replayed on another class may differ from its history by this many times what a second
# replay here, at another vector width, differs from the first (how much its training amplifies round-off).
# Measured on an Intel Xeon against runs of the goldens' AMD machine, round 1: FedBE 1×, FedCurv, FedNova and
# FOLA up to 42× (two perturbations of the same size are amplified by unequal amounts); the goldens, not
# this, are what tells a code change from round-off
AMPLIFIED_FACTOR = 100.0


def perturbed_rows(run_dir: str | Path, rounds: int, raw: str) -> list[dict] | None:
    """The run's first rounds replayed in a child process with PyTorch's CPU kernels at another vector
    width than this process's (``ATEN_CPU_CAPABILITY``: default, or AVX2 where this one runs default), as
    written; None where the child fails."""
    import os
    import subprocess
    import sys

    other = "avx2" if machine_class()["aten"] == "DEFAULT" else "default"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        r = subprocess.run([sys.executable, "-m", "fedbayes.cli", "replay", str(run_dir), "--rounds", str(rounds),
                            "--root", str(raw), "--rows-out", str(out)], capture_output=True, text=True,
                           env={**os.environ, "ATEN_CPU_CAPABILITY": other})
        if r.returncode != 0 or not out.exists():
            return None
        return json.loads(out.read_text())
