"""FOLA (spec 004): clients trained under the global posterior's prior loss; Fishers aggregated."""

from __future__ import annotations

from fedbayes.methods.core.params import CurvatureParams
from fedbayes.methods.hyperparameters import POSNUM, Hyperparameters, hparam, hyperparameters, like
from fedbayes.methods.spec import MethodSpec


@hyperparameters
class Params(CurvatureParams):
    optimizer: str = like(Hyperparameters, "optimizer", "sgd")
    gamma: float = hparam(1e-5, POSNUM, "γ: precision floor of the aggregate (Eq. 25; code eps)", sweep=True)

    def problems(self) -> list[str]:
        ggn = [f"fisher_norm must be code or paper (ggn is FedCurv's), got {self.fisher_norm!r}"] \
            if self.fisher_norm == "ggn" else []
        return ggn


SPEC = MethodSpec(key="fola", implementation="fedbayes.methods.fola.algorithm:FOLA", params=Params,
                  doc="FOLA (Liu, Jiang et al., Bayesian federated learning via online Laplace approximation)", needs=frozenset({"local_models"}),
                  schedules=("constant",),   # its own local loop has no schedule
                  family="online Laplace and FOLA's baselines (SGD)", colour="#d95f02")
