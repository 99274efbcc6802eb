"""BayesADMM with IVON clients (spec 001): the posterior predictive, and the point at its mean
(``bayesadmm@mean``)."""

from __future__ import annotations

from fedbayes.methods.core.params import IVONParams
from fedbayes.methods.hyperparameters import NONNEG, POSNUM, REQUIRED, enum, hparam, hyperparameters, like
from fedbayes.methods.spec import MethodSpec


@hyperparameters
class Params(IVONParams):
    rho: float = hparam(REQUIRED, POSNUM, "BayesADMM ρ", sweep=True)
    tau: float = hparam(REQUIRED, NONNEG, "BayesADMM τ, the prior's tempering", sweep=True)
    dual_damping: float = hparam(REQUIRED, POSNUM, "γ = dual_damping · ρ", sweep=True)
    ivon_reset: str = hparam("code", enum("code", "paper"), "what the client's IVON starts from each round")
    pred_samples: int = like(IVONParams, "pred_samples", 32)
    pred_var: str = hparam("posterior", enum("posterior", "code_quirk"),
                           "sample from q̄, or as the authors' code did")


SPEC = MethodSpec(key="bayesadmm", implementation="fedbayes.methods.bayesadmm.algorithm:BayesADMM", params=Params,
                  doc="BayesADMM with IVON clients (the BayesADMM paper, \"Federated ADMM from Bayesian Duality\")", variants={"": "samples", "mean": "point"},
                  schedules=("constant", "cosine_rounds", "linear_local"),   # its own IVON loop, given the round
                  family="variational (IVON)", colour="#e7298a")
