"""Hyperparameter groups several methods' ``Params`` extend (torch-free; ``fedbayes.methods.hyperparameters``).
A default is the value the implementation uses when params.yaml gives none (``REQUIRED``: it must be
given); a run records the defaults it read (run.json ``defaults``, ``fedbayes.study.rerun``)."""

from __future__ import annotations

from fedbayes.methods.hyperparameters import (NONNEG, POSINT, POSNUM, REQUIRED, SHARE, Hyperparameters, enum, hparam,
                                              hyperparameters, like)


@hyperparameters
class WeightDecay(Hyperparameters):
    weight_decay: float = hparam(0.0, NONNEG, "(wd/2)‖w‖² added to the client loss (FedIVON App. B)", sweep=True)


@hyperparameters
class ProxTerm(Hyperparameters):
    alpha: float = hparam(REQUIRED, NONNEG, "α of the proximal / dual term (α/2)‖w − w_g‖²; 0 gives FedAvg",
                          sweep=True)
    prox_norm: str = hparam("squared", enum("squared", "unsquared"),
                            "½‖w − w_g‖² (papers) or ½‖w − w_g‖ (the FedLap authors' baseline code)",
                            sweep=True, code_default=True)


@hyperparameters
class IVONParams(Hyperparameters):
    delta: float = hparam(REQUIRED, POSNUM, "δ, the prior precision", sweep=True)
    h0: float = hparam(REQUIRED, POSNUM, "IVON initial Hessian", sweep=True)
    beta1: float = hparam(0.9, SHARE, "IVON gradient momentum")
    beta2: float = hparam(0.99999, SHARE, "IVON Hessian momentum")
    mc_samples: int = hparam(1, POSINT, "MC samples per training step")
    clip_radius: float | None = hparam(None, {"type": ["number", "null"], "exclusiveMinimum": 0},
                                       "IVON's element-wise update clip (null: none)")
    pred_samples: int = hparam(REQUIRED, POSINT, "posterior samples of the MC predictive")


@hyperparameters
class CurvatureParams(Hyperparameters):
    needed = ("lambda_prior",)

    lambda_prior: float = hparam(REQUIRED, NONNEG, "λ: FOLA prior-loss weight (Eq. 16) / FedCurv penalty weight",
                                 sweep=True)
    fisher_norm: str = hparam("code", enum("code", "paper", "ggn"), "Fisher estimator (spec D2); ggn: FedCurv only")
    prior_loss: str = hparam("paper", enum("paper", "released"), "differentiable (paper) or detached (code, D3)")


@hyperparameters
class ServerStep(Hyperparameters):
    server_lr: float = hparam(1.0, POSNUM, "server learning rate η_g", sweep=True)


__all__ = ["CurvatureParams", "IVONParams", "ProxTerm", "ServerStep", "WeightDecay", "like"]
