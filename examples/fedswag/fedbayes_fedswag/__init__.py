"""FedSWAG-diag, an example Bayesian method from outside fedbayes.

Client k: FedAvg's local training from the server's mean, then ``swag_epochs`` more epochs of the same
optimiser whose iterates θ_1 … θ_T give a diagonal Gaussian (SWAG-diagonal, Maddox et al. 2019):
m_k = mean θ_t, v_k = max(mean θ_t² − m_k², ``var_floor``).
Server: the product of the client Gaussians, precision-weighted:
λ = Σ_k 1/v_k,  m = (Σ_k m_k / v_k) / λ.
Predictions: ``fedswag``, the mean softmax over ``pred_samples`` networks θ ~ N(m, 1/λ) (sampled), and
``fedswag@mean``, the network at m (point).

Torch-free: fedbayes reads this spec to validate params.yaml and plan the DAG; the tensor math
(``algorithm.py``) is imported only by a training job.
"""

from fedbayes.methods.fedavg import Params as FedAvgParams
from fedbayes.methods.hyperparameters import POSINT, POSNUM, hparam, hyperparameters
from fedbayes.methods.spec import MethodSpec


@hyperparameters
class Params(FedAvgParams):
    """FedAvg's local training (lr, batch_size, local_epochs, optimizer, weight_decay, ...) and SWAG's."""

    swag_epochs: int = hparam(1, POSINT, "epochs after local training whose iterates give the client's moments",
                              sweep=True)
    var_floor: float = hparam(1.0e-6, POSNUM, "the least variance of a weight in a client's Gaussian", sweep=True)
    pred_samples: int = hparam(16, POSINT, "networks drawn for the sampled predictive")


SPEC = MethodSpec(
    key="fedswag",
    implementation="fedbayes_fedswag.algorithm:FedSWAG",
    params=Params,
    variants={"": "samples", "mean": "point"},   # the posterior predictive, and the network at its mean
    numerics=1,
    needs=frozenset({"local_models"}),            # each client's SWAG mean is its model (local accuracy)
    doc="FedSWAG-diag: SWAG-diagonal client Gaussians, their product on the server (an out-of-tree example)",
)
