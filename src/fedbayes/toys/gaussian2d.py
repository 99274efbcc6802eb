"""FedEP's two-client 2-D Gaussian toy (paper 002 §3.1: Fig. 1, Table 4, Fig. 4-left; spec 002 §3.1).

Problem.  Client k ∈ {1, 2} holds the "likelihood" p_k(θ) = N(θ; μ_k, Σ_k); the prior is an improper
uniform, so the global posterior Π_k p_k is Gaussian and its mode is its mean:

    P_k = Σ_k⁻¹,    μ* = (Σ_k P_k)⁻¹ Σ_k P_k μ_k                                  (exact_global_mean)

One-shot baselines (spec §3.1, §1 "Toy experiments only"):

    FedAvg:  μ̂ = (1/K) Σ_k μ_k                                                   (unweighted)
    FedPA:   μ̂ = (Σ_k D_k)⁻¹ Σ_k D_k μ_k,   D_k = diag(Σ_k)⁻¹                    (diagonal)

FedPA on the toy is the product of each client's *diagonal* Gaussian approximation N(μ_k, diag Σ_k),
the moment-matched projection of p_k onto the diagonal family.  That is why its distance is 0.26 and
not 0: with the clients' full covariances the product would be the exact posterior.  It is also EP's
first step from a uniform initialisation (paper footnote 2; spec §3.1 "Step 1 with uniform init is
FedPA (diagonal)").

FedEP (spec §2.1–2.2 with δ = 1, §3.1 "EP step in the toy").  Diagonal Gaussian sites q_k = N(η_k, Λ_k)
in natural form (η = Λ ⊙ μ, Λ a precision vector), all uniform at the start (η_k = Λ_k = 0); the
global approximation is q_g = Π_k q_k (flat prior).  One step updates every site in parallel against
the q_g fixed at the start of the step, undamped:

    cavity   q_{-k} = q_g / q_k:        η_{-k} = η_g − η_k,   Λ_{-k} = Λ_g − Λ_k
    tilted   q_{\\k} ∝ q_{-k} p_k (exact, a full Gaussian):
             S_{\\k} = (diag Λ_{-k} + P_k)⁻¹,   m_{\\k} = S_{\\k} (η_{-k} + P_k μ_k)
    project  onto diagonal Gaussians by moment matching (argmin_q KL(q_{\\k} ‖ q)):
             Λ̂ = 1 / diag S_{\\k},   η̂ = Λ̂ ⊙ m_{\\k}
    site     q_k = q̂ / q_{-k}:          η_k = η̂ − η_{-k},     Λ_k = Λ̂ − Λ_{-k}
    global   η_g = Σ_k η_k,  Λ_g = Σ_k Λ_k,  μ_g = η_g / Λ_g

The "identity" projection of Fig. 4-left (FedEP, Scaled Identity) keeps the tilted mean and sets
Λ̂ = Λ_{-k} + 1 (spec §3.1); its first step is FedAvg.  Both variants' fixed points have μ_g = μ*
(spec §3.1: about 2e-16 in float64; the paper's 1.1e-7 is float32 round-off).

Random instances (Table 4, spec ambiguity 17: the authors' code version): Ψ = make_spd_matrix(2,
random_state=0) fixed for all draws, W ~ W⁻¹(df = ν = 7, scale = Ψ), Σ_k = W / λ with λ = 0.2,
μ_k ~ N(0, Σ_k).  Deviation: the code used numpy's unseeded global RNG; here every draw comes from a
seeded ``numpy.random.Generator``.

All functions take one problem, ``mus`` of shape ``(K, d)`` and ``sigmas`` of shape ``(K, d, d)``, or
a batch of problems with leading dimensions, ``(..., K, d)`` and ``(..., K, d, d)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from scipy import linalg, stats

from fedbayes.fileio import save_figure_atomic

PSI_SEED = 0  # authors' toy code: Ψ = make_spd_matrix(2, random_state=0), fixed for every draw (spec §3.1)
NU, LAM = 7, 0.2  # normal-inverse-Wishart degrees of freedom ν and scaling λ (paper §3.1, Table 4)
PROJECTIONS = ("diagonal", "identity")
IDENTITY_PRECISION = 1.0  # scaled-identity projection adds this precision to the cavity (spec §3.1)

# Fig. 1 instance, from the authors' toy code (spec §3.1)
FIG1_MUS = np.array([[7.0, -10.6], [0.2, 2.24]])
FIG1_SIGMAS = np.array([[[11.0, -5.3], [-5.3, 3.5]], [[5.0, 4.9], [4.9, 5.5]]])
FIG1_STEPS = 10
FIG1_LIMITS = ((-10.0, 15.0), (-15.0, 7.5))  # plot grid x, y


class FedEPResult(NamedTuple):
    """``mean``: global mean after the last step, shape ``(..., d)``;
    ``trajectory``: global mean after each step 1..steps, shape ``(steps, ..., d)``."""

    mean: np.ndarray
    trajectory: np.ndarray


def make_spd_matrix(n: int, random_state: int | np.random.RandomState | None = None) -> np.ndarray:
    """Random symmetric positive-definite ``(n, n)`` matrix, drawn as scikit-learn's generator does.

    A ~ U[0, 1)^{n×n};  U S Vᵀ = AᵀA (SVD);  u ~ U[0, 1)^n;  X = U (𝟙𝟙ᵀ + diag(u)) Vᵀ.
    The all-ones matrix 𝟙𝟙ᵀ (a scalar 1 added to a diagonal matrix) is scikit-learn's, kept so that
    ``random_state=0`` gives the Ψ of the authors' toy, [[2.5409, −0.0113], [−0.0113, 0.5287]].
    """
    rng = random_state if isinstance(random_state, np.random.RandomState) else np.random.RandomState(random_state)
    a = rng.uniform(size=(n, n))
    u, _, vt = linalg.svd(a.T @ a, check_finite=False)
    return u @ (1.0 + np.diag(rng.uniform(size=n))) @ vt


def draw_clients(rng: np.random.Generator, psi: np.ndarray, nu: float = NU, lam: float = LAM,
                 n_clients: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """One toy instance: W_k ~ W⁻¹(df=ν, scale=Ψ), Σ_k = W_k/λ, μ_k ~ N(0, Σ_k) for each client.

    Returns ``mus`` of shape ``(n_clients, d)`` and ``sigmas`` of shape ``(n_clients, d, d)``.
    """
    d = psi.shape[0]
    if not nu > d - 1:
        raise ValueError(f"nu must be > d - 1 = {d - 1}, got {nu}")
    if not lam > 0:
        raise ValueError(f"lam must be > 0, got {lam}")
    w = stats.invwishart.rvs(df=nu, scale=psi, size=n_clients, random_state=rng)
    sigmas = np.reshape(w, (n_clients, d, d)) / lam
    mus = np.stack([rng.multivariate_normal(np.zeros(d), s) for s in sigmas])
    return mus, sigmas


def draw_instances(n_draws: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n_draws`` independent client pairs with the fixed Ψ: ``(n_draws, 2, 2)``, ``(n_draws, 2, 2, 2)``."""
    rng, psi = np.random.default_rng(seed), make_spd_matrix(2, random_state=PSI_SEED)
    pairs = [draw_clients(rng, psi) for _ in range(n_draws)]
    return np.stack([m for m, _ in pairs]), np.stack([s for _, s in pairs])


def exact_global_mean(mus: np.ndarray, sigmas: np.ndarray) -> np.ndarray:
    """Mean (= mode) of Π_k N(μ_k, Σ_k): μ* = (Σ_k P_k)⁻¹ Σ_k P_k μ_k with P_k = Σ_k⁻¹; shape ``(..., d)``."""
    prec = np.linalg.inv(sigmas)
    h = np.einsum("...kij,...kj->...i", prec, mus)
    return np.linalg.solve(prec.sum(axis=-3), h[..., None])[..., 0]


def fedavg(mus: np.ndarray, sigmas: np.ndarray) -> np.ndarray:
    """Unweighted mean of the client means (the toy's FedAvg; ``sigmas`` unused); shape ``(..., d)``."""
    return mus.mean(axis=-2)


def fedpa(mus: np.ndarray, sigmas: np.ndarray) -> np.ndarray:
    """One-shot posterior averaging of diagonal client Gaussians: Σ_k D_k μ_k / Σ_k D_k, D_k = 1/diag Σ_k.

    The product of the moment-matched diagonal approximations N(μ_k, diag Σ_k), as in the paper's toy;
    equal to FedEP's first step from uniform sites.  Shape ``(..., d)``.
    """
    d_k = 1.0 / np.diagonal(sigmas, axis1=-2, axis2=-1)
    return (d_k * mus).sum(axis=-2) / d_k.sum(axis=-2)


def fedep(mus: np.ndarray, sigmas: np.ndarray, steps: int = 100, dtype=np.float64,
          projection: str = "diagonal") -> FedEPResult:
    """Parallel, undamped EP with diagonal Gaussian sites from a uniform start (module docstring).

    Parameters
    ----------
    mus, sigmas : array, shapes ``(..., K, d)`` and ``(..., K, d, d)``
        Client means and covariances; cast to ``dtype``, in which every step is computed.
    steps : int
        Number of EP steps (every site updated once per step).
    dtype : numpy float type
        ``np.float64``, or ``np.float32`` as in the authors' JAX code.
    projection : {"diagonal", "identity"}
        Moment matching onto diagonal Gaussians, or the scaled-identity variant (tilted mean, cavity
        precision + 1).
    """
    if not steps >= 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    if projection not in PROJECTIONS:
        raise ValueError(f"projection must be one of {PROJECTIONS}, got {projection!r}")
    mus, sigmas = np.asarray(mus, dtype=dtype), np.asarray(sigmas, dtype=dtype)
    eye = np.eye(mus.shape[-1], dtype=dtype)
    client_prec = np.linalg.inv(sigmas)  # P_k
    client_eta = np.einsum("...kij,...kj->...ki", client_prec, mus)  # P_k μ_k
    eta, lam = np.zeros_like(mus), np.zeros_like(mus)  # uniform sites q_k ∝ 1
    trajectory = []
    for _ in range(steps):
        eta_cav = eta.sum(axis=-2, keepdims=True) - eta  # q_g / q_k, q_g = Π_k q_k
        lam_cav = lam.sum(axis=-2, keepdims=True) - lam
        tilted_cov = np.linalg.inv(lam_cav[..., None] * eye + client_prec)  # q_{-k} p_k, exact
        tilted_mean = np.einsum("...ij,...j->...i", tilted_cov, eta_cav + client_eta)
        if projection == "diagonal":
            lam_hat = 1.0 / np.diagonal(tilted_cov, axis1=-2, axis2=-1)
        else:
            lam_hat = lam_cav + IDENTITY_PRECISION
        eta, lam = lam_hat * tilted_mean - eta_cav, lam_hat - lam_cav  # q_k = q̂ / q_{-k}
        trajectory.append(eta.sum(axis=-2) / lam.sum(axis=-2))
    trajectory = np.stack(trajectory)
    return FedEPResult(mean=trajectory[-1], trajectory=trajectory)


def _distance(estimate: np.ndarray, target: np.ndarray) -> np.ndarray:
    return np.linalg.norm(estimate.astype(np.float64) - target, axis=-1)


def _targets(mus: np.ndarray, sigmas: np.ndarray, dtype) -> np.ndarray:
    # the exact answer to the problem the estimators see (inputs rounded to dtype), computed in float64,
    # so that the distance measures each method's error and not the rounding of its inputs
    return exact_global_mean(mus.astype(dtype).astype(np.float64), sigmas.astype(dtype).astype(np.float64))


def table4(n_draws: int = 200, seed: int = 0, dtype=np.float32, steps: int = 100) -> pd.DataFrame:
    """Table 4: Euclidean distance to the exact global mean over ``n_draws`` random client pairs.

    Rows ``fedavg``, ``fedpa``, ``fedep`` (index ``method``); columns ``mean`` and ``std``
    (population std, ddof = 0) of the distance.  Estimates are computed in ``dtype``.
    """
    mus, sigmas = draw_instances(n_draws, seed)
    target = _targets(mus, sigmas, dtype)
    mus, sigmas = mus.astype(dtype), sigmas.astype(dtype)
    estimates = {"fedavg": fedavg(mus, sigmas), "fedpa": fedpa(mus, sigmas),
                 "fedep": fedep(mus, sigmas, steps=steps, dtype=dtype).mean}
    dist = {m: _distance(e, target) for m, e in estimates.items()}
    rows = {m: (d.mean(), d.std()) for m, d in dist.items()}
    return pd.DataFrame.from_dict(rows, orient="index", columns=["mean", "std"]).rename_axis("method")


def figure1(path: str | Path, steps: int = FIG1_STEPS) -> Path:
    """Fig. 1: the two clients, the global target (1σ and 2σ ellipses), FedAvg, FedPA and the EP trajectory."""
    prec = np.linalg.inv(FIG1_SIGMAS)
    target_mu, target_sigma = exact_global_mean(FIG1_MUS, FIG1_SIGMAS), np.linalg.inv(prec.sum(axis=0))
    (x0, x1), (y0, y1) = FIG1_LIMITS
    xx, yy = np.meshgrid(np.linspace(x0, x1, 400), np.linspace(y0, y1, 400))
    grid = np.stack([xx, yy], axis=-1)

    fig = Figure(figsize=(6.0, 5.0), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    handles = []
    gaussians = [(FIG1_MUS[0], FIG1_SIGMAS[0], "C0", "Client 1"), (FIG1_MUS[1], FIG1_SIGMAS[1], "C1", "Client 2"),
                 (target_mu, target_sigma, "k", "Global (Target)")]
    for mu, sigma, color, label in gaussians:
        diff = grid - mu
        mahalanobis = np.sqrt(np.einsum("...i,ij,...j->...", diff, np.linalg.inv(sigma), diff))
        ax.contour(xx, yy, mahalanobis, levels=[1.0, 2.0], colors=color, linewidths=1.2)
        ax.plot(*mu, "+", color=color, ms=8)
        handles.append(Line2D([], [], color=color, label=label))
    pa, avg = fedpa(FIG1_MUS, FIG1_SIGMAS), fedavg(FIG1_MUS, FIG1_SIGMAS)
    traj = fedep(FIG1_MUS, FIG1_SIGMAS, steps=steps).trajectory
    handles.append(ax.plot(*pa, "s", color="C2", ms=8, label="Posterior Averaging")[0])
    handles.append(ax.plot(*avg, "^", color="C3", ms=8, label="Federated Averaging")[0])
    handles.append(ax.plot(traj[:, 0], traj[:, 1], ".-", color="C4", label="Expectation Propagation (Trajectory)")[0])
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)
    ax.set_xlabel(r"$\theta_1$")
    ax.set_ylabel(r"$\theta_2$")
    ax.set_title(f"Two-client toy, {steps} EP steps (FedEP paper, Fig. 1)")
    ax.legend(handles=handles, fontsize=8, loc="upper right")
    return save_figure_atomic(fig, path)


def figure4_left(path: str | Path, n_draws: int = 200, seed: int = 0, dtype=np.float32,
                 steps: int = 100) -> Path:
    """Fig. 4-left: mean distance to the exact global mean vs EP step (diagonal and scaled-identity
    FedEP), FedAvg and FedPA as horizontal lines; log y axis."""
    mus, sigmas = draw_instances(n_draws, seed)
    target = _targets(mus, sigmas, dtype)
    mus, sigmas = mus.astype(dtype), sigmas.astype(dtype)
    step = np.arange(1, steps + 1)

    fig = Figure(figsize=(5.0, 3.6), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for projection, label, color in (("identity", "FedEP (Scaled Identity)", "C4"),
                                     ("diagonal", "FedEP (Diagonal)", "C0")):
        traj = fedep(mus, sigmas, steps=steps, dtype=dtype, projection=projection).trajectory
        ax.plot(step, _distance(traj, target).mean(axis=-1), color=color, label=label)
    ax.axhline(_distance(fedavg(mus, sigmas), target).mean(), color="C3", ls="--", label="FedAvg")
    ax.axhline(_distance(fedpa(mus, sigmas), target).mean(), color="C2", ls=":", label="FedPA (Diagonal)")
    ax.set_yscale("log")
    ax.set_xlabel("EP step (round)")
    ax.set_ylabel("distance to global mean")
    ax.set_title(f"{n_draws} draws, seed {seed}, {np.dtype(dtype).name}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure_atomic(fig, path)
