"""FedSEP, stateless FedEP (FedEP spec 002 §2.15): FedEP's rounds (``fedbayes.methods.fedep.algorithm``)
with the cavity (1 − n_k/N)·(η_g, Λ_g) in place of the client's own site, so a client keeps no state.
"""

from __future__ import annotations

from fedbayes.methods.fedep.algorithm import FedEP


class FedSEP(FedEP):
    stateful = False
