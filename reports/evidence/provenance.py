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
            what = f"rounds 0–{rep['rounds']} of {rep['of']} bit for bit at {rep['commit'][:12]}"
            counts["replayed bit for bit (all rounds)" if rep["rounds"] == rep["of"] else
                   "replayed bit for bit (first round)"] += 1
        elif run in seen and "differ" in seen[run]:
            what = "does not replay here: " + seen[run]
            counts["does not replay on this machine class"] += 1
        else:
            what = "not replayed yet"
            counts["not replayed yet"] += 1
        rows.append(f"| {run.removeprefix(str(RUNS) + '/')} | {trained} | {what} |")
    total = sum(counts.values())
    print("# Provenance of the committed runs\n")
    print(f"{total} committed paper-scale runs. Each run.json records the code that trained it; a run trained "
          "from a modified tree, or before run.json recorded its code, is replayed with `fedbayes replay --record` "
          "from a clean commit, which records an identical replay in its run.json (`replayed`) and MLflow "
          "(`replayed_commit`, `replayed_rounds`, `provenance`). Built by `reports/evidence/provenance.py`.\n")
    print("| | runs |\n|---|---|")
    for k, v in counts.most_common():
        print(f"| {k} | {v} |")
    groups = collections.Counter("/".join(r.split("/")[2:4]) for r, o in seen.items() if "differ" in o
                                 and not (json.loads(Path(r, "run.json").read_text()).get("replayed")))
    print("\nRuns that do not replay here, by experiment and method: "
          + ", ".join(f"{g} ({n})" for g, n in sorted(groups.items())) + ". docs/workflow.md (\"Same numbers on "
          "another machine\") lists the runs trained on an AVX-512 machine before the package capped CPU kernels at "
          "AVX2 — FedPA, FedEP-I, FedSEP-I and FOLA on FMNIST 10 %, the FOLA substitute's 100-round runs: their "
          "first round differs in round-off that training amplifies. Their numbers stand as results of that "
          "machine; a retrain here would replace them.\n")
    print("| run | trained by | replay |\n|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main(sys.argv[1:])
