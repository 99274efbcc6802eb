"""FedDyn (Acar et al. 2021, spec 000 §3.2): dynamic regularisation of each client's loss."""

from __future__ import annotations

from fedbayes.methods.core.params import ProxTerm, WeightDecay
from fedbayes.methods.hyperparameters import hyperparameters, like
from fedbayes.methods.spec import MethodSpec


@hyperparameters
class Params(ProxTerm):
    weight_decay: float = like(WeightDecay, "weight_decay", doc="FedDyn local weight decay")


# numerics 2: closed-form penalty gradients (extra_grad); also the feddyn@avg prediction (the clients'
# plain average) beside the cloud model
SPEC = MethodSpec(key="feddyn", implementation="fedbayes.methods.feddyn.algorithm:FedDyn", params=Params,
                  doc="FedDyn (Acar et al. 2021)", numerics=2, variants={"": "point", "avg": "point"},
                  family="FedLap paper (Adam baselines and FedLap)", colour="#2ca02c")
