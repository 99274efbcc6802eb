"""FedPA (Al-Shedivat et al. 2021; FedEP spec 002 §2.14): posterior-averaged client deltas after
FedAvg-M's burn-in."""

from __future__ import annotations

from fedbayes.methods.fedavgm import Params as FedAvgMParams
from fedbayes.methods.hyperparameters import NONNEG_INT, POSNUM, hparam, hyperparameters
from fedbayes.methods.spec import MethodSpec


@hyperparameters
class Params(FedAvgMParams):
    shrinkage: float = hparam(0.01, POSNUM, "FedPA ρ")
    mixin_epochs: int = hparam(1, NONNEG_INT, "epochs before the first sample")


SPEC = MethodSpec(key="fedpa", implementation="fedbayes.methods.fedpa.algorithm:FedPA", params=Params,
                  doc="FedPA (Al-Shedivat et al. 2021)",
                  schedules=("constant",),   # FedAvgM's SGD-M loop, no schedule
                  family="expectation propagation (SGD-M)", colour="#bcbd22")
