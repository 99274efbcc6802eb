"""FedCurv (Shoham et al. 2019; spec 004): an EWC penalty from the other clients' Fishers."""

from __future__ import annotations

from fedbayes.methods.core.params import CurvatureParams
from fedbayes.methods.hyperparameters import enum, hparam, hyperparameters
from fedbayes.methods.spec import MethodSpec


@hyperparameters
class Params(CurvatureParams):
    anchor: str = hparam("clients", enum("clients", "global"),
                         "Shoham et al.'s others' Fishers, or the FOLA code's Ω_S")


SPEC = MethodSpec(key="fedcurv", implementation="fedbayes.methods.fedcurv.algorithm:FedCurv", params=Params,
                  doc="FedCurv (Shoham et al. 2019; a FOLA paper baseline)", needs=frozenset({"local_models"}),
                  family="online Laplace and FOLA's baselines (SGD)", colour="#e6ab02")
