"""FedEP's two-client 2-D Gaussian toy (spec 002 §3.1, Table 4, §7): generator, estimators, EP, tables, figures."""

import numpy as np
import pytest
from scipy import optimize, stats
from sklearn.datasets import make_spd_matrix as sklearn_make_spd_matrix

from fedbayes.toys import gaussian2d as g2
from fedbayes.toys.gaussian2d import (FIG1_MUS, FIG1_SIGMAS, draw_clients, draw_instances, exact_global_mean,
                                      fedavg, fedep, fedpa, make_spd_matrix, table4)

METHODS = [fedavg, fedpa, lambda m, s: fedep(m, s).mean]


@pytest.fixture(scope="module")
def draws():
    """Twenty random client pairs of the Table 4 generator, float64."""
    return draw_instances(20, seed=123)


def random_diagonal_clients(rng, k=2, d=2):
    return rng.normal(size=(k, d)) * 3, np.stack([np.diag(v) for v in rng.uniform(0.2, 5.0, size=(k, d))])


@pytest.mark.parametrize("n", [2, 3, 5])
@pytest.mark.parametrize("seed", [0, 1, 42, 2023])
def test_make_spd_matrix_matches_sklearn(n, seed):
    np.testing.assert_allclose(make_spd_matrix(n, random_state=seed),
                               sklearn_make_spd_matrix(n, random_state=seed), rtol=0, atol=1e-12)


def test_psi_is_the_spec_value():
    np.testing.assert_allclose(make_spd_matrix(2, random_state=0), [[2.5409, -0.0113], [-0.0113, 0.5287]],
                               atol=5e-5)


def test_draw_clients_is_seeded_and_spd():
    psi = make_spd_matrix(2, random_state=0)
    mus, sigmas = draw_clients(np.random.default_rng(7), psi)
    mus2, sigmas2 = draw_clients(np.random.default_rng(7), psi)
    assert mus.shape == (2, 2) and sigmas.shape == (2, 2, 2)
    assert np.array_equal(mus, mus2) and np.array_equal(sigmas, sigmas2)
    np.testing.assert_allclose(sigmas, np.swapaxes(sigmas, -1, -2), atol=1e-12)
    assert (np.linalg.eigvalsh(sigmas) > 0).all()


def test_draw_clients_scaling_matches_the_code_generator():
    # E[W] = Ψ/(ν − d − 1) for W ~ W⁻¹(ν, Ψ); Σ_k = W/λ and μ_k ~ N(0, Σ_k), so E[Σ_k] = E[μ_k μ_kᵀ] = Ψ/(4λ)
    psi, rng = make_spd_matrix(2, random_state=0), np.random.default_rng(0)
    pairs = [draw_clients(rng, psi) for _ in range(1500)]
    sigmas = np.concatenate([s for _, s in pairs])
    mus = np.concatenate([m for m, _ in pairs])
    expected = psi / (g2.NU - 2 - 1) / g2.LAM
    np.testing.assert_allclose(np.diag(sigmas.mean(axis=0)), np.diag(expected), rtol=0.1)
    np.testing.assert_allclose(np.diag(np.einsum("ni,nj->ij", mus, mus) / len(mus)), np.diag(expected), rtol=0.15)


@pytest.mark.parametrize("bad, match", [({"nu": 0.5}, "nu must be"), ({"lam": 0.0}, "lam must be > 0")])
def test_draw_clients_rejects_bad_arguments(bad, match):
    with pytest.raises(ValueError, match=match):
        draw_clients(np.random.default_rng(0), np.eye(2), **bad)


def test_exact_global_mean_maximises_the_product_density(draws):
    mus, sigmas = draws
    for m, s in list(zip(mus, sigmas))[:5]:
        def neg_log_product(theta):
            return -sum(stats.multivariate_normal(mk, sk).logpdf(theta) for mk, sk in zip(m, s))

        res = optimize.minimize(neg_log_product, x0=np.zeros(2), method="BFGS", options={"gtol": 1e-10})
        np.testing.assert_allclose(exact_global_mean(m, s), res.x, atol=1e-5)


def test_batched_estimators_equal_per_problem_calls(draws):
    mus, sigmas = draws
    for method in METHODS + [exact_global_mean]:
        batched = method(mus, sigmas)
        looped = np.stack([method(m, s) for m, s in zip(mus, sigmas)])
        np.testing.assert_allclose(batched, looped, rtol=1e-12, atol=1e-12)


def test_figure1_instance_matches_spec():
    # spec §3.1: exact (−4.757, −3.602), FedAvg (3.6, −4.18), FedPA (2.325, −5.607),
    # EP after 10 steps (−4.763, −3.611) at distance 0.011
    target = exact_global_mean(FIG1_MUS, FIG1_SIGMAS)
    np.testing.assert_allclose(target, [-4.757, -3.602], atol=1e-3)
    np.testing.assert_allclose(fedavg(FIG1_MUS, FIG1_SIGMAS), [3.6, -4.18], atol=1e-12)
    np.testing.assert_allclose(fedpa(FIG1_MUS, FIG1_SIGMAS), [2.325, -5.607], atol=1e-3)
    ep = fedep(FIG1_MUS, FIG1_SIGMAS, steps=10).mean
    np.testing.assert_allclose(ep, [-4.763, -3.611], atol=1e-3)
    assert np.linalg.norm(ep - target) == pytest.approx(0.011, abs=5e-4)


def test_fedpa_is_the_diagonal_product_not_the_exact_posterior(draws):
    # with full client covariances the product would be exact; the toy's FedPA uses their diagonals
    mus, sigmas = draws
    assert np.linalg.norm(fedpa(mus, sigmas) - exact_global_mean(mus, sigmas), axis=-1).min() > 1e-3
    diagonal = sigmas * np.eye(2)
    np.testing.assert_allclose(fedpa(mus, sigmas), exact_global_mean(mus, diagonal), rtol=1e-12, atol=1e-12)


def test_first_ep_step_from_uniform_sites_is_fedpa(draws):
    # spec §7.5 and paper footnote 2: FedEP's first round from a uniform initialisation equals FedPA
    mus, sigmas = draws
    np.testing.assert_allclose(fedep(mus, sigmas, steps=1).mean, fedpa(mus, sigmas), rtol=1e-12, atol=1e-12)


def test_first_identity_ep_step_is_fedavg(draws):
    mus, sigmas = draws
    first = fedep(mus, sigmas, steps=1, projection="identity").mean
    np.testing.assert_allclose(first, fedavg(mus, sigmas), rtol=1e-12, atol=1e-12)


def test_ep_is_exact_after_one_step_for_diagonal_clients():
    # with diagonal p_k the projection is the identity map: step 1 is the exact product, a fixed point
    rng = np.random.default_rng(5)
    for _ in range(5):
        mus, sigmas = random_diagonal_clients(rng, k=int(rng.integers(2, 5)), d=3)
        traj = fedep(mus, sigmas, steps=4).trajectory
        np.testing.assert_allclose(traj, np.broadcast_to(exact_global_mean(mus, sigmas), traj.shape),
                                   rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-12), (np.float32, 1e-5)])
def test_ep_converges_to_the_exact_global_mean(draws, dtype, tol):
    mus, sigmas = draws
    ep = fedep(mus, sigmas, steps=100, dtype=dtype)
    assert ep.mean.dtype == dtype and ep.trajectory.shape == (100, 20, 2)
    dist = np.linalg.norm(ep.mean.astype(np.float64) - exact_global_mean(mus, sigmas), axis=-1)
    assert dist.max() < tol


def test_identity_ep_converges_more_slowly_but_converges():
    mus, sigmas = draw_instances(10, seed=4)
    target = exact_global_mean(mus, sigmas)
    diag = np.linalg.norm(fedep(mus, sigmas, steps=10).mean - target, axis=-1)
    ident = fedep(mus, sigmas, steps=10, projection="identity").mean
    assert np.linalg.norm(ident - target, axis=-1).mean() > diag.mean()
    ident = fedep(mus, sigmas, steps=100, projection="identity").mean
    assert np.linalg.norm(ident - target, axis=-1).max() < 1e-9


@pytest.mark.parametrize("method", METHODS + [exact_global_mean])
def test_common_covariance_scale_changes_nothing(draws, method):
    # spec §3.1: dividing both Σ_k by λ leaves FedAvg, FedPA, diagonal FedEP and the target unchanged
    mus, sigmas = draws
    np.testing.assert_allclose(method(mus, sigmas / g2.LAM), method(mus, sigmas), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("bad, match", [({"steps": 0}, "steps must be >= 1"),
                                        ({"projection": "full"}, "projection must be one of")])
def test_fedep_rejects_bad_arguments(bad, match):
    with pytest.raises(ValueError, match=match):
        fedep(FIG1_MUS, FIG1_SIGMAS, **bad)


def test_table4_lands_in_the_spec_ranges():
    # spec §7.1: FedAvg mean ∈ [0.45, 0.60], FedPA mean ∈ [0.21, 0.30] over 200 draws (±2 sd across
    # seeds); the across-seed sd of the stds (0.06, 0.03; spec §3.1) gives the std bands
    t32 = table4(200, seed=0, dtype=np.float32)
    assert list(t32.index) == ["fedavg", "fedpa", "fedep"] and list(t32.columns) == ["mean", "std"]
    assert 0.45 <= t32.loc["fedavg", "mean"] <= 0.60 and 0.40 <= t32.loc["fedavg", "std"] <= 0.64
    assert 0.21 <= t32.loc["fedpa", "mean"] <= 0.30 and 0.22 <= t32.loc["fedpa", "std"] <= 0.34
    assert 1e-9 < t32.loc["fedep", "mean"] < 1e-6  # float32 round-off, the paper's 1.1e-7
    t64 = table4(200, seed=0, dtype=np.float64)
    assert t64.loc["fedep", "mean"] < 1e-12
    np.testing.assert_allclose(t64.loc[["fedavg", "fedpa"]], t32.loc[["fedavg", "fedpa"]], rtol=1e-4)


def test_figures_are_written(tmp_path):
    for path in (g2.figure1(tmp_path / "fig1.png"), g2.figure4_left(tmp_path / "sub" / "fig4.png", n_draws=10,
                                                                      steps=20)):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
    assert sorted(p.name for p in tmp_path.rglob("*.png")) == ["fig1.png", "fig4.png"]
