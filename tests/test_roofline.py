"""benchmarks/roofline.py's FLOP count against hand counts (the benchmark itself is not a timed test)."""

import importlib.util
from pathlib import Path

import pytest

from fedbayes.models import build_model

_spec = importlib.util.spec_from_file_location("roofline", Path(__file__).resolve().parents[1] / "benchmarks" / "roofline.py")
roofline = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(roofline)


@pytest.mark.parametrize("name, kw, classes, macs", [
    # 784·200 + 200·100 + 100·10 (the FMNIST MLP)
    ("mlp", {"hidden": [200, 100], "activation": "sigmoid"}, 10, 784 * 200 + 200 * 100 + 100 * 10),
    # the FOLA substitute MLP
    ("mlp", {"hidden": [500, 300], "activation": "relu"}, 10, 784 * 500 + 500 * 300 + 300 * 10),
    # FedIVON's CNN on 28×28: conv5×5(32) → 24×24×32 outputs of 25 MACs; pool → 12×12; conv5×5(64) → 8×8×64
    # outputs of 32·25 MACs; pool → 4×4×64 = 1024 → fc128 → fc10
    ("emnist_cnn", {}, 10, 24 * 24 * 32 * 25 + 8 * 8 * 64 * 32 * 25 + 1024 * 128 + 128 * 10),
])
def test_forward_macs_match_a_hand_count(name, kw, classes, macs):
    assert roofline.forward_macs(build_model(name, (28, 28), classes, **kw), (28, 28)) == macs
