#!/usr/bin/env bash
# The suite's cost on a GPU (the GPU column of benchmarks/suite_cost.md): benchmarks/suite_cost.py on the
# device, one row at a time, the heaviest CPU rows first, inside one device call with room for a rerun:
# everything ends within BUDGET_S seconds (default 330; call it with the device tool's timeout_s 400: with a
# machine's start (1–2 min) and the transfers ≈ 8 of a session's 15 device minutes, so a second call on the
# warm machine still fits). Rows already measured in the GPU JSON are kept (--resume);
# rows skipped for time are tried again on the next call (--retry).
#   bash benchmarks/gpu_suite_cost.sh [SECONDS_A_ROW] [BUDGET_S]
#   DEVICE=cpu GPU_JSON=/tmp/x.json ROWS="fmnist10-iid-k10:fedavg" bash benchmarks/gpu_suite_cost.sh 60 90   # dry run
# Needs the Python packages of pyproject.toml; where they are not installed, a folder .whl/ of wheels is
# installed into /tmp/site first (as benchmarks/gpu_check.sh). Stand-in data are generated on the device.
# Writes GPU_JSON (default benchmarks/suite_cost_gpu.json) and its .md; copied to $OUT when set.
set -uo pipefail
cd "$(dirname "$0")/.."
PER_ROW="${1:-90}"
BUDGET_S="${2:-330}"
DEVICE="${DEVICE:-cuda}"
JSON="${GPU_JSON:-benchmarks/suite_cost_gpu.json}"
MD="${JSON%.json}.md"
t_end=$(( $(date +%s) + BUDGET_S ))
if [ -d .whl ]; then
  "${PYTHON:-python3}" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed"; exit 2; }
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] && PY=.venv/bin/python
# the method registry is the package's entry points: where fedbayes is not installed (a bare machine, the
# source on PYTHONPATH), its metadata is written from pyproject.toml into /tmp/site
if ! "$PY" -c "import importlib.metadata as m; m.distribution('fedbayes')" 2>/dev/null; then
  "$PY" benchmarks/source_metadata.py /tmp/site || exit 2
  export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi (DEVICE=$DEVICE)"
# the heaviest rows of benchmarks/suite_cost.md's CPU column first (core-hours), then the rest of their experiments
ROWS="${ROWS:-cifar100-pachinko-k500:fedsep_v cifar100-pachinko-k500:fedep_v cifar100-pachinko-k500:fedep_l \
cifar100-pachinko-k500:fedsep_l emnist62-dir-k3400:fedsep_v cifar10-dir-k10:fedlap_cov cifar10-dir-k10:fedlap_func \
emnist62-dir-k3400:fedsep_l cifar10-dir-k10:feddyn cifar100-dir-k10-resnet20:bayesadmm cifar10-labeldir0.01-k20:fola \
cifar10-labeldir0.01-k20:fedcurv cifar10-labeldir0.01-k20:fedavg cifar10-dir-k10-acar:fedlap_cov}"
for row in $ROWS; do
  left=$(( t_end - $(date +%s) - 15 ))
  if (( left < 50 )); then echo "budget spent: $row and the rows after it not measured"; break; fi
  lim=$(( left - 20 < PER_ROW ? left - 20 : PER_ROW ))   # the row's child; its parent has 20 s more to write the JSON
  echo "[$(date +%T)] ${row%%:*} ${row##*:} (≤ ${lim} s a row, ${left} s left)"
  # the row's own limit, plus data generation (a first row of an experiment) inside the same budget
  timeout $(( left )) "$PY" benchmarks/suite_cost.py --device "$DEVICE" --resume --retry --max-seconds "$lim" \
      --pick fit --fit-points 512 --json "$JSON" --md "$MD" --experiments "${row%%:*}" --methods "${row##*:}" || true
done
if [ -n "${OUT:-}" ]; then cp "$JSON" "$MD" "$OUT"/ 2>/dev/null || true; fi
