"""FedAvg with SGD-M clients and server (FedEP spec 002): the FedEP paper's FedAvg, and the burn-in
of FedPA, FedEP and FedSEP (their ``Params`` extend this one)."""

from __future__ import annotations

from fedbayes.methods.core.params import ServerStep, WeightDecay
from fedbayes.methods.hyperparameters import NONNEG_INT, SHARE, Hyperparameters, hparam, hyperparameters, like
from fedbayes.methods.spec import MethodSpec


@hyperparameters
class Params(Hyperparameters):
    optimizer: str = like(Hyperparameters, "optimizer", "sgd", doc="the clients run SGD with momentum (only sgd)")
    momentum: float = hparam(0.9, SHARE, "client SGD momentum")
    weight_decay: float = like(WeightDecay, "weight_decay")
    server_lr: float = like(ServerStep, "server_lr", 1.0, doc="server SGD-M learning rate")
    server_momentum: float = hparam(0.9, SHARE, "server SGD-M (also FedEP's client-state optimiser)")
    burn_in: int | None = hparam(None, NONNEG_INT, "rounds of FedAvg-M before EP / FedPA (none: every round)")


SPEC = MethodSpec(key="fedavgm", implementation="fedbayes.methods.fedavgm.algorithm:FedAvgM", params=Params,
                  doc="FedAvg with SGD-M clients and server (the FedEP paper's FedAvg, Guo et al. 2023)",
                  schedules=("constant",),   # its own SGD-M loop has no schedule
                  family="expectation propagation (SGD-M)", colour="#666666")
