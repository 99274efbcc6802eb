"""FedProx (Li et al. 2020): FedAvg with the proximal term (α/2)‖w − w_g‖² in the client loss."""

from __future__ import annotations

from fedbayes.methods.core.params import ProxTerm, WeightDecay
from fedbayes.methods.hyperparameters import hyperparameters
from fedbayes.methods.spec import MethodSpec


@hyperparameters
class Params(WeightDecay, ProxTerm):
    pass


# numerics 2: the proximal / dual terms' gradients added in closed form (extra_grad), not through autograd
SPEC = MethodSpec(key="fedprox", implementation="fedbayes.methods.fedprox.algorithm:FedProx", params=Params,
                  doc="FedProx (Li et al. 2020)", numerics=2, needs=frozenset({"local_models"}),
                  family="FedLap paper (Adam baselines and FedLap)", colour="#ff7f0e")
