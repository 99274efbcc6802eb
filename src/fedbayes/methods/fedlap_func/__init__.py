"""FedLap-Func (spec 000): FedLap with a function-space term on memory points at the server."""

from __future__ import annotations

from fedbayes.methods.fedlap import Params as FedLapParams
from fedbayes.methods.hyperparameters import NONNEG, NONNEG_INT, POSNUM, hparam, hyperparameters
from fedbayes.methods.spec import MethodSpec


@hyperparameters
class Params(FedLapParams):
    tau: float = hparam(1.0, NONNEG, "τ_f, weight of the function-space term", sweep=True)
    memory_per_class: int = hparam(1, NONNEG_INT, "memory points per class a client holds", sweep=True)
    server_iters: int = hparam(5000, NONNEG_INT, "server optimisation steps a round", sweep=True)
    server_lr: float = hparam(1e-3, POSNUM, "server learning rate η_g", sweep=True)


SPEC = MethodSpec(key="fedlap_func", implementation="fedbayes.methods.fedlap_func.algorithm:FedLapFunc", params=Params,
                  doc="FedLap-Func (Swaroop, Khan & Doshi-Velez)",
                  family="FedLap paper (Adam baselines and FedLap)", colour="#8c564b")
