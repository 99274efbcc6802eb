"""FedBE (Chen & Chao 2021; spec 004 §4.6): FedAvg, then distillation from a Bayesian ensemble of
teachers on unlabeled server data."""

from __future__ import annotations

from fedbayes.methods.core.params import WeightDecay
from fedbayes.methods.hyperparameters import BOOL, NONNEG, NONNEG_INT, POSINT, POSNUM, SHARE, hparam, hyperparameters
from fedbayes.methods.spec import MethodSpec


@hyperparameters
class Params(WeightDecay):
    server_unlabeled: float = hparam(0, {"type": "number", "minimum": 0, "exclusiveMaximum": 1},
                                     "share of the training points held out as unlabeled server data")
    teacher_samples: int = hparam(10, NONNEG_INT, "Gaussian samples in the teacher ensemble")
    var_scale: float = hparam(0.1, POSNUM, "scale of the sampled variance")
    teacher_clients: bool = hparam(False, BOOL, "the client models are teachers too")
    temperature: float = hparam(0.5, POSNUM, "sharpening temperature of the teachers' mean probabilities")
    server_lr: float = hparam(1e-3, POSNUM, "distillation SGD learning rate", sweep=True)
    server_momentum: float = hparam(0.9, SHARE, "distillation SGD momentum")
    server_weight_decay: float = hparam(1e-5, NONNEG, "distillation SGD weight decay")
    server_epochs: int = hparam(20, NONNEG_INT, "distillation epochs a round")
    server_batch_size: int = hparam(128, POSINT, "distillation minibatch")


SPEC = MethodSpec(key="fedbe", implementation="fedbayes.methods.fedbe.algorithm:FedBE", params=Params,
                  doc="FedBE (Chen & Chao 2021; a FOLA paper baseline)", needs=frozenset({"local_models", "server_data"}),
                  family="online Laplace and FOLA's baselines (SGD)", colour="#7f7f7f")
