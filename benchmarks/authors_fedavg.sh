#!/usr/bin/env bash
# FedAvg side by side with the authors' released code, one core each at the same moment:
# fmnist10-iid-k10, E 10, 50 rounds, Adam 1e-3, batch 32, MLP 784-200-100-10 (sigmoid, raw pixels).
#
#   bash benchmarks/authors_fedavg.sh /path/to/bayes-admm [OUT_JSONL]
#
# /path/to/bayes-admm: a checkout of team-approx-bayes/bayes-admm (commit bd80f94) OUTSIDE this repository,
# able to load its fashionmnist_10p_iid benchmark (its data loader pointed at Fashion-MNIST). Nothing of
# it is copied here: this script only writes its YAML configuration and times `train.py` from the
# checkout on core 1 while `fedbayes train` runs the same protocol on core 0. Needs 2 cores.
set -euo pipefail
authors=$(cd "$1" && pwd)
out=${2:-}
repo=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/fedavg.yaml" <<EOT
seed_init: 62
num_runs: 1
benchmark: fashionmnist_10p_iid
network_type: MLP
use_cuda: false
num_epochs_batch: 0
num_clients: 10
num_comm_rounds: 50
federated_method: FedAvg
federated_step_size: 0
global_prior_prec: 0
local_prior_prec: 0
global_step_size: 0
opt_type: Adam
learning_rate_local: 0.001
batch_size: 32
num_epochs_local: 10
wandb_log: False
log_interval_epochs: 0
plot_comm_round: 0
hidden_sizes: [200, 100]
EOT
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
py="$repo/.venv/bin/python"
"$repo/.venv/bin/fedbayes" partition --experiment fmnist10-iid-k10 --seed 0 --out "$tmp/part.npz" > /dev/null
timed() {  # timed SECONDS_FILE LOG_FILE COMMAND...: the command's wall seconds into SECONDS_FILE
    local secs=$1 log=$2 s e; shift 2
    s=$(date +%s.%N); "$@" > "$log" 2>&1; e=$(date +%s.%N)
    echo "$e - $s" | bc > "$secs"
}
(cd "$authors" && timed "$tmp/authors.s" "$tmp/authors.log" taskset -c 1 "$py" train.py --config_file "$tmp/fedavg.yaml") &
(cd "$repo" && timed "$tmp/ours.s" "$tmp/ours.log" taskset -c 0 .venv/bin/fedbayes train --experiment fmnist10-iid-k10 \
    --method fedavg --point local_epochs=10 --seed 0 --partition "$tmp/part.npz" --out "$tmp/ours" --threads 1) &
wait
a=$(cat "$tmp/authors.s"); o=$(cat "$tmp/ours.s")
acc_a=$(grep -o "Comm round 50: Test-acc: [0-9.]*" "$tmp/authors.log" | grep -o "[0-9.]*$")
acc_o=$(grep -o "round  50/50  acc [0-9.]*" "$tmp/ours.log" | grep -o "[0-9.]*$")
echo "authors' code: ${a} s (round-50 accuracy ${acc_a} %); fedbayes: ${o} s (round-50 accuracy ${acc_o}); ratio $(echo "scale=2; $a / $o" | bc)"
if [ -n "$out" ]; then
    printf '{"benchmark": "fedavg_vs_authors_code", "experiment": "fmnist10-iid-k10", "local_epochs": 10, "rounds": 50, "authors_s": %s, "ours_s": %s, "ratio": %s, "cores": "one each, same moment", "time": "%s"}\n' \
        "$a" "$o" "$(echo "scale=3; $a / $o" | bc)" "$(date -Iseconds)" >> "$out"
fi
