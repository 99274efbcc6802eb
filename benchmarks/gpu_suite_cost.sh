#!/usr/bin/env bash
# The suite's cost on a GPU (the H100 column of benchmarks/suite_cost.md): benchmarks/suite_cost.py on the
# device, the heaviest experiments first, within one device session (≈ 10 minutes, --max-seconds a row).
#   bash benchmarks/gpu_suite_cost.sh [SECONDS_A_ROW]
# Writes benchmarks/suite_cost_gpu.{json,md} (copied to $OUT when set, as the device tool collects them).
set -euo pipefail
cd "$(dirname "$0")/.."
PER_ROW="${1:-90}"
PY=.venv/bin/python
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
# the heaviest first: CIFAR-100 ResNet-18 (FedEP family), EMNIST-62, CIFAR-10 CNNs, then the rest
for exps in "cifar100-pachinko-k500" "emnist62-dir-k3400" "cifar100-dir-k10-resnet20" \
            "cifar10-dir-k10 cifar10-dir-k10-acar cifar10-labeldir0.01-k20 cifar10-shards-k200 svhn-shards-k200" \
            "emnistl-shards-k200 fmnist-shards-k200"; do
    timeout $((PER_ROW * 12)) $PY benchmarks/suite_cost.py --device cuda --resume --retry --max-seconds "$PER_ROW" \
        --json benchmarks/suite_cost_gpu.json --md benchmarks/suite_cost_gpu.md --experiments $exps || true
done
if [ -n "${OUT:-}" ]; then cp benchmarks/suite_cost_gpu.json benchmarks/suite_cost_gpu.md "$OUT"/ 2>/dev/null || true; fi
