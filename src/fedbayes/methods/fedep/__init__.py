"""FedEP (Guo et al. 2023; spec 002): expectation propagation with a client site each, after FedAvg-M's
burn-in. One package registers FedEP and its paper's table rows ``fedep_i``, ``fedep_m``, ``fedep_l``,
``fedep_v``: FedEP with the tilted approximation (``variant``) fixed, the same class and ``Params``, so
a package each would hold no math of its own. Its ``"mc"`` variant is the Monte Carlo predictive."""

from __future__ import annotations

from fedbayes.methods.core.params import IVONParams
from fedbayes.methods.fedavgm import Params as FedAvgMParams
from fedbayes.methods.hyperparameters import NONNEG, POSINT, POSNUM, enum, hparam, hyperparameters, like
from fedbayes.methods.spec import MethodSpec

EP_AND_MC = {"": "point", "mc": "samples"}   # the mean of q_g; its Monte Carlo predictive


@hyperparameters
class Params(FedAvgMParams):
    variant: str = hparam("I", enum("I", "M", "L", "V"), "tilted approximation")
    server_lr: float = like(FedAvgMParams, "server_lr", 0.5, doc="EP server step, and the FedAvg-M step of the burn-in rounds")
    server_optimizer: str = hparam("sgdm", enum("sgdm", "adagrad"), "EP server optimiser")
    adagrad_eps: float = hparam(1e-5, POSNUM, "optax Adagrad: inside the square root")
    cov_scale: float = hparam(500.0, POSNUM, "c: α_cov = c (init_scale + weight_decay), per data point")
    init_scale: float = hparam(0.0, NONNEG, "a")
    shrinkage: float = hparam(1e-4, POSNUM, "FedEP-M ρ")
    laplace_epochs: int = hparam(5, POSINT, "FedEP-L T_L")
    ngvi_epochs: int = hparam(5, POSINT, "FedEP-V T_V")
    ngvi_samples: int = hparam(1, POSINT, "FedEP-V N_V")
    ngvi_beta: float = hparam(0.99, {"type": "number", "minimum": 0, "exclusiveMaximum": 1}, "FedEP-V β")
    clip: float | None = hparam(None, {"type": ["number", "null"], "exclusiveMinimum": 0}, "global norm of (Δη, ΔΛ)")
    damping: float | None = hparam(None, {"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 1},
                                   "δ; null: 1/(clients per round)")
    pred_samples: int = like(IVONParams, "pred_samples", 10)

    def problems(self) -> list[str]:
        if self.variant == "M" and isinstance(self.local_epochs, int) and self.local_epochs < 2:
            return [f"variant M takes one SG-MCMC sample per local epoch and its covariance needs two: "
                    f"local_epochs must be at least 2, got {self.local_epochs}"]
        return []


NO_SCHEDULE = ("constant",)   # FedAvgM's SGD-M loop (burn-in) and the EP loop have no learning-rate schedule


FAMILY = "expectation propagation (SGD-M)"   # the figures' row of panels (FedAvg-M's and FedPA's too)


def family(key: str, cls: str, doc: str, colours: dict[str, str]) -> dict[str, MethodSpec]:
    """``key`` (the class ``cls`` of ``fedbayes.methods.<key>.algorithm``) and its rows ``<key>_i`` …
    ``<key>_v``, each with the tilted approximation fixed; ``colours``: the figures' colour of each key."""
    impl = f"fedbayes.methods.{key}.algorithm:{cls}"
    out = {key: MethodSpec(key=key, implementation=impl, params=Params, doc=doc, variants=EP_AND_MC, schedules=NO_SCHEDULE,
                           family=FAMILY, colour=colours[key])}
    for v in "IMLV":
        k = f"{key}_{v.lower()}"
        out[k] = MethodSpec(key=k, implementation=impl, params=Params, doc=f"{cls} with variant {v} (Guo et al. 2023)",
                            variants=EP_AND_MC, fixed={"variant": v}, schedules=NO_SCHEDULE, family=FAMILY,
                            colour=colours[k])
    return out


SPECS = family("fedep", "FedEP", "FedEP (Guo et al. 2023)",
               {"fedep": "#08519c", "fedep_i": "#17becf", "fedep_m": "#9edae5", "fedep_l": "#0e6f7a",
                "fedep_v": "#6baed6"})
SPEC, SPEC_I, SPEC_M, SPEC_L, SPEC_V = SPECS.values()
