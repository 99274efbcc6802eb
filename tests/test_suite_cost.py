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


def test_two_clients_of_one_size_cost_the_warm_ones_time_each_not_a_fit_through_one_point():
    """On the H200 (2026-11-30) cifar100-pachinko-k500's clients all hold 100 points: the 'fit' through
    (100, 10.7 s) and (100, 5.0 s) gave a = 5.7 s fixed + b = 50 ms a point, a 20-client round 215 s.
    With one size there is no line to fit; round 2's first client still paid one-time costs (the first
    post-burn-in step), so the round is clients × the second client's time: 20 × 5.0 s."""
    fit = suite_cost.fit_clients([100, 100], [10.73, 4.99], 20, 2_000)
    assert fit["round_client_s"] == pytest.approx(20 * 4.99)
    assert fit["fixed_s"] == 0 and fit["per_point_s"] == pytest.approx(4.99 / 100)


def test_a_row_refitted_from_its_raw_timings_gets_the_burn_in_weighted_mean_again():
    """suite_cost.refit recomputes a row's training seconds from what the JSON keeps (round 2's client
    times, the server step, round 1 for a burn-in): unchanged for a well-posed fit, corrected for one size."""
    row = {"client_fit": {"points": [100, 100], "full_sizes": [100, 100]}, "client_update_s_each": [0.5, 0.3, 10.0, 5.0],
           "clients_measured": 2, "clients_per_round": 20, "points_per_round": 2_000.0, "points_measured": 200, "round2_client_s": 15.0,
           "round2_other_s": 0.01, "scale_other": 10.0, "rounds": 1500, "burn_in": 400,
           "burn_in_client_s": 0.8, "burn_in_other_s": 0.02}
    out = suite_cost.refit(dict(row))
    post, burn = 20 * 5.0 + 0.1, 20 * 0.3 + 0.2     # round 1 (FedAvg-M) of the same clients: its own second client
    assert out["post_burn_in_train_s_per_round"] == pytest.approx(post)
    assert out["train_s_per_round"] == pytest.approx((400 * burn + 1100 * post) / 1500)
    a, b = 0.5, 0.01
    fine = {**row, "client_fit": {"points": [1, 128], "full_sizes": [1, 2_500]}, "burn_in": None,
            "client_update_s_each": [0.0, 0.0, a + b, a + 128 * b], "round2_client_s": 2 * a + 129 * b}
    assert suite_cost.refit(dict(fine))["train_s_per_round"] == pytest.approx(20 * a + b * 2_000 + 0.1)


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
