#!/usr/bin/env bash
# Issue 32 item 4 on a CUDA machine, in one call (the device's lease is short):
#   1. benchmarks/batched.py: the batching roofline protocols with their clients together (the step replayed
#      as a CUDA graph, and eagerly) and one by one (s/round, peak memory, relative difference of the final
#      states), paper configuration, seed 0;
#   2. benchmarks/suite_cost.py --device cuda with all of a round's clients (the batched path), the heaviest
#      experiments first, until the budget ends (rows kept in the JSON; a later call resumes).
#   bash benchmarks/gpu_batched.sh            # OUT (the device tool's folder) or build/gpu_out gets the files
#   GPU_BUDGET_S=540 bash benchmarks/gpu_batched.sh
# Needs data/raw/fmnist (carried) and the pyproject's packages; a folder .whl/ of wheels for the GPU machine's
# Python is installed into /tmp/site first where one is there (jsonschema and its needs, on the lent machines).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build/gpu_out}
mkdir -p "$out"
for f in suite_cost_gpu.json batched_gpu.json; do   # resume the committed rows
  [ -f "$out/$f" ] || cp "benchmarks/$f" "$out/" 2>/dev/null
done
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed"; exit 2; }
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
# the method registry is the package's entry points: where fedbayes is not installed (a bare machine, the
# source on PYTHONPATH), its metadata is written from pyproject.toml into /tmp/site
if ! $py -c "import importlib.metadata as m; m.distribution('fedbayes')" 2>/dev/null; then
  $py benchmarks/source_metadata.py /tmp/site || exit 2
  export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
t_end=$(( $(date +%s) + ${GPU_BUDGET_S:-540} ))
left() { echo $(( t_end - $(date +%s) )); }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
$py -c "import torch, fedbayes.study; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())" || exit 2
echo "[$(date +%T)] batched (CUDA graph and eager) vs one by one"
timeout $(( $(left) > ${BATCHED_S:-330} ? ${BATCHED_S:-330} : $(left) )) $py benchmarks/batched.py --device cuda --rounds ${ROUNDS:-2} \
  --protocols ${PROTOCOLS:-bayesadmm@fmnist10-iid-k10 fedivon fedavg@fmnist10-iid-k10 bayesadmm fedavg fedprox scaffold fedlap fedlap_cov} \
  --json "$out/batched_gpu.json" --md "$out/batched_gpu.md" 2>&1 | grep -v "^  \|UserWarning"
echo "[$(date +%T)] suite cost, $(left) s left"
for exps in ${SUITE_EXPERIMENTS:-"cifar100-pachinko-k500" "emnist62-dir-k3400"}; do
  l=$(left); (( l < 40 )) && break
  timeout $(( l - 10 )) $py benchmarks/suite_cost.py --device cuda --clients-cap 0 --resume --retry --max-seconds 90 \
    --json "$out/suite_cost_gpu.json" --md "$out/suite_cost_gpu.md" --experiments $exps 2>&1 | tail -n 40
done
echo "[$(date +%T)] done"
