"""BayesADMM's convex toys (spec 001 §4.8, §8 (iii)): Prop. 3.2 one-round exactness of full-covariance
BayesADMM on ridge regression, convergence of federated ADMM and BregmanADMM, the Fig. 4 ordering, the
diagonal Fig. 3a methods, and the figures (all on synthetic data)."""

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from fedbayes.toys.bayesadmm import data, experiments, figures, problems, solvers
from fedbayes.toys.bayesadmm.numerics import ClientDivergence

# the settings the report runs with (params.yaml toys: bayesadmm/figures)
SPEC = yaml.safe_load((Path(__file__).resolve().parents[1] / "params.yaml").read_text())["toys"]["bayesadmm/figures"]
FIG3B, FIG4, FIG3A = SPEC["fig3b"], SPEC["fig4"], SPEC["fig3a"]


def small_ridge(seed=0, n=60, d=4, n_classes=3, delta=0.7, pairs=((0,), (1,), (2,))):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)) + 0.3
    labels = rng.integers(0, n_classes, size=n)
    return problems.ridge_problem(x, labels, delta=delta, pairs=pairs, n_classes=n_classes)


@pytest.fixture(scope="module")
def ridge():
    """K = 3 clients, d = 4 features, 3 outputs (P = 12), δ = 0.7."""
    return small_ridge()


def test_ridge_clients_are_the_sum_of_squares(ridge):
    rng0 = np.random.default_rng(0)  # the draws of small_ridge
    x, labels = rng0.normal(size=(60, 4)) + 0.3, rng0.integers(0, 3, size=60)
    theta = np.random.default_rng(1).normal(size=12)
    W, Y = theta.reshape(4, 3), np.eye(3)[labels]
    direct = 0.5 * np.sum((x @ W - Y) ** 2) + 0.5 * 0.7 * theta @ theta
    assert problems.objective(ridge.clients, ridge.delta, theta) == pytest.approx(direct, rel=1e-12)
    Wstar = np.linalg.solve(x.T @ x + 0.7 * np.eye(4), x.T @ Y)
    np.testing.assert_allclose(ridge.solution, Wstar.ravel(), atol=1e-12)


def test_prop32_one_round_exact_from_the_prior(ridge):
    # ρ = 1/K, γ = ρ (c = 1), server at the prior (S̄ = δI): exact posterior after ONE round
    K = len(ridge.clients)
    tr = solvers.bayesadmm_full(ridge.clients, ridge.delta, 1.0 / K, 1, c=1.0, server_init="prior")
    exact_prec = ridge.delta * np.eye(12) + sum(q.A for q in ridge.clients)
    assert np.linalg.norm(tr.server[1] - ridge.solution) < 1e-10
    np.testing.assert_allclose(tr.precision, exact_prec, rtol=0, atol=1e-10 * np.abs(exact_prec).max())
    chk = experiments.onestep_check(ridge, rounds=5, c=1.0, tol=1e-6)
    assert chk.distance_round1_prior < 1e-10 and chk.precision_error_prior < 1e-9
    assert (chk.distances_prior[1:] < 1e-10).all()


@pytest.mark.parametrize("factor", [0.5, 2.0])
def test_other_rho_is_not_exact_after_one_round_but_converges(ridge, factor):
    K = len(ridge.clients)
    chk = experiments.onestep_check(ridge, rho=factor / K, rounds=80, c=1.0, tol=1e-6)
    d0 = chk.distances_prior[0]
    assert chk.distances_prior[1] > 1e-3 * d0   # round 1: λ̄ = λ̂_0 + 2αΣt_k with 2α ≠ 1
    assert chk.distances_prior[-1] < 1e-9 * d0  # then λ̄ ← (1 − α)λ̄ + α λ*: linear convergence


def test_damped_dual_is_not_exact_after_one_round(ridge):
    K = len(ridge.clients)
    tr = solvers.bayesadmm_full(ridge.clients, ridge.delta, 1.0 / K, 1, c=0.5, server_init="prior")
    assert np.linalg.norm(tr.server[1] - ridge.solution) > 1e-3 * np.linalg.norm(ridge.solution)


def test_identity_init_halves_the_precision_error_every_round(ridge):
    # from the code's S̄ = I with ρ = 1/K: λ̄_r − λ* = (1/2)^r (λ̄_0 − λ̂_0), i.e. S̄_r − S* = 2^{-r}(1 − δ) I
    K = len(ridge.clients)
    exact_prec = ridge.delta * np.eye(12) + sum(q.A for q in ridge.clients)
    for rounds in (1, 3):
        tr = solvers.bayesadmm_full(ridge.clients, ridge.delta, 1.0 / K, rounds, c=1.0, server_init="identity")
        np.testing.assert_allclose(tr.precision - exact_prec, 0.5 ** rounds * (1 - ridge.delta) * np.eye(12),
                                   atol=1e-10)
    chk = experiments.onestep_check(ridge, rounds=40, c=1.0, tol=1e-6)
    assert chk.distances_identity[1] > 1e-4 and chk.rounds_to_tol_identity > 5
    assert chk.distances_identity[-1] < 1e-9


def test_federated_admm_converges_to_the_ridge_solution(ridge):
    tr = solvers.federated_admm(ridge.clients, ridge.delta, rho=20.0, rounds=100, c=1.0)
    d = experiments.distances(tr.server, ridge.solution)
    assert d[1] > 0.1 * d[0]            # not a one-round method
    assert d[-1] < 1e-10 * d[0]
    np.testing.assert_allclose(tr.client0[-1], ridge.solution, atol=1e-8)


def test_federated_admm_with_separate_server_step(ridge):
    # ρ_s ≠ ρ changes the path, not the fixed point
    tr = solvers.federated_admm(ridge.clients, ridge.delta, rho=20.0, rounds=200, c=1.0, rho_server=40.0)
    assert np.linalg.norm(tr.server[-1] - ridge.solution) < 1e-8


def test_bregman_admm_converges(ridge):
    tr = solvers.bregman_admm_full(ridge.clients, ridge.delta, rho=1.0, rounds=300, c=0.1)
    d = experiments.distances(tr.server, ridge.solution)
    # fast at first, then a slow tail (the precision dual moves by ~γ/S² per round in μ-coordinates)
    assert d[10] < 0.01 * d[0] and d[-1] < 1e-4 * d[0] and d[-1] < 0.7 * d[100]
    assert d[1] > 1e-3 * d[0]


@pytest.mark.parametrize("dual", ["natural", "expectation"])
def test_first_round_algebra(ridge, dual):
    # one round from the prior, written out for quadratic clients: client (ρS̄ + A_k)m_k = ρS̄m̄ + b_k,
    # S_k = S̄ + A_k/ρ; dual (Eq. 36, or §3.4 in μ = (m, mmᵀ + S⁻¹) with λ̂ = (v, −½V)); server Eqs. 37–38
    rho, c, delta, K = 0.7, 0.3, ridge.delta, len(ridge.clients)
    gamma, alpha = c * rho, 1.0 / (1.0 + K * rho)
    S0, m0 = delta * np.eye(12), np.zeros(12)
    S = np.stack([S0 + q.A / rho for q in ridge.clients])
    m = np.stack([np.linalg.solve(rho * S0 + q.A, rho * S0 @ m0 + q.b) for q in ridge.clients])
    if dual == "natural":
        v = gamma * (np.einsum("kij,kj->ki", S, m) - S0 @ m0)
        V = gamma * (S - S0)
    else:
        v = gamma * (m - m0)
        V = 2 * gamma * ((np.linalg.inv(S0) + np.outer(m0, m0)) - (np.linalg.inv(S) + np.einsum("ki,kj->kij", m, m)))
    S_bar = (1 - alpha) * S.mean(0) + alpha * (delta * np.eye(12) + V.sum(0))
    m_bar = np.linalg.solve(S_bar, (1 - alpha) * np.einsum("kij,kj->ki", S, m).mean(0) + alpha * v.sum(0))
    tr = solvers.gaussian_admm(ridge.clients, delta, rho, 1, c=c, dual=dual, server_init="prior")
    np.testing.assert_allclose(tr.client0[1], m[0], atol=1e-12)
    np.testing.assert_allclose(tr.duals[0], v, atol=1e-12)
    np.testing.assert_allclose(tr.duals[1], V, atol=1e-12)
    np.testing.assert_allclose(tr.precision, S_bar, atol=1e-10)
    np.testing.assert_allclose(tr.server[1], m_bar, atol=1e-12)


def test_gaussian_admm_rejects_bad_arguments(ridge):
    with pytest.raises(ValueError, match="dual"):
        solvers.gaussian_admm(ridge.clients, 1.0, 1.0, 1, c=1.0, dual="mean")
    with pytest.raises(ValueError, match="server_init"):
        solvers.gaussian_admm(ridge.clients, 1.0, 1.0, 1, c=1.0, server_init="zero")


def test_laplace_bayesadmm_reaches_the_map_on_a_benign_logistic_problem():
    rng = np.random.default_rng(0)
    clients = []
    for _ in range(3):
        X = np.hstack([rng.normal(size=(80, 2)) + rng.normal(size=2), np.ones((80, 1))])
        y = (rng.random(80) < 1 / (1 + np.exp(-X @ [1.5, -1.0, 0.3]))).astype(float)
        clients.append(problems.Logistic(X, y))
    theta_map = problems.global_map(clients, 1.0)
    g = sum(c.grad_hess(theta_map)[0] for c in clients) + theta_map
    assert np.linalg.norm(g) < 1e-10
    d = experiments.distances(solvers.bayesadmm_full(clients, 1.0, 1 / 3, 6, c=1.0).server, theta_map)
    assert d[6] < 1e-10 and d[1] > 1e-3


def test_fig4_data_matches_the_spec():
    (X1, y1), (X2, y2) = data.outlier_data(FIG4["seed"])
    assert X1.shape == (103, 3) and X2.shape == (200, 3) and (X1[:, 2] == 1).all()
    assert y1.sum() == 53 and y2.sum() == 100
    np.testing.assert_array_equal(X1[50:53, :2], [[-2.5, -2.5], [-2.4, -2.6], [-2.5, -2.4]])
    np.testing.assert_array_equal(data.outlier_data(FIG4["seed"])[0][0], X1)   # seeded


def fig4_runs(**over):
    """``experiments.fig4_runs`` on the outlier data with the report's settings, ``over`` replacing some."""
    settings = {k: v for k, v in FIG4.items() if k != "seed"}
    return experiments.fig4_runs(data.outlier_data(FIG4["seed"]), **{**settings, **over})


def fig3b_methods():
    return {k: FIG3B[k] for k in ("c_bayes", "rho_bregman", "c_bregman", "rho_admm", "c_admm")}


@pytest.fixture(scope="module")
def fig4():
    return fig4_runs(rounds_bayes=2, rounds_admm=5)


def test_fig4_bayesadmm_closer_after_two_rounds_than_admm(fig4):
    theta_map = fig4.map
    assert fig4.dist_bayes[0] == pytest.approx(np.linalg.norm(theta_map))
    assert fig4.dist_bayes[2] < fig4.dist_admm[2]
    assert fig4.dist_bayes[1] < fig4.dist_admm[1]
    assert fig4.dist_admm[5] < 0.25 * fig4.dist_admm[0]
    # the decision boundary (direction of (w, b)) after two BayesADMM rounds beats ADMM's after two
    unit = lambda t: t / np.linalg.norm(t)
    assert np.linalg.norm(unit(fig4.bayes.server[2]) - unit(theta_map)) < \
        np.linalg.norm(unit(fig4.admm.server[2]) - unit(theta_map))


def test_fig4_exact_client_solves_break_in_round_two():
    # with ρ = 0.2 the exactly solved round-2 client problem has no minimum near m̄ (documented in fig4_runs)
    with pytest.raises(ClientDivergence):
        with np.errstate(all="ignore"):
            fig4_runs(rounds_bayes=2, rounds_admm=1, solver="newton")


def test_downsample_nearest_matches_torch():
    x = np.arange(2 * 28 * 28, dtype=np.float64).reshape(2, 28, 28)
    for size in (7, 14):
        ref = torch.nn.functional.interpolate(torch.from_numpy(x)[:, None], size=(size, size), mode="nearest")
        np.testing.assert_array_equal(data.downsample_nearest(x, size), ref[:, 0].numpy())


def test_first_n_balanced_on_label_sorted_data():
    labels = np.repeat(np.arange(10), 7)
    idx = data.first_n_balanced(labels, 30)
    assert np.bincount(labels[idx], minlength=10).tolist() == [3] * 10
    assert idx.tolist() == sorted(7 * c + j for c in range(10) for j in range(3))


def synthetic_digits(n=200, seed=0):
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(10), n // 10)
    templates = rng.integers(0, 256, size=(10, 28, 28))
    images = np.clip(templates[labels] + rng.normal(0, 40, size=(n, 28, 28)), 0, 255).astype(np.uint8)
    return images, labels


def test_figure3b_written(tmp_path):
    images, labels = synthetic_digits()
    problem = problems.mnist_ridge_problem(images, labels, n=100, size=FIG3B["size"], delta=FIG3B["delta"])
    assert len(problem.solution) == 490 and len(problem.clients) == 5
    gaps = figures.figure3b(tmp_path / "fig3b.png", problem, experiments.fig3b_runs(problem, **fig3b_methods(), rounds=4))
    assert (tmp_path / "fig3b.png").stat().st_size > 1000
    assert not list(tmp_path.glob("*.tmp.png"))
    assert set(gaps) == {"BayesADMM", "BregmanADMM", "ADMM", experiments.PRIOR_INIT} and all(len(g) == 5 for g in gaps.values())
    assert (np.abs(gaps[experiments.PRIOR_INIT][1:]) < 1e-9 * problem.optimum).all()
    assert all((g >= -1e-9 * problem.optimum).all() for g in gaps.values())


def test_figure4_written(tmp_path):
    res = fig4_runs(von={**FIG4["von"], "steps": 2000})
    figures.figure4(tmp_path / "fig4.png", data.outlier_data(FIG4["seed"]), res)
    assert (tmp_path / "fig4.png").stat().st_size > 1000
    assert len(res.dist_bayes) == 3 and len(res.dist_admm) == 6


@pytest.fixture(scope="module")
def softmax_small():
    images, labels = synthetic_digits(n=100, seed=3)
    return problems.mnist_softmax_data(images, labels, n=100, size=7)


def test_variational_objective_matches_direct_weight_sampling(softmax_small):
    d, P = softmax_small.x.shape[-1], softmax_small.x.shape[-1] * 10
    gen = torch.Generator().manual_seed(5)
    m = 0.1 * torch.randn(P, generator=gen, dtype=torch.float64)
    s = 5.0 + 5.0 * torch.rand(P, generator=gen, dtype=torch.float64)
    ours = problems.variational_objective(softmax_small, m, s, delta=10.0, n_samples=2000, seed=0)
    x = softmax_small.x[softmax_small.mask > 0]
    y = softmax_small.y[softmax_small.mask > 0].argmax(-1)
    losses = []
    for _ in range(2000):
        W = (m + s.rsqrt() * torch.randn(P, generator=gen, dtype=torch.float64)).view(d, 10)
        losses.append(float(torch.nn.functional.cross_entropy(x @ W, y, reduction="sum")))
    kl = 0.5 * float((10.0 * m * m).sum() + s.log().sum() + (10.0 / s).sum())
    assert ours == pytest.approx(np.mean(losses) + kl, rel=3e-3)  # both MC: standard errors ≈ 0.6 on ≈ 1170


def test_diag_methods_run_and_bayesadmm_improves(softmax_small):
    runs = experiments.fig3a_runs(softmax_small, FIG3A["methods"],
                                  **{**FIG3A["shared"], "rounds": 3, "inner_steps": 30, "lr": 0.05, "mc_objective": 5})
    assert set(runs) == {"PVI", "PVI (damped)", "BregmanADMM", "BayesADMM"}
    bay = runs["BayesADMM"].objective
    assert np.isfinite(bay).all() and bay[-1] < bay[0]
    assert (runs["BayesADMM"].s > 0).all()


def test_figure3a_written(tmp_path, softmax_small):
    runs = experiments.fig3a_runs(softmax_small, FIG3A["methods"],
                                  **{**FIG3A["shared"], "rounds": 2, "inner_steps": 10, "mc_objective": 2})
    figures.figure3a(tmp_path / "fig3a.png", softmax_small, runs)
    assert (tmp_path / "fig3a.png").stat().st_size > 1000
    assert all(len(r.objective) == 3 for r in runs.values())


def test_the_report_passes_every_setting(tmp_path, monkeypatch):
    """``fedbayes.reports.toys.bayesadmm_figures`` with params.yaml's block (shrunk to seconds, on synthetic
    digits): every key reaches a function that takes it, and the report and its figures are written."""
    import copy

    from fedbayes.reports import toys

    spec = copy.deepcopy(SPEC)
    spec["fig3b"].update(n=100, rounds=3)
    spec["fig4"]["von"]["steps"] = 200
    spec["fig3a"].update(n=100, size=7)
    spec["fig3a"]["shared"].update(rounds=2, inner_steps=5, mc_objective=2)
    monkeypatch.setattr(toys.bayesadmm_data, "load_mnist5k", lambda root: synthetic_digits())
    p = {"toys": {"bayesadmm/figures": spec}, "scale": "paper",
         "paths": {"raw": str(tmp_path / "raw"), "partitions": "p", "runs": "r", "reports": str(tmp_path)}}
    df = toys.bayesadmm_figures(p, tmp_path / "bayesadmm" / "figures.csv")
    assert len(df) == 2 + 2 * 4 + 3 + 6 + 4
    assert "first round within 1e-6" in df.quantity.iloc[1]
    md = (tmp_path / "bayesadmm" / "figures.md").read_text()
    assert "(200 decaying steps" in md and "runs 5 IVON steps" in md and "(the code: 1,250)" in md
    assert all((tmp_path / "figures" / f).stat().st_size > 1000 for f in toys.TOYS["bayesadmm/figures"].figures)
