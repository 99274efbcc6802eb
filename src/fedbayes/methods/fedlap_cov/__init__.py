"""FedLap with the Laplace covariance (Swaroop, Khan & Doshi-Velez; spec 000 §3.7): FedLap's
hyperparameters."""

from __future__ import annotations

from fedbayes.methods.fedlap import Params
from fedbayes.methods.spec import MethodSpec

# numerics 2: the proximal / dual terms' gradients added in closed form (extra_grad), not through autograd
SPEC = MethodSpec(key="fedlap_cov", implementation="fedbayes.methods.fedlap_cov.algorithm:FedLapCov", params=Params,
                  doc="FedLap with the Laplace covariance (Swaroop, Khan & Doshi-Velez)", numerics=2,
                  family="FedLap paper (Adam baselines and FedLap)", colour="#9467bd")
