#!/usr/bin/env bash
# The GPU path, checked in one go on a CUDA machine:
#   1. one paper-scale run each of FedAvg (fmnist10-iid-k10, its selected E 5; with its clients batched, the
#      default on a GPU, and one by one), BayesADMM (same experiment)
#      and the FedIVON substitute (fmnist-shards-k200, 2000 rounds, ending in its 500-sample predictive),
#      seed 0, one after another so that each has the GPU to itself; seconds per round, peak GPU memory
#      (run.json gpu_peak_mib) and the final metrics against the committed CPU runs of the same experiment
#      (benchmarks/gpu_compare.py: within the spread of the CPU seeds?);
#   2. the smoke DAG (`snakemake --cores all reports/smoke/table1.csv reports/smoke/metrics`) on the GPU.
#
#   bash benchmarks/gpu_check.sh [OUT_DIR]      # OUT_DIR defaults to $OUT, else build/gpu_out
#   GPU_CHECK_STEPS="smoke predictive profile" bash benchmarks/gpu_check.sh    # steps: runs smoke predictive profile
#
# Needs the raw data (`fedbayes data fmnist mnist5k`) and the Python packages of pyproject.toml. Where they
# are not installed, a folder .whl/ of wheels (pip download ... for the GPU machine's Python) is installed
# into /tmp/site first. Each step has its own time limit so that one slow step still leaves the others'
# results; OUT_DIR gets steps.log, compare.txt (the table) and gpu_check.tgz (every run's run.json,
# history.csv and log, the smoke DAG's log and table).
set -uo pipefail
out=${1:-${OUT:-build/gpu_out}}
mkdir -p "$out"
log() { echo "[$(date +%T)] $*" | tee -a "$out/steps.log"; }
if [ -d .whl ]; then
  "${PYTHON:-python3}" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { log "wheel install failed"; exit 2; }
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
work=build/gpu_check
mkdir -p "$work/runs"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1 | tee -a "$out/steps.log"
$py -c "import torch, fedbayes.cli; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())" \
  | tee -a "$out/steps.log" || exit 2

t_end=$(( $(date +%s) + ${GPU_CHECK_BUDGET_S:-540} ))   # every step ends by then (the machine's call limit)
left() { local l=$(( t_end - $(date +%s) - 20 )); (( l < $1 )) && echo $(( l > 1 ? l : 1 )) || echo "$1"; }
run() {  # experiment method point limit_s [name params]
  local e=$1 m=$2 pt=$3 lim; lim=$(left "$4")
  local name=${5:-$e.$m} params=${6:-params.yaml}
  local d="$work/runs/$name"
  mkdir -p "$d"
  [ -f "build/gpu_parts/$e.npz" ] || $py -m fedbayes.cli partition --experiment "$e" --seed 0 --scale "${SCALE:-paper}" \
    --out "build/gpu_parts/$e.npz" >/dev/null
  log "train $e $m $pt (limit ${lim}s)"
  timeout "$lim" $py -m fedbayes.cli train --params "$params" --experiment "$e" --method "$m" --point "$pt" --seed 0 \
    --partition "build/gpu_parts/$e.npz" --out "build/gpu_runs/$name" --threads 1 --scale "${SCALE:-paper}" > "$d/train.log" 2>&1
  log "  rc $?"
  cp build/gpu_runs/$name/{run.json,history.csv} "$d/" 2>/dev/null
}
mkdir -p build/gpu_parts
for step in ${GPU_CHECK_STEPS:-runs smoke}; do
  case $step in
  runs)      # paper-scale runs, one at a time
    sed 's/^batch_clients: auto/batch_clients: false/' params.yaml > build/params_sequential.yaml
    run fmnist10-iid-k10 fedavg local_epochs=5 120                      # clients batched (auto: on a GPU)
    run fmnist10-iid-k10 fedavg local_epochs=5 120 fmnist10-iid-k10.fedavg-sequential build/params_sequential.yaml
    run fmnist10-iid-k10 bayesadmm default 200
    run fmnist-shards-k200 fedivon default 400 ;;   # 2000 rounds: ≈ 330 s on an H100
  predictive)   # FedIVON's 500-sample predictive (paper scale) after 20 rounds instead of 2000
    $py - <<'PY'
import yaml
p = yaml.safe_load(open("params.yaml"))
e = p["experiments"]["fmnist-shards-k200"]
e.update(rounds=20, report_rounds=[20], eval_every=20)
e["methods"]["fedivon"]["mc_every"] = 20
yaml.safe_dump(p, open("build/params_predictive.yaml", "w"), sort_keys=False)
PY
    run fmnist-shards-k200 fedivon default 120 fmnist-shards-k200.fedivon-20rounds build/params_predictive.yaml ;;
  profile)   # where BayesADMM's round goes on this device
    log "profile bayesadmm"
    PYTHONPATH=benchmarks:$PYTHONPATH timeout "$(left 90)" $py benchmarks/profile_round.py --experiment fmnist10-iid-k10 \
      --method bayesadmm > "$work/profile_bayesadmm.txt" 2>&1
    log "  rc $?"; tail -45 "$work/profile_bayesadmm.txt" ;;
  smoke)
    log "smoke DAG"
    start=$(date +%s)
    timeout "$(left "${SMOKE_LIMIT:-240}")" $py -m snakemake --cores all --scheduler greedy reports/smoke/table1.csv \
      reports/smoke/metrics --config scale=smoke > "$work/smoke.log" 2>&1
    log "  rc $? in $(( $(date +%s) - start )) s"
    cp reports/smoke/table1.csv "$work/smoke_table1.csv" 2>/dev/null
    grep -h '"device"' results/runs/smoke/*/*/*/seed*/run.json 2>/dev/null | sort | uniq -c | tee -a "$out/steps.log" ;;
  esac
done
$py benchmarks/gpu_compare.py "$work/runs" | tee "$out/compare.txt"
tar czf "$out/gpu_check.tgz" -C "$work" .
