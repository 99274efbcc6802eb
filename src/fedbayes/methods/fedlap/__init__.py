"""FedLap, diagonal (Swaroop, Khan & Doshi-Velez; spec 000 §3.6)."""

from __future__ import annotations

from fedbayes.methods.core.params import ProxTerm
from fedbayes.methods.hyperparameters import (POSINT, POSNUM, REQUIRED, Hyperparameters, enum, hparam,
                                              hyperparameters, like)
from fedbayes.methods.spec import MethodSpec


@hyperparameters
class Params(Hyperparameters):
    delta: float = hparam(REQUIRED, POSNUM, "δ, the prior precision (sum-loss units)", sweep=True)
    rho: str = hparam("data", enum("data", "uniform"), "dual damping ρ_k: N_k/N (data) or 1/K (uniform), App. E",
                      sweep=True)
    rho_switch_round: int | None = hparam(None, POSINT, "N_k/N up to this round, then 1/K (CIFAR-10)")
    prox_norm: str = like(ProxTerm, "prox_norm")


# numerics 2: the proximal / dual terms' gradients added in closed form (extra_grad), not through autograd
SPEC = MethodSpec(key="fedlap", implementation="fedbayes.methods.fedlap.algorithm:FedLap", params=Params,
                  doc="FedLap, diagonal (Swaroop, Khan & Doshi-Velez)", numerics=2,
                  family="FedLap paper (Adam baselines and FedLap)", colour="#d62728")
