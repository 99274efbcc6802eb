"""FedADMM (FedLap paper Eq. 2, spec 000 §3.1): a proximal term and a dual variable per client."""

from __future__ import annotations

from fedbayes.methods.core.params import ProxTerm
from fedbayes.methods.spec import MethodSpec

Params = ProxTerm

# numerics 2: the proximal / dual terms' gradients added in closed form (extra_grad), not through autograd
SPEC = MethodSpec(key="fedadmm", implementation="fedbayes.methods.fedadmm.algorithm:FedADMM", params=Params,
                  doc="FedADMM", numerics=2,
                  family="FedLap paper (Adam baselines and FedLap)", colour="#393b79")
