"""FedPA (Al-Shedivat et al. 2021; FedEP spec 002 §2.14), after FedAvg-M's ``burn_in`` rounds
(``fedbayes.methods.fedavgm.algorithm``): from the ℓ = E − mixin iterate-averaged samples (one per epoch
after the mix-in epochs) with mean μ̂ and sample covariance Ŝ, Σ̂ = ρ̂ I + (1 − ρ̂) Ŝ,
ρ̂ = 1/(1 + (ℓ−1)ρ); the client sends Σ̂⁻¹(θ_g − μ̂) (Woodbury, O(ℓ² d)) in place of FedAvg's Δ_k; the
server is FedAvg-M's. No posterior: it predicts with θ_g.
"""

from __future__ import annotations

import torch

from fedbayes.methods.fedavgm.algorithm import FedAvgM


def shrinkage_solve(samples: torch.Tensor, v: torch.Tensor, rho: float) -> torch.Tensor:
    """Σ̂⁻¹ v for FedPA's Σ̂ = ρ̂ I + (1 − ρ̂) Ŝ, Ŝ the sample covariance (ℓ − 1 denominator) of the
    ℓ rows of ``samples``, ρ̂ = 1/(1 + (ℓ − 1) ρ). Woodbury with U = centred samples (d × ℓ):
    Σ̂⁻¹ v = (v − U (ρ̂/β I + UᵀU)⁻¹ Uᵀ v) / ρ̂,  β = (1 − ρ̂)/(ℓ − 1). One sample: Σ̂ = I."""
    ell = samples.shape[0]
    if ell < 2:
        return v.clone()
    rho_hat = 1.0 / (1.0 + (ell - 1) * rho)
    beta = (1.0 - rho_hat) / (ell - 1)
    U = (samples - samples.mean(0)).T.double()
    small = (rho_hat / beta) * torch.eye(ell, dtype=U.dtype, device=U.device) + U.T @ U
    vv = v.double()
    return ((vv - U @ torch.linalg.solve(small, U.T @ vv)) / rho_hat).to(v.dtype)


class FedPA(FedAvgM):
    def client_update(self, k, down, state, data, rng, rnd):
        if rnd <= self.burn_in():
            return super().client_update(k, down, state, data, rng, rnd)
        samples, loss = self.sgd_epochs(down["w"], data, rng, int(self.p.local_epochs), average=True)
        return self.posterior_message(down, samples), state, loss

    def client_updates_after_burn_in(self, ks, down, states, datas, rngs, rnd):
        """The sampling rounds trained together: the epoch-mean iterates of every client from one batched
        loop (``sgd_epochs_batched``), then each client's Woodbury solve."""
        out = self.sgd_epochs_batched(down["w"], datas, rngs, int(self.p.local_epochs), average=True)
        if out is None:
            return None
        return [(self.posterior_message(down, samples), st, loss) for (samples, loss), st in zip(out, states)]

    def posterior_message(self, down, samples):
        """Σ̂⁻¹(θ_g − μ̂) from the epoch-mean iterates after the mix-in epochs."""
        mixin, epochs = int(self.p.mixin_epochs), int(self.p.local_epochs)
        samples = samples[min(mixin, epochs - 1):]
        return {"delta": shrinkage_solve(samples, down["w"] - samples.mean(0), float(self.p.shrinkage))}
