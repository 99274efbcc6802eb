"""FedAvg (McMahan et al. 2017): the clients' models, averaged by their data sizes. Torch-free spec;
the math is ``algorithm.py``."""

from __future__ import annotations

from fedbayes.methods.core.params import WeightDecay
from fedbayes.methods.hyperparameters import hyperparameters
from fedbayes.methods.spec import MethodSpec


@hyperparameters
class Params(WeightDecay):
    pass


SPEC = MethodSpec(key="fedavg", implementation="fedbayes.methods.fedavg.algorithm:FedAvg", params=Params,
                  doc="FedAvg (McMahan et al. 2017)", needs=frozenset({"local_models"}),
                  family="FedLap paper (Adam baselines and FedLap)", colour="#1f77b4")
