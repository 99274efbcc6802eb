"""The runs behind each figure (no plotting): Fig. 3b's three methods on federated ridge regression and the
Prop. 3.2 check, Fig. 4's two methods on the outlier data, Fig. 3a's four diagonal methods; and the
distances and objective gaps the report prints.  Every setting comes from the caller (params.yaml
``toys: bayesadmm/figures``, read by ``fedbayes.reports.toys``).

Rounds: row r of a trajectory is the server after r client/server iterations; row 0 is the initial server
(the authors' loops execute one iteration more than the nominal round count).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from fedbayes.toys.bayesadmm.numerics import one_blas_thread
from fedbayes.toys.bayesadmm.problems import Logistic, RidgeProblem, SoftmaxData, global_map, objective
from fedbayes.toys.bayesadmm.solvers import (DiagRun, Trajectory, bayesadmm_full, bregman_admm_full,
                                             diag_federated_vi, federated_admm)

PRIOR_INIT = "BayesADMM (S̄ = δI)"


def objective_gaps(problem: RidgeProblem, means: np.ndarray) -> np.ndarray:
    """F(θ_r) − F(θ*) for each row of ``means``."""
    return np.array([objective(problem.clients, problem.delta, t) - problem.optimum for t in means])


def distances(means: np.ndarray, target: np.ndarray) -> np.ndarray:
    """‖θ_r − θ*‖ for each row of ``means``."""
    return np.linalg.norm(np.asarray(means) - target, axis=-1)


def rounds_to(values: np.ndarray, tol: float) -> int | None:
    """First round r with ``values[r] <= tol`` and staying below it afterwards (None if never)."""
    ok = np.asarray(values) <= tol
    for r in range(len(ok)):
        if ok[r:].all():
            return r
    return None


# ------------------------------------------------------------------------------------ Fig. 3b (ridge)
@one_blas_thread
def fig3b_runs(problem: RidgeProblem, *, rounds: int, c_bayes: float, rho_bregman: float, c_bregman: float,
               rho_admm: float, c_admm: float, server_init: str = "identity") -> dict[str, Trajectory]:
    """The three methods of Fig. 3b: BayesADMM (ρ = 1/K, γ = c_bayes·ρ), BregmanADMM, federated ADMM (ρ = ρ_s);
    ``server_init`` for the two Gaussian methods.  With ``server_init="identity"`` (the code's S̄ = I)
    BayesADMM from the prior (S̄ = δI, Prop. 3.2's setting) is added as ``PRIOR_INIT``."""
    cl, d = problem.clients, problem.delta
    rho_b = 1.0 / len(cl)
    runs = {"BayesADMM": bayesadmm_full(cl, d, rho_b, rounds, c=c_bayes, server_init=server_init),
            "BregmanADMM": bregman_admm_full(cl, d, rho_bregman, rounds, c=c_bregman, server_init=server_init),
            "ADMM": federated_admm(cl, d, rho_admm, rounds, c=c_admm)}
    if server_init == "identity":  # Prop. 3.2's setting alongside the code's
        runs[PRIOR_INIT] = bayesadmm_full(cl, d, rho_b, rounds, c=c_bayes, server_init="prior")
    return runs


class OneStepCheck(NamedTuple):
    distance_round1_prior: float    # ‖m̄ − θ*‖ after round 1, server initialised at the prior (S̄ = δI)
    precision_error_prior: float    # max |S̄ − (δI + ΣA_k)| after round 1, same run
    distances_prior: np.ndarray     # ‖m̄_r − θ*‖, r = 0..rounds, server init at the prior
    distances_identity: np.ndarray  # same with the code's S̄ = I
    rounds_to_tol_identity: int | None  # first round from which the S̄ = I run stays within ``tol``


@one_blas_thread
def onestep_check(problem: RidgeProblem, *, rounds: int, c: float, tol: float,
                  rho: float | None = None) -> OneStepCheck:
    """Prop. 3.2 on a ridge problem: full-covariance BayesADMM (ρ = 1/K unless given, γ = cρ) from the prior
    (S̄ = δI) and from the code's S̄ = I; distances of the server mean to the exact ridge solution."""
    cl, d = problem.clients, problem.delta
    rho = 1.0 / len(cl) if rho is None else rho
    prior = bayesadmm_full(cl, d, rho, rounds, c=c, server_init="prior")
    ident = bayesadmm_full(cl, d, rho, rounds, c=c, server_init="identity")
    one = bayesadmm_full(cl, d, rho, 1, c=c, server_init="prior")
    exact_prec = d * np.eye(len(problem.solution)) + sum(q.A for q in cl)
    dist_id = distances(ident.server, problem.solution)
    return OneStepCheck(float(distances(one.server[1:], problem.solution)[0]),
                        float(np.abs(one.precision - exact_prec).max()),
                        distances(prior.server, problem.solution), dist_id, rounds_to(dist_id, tol))


# --------------------------------------------------------------------------------- Fig. 4 (outlier)
class Fig4Result(NamedTuple):
    map: np.ndarray            # global MAP of Σ_k BCE_k + (δ/2)‖θ‖²
    bayes: Trajectory          # BayesADMM server means, rounds 0..rounds_bayes
    admm: Trajectory           # federated ADMM server means, rounds 0..rounds_admm
    dist_bayes: np.ndarray     # ‖m̄_r − θ_MAP‖
    dist_admm: np.ndarray      # ‖θ̄_r − θ_MAP‖


def fig4_runs(data: list, *, delta: float, rho: float, c: float, rounds_bayes: int, rounds_admm: int,
              von: dict | None, solver: str = "von", server_init: str = "identity") -> Fig4Result:
    """Full-covariance BayesADMM and federated ADMM (Newton clients, ρ_s = ρ) on the outlier problem
    (``data.outlier_data``), both with the same ρ and c; distances of the server mean to the global MAP.

    BayesADMM's clients: ``solver="von"`` (the authors' VON schedule ``von``, see ``solvers.von_client``)
    or ``"newton"`` (each client's exact local minimum).  With ρ = 0.2 the exactly solved client problem of
    round 2 has no minimum near m̄ on this data (the Laplace objective f_k is bounded below only where
    ρS̄ ⪰ V_k: here V_1 ≻ ρS̄ in some direction, so Newton runs away and ``ClientDivergence`` is raised);
    the truncated VON solve is what makes the published run stable.  The fixed point of both is the MAP
    (delta mode)."""
    clients = [Logistic(X, y) for X, y in data]
    theta_map = global_map(clients, delta)
    bayes = bayesadmm_full(clients, delta, rho, rounds_bayes, c=c, server_init=server_init, solver=solver, von=von)
    admm = federated_admm(clients, delta, rho, rounds_admm, c=c)
    return Fig4Result(theta_map, bayes, admm, distances(bayes.server, theta_map), distances(admm.server, theta_map))


# --------------------------------------------------------------- Fig. 3a (diagonal Gaussians, softmax)
def fig3a_runs(data: SoftmaxData, methods: dict[str, dict], **shared) -> dict[str, DiagRun]:
    """The methods of Fig. 3a (``methods``: name -> its α rule, ρ, c and dual coordinates; the paper's PVI,
    damped PVI, BregmanADMM, BayesADMM), each ``diag_federated_vi`` with the ``shared`` settings (delta,
    rounds, inner_steps, lr, ...)."""
    return {name: diag_federated_vi(data, **spec, **shared) for name, spec in methods.items()}
