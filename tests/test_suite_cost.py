"""benchmarks/suite_cost.py's scaling and floor arithmetic (the benchmark itself is not a timed test)."""

import importlib.util
import sys
from pathlib import Path

import pytest

from fedbayes.models import build_model

_path = Path(__file__).resolve().parents[1] / "benchmarks" / "suite_cost.py"
_spec = importlib.util.spec_from_file_location("suite_cost", _path)
suite_cost = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("suite_cost", suite_cost)
_spec.loader.exec_module(suite_cost)


def test_a_round_of_many_clients_is_fixed_plus_per_point_cost_not_the_tiny_clients_scaled_by_points():
    """suite_cost.md costed cifar10-labeldir0.01-k20 from two 1-point clients scaled ×25,001 by points, so
    their fixed cost (a second each, 40 epochs of one step) was counted 25,001 times. Two client sizes fit
    t = a + b·n; a round of 20 clients and 50,000 points is 20·a + b·50,000."""
    a, b = 0.5, 0.01
    fit = suite_cost.fit_clients([1, 128], [a + b * 1, a + b * 128], 20, 50_000)
    assert fit["fixed_s"] == pytest.approx(a) and fit["per_point_s"] == pytest.approx(b)
    assert fit["round_client_s"] == pytest.approx(20 * a + b * 50_000)            # 510 s
    by_points = (2 * a + b * 2) * 50_000 / 2                                        # the old scaling of two 1-point clients
    assert by_points > 20 * fit["round_client_s"]


def test_split_macs_counts_linear_conv_and_the_first_layer():
    # lenet5 on 1×28×28: conv5×5(6) → 24×24×6 outputs of 25 MACs; pool → 12×12; conv5×5(16) → 8×8×16 outputs
    # of 6·25 MACs; pool → 4×4×16 = 256 → 120 → 84 → 10
    lin, conv, first = suite_cost.split_macs(build_model("lenet5", (1, 28, 28), 10), (1, 28, 28))
    assert conv == 24 * 24 * 6 * 25 + 8 * 8 * 16 * 6 * 25
    assert lin == 256 * 120 + 120 * 84 + 84 * 10
    assert first == 24 * 24 * 6 * 25


def test_the_floor_counts_local_epochs_curvature_and_evaluation():
    mac = {"lin": 100, "conv": 0, "first": 60}
    row = {"method": "fedlap_cov", "n_classes": 10, "rounds": 50, "points_per_round": 1000.0, "clients_per_round": 10,
           "test_size": 200, "ood_size": 0, "evals_per_variant": {"": 51}, "eval_variants": {"": {"kind": "point"}}}
    f = suite_cost.floor_seconds(row, {"local_epochs": 5}, 1.0, 0, mac)
    fb = 3 - 0.6                                   # forward + backward, the first layer's input gradient not needed
    ggn = 1 + 10 * (1 - 0.6) + 1                   # forward, 10 backward passes to the outputs, one Linear product
    assert f["train_s"] == pytest.approx((5 * fb + ggn) * 1000)
    assert f["eval_s"] == pytest.approx(51 * 200 / 50)
    fedavg = suite_cost.floor_seconds({**row, "method": "fedavg"}, {"local_epochs": 5}, 1.0, 0, mac)
    assert fedavg["train_s"] == pytest.approx(5 * fb * 1000)
