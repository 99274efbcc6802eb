"""The provenance of the committed runs: which code trained each (run.json ``code``), and for a run trained
from a modified tree or before run.json recorded its code, whether a clean commit replays it bit for bit
(``fedbayes replay --record`` writes run.json ``replayed``) or not (the replay's log line).

    python reports/evidence/provenance.py REPLAY_LOG [REPLAY_LOG ...] > reports/evidence/provenance.md

REPLAY_LOG: the output of ``fedbayes replay --record`` (one line a run: ``<run>: rounds 0-N bit-identical``
or ``<run>: K values differ, first: …``)."""

from __future__ import annotations

import collections
import json
import re
import sys
from pathlib import Path

RUNS = Path("results/runs")


def outcomes(logs: list[str]) -> dict[str, str]:
    """run directory → its latest replay outcome in the logs (a later line wins: a full replay after a
    first-round one)."""
    out = {}
    for log in logs:
        for line in Path(log).read_text().splitlines():
            m = re.match(r"^(results/runs/\S+): (rounds 0-\d+ bit-identical|\d+ values differ, first: .*?)( \(recorded.*)?$", line)
            if m:
                out[m.group(1)] = m.group(2)
    return out


GOLDENS_CLASS = "the goldens' AMD machine (AVX2; class not recorded then)"


def replay_text(rep: dict) -> tuple[str, str]:
    """(count row, table cell) of a run's ``replayed`` record: bit for bit, or another class's verdict."""
    where = rep.get("machine") or GOLDENS_CLASS
    span = f"rounds 0–{rep['rounds']} of {rep['of']}"
    if rep.get("identical", True):
        kind = "all rounds" if rep["rounds"] == rep["of"] else "first round"
        return f"replayed bit for bit ({kind})", f"{span} bit for bit at {rep['commit'][:12]} on {where}"
    return (f"replayed {rep['verdict']} on another class",
            f"{span} {rep['verdict']} at {rep['commit'][:12]} on {where}: {rep.get('detail', '')}")


def main(logs: list[str]) -> None:
    seen = outcomes(logs)
    rows, counts = [], collections.Counter()
    for f in sorted(RUNS.glob("*/*/*/seed*/run.json")):
        info = json.loads(f.read_text())
        code, rep = info.get("code") or {}, info.get("replayed")
        trained = ("commit " + code["commit"][:12] + (", modified tree" if code.get("dirty") else "")) \
            if code.get("commit") else "not recorded"
        run = str(f.parent)
        if code.get("commit") and not code.get("dirty"):
            counts["trained from a clean commit"] += 1
            continue
        if rep:
            row, what = replay_text(rep)
            counts[row] += 1
        elif run in seen and "differ" in seen[run]:
            what = "differs beyond round-off: " + seen[run]
            counts["differs beyond round-off"] += 1
        else:
            what = "not replayed yet"
            counts["not replayed yet"] += 1
        rows.append(f"| {run.removeprefix(str(RUNS) + '/')} | {trained} | {what} |")
    total = sum(counts.values())
    print("# Provenance of the committed runs\n")
    print(f"{total} committed paper-scale runs. Each run.json records the code that trained it; a run trained "
          "from a modified tree, or before run.json recorded its code, is replayed with `fedbayes replay --record` "
          "from a clean commit, which records the replay's verdict in its run.json (`replayed`) and MLflow "
          "(`replayed_commit`, `replayed_rounds`, `provenance`). A replay is judged by machine class "
          "(docs/workflow.md, \"Same numbers on another machine\"): bit for bit on the class that trained the run; "
          "on another, round 0 within the round-off envelope and round 1, where training has amplified it, within "
          "twice the range of the run's seeds (or, for a run of one seed, within 100× what a second replay at "
          "another vector width differs) — never a failure for round-off alone. "
          "Built by `reports/evidence/provenance.py` from the run.json records.\n")
    print("| | runs |\n|---|---|")
    for k, v in counts.most_common():
        print(f"| {k} | {v} |")
    print("\nThe runs replayed on another class were trained on an AVX-512 machine before the package capped CPU "
          "kernels at AVX2 (FedPA, FedEP-I, FedSEP-I and FOLA on FMNIST 10 %, the FOLA substitute's 100-round runs), "
          "or on the goldens' AMD machine and replayed on an Intel Xeon. Their numbers stand as results of the "
          "machine that trained them; a retrain elsewhere would give numbers within the same seed spread.\n")
    print("| run | trained by | replay |\n|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main(sys.argv[1:])
