"""SCAFFOLD (Karimireddy et al. 2020; spec 004 §4.4): control variates correct the client drift."""

from __future__ import annotations

from fedbayes.methods.core.params import ServerStep
from fedbayes.methods.spec import MethodSpec

Params = ServerStep

SPEC = MethodSpec(key="scaffold", implementation="fedbayes.methods.scaffold.algorithm:Scaffold", params=Params,
                  doc="SCAFFOLD (Karimireddy et al. 2020; a FOLA paper baseline)", needs=frozenset({"local_models"}),
                  schedules=("constant",),   # its control variates assume a constant SGD step
                  family="online Laplace and FOLA's baselines (SGD)", colour="#66a61e")
