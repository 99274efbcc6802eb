"""The federated solvers of BayesADMM's toys: federated ADMM, full-covariance BayesADMM and BregmanADMM
(numpy, any client loss of ``problems``), the VON client solver, and the diagonal-Gaussian family of
Fig. 3a (BayesADMM, BregmanADMM, PVI, damped PVI; torch, clients solved by IVON).

Federated ADMM (Fig. 2a; spec §2.1, §3.3), prior ℓ_0 = (δ/2)‖θ‖², server init θ̄ = 0, v_k = 0:

    client   θ_k ← argmin_θ ℓ_k(θ) + v_kᵀθ + (ρ/2)‖θ − θ̄‖²          (Newton to convergence; exact for ridge)
    dual     v_k ← v_k + cρ (θ_k − θ̄)
    server   α = 1/(δ + Kρ_s),   θ̄ ← (1 − δα)·Mean(θ_k) + α·Σ_k v_k

Full-covariance BayesADMM (Eqs. 7–9, 34–38; spec §3.2) with q = N(m, S⁻¹), natural parameters
λ = (S m, −½S), duals λ̂_k = (v_k, −½V_k), prior λ̂_0 = (0, −½δI):

    client   (m_k, S_k) ← argmin_q E_q[ℓ_k(θ) + v_kᵀθ − ½θᵀV_kθ] + ρ KL(q ‖ q̄)
             in the delta/Laplace mode (expectations at the mean) this is
                 m_k = argmin_θ f_k(θ),   f_k(θ) = ℓ_k(θ) + v_kᵀθ − ½θᵀV_kθ + (ρ/2)(θ − m̄)ᵀS̄(θ − m̄)
                 S_k = S̄ + (∇²ℓ_k(m_k) − V_k)/ρ    (= ∇²f_k(m_k)/ρ)
             solved by Newton's method; for a quadratic ℓ_k = ½θᵀA_kθ − b_kᵀθ the first Newton step is the
             closed form  (ρS̄ + A_k − V_k) m_k = ρS̄m̄ + b_k − v_k,  i.e.  λ_k = λ̄ + (t_k − λ̂_k)/ρ with
             t_k = (b_k, −½A_k)
    dual     v_k ← v_k + γ (S_k m_k − S̄ m̄),   V_k ← V_k + γ (S_k − S̄),   γ = cρ          (Eq. 36)
    server   α = 1/(1 + Kρ)
             S̄ ← (1 − α)·Mean(S_k) + α (δI + Σ_k V_k)                                      (Eq. 37)
             m̄ ← S̄⁻¹ [ (1 − α)·Mean(S_k m_k) + α Σ_k v_k ]                                  (Eq. 38)

Prop. 3.2 (spec §2.3): for quadratic ℓ_k, the first round gives λ̄ = (1 − α)λ̄_init + α λ̂_0 + 2α Σ_k t_k;
with λ̄_init = λ̂_0 (S̄ = δI, m̄ = 0), ρ = 1/K (α = ½) and γ = ρ this is λ̂_0 + Σ_k t_k, the exact posterior
N((δI + ΣA_k)⁻¹Σb_k, (δI + ΣA_k)⁻¹): exact after one round.  After round 1 λ̂_k = t_k, so every later
round is λ̄ ← (1 − α)λ̄ + α(λ̂_0 + Σt_k): from the code's S̄ = I the error halves every round (ρ = 1/K).

BregmanADMM [58] (spec §3.4): the same client and server, dual step in expectation coordinates
μ = (m, mmᵀ + S⁻¹):  λ̂_k ← λ̂_k + γ(μ_k − μ̄), i.e. with λ̂_k = (v_k, −½V_k)

    v_k ← v_k + γ (m_k − m̄),    V_k ← V_k + 2γ [(S̄⁻¹ + m̄m̄ᵀ) − (S_k⁻¹ + m_k m_kᵀ)]

(the literal reading of the equation; the spec's account of the code writes the V step as
V_k += cρ[(S_k⁻¹ + m_k m_kᵀ) − (S̄⁻¹ + m̄m̄ᵀ)], without the factor 2 and with the opposite sign, presumably
the code's own sign convention for V.  Both variants converge on the ridge problems tried, at different
speeds.)

Fig. 4 client solver.  With ρ = 0.2 the Laplace client objective f_k is bounded below only locally
(far from m̄, ∇²f_k → ρS̄ − V_k, and V_1 ≻ ρS̄ in some direction on the Fig. 4 data), and in round 2 Newton
from m̄ finds no minimum (the same holds in the full VB form with exact Gauss–Hermite expectations, where
S_k = S̄ + (E∇²ℓ_k − V_k)/ρ stops being positive definite).  ``experiments.fig4_runs`` therefore uses, by
default, the authors' VON schedule (``von_client``: 10,000 steps with decaying step sizes from q̄, a
truncated solve; params.yaml ``toys: bayesadmm/figures: fig4: von``); ``solver="newton"`` gives the
exact-solve variant, which raises ``ClientDivergence`` there.  Federated ADMM's clients are strongly convex
and solved exactly.

Diagonal family (Fig. 3a; Alg. 1, spec §3.1, §3.5): q = N(m, diag(1/s)), λ = (s∘m, −½s), duals (v_k, −½u_k);
client solved by the project's IVON (``fedbayes.methods.core.ivon``) with ℓ̄ = mean CE over the client's data,
λ_IVON = N_k/(ρτ), prior (m̄, δ_IVON = s̄/λ_IVON), multipliers (τ/N_k)v_k, (τ/N_k)u_k; s_k = λ_IVON(h + δ_IVON).
Dual step natural (v_k += γ(s_k∘m_k − s̄∘m̄), u_k += γ(s_k − s̄)) or expectation coordinates
(v_k += γ(m_k − m̄), u_k += 2γ[(m̄² + 1/s̄) − (m_k² + 1/s_k)]); server
s̄ ← (1 − α)Mean(s_k) + α(δ + Σu_k), m̄ ← [(1 − α)Mean(s_k∘m_k) + αΣv_k]/s̄ with α = 1/(1 + Kρ) (BayesADMM,
BregmanADMM) or α = 1 (PVI and damped PVI: q̄ ∝ π Π_k t̂_k, Eq. 16).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple, Sequence

import numpy as np
from scipy import linalg

from fedbayes.toys.bayesadmm.numerics import ClientDivergence, newton, one_blas_thread, sym
from fedbayes.toys.bayesadmm.problems import SoftmaxData, mean_ce_grad, variational_objective

if TYPE_CHECKING:
    import torch


class Trajectory(NamedTuple):
    """``server``: server mean after round r = 0..R, shape ``(R + 1, P)`` (row 0 = initial server);
    ``client0``: client 0's mean in round r (row 0 = the initial server mean), shape ``(R + 1, P)``;
    ``precision``: the final server precision ``(P, P)`` (None for federated ADMM);
    ``duals``: the clients' final duals, ``(v, V)`` of shapes ``(K, P)``, ``(K, P, P)`` (ADMM: ``(v, None)``)."""

    server: np.ndarray
    client0: np.ndarray
    precision: np.ndarray | None
    duals: tuple = (None, None)


@one_blas_thread
def federated_admm(clients: Sequence, delta: float, rho: float, rounds: int, *, c: float,
                   rho_server: float | None = None) -> Trajectory:
    """Federated ADMM (Fig. 2a) with ℓ_0 = (δ/2)‖θ‖²: clients solved exactly (Newton), dual step cρ,
    server α = 1/(δ + Kρ_s), θ̄ ← (1 − δα)Mean(θ_k) + αΣv_k; θ̄ = 0, v_k = 0 at the start; ρ_s = ρ unless
    ``rho_server`` is given."""
    rho_s = rho if rho_server is None else rho_server
    K, p = len(clients), clients[0].dim
    alpha = 1.0 / (delta + K * rho_s)
    theta_bar, v = np.zeros(p), np.zeros((K, p))
    server, client0 = [theta_bar], [theta_bar]
    eye = np.eye(p)
    for _ in range(rounds):
        thetas = np.empty((K, p))
        for k, cl in enumerate(clients):
            def fun(t, cl=cl, k=k):
                d = t - theta_bar
                return cl.value(t) + v[k] @ t + 0.5 * rho * d @ d

            def grad_hess(t, cl=cl, k=k):
                g, h = cl.grad_hess(t)
                return g + v[k] + rho * (t - theta_bar), h + rho * eye

            thetas[k] = newton(fun, grad_hess, theta_bar)
        v = v + c * rho * (thetas - theta_bar)
        theta_bar = (1.0 - delta * alpha) * thetas.mean(axis=0) + alpha * v.sum(axis=0)
        server.append(theta_bar)
        client0.append(thetas[0])
    return Trajectory(np.array(server), np.array(client0), None, (v, None))


@one_blas_thread
def gaussian_admm(clients: Sequence, delta: float, rho: float, rounds: int, *, c: float,
                  dual: str = "natural", server_init: str = "identity", solver: str = "newton",
                  von: dict | None = None) -> Trajectory:
    """Full-covariance BayesADMM (``dual="natural"``, Eqs. 34–38) or BregmanADMM (``dual="expectation"``),
    clients in the delta/Laplace mode (module docstring).  γ = cρ, α = 1/(1 + Kρ).

    ``server_init``: ``"identity"`` (the authors' code: m̄ = 0, S̄ = I) or ``"prior"`` (m̄ = 0, S̄ = δI, as
    Prop. 3.2 assumes).  ``solver``: ``"newton"`` (the client's local minimum, exact for quadratics;
    raises ``ClientDivergence`` where Newton from m̄ finds none) or ``"von"`` (a fixed number of VON steps
    from q̄ with decaying step sizes, ``von_client``; ``von`` = its schedule, required)."""
    if solver not in ("newton", "von"):
        raise ValueError(f"solver must be 'newton' or 'von', got {solver!r}")
    if solver == "von" and von is None:
        raise ValueError("solver 'von' needs von= its schedule (steps, lr_m, lr_S, decay)")
    if dual not in ("natural", "expectation"):
        raise ValueError(f"dual must be 'natural' or 'expectation', got {dual!r}")
    if server_init not in ("identity", "prior"):
        raise ValueError(f"server_init must be 'identity' or 'prior', got {server_init!r}")
    K, p = len(clients), clients[0].dim
    eye = np.eye(p)
    gamma, alpha = c * rho, 1.0 / (1.0 + K * rho)
    m_bar = np.zeros(p)
    S_bar = eye.copy() if server_init == "identity" else delta * eye
    v, V = np.zeros((K, p)), np.zeros((K, p, p))
    server, client0 = [m_bar], [m_bar]
    for _ in range(rounds):
        ms, Ss = np.empty((K, p)), np.empty((K, p, p))
        for k, cl in enumerate(clients):
            def fun(t, cl=cl, k=k):
                d = t - m_bar
                return cl.value(t) + v[k] @ t - 0.5 * t @ V[k] @ t + 0.5 * rho * d @ S_bar @ d

            def grad_hess(t, cl=cl, k=k):
                g, h = cl.grad_hess(t)
                return g + v[k] - V[k] @ t + rho * S_bar @ (t - m_bar), h - V[k] + rho * S_bar

            if solver == "von":
                ms[k], Ss[k] = von_client(cl, m_bar, S_bar, v[k], V[k], rho, **von)
            else:
                ms[k] = newton(fun, grad_hess, m_bar)
                Ss[k] = sym(S_bar + (cl.grad_hess(ms[k])[1] - V[k]) / rho)
        if dual == "natural":
            v = v + gamma * (np.einsum("kij,kj->ki", Ss, ms) - S_bar @ m_bar)
            V = V + gamma * (Ss - S_bar)
        else:
            v = v + gamma * (ms - m_bar)
            second_bar = np.linalg.inv(S_bar) + np.outer(m_bar, m_bar)
            second_k = np.linalg.inv(Ss) + np.einsum("ki,kj->kij", ms, ms)
            V = sym(V + 2.0 * gamma * (second_bar - second_k))
        S_bar = sym((1.0 - alpha) * Ss.mean(axis=0) + alpha * (delta * eye + V.sum(axis=0)))
        eta = (1.0 - alpha) * np.einsum("kij,kj->ki", Ss, ms).mean(axis=0) + alpha * v.sum(axis=0)
        m_bar = linalg.solve(S_bar, eta, assume_a="pos")
        server.append(m_bar)
        client0.append(ms[0])
    return Trajectory(np.array(server), np.array(client0), S_bar, (v, V))


def bayesadmm_full(clients, delta, rho, rounds, *, c, server_init="identity", solver="newton",
                   von=None) -> Trajectory:
    """Full-covariance BayesADMM (natural-coordinate dual step); see ``gaussian_admm``."""
    return gaussian_admm(clients, delta, rho, rounds, c=c, dual="natural", server_init=server_init,
                         solver=solver, von=von)


def bregman_admm_full(clients, delta, rho, rounds, *, c, server_init="identity", solver="newton",
                      von=None) -> Trajectory:
    """BregmanADMM (expectation-coordinate dual step); see ``gaussian_admm``."""
    return gaussian_admm(clients, delta, rho, rounds, c=c, dual="expectation", server_init=server_init,
                         solver=solver, von=von)


def von_client(cl, m_bar: np.ndarray, S_bar: np.ndarray, v: np.ndarray, V: np.ndarray, rho: float, *,
               steps: int, lr_m: float, lr_S: float, decay: float) -> tuple[np.ndarray, np.ndarray]:
    """VON (Khan & Rue Eq. 12) in the delta mode on the BayesADMM client objective, spec §3.2:
    λ E_q[ℓ + vᵀθ − ½θᵀVθ] + KL(q ‖ q̄), λ = 1/ρ (τ = 1), q = N(m, P⁻¹) started at q̄; in step t = 0, 1, ...
    with β_m = lr_m/(λ(1 + decay·t)), β_S = lr_S/(λ(1 + decay·t)) and ∇ℓ, ∇²ℓ at m:

        P ← (1 − β_S) P + β_S (S̄ + λ(∇²ℓ(m) − V))
        m ← m − β_m P⁻¹ (λ(∇ℓ(m) + v − Vm) + S̄(m − m̄))

    (the code's updates ``S ← (1 − ρ₂/λ)S + ρ₂(E∇²ℓ − V + S_p/λ)``, ``m ← m − ρ₁S⁻¹(E∇ℓ + v − Vm +
    S_p(m − m_p)/λ)`` with ρ₁,₂ = lr/(1 + 0.1·it), written as a BLR step; expectations at the mean where the
    code used one MC sample).  Its fixed point is the Newton solver's (P = S̄ + (∇²ℓ − V)/ρ), but with the
    Fig. 4 settings Σ_t β ≈ 0.14 (m) and 0.07 (P): a truncated solve, see ``experiments.fig4_runs``.
    Returns (m, P)."""
    lam = 1.0 / rho
    m, P = m_bar.copy(), S_bar.copy()
    for t in range(steps):
        bm, bs = lr_m / (lam * (1.0 + decay * t)), lr_S / (lam * (1.0 + decay * t))
        g, H = cl.grad_hess(m)
        P = (1.0 - bs) * P + bs * (S_bar + lam * (H - V))
        m = m - bm * np.linalg.solve(P, lam * (g + v - V @ m) + S_bar @ (m - m_bar))
    if not (np.all(np.isfinite(m)) and np.all(np.linalg.eigvalsh(sym(P)) > 0)):
        raise ClientDivergence("VON client iterate left the positive-definite cone")
    return m, sym(P)


# --------------------------------------------------------------- the diagonal family (Fig. 3a, torch)
class DiagRun(NamedTuple):
    objective: np.ndarray   # variational objective of q̄ after round r = 0..R (NaN after a divergence)
    m: "torch.Tensor"       # final server mean
    s: "torch.Tensor"       # final server precision
    diverged: int | None    # round in which s̄ stopped being positive and finite, or None


def diag_federated_vi(data: SoftmaxData, *, delta: float, rounds: int, alpha: str, rho: float, c: float,
                      dual: str, inner_steps: int, lr: float, beta1: float, beta2: float, h0: float,
                      tau: float, mc_objective: int, seed: int) -> DiagRun:
    """Diagonal-Gaussian federated VI for a linear softmax model (module docstring, "Diagonal family"):
    BayesADMM (``alpha="admm"``, ``dual="natural"``), BregmanADMM (``dual="expectation"``), PVI and damped
    PVI (``alpha="pvi"``: α = 1).  Server starts at the prior (m̄ = 0, s̄ = δ), duals at 0.

    Each round every client runs ``inner_steps`` full-batch IVON steps (``fedbayes.methods.core.ivon``) from
    q̄ (m = m̄, h = h0, fresh momentum), one MC sample, lr cosine-decayed over the steps
    (lr·(1 + cos(πt/T))/2), λ_IVON = N_k/(ρτ), prior (m̄, s̄/λ_IVON), multipliers (τ/N_k)(v_k, u_k).
    All clients are updated in parallel as one batch.  Torch noise, and the ``mc_objective`` draws of the
    objective, are seeded with ``seed``."""
    import torch

    from fedbayes.methods.core.ivon import IVONState, ivon_step  # imports torch (seconds): only this solver pays it

    if alpha not in ("admm", "pvi") or dual not in ("natural", "expectation"):
        raise ValueError(f"alpha must be 'admm'/'pvi' and dual 'natural'/'expectation', got {alpha!r}, {dual!r}")
    K, n, d = data.x.shape
    P = d * data.y.shape[-1]
    a = 1.0 / (1.0 + K * rho) if alpha == "admm" else 1.0
    gamma = c * rho
    dt = data.x.dtype
    m_bar, s_bar = torch.zeros(P, dtype=dt), torch.full((P,), float(delta), dtype=dt)
    v, u = torch.zeros(K, P, dtype=dt), torch.zeros(K, P, dtype=dt)
    ess = (data.sizes / (rho * tau))[:, None]                                  # λ_IVON per client, (K, 1)
    scale = (tau / data.sizes)[:, None]
    gen = torch.Generator().manual_seed(int(seed))
    obj = [variational_objective(data, m_bar, s_bar, delta, n_samples=mc_objective, seed=seed)]
    diverged = None
    for r in range(1, rounds + 1):
        delta_ivon = s_bar / ess                                               # (K, P)
        st = IVONState.start(m_bar.expand(K, P), h0)
        for t in range(inner_steps):
            std = (ess * (st.h + delta_ivon)).rsqrt()
            noise = torch.randn(st.m.shape, generator=gen, dtype=dt) * std
            grad = mean_ce_grad(data, st.m + noise)
            lr_t = lr * 0.5 * (1.0 + math.cos(math.pi * t / inner_steps))
            st = ivon_step(st, grad, noise * grad, lr=lr_t, ess=ess, delta=delta_ivon, beta1=beta1, beta2=beta2,
                           prior_mean=m_bar, v=scale * v, u=scale * u)
        m_k, s_k = st.m, st.precision(ess, delta_ivon)
        if dual == "natural":
            v = v + gamma * (s_k * m_k - s_bar * m_bar)
            u = u + gamma * (s_k - s_bar)
        else:
            v = v + gamma * (m_k - m_bar)
            u = u + 2.0 * gamma * ((m_bar ** 2 + 1.0 / s_bar) - (m_k ** 2 + 1.0 / s_k))
        s_new = (1.0 - a) * s_k.mean(0) + a * (delta + u.sum(0))
        if not (torch.isfinite(s_new).all() and (s_new > 0).all()):
            diverged = r
            obj += [math.nan] * (rounds - r + 1)
            break
        m_bar = ((1.0 - a) * (s_k * m_k).mean(0) + a * v.sum(0)) / s_new
        s_bar = s_new
        obj.append(variational_objective(data, m_bar, s_bar, delta, n_samples=mc_objective, seed=seed))
    return DiagRun(np.array(obj), m_bar, s_bar, diverged)
