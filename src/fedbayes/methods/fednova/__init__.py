"""FedNova (Wang et al. 2020; spec 004 §4.5): client updates normalised by their local step counts."""

from __future__ import annotations

from fedbayes.methods.core.params import ServerStep
from fedbayes.methods.spec import MethodSpec

Params = ServerStep

SPEC = MethodSpec(key="fednova", implementation="fedbayes.methods.fednova.algorithm:FedNova", params=Params,
                  doc="FedNova (Wang et al. 2020; a FOLA paper baseline)", needs=frozenset({"local_models"}),
                  schedules=("constant",),   # its normalisation assumes a constant SGD step
                  family="online Laplace and FOLA's baselines (SGD)", colour="#a6761d")
