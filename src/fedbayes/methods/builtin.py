"""The built-in methods, described once each (torch-free; ``fedbayes.methods.spec``): hyperparameters with
their rules, defaults and provenance, prediction variants, numerics versions, needs, and the class
that implements each. ``fedbayes.catalog``, ``fedbayes.methods.METHODS`` and the params schema's method
hyperparameters are derived from ``SPECS``.

A default is the value the implementation uses when params.yaml gives none (``REQUIRED``: it reads the
key without one; ``self.p``). A run records the defaults it read (run.json ``defaults``), so a change of
a default here reruns exactly the runs that read it (``catalog.default_changes``; the runs from before
the record compare with ``methods/frozen_defaults.json``, which is never edited).
"""

from __future__ import annotations

from fedbayes.methods.spec import (BOOL, NONNEG, NONNEG_INT, POSINT, POSNUM, REQUIRED, SHARE, Hyperparameters,
                                   MethodSpec, enum, hparam, hyperparameters, like)

POINT = {"": "point"}
POSTERIOR_AND_MEAN = {"": "samples", "mean": "point"}   # the posterior predictive; the point at its mean
EP_AND_MC = {"": "point", "mc": "samples"}              # the mean of q_g; its Monte Carlo predictive


# --- FedAvg, FedProx, FedADMM, FedDyn (methods/fedavg.py, prox.py, admm.py) -------------------------

@hyperparameters
class FedAvgParams(Hyperparameters):
    weight_decay: float = hparam(0.0, NONNEG, "(wd/2)‖w‖² added to the client loss (FedIVON App. B)", sweep=True)


@hyperparameters
class ProxTerm(Hyperparameters):
    alpha: float = hparam(REQUIRED, NONNEG, "α of the proximal / dual term (α/2)‖w − w_g‖²; 0 gives FedAvg",
                          sweep=True)
    prox_norm: str = hparam("squared", enum("squared", "unsquared"),
                            "½‖w − w_g‖² (papers) or ½‖w − w_g‖ (authors' baseline code, spec 001 §6 item 5)",
                            sweep=True, code_default=True)


@hyperparameters
class FedProxParams(FedAvgParams, ProxTerm):
    pass


@hyperparameters
class FedDynParams(ProxTerm):
    weight_decay: float = like(FedAvgParams, "weight_decay", doc="FedDyn local weight decay")


# --- FedLap family (methods/fedlap.py, fedlap_func.py; spec 000) --------------------------------------

@hyperparameters
class FedLapParams(Hyperparameters):
    delta: float = hparam(REQUIRED, POSNUM, "δ, the prior precision (sum-loss units)", sweep=True)
    rho: str = hparam("data", enum("data", "uniform"), "dual damping ρ_k: N_k/N (data) or 1/K (uniform), App. E",
                      sweep=True)
    rho_switch_round: int | None = hparam(None, POSINT, "N_k/N up to this round, then 1/K (CIFAR-10)")
    prox_norm: str = like(ProxTerm, "prox_norm")


@hyperparameters
class FedLapFuncParams(FedLapParams):
    tau: float = hparam(1.0, NONNEG, "τ_f, weight of the function-space term", sweep=True)
    memory_per_class: int = hparam(1, NONNEG_INT, "memory points per class a client holds", sweep=True)
    server_iters: int = hparam(5000, NONNEG_INT, "server optimisation steps a round", sweep=True)
    server_lr: float = hparam(1e-3, POSNUM, "server learning rate η_g", sweep=True)


# --- IVON-based: BayesADMM, FedIVON (methods/bayesadmm.py, fedivon.py, ivon.py; specs 001, 003) -------

@hyperparameters
class IVONParams(Hyperparameters):
    delta: float = like(FedLapParams, "delta", doc="δ, the prior precision")
    h0: float = hparam(REQUIRED, POSNUM, "IVON initial Hessian", sweep=True)
    beta1: float = hparam(0.9, SHARE, "IVON gradient momentum")
    beta2: float = hparam(0.99999, SHARE, "IVON Hessian momentum")
    mc_samples: int = hparam(1, POSINT, "MC samples per training step")
    clip_radius: float | None = hparam(None, {"type": ["number", "null"], "exclusiveMinimum": 0},
                                       "IVON's element-wise update clip (null: none)")
    pred_samples: int = hparam(REQUIRED, POSINT, "posterior samples of the MC predictive")


@hyperparameters
class BayesADMMParams(IVONParams):
    rho: float = hparam(REQUIRED, POSNUM, "BayesADMM ρ", sweep=True)
    tau: float = like(FedLapFuncParams, "tau", REQUIRED, doc="BayesADMM τ, the prior's tempering")
    dual_damping: float = hparam(REQUIRED, POSNUM, "γ = dual_damping · ρ", sweep=True)
    ivon_reset: str = hparam("code", enum("code", "paper"), "what the client's IVON starts from each round")
    pred_samples: int = like(IVONParams, "pred_samples", 32)
    pred_var: str = hparam("posterior", enum("posterior", "code_quirk"),
                           "sample from q̄, or as the authors' code did")


@hyperparameters
class FedIVONParams(IVONParams):
    ess: float = hparam(REQUIRED, POSNUM, "effective sample size λ")
    pred_samples: int = like(IVONParams, "pred_samples", 500)


# --- FOLA, FedCurv (methods/fola.py, fedcurv.py; spec 004) -------------------------------------------

@hyperparameters
class CurvatureParams(Hyperparameters):
    lambda_prior: float = hparam(REQUIRED, NONNEG, "λ: FOLA prior-loss weight (Eq. 16) / FedCurv penalty weight",
                                 sweep=True)
    fisher_norm: str = hparam("code", enum("code", "paper", "ggn"), "Fisher estimator (spec D2); ggn: FedCurv only")
    prior_loss: str = hparam("paper", enum("paper", "released"), "differentiable (paper) or detached (code, D3)")


@hyperparameters
class FOLAParams(CurvatureParams):
    optimizer: str = like(Hyperparameters, "optimizer", "sgd")
    gamma: float = hparam(1e-5, POSNUM, "γ: precision floor of the aggregate (Eq. 25; code eps)", sweep=True)


@hyperparameters
class FedCurvParams(CurvatureParams):
    anchor: str = hparam("clients", enum("clients", "global"),
                         "Shoham et al.'s others' Fishers, or the FOLA code's Ω_S")


# --- FOLA's Table II baselines (methods/scaffold.py, fednova.py, fedbe.py; spec 004 §4.4–4.6) ---------

@hyperparameters
class ServerStepParams(Hyperparameters):
    server_lr: float = like(FedLapFuncParams, "server_lr", 1.0, doc="server learning rate η_g")


@hyperparameters
class FedBEParams(FedAvgParams):
    server_unlabeled: float = hparam(0, {"type": "number", "minimum": 0, "exclusiveMaximum": 1},
                                     "share of the training points held out as unlabeled server data")
    teacher_samples: int = hparam(10, NONNEG_INT, "Gaussian samples in the teacher ensemble")
    var_scale: float = hparam(0.1, POSNUM, "scale of the sampled variance")
    teacher_clients: bool = hparam(False, BOOL, "the client models are teachers too")
    temperature: float = hparam(0.5, POSNUM, "sharpening temperature of the teachers' mean probabilities")
    server_lr: float = like(FedLapFuncParams, "server_lr", 1e-3, doc="distillation SGD learning rate")
    server_momentum: float = hparam(0.9, SHARE, "distillation SGD momentum")
    server_weight_decay: float = hparam(1e-5, NONNEG, "distillation SGD weight decay")
    server_epochs: int = hparam(20, NONNEG_INT, "distillation epochs a round")
    server_batch_size: int = hparam(128, POSINT, "distillation minibatch")


# --- FedEP family (methods/fedep.py; spec 002) -------------------------------------------------------

@hyperparameters
class FedAvgMParams(Hyperparameters):
    optimizer: str = like(Hyperparameters, "optimizer", "sgd", doc="the clients run SGD with momentum (only sgd)")
    momentum: float = hparam(0.9, SHARE, "client SGD momentum")
    weight_decay: float = like(FedAvgParams, "weight_decay")
    server_lr: float = like(ServerStepParams, "server_lr", 1.0, doc="server SGD-M learning rate")
    server_momentum: float = like(FedBEParams, "server_momentum", doc="server SGD-M (also FedEP's client-state optimiser)")
    burn_in: int | None = hparam(None, NONNEG_INT, "rounds of FedAvg-M before EP / FedPA (none: every round)")


@hyperparameters
class FedPAParams(FedAvgMParams):
    shrinkage: float = hparam(0.01, POSNUM, "FedPA ρ")
    mixin_epochs: int = hparam(1, NONNEG_INT, "epochs before the first sample")


@hyperparameters
class FedEPParams(FedAvgMParams):
    variant: str = hparam("I", enum("I", "M", "L", "V"), "tilted approximation")
    server_lr: float = like(FedAvgMParams, "server_lr", 0.5, doc="EP server step, and the FedAvg-M step of the burn-in rounds")
    server_optimizer: str = hparam("sgdm", enum("sgdm", "adagrad"), "EP server optimiser")
    adagrad_eps: float = hparam(1e-5, POSNUM, "optax Adagrad: inside the square root")
    cov_scale: float = hparam(500.0, POSNUM, "c: α_cov = c (init_scale + weight_decay), per data point")
    init_scale: float = hparam(0.0, NONNEG, "a")
    shrinkage: float = like(FedPAParams, "shrinkage", 1e-4, doc="FedEP-M ρ")
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


def _m(key: str, impl: str, params: type[Hyperparameters], doc: str, **kw) -> MethodSpec:
    return MethodSpec(key=key, implementation=f"fedbayes.methods.{impl}", params=params, doc=doc, **kw)


LOCAL = frozenset({"local_models"})

SPECS: list[MethodSpec] = [
    _m("fedavg", "fedavg:FedAvg", FedAvgParams, "FedAvg (McMahan et al. 2017)", needs=LOCAL),
    # numerics 2: the proximal / dual terms' gradients added in closed form (extra_grad), not through autograd
    _m("fedprox", "prox:FedProx", FedProxParams, "FedProx (Li et al. 2020)", numerics=2, needs=LOCAL),
    _m("fedadmm", "admm:FedADMM", ProxTerm, "FedADMM", numerics=2),
    # numerics 2: also the feddyn@avg prediction (the clients' plain average) beside the cloud model
    _m("feddyn", "admm:FedDyn", FedDynParams, "FedDyn (Acar et al. 2021)", numerics=2,
       variants={"": "point", "avg": "point"}),
    _m("fedlap", "fedlap:FedLap", FedLapParams, "FedLap, diagonal (spec 000)", numerics=2),
    _m("fedlap_cov", "fedlap:FedLapCov", FedLapParams, "FedLap with the Laplace covariance (spec 000)", numerics=2),
    _m("fedlap_func", "fedlap_func:FedLapFunc", FedLapFuncParams, "FedLap-Func (spec 000)"),
    _m("bayesadmm", "bayesadmm:BayesADMM", BayesADMMParams, "BayesADMM with IVON clients (spec 001)",
       variants=POSTERIOR_AND_MEAN),
    _m("fedivon", "fedivon:FedIVON", FedIVONParams, "FedIVON (spec 003)", variants=POSTERIOR_AND_MEAN),
    _m("fola", "fola:FOLA", FOLAParams, "FOLA (spec 004)", needs=LOCAL),
    _m("fedcurv", "fedcurv:FedCurv", FedCurvParams, "FedCurv (Shoham et al. 2019; spec 004)", needs=LOCAL),
    _m("fedavgm", "fedep:FedAvgM", FedAvgMParams, "FedAvg with SGD-M clients and server (spec 002)"),
    _m("fedpa", "fedep:FedPA", FedPAParams, "FedPA (Al-Shedivat et al. 2021; spec 002)"),
    _m("fedep", "fedep:FedEP", FedEPParams, "FedEP (Guo et al. 2023; spec 002)", variants=EP_AND_MC),
    _m("fedsep", "fedep:FedSEP", FedEPParams, "FedSEP, stateless FedEP (spec 002)", variants=EP_AND_MC),
    _m("scaffold", "scaffold:Scaffold", ServerStepParams, "SCAFFOLD (Karimireddy et al. 2020; spec 004 §4.4)",
       needs=LOCAL),
    _m("fednova", "fednova:FedNova", ServerStepParams, "FedNova (Wang et al. 2020; spec 004 §4.5)", needs=LOCAL),
    _m("fedbe", "fedbe:FedBE", FedBEParams, "FedBE (Chen & Chao 2021; spec 004 §4.6)",
       needs=LOCAL | {"server_data"}),
    # the FedEP paper's table rows: FedEP / FedSEP with the tilted approximation fixed
    *[_m(f"{name}_{v.lower()}", f"fedep:{cls}", FedEPParams, f"{cls} with variant {v} (spec 002)",
         variants=EP_AND_MC, fixed={"variant": v})
      for name, cls in (("fedep", "FedEP"), ("fedsep", "FedSEP")) for v in "IMLV"],
]
