"""FedIVON (spec 003): IVON clients, their posteriors multiplied at the server; the posterior
predictive, and the point at its mean (``fedivon@mean``)."""

from __future__ import annotations

from fedbayes.methods.core.params import IVONParams
from fedbayes.methods.hyperparameters import POSNUM, REQUIRED, hparam, hyperparameters, like
from fedbayes.methods.spec import MethodSpec


@hyperparameters
class Params(IVONParams):
    ess: float = hparam(REQUIRED, POSNUM, "effective sample size λ")
    pred_samples: int = like(IVONParams, "pred_samples", 500)


SPEC = MethodSpec(key="fedivon", implementation="fedbayes.methods.fedivon.algorithm:FedIVON", params=Params,
                  doc="FedIVON (Pal et al.)", variants={"": "samples", "mean": "point"},
                  schedules=("constant", "cosine_rounds", "linear_local"),   # its own IVON loop, given the round
                  family="variational (IVON)", colour="#1b9e77")
