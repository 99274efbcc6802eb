"""FedSEP, stateless FedEP (spec 002), and its paper's table rows ``fedsep_i`` … ``fedsep_v`` (the tilted
approximation fixed; one package for the reason ``fedbayes.methods.fedep`` gives). FedEP's ``Params``."""

from __future__ import annotations

from fedbayes.methods.fedep import Params, family

SPECS = family("fedsep", "FedSEP", "FedSEP, stateless FedEP (Guo et al. 2023)",
               {"fedsep": "#54278f", "fedsep_i": "#7570b3", "fedsep_m": "#c5b0d5", "fedsep_l": "#3f3a7a",
                "fedsep_v": "#b07aa1"})
SPEC, SPEC_I, SPEC_M, SPEC_L, SPEC_V = SPECS.values()

__all__ = ["Params", "SPEC", "SPEC_I", "SPEC_L", "SPEC_M", "SPEC_V", "SPECS"]
