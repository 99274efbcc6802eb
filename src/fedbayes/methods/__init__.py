"""Federated methods, one module per family. ``METHODS`` maps the params.yaml name to the class."""

from fedbayes.catalog import split_variant
from fedbayes.methods.admm import FedADMM, FedDyn
from fedbayes.methods.base import ClientData, Method
from fedbayes.methods.bayesadmm import BayesADMM
from fedbayes.methods.fedavg import FedAvg
from fedbayes.methods.fedbe import FedBE
from fedbayes.methods.fedcurv import FedCurv
from fedbayes.methods.fedep import FedAvgM, FedEP, FedPA, FedSEP, with_variant
from fedbayes.methods.fedivon import FedIVON
from fedbayes.methods.fedlap import FedLap, FedLapCov
from fedbayes.methods.fedlap_func import FedLapFunc
from fedbayes.methods.fednova import FedNova
from fedbayes.methods.fola import FOLA
from fedbayes.methods.prox import FedProx
from fedbayes.methods.scaffold import Scaffold

METHODS: dict[str, type[Method]] = {
    "fedavg": FedAvg,
    "fedprox": FedProx,
    "fedadmm": FedADMM,
    "feddyn": FedDyn,
    "fedlap": FedLap,
    "fedlap_cov": FedLapCov,
    "fedlap_func": FedLapFunc,
    "bayesadmm": BayesADMM,
    "fedivon": FedIVON,
    "fola": FOLA,
    "fedcurv": FedCurv,
    "fedavgm": FedAvgM,
    "fedpa": FedPA,
    "fedep": FedEP,
    "fedsep": FedSEP,
    "scaffold": Scaffold,
    "fednova": FedNova,
    "fedbe": FedBE,
    **{f"{name}_{v.lower()}": with_variant(cls, v) for name, cls in (("fedep", FedEP), ("fedsep", FedSEP))
       for v in "IMLV"},
}


def build_method(name: str, fm, hp: dict, client_sizes) -> Method:
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; implemented: {sorted(METHODS)}")
    m = METHODS[name](fm, hp, client_sizes)
    m.name = name
    return m


__all__ = ["METHODS", "ClientData", "Method", "build_method", "split_variant"]
