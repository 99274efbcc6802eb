#!/usr/bin/env bash
# Replay at a clean commit the committed runs that have no clean code record (trained from a modified tree,
# or before run.json recorded its code), recording each replay's verdict in its run.json
# (`fedbayes replay --record`: bit for bit on the run's machine class, within round-off or the seed spread on
# another): first rounds 0-1 of every such run, then every round of those trained from a
# modified tree. Resumable: a run already in LOG with that many rounds is skipped.
#   bash reports/evidence/provenance_replay.sh LOG [DATA_ROOT]      (from a checkout whose src/ is unmodified)
# then: python reports/evidence/provenance.py LOG > reports/evidence/provenance.md
set -uo pipefail
LOG=${1:?usage: provenance_replay.sh LOG [DATA_ROOT]}
ROOT=${2:-data/raw}
echo "commit $(git rev-parse HEAD) modified_src=$(git status --porcelain -- src | wc -l) start $(date -u +%FT%TZ)" >> "$LOG"
runs() {   # $1: dirty | all — the runs without a clean code record (dirty: trained from a modified tree)
    python3 - "$1" <<'PY'
import json, sys
from pathlib import Path
for f in sorted(Path("results/runs").glob("*/*/*/seed*/run.json")):
    code = json.loads(f.read_text()).get("code") or {}
    if code.get("dirty") or (sys.argv[1] == "all" and not code.get("commit")):
        print(f.parent)
PY
}
for r in $(runs all); do
    grep -q "^$r: " "$LOG" || fedbayes replay --record --rounds 1 --root "$ROOT" "$r" >> "$LOG"
done
for r in $(runs dirty); do
    n=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['config']['rounds'])" "$r/run.json")
    grep -qE "^$r: (rounds 0-$n |[0-9]+ values (differ|beyond))" "$LOG" || fedbayes replay --record --rounds "$n" --root "$ROOT" "$r" >> "$LOG"
done
echo "end $(date -u +%FT%TZ)" >> "$LOG"
