#!/usr/bin/env bash
# FedAvg side by side with the federated-learning frameworks a user would pick instead,
# one core each at the same moment, as benchmarks/authors_fedavg.sh does for the authors' code:
# fmnist10-iid-k10, seed 0, E local epochs (default 10), 50 rounds, Adam 1e-3, batch 32,
# MLP 784-200-100-10 (sigmoid, raw pixels), the global model evaluated on the 10,000 test images every round.
#
#   bash benchmarks/peers/run.sh [PEERS] [E] [ROUNDS]       PEERS: "flower flbench" (default) or one of them
#
# Each peer runs in its own environment, set up here when missing (git-ignored, under build/peers/):
#   flower   build/peers/flower: flwr[simulation] + torch 2.14.1 (pip); benchmarks/peers/flower_fedavg.py
#   flbench  build/peers/flbench: FL-bench's imports + torch 2.14.1; FL-bench's code is a copy OUTSIDE this
#            repository ($FLBENCH, default /tmp/flbench, exported from $FLBENCH_GIT, a bare git directory of
#            KarhouTam/FL-bench); benchmarks/peers/flbench_setup.py writes its data, partition, model and config
# Both read fedbayes's own split (`fedbayes partition`) and initial weights (export_init.py) for the seed.
# Fashion-MNIST's IDX files: $RAW (default data/raw/fmnist, as `fedbayes data fmnist` fetches them).
# Every pair is measured by measure.py (wall, peak summed PSS of all processes, Ray's included), and a row
# per pair is appended to benchmarks/peers/peers.json; benchmarks/peers/peers.md is rewritten from it.
# Needs 2 cores; `uptime` before and after is recorded, since other jobs may share the machine.
set -euo pipefail
peers=${1:-flower flbench}
E=${2:-10}
R=${3:-50}
repo=$(cd "$(dirname "$0")/../.." && pwd)
here="$repo/benchmarks/peers"
RAW=$(cd "${RAW:-$repo/data/raw/fmnist}" && pwd)
FLBENCH=${FLBENCH:-/tmp/flbench}
FLBENCH_GIT=${FLBENCH_GIT:-/work/.mirror/KarhouTam+FL-bench/repo}
ours_py=${FEDBAYES_PY:-$repo/.venv/bin/python}
[ -x "$ours_py" ] || ours_py=$(command -v python)
ours_bin=$(dirname "$ours_py")/fedbayes
tmp=$(mktemp -d)
keep=${KEEP:-}
trap '[ -n "$keep" ] || rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

setup_flower() {
    local v="$repo/build/peers/flower"
    [ -x "$v/bin/python" ] && "$v/bin/python" -c "import flwr, ray, torch" 2>/dev/null && return
    "$ours_py" -m venv "$v"
    # torch pinned to fedbayes's own version so the two time the same kernels
    "$v/bin/pip" install -q "torch==2.14.1" "torchvision==0.29.1" "flwr[simulation]"
}

setup_flbench() {
    local v="$repo/build/peers/flbench"
    if [ ! -f "$FLBENCH/main.py" ]; then
        mkdir -p "$FLBENCH"
        # file by file: the snapshot lacks some large blobs (.github/images), which `git archive` stops on
        git --git-dir="$FLBENCH_GIT" ls-tree -r HEAD | while read -r _ _ sha path; do
            case "$path" in .github/*) continue ;; esac
            mkdir -p "$FLBENCH/$(dirname "$path")"
            git --git-dir="$FLBENCH_GIT" cat-file blob "$sha" > "$FLBENCH/$path"
        done
        git --git-dir="$FLBENCH_GIT" rev-parse HEAD > "$FLBENCH/.flbench_commit"
    fi
    [ -x "$v/bin/python" ] && "$v/bin/python" -c "import hydra, ray, torch, torchvision, rich, pandas, sklearn" 2>/dev/null && return
    "$ours_py" -m venv "$v"
    "$v/bin/pip" install -q "torch==2.14.1" "torchvision==0.29.1" hydra-core omegaconf rich numpy "ray[default]" \
        pandas matplotlib scikit-learn scipy pillow pynvml
}

cd "$repo"
"$ours_bin" partition --experiment fmnist10-iid-k10 --seed 0 --out "$tmp/part.npz" > /dev/null
"$ours_py" "$here/export_init.py" --experiment fmnist10-iid-k10 --seed 0 --out "$tmp/init.npz" > /dev/null

ours() {  # ours PEER: fedbayes train on core 0 under measure.py
    python3 "$here/measure.py" --json "$tmp/ours_$1.measure.json" --log "$tmp/ours_$1.log" -- \
        taskset -c 0 "$ours_bin" train --experiment fmnist10-iid-k10 --method fedavg --point "local_epochs=$E" \
        --seed 0 --partition "$tmp/part.npz" --out "$tmp/ours_$1" --threads 1 || true
}

for peer in $peers; do
    "setup_$peer"
    uptime > "$tmp/load_$peer.txt"
    case "$peer" in
    flower)
        cat > "$tmp/flower.fidelity.json" <<'EOT'
{"summary": "same split, same init, client Adam kept across rounds (Context.state); own minibatch order",
 "client optimiser": "Adam per client kept across rounds (moments and step count) in the client's Flower Context.state, as fedbayes's `client_optimizer: persistent` for this experiment; checked: Adam's step count after the last round = rounds × E × 19 batches (peers.json adam_step_last_round). Flower's examples build a fresh optimiser every round; --client-optimizer fresh does that",
 "data split": "the same rows: fedbayes's partition file for seed 0 (subsample 10 %, iid, 600 per client); pixels read from the same IDX files, raw 0–255 floats",
 "initial model": "the same weights: fedbayes's initial state_dict for seed 0 (export_init.py)",
 "local loop": "Adam lr 1e-3, batch 32 reshuffled every epoch, last batch 24 rows (19 batches an epoch), E epochs; the permutations come from its own torch generator, not fedbayes's streams, so the curves differ by sampling noise",
 "aggregation": "Flower's FedAvg strategy (weighted by num-examples, equal here), all 10 clients every round",
 "evaluation": "Flower's centralised evaluate_fn: accuracy and NLL of the global model on the 10,000 test images before round 1 and after every round; fedbayes also computes ECE, MCE, Brier and OOD AUROC on 5,000 MNIST digits every round (more work per round on its side)",
 "runtime": "run_simulation, Ray backend, one Ray worker (client_resources num_cpus 1): the 10 clients run one after another on the peer's core, as in fedbayes"}
EOT
        ( python3 "$here/measure.py" --json "$tmp/flower.measure.json" --log "$tmp/flower.log" \
              --marker "$repo/build/peers/flower/" -- \
              taskset -c 1 "$repo/build/peers/flower/bin/python" "$here/flower_fedavg.py" --raw "$RAW" \
              --partition "$tmp/part.npz" --init "$tmp/init.npz" --rounds "$R" --local-epochs "$E" \
              --client-optimizer persistent --seed 0 --out "$tmp/flower.json" || true ) &
        ;;
    flbench)
        "$repo/build/peers/flbench/bin/python" "$here/flbench_setup.py" --flbench "$FLBENCH" --raw "$RAW" \
            --partition "$tmp/part.npz" --init "$tmp/init.npz" --rounds "$R" --local-epochs "$E" \
            --fidelity "$tmp/flbench.fidelity.json" --config-name peers_fedavg
        ( cd "$FLBENCH" && PEERS_INIT="$FLBENCH/peers_init.npz" PEERS_HISTORY="$FLBENCH/peers_history.json" python3 "$here/measure.py" --json "$tmp/flbench.measure.json" --log "$tmp/flbench.log" \
              --marker "$repo/build/peers/flbench/" -- \
              taskset -c 1 "$repo/build/peers/flbench/bin/python" main.py --config-name peers_fedavg || true
          "$repo/build/peers/flbench/bin/python" "$here/flbench_setup.py" --flbench "$FLBENCH" --collect \
              --log "$tmp/flbench.log" --out "$tmp/flbench.json" --rounds "$R" || true ) &
        ;;
    *) echo "unknown peer $peer" >&2; exit 2 ;;
    esac
    ours "$peer" &
    wait
    uptime >> "$tmp/load_$peer.txt"
    python3 "$here/table.py" add --work "$tmp" --peer "$peer" --out-json "$here/peers.json" --local-epochs "$E" \
        --rounds "$R" --time "$(date -u -Iseconds)" --cpu "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
    echo "$peer: $(tail -c 2000 "$here/peers.json" | grep -o '"final_acc": [0-9.]*' | tr '\n' ' ')"
done
python3 "$here/table.py" md --json "$here/peers.json" --md "$here/peers.md" --notes "$here/notes.md"
[ -z "$keep" ] || echo "work files kept in $tmp"
