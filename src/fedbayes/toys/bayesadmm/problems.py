"""The toys' problems: client losses (ridge sums of squares, binary logistic), the global MAP objective
F(θ) = Σ_k ℓ_k(θ) + (δ/2)‖θ‖² and its minimiser, Fig. 3b's federated ridge problem, and Fig. 3a's
softmax clients with the variational objective of a diagonal Gaussian."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple, Sequence

import numpy as np

from fedbayes.toys.bayesadmm.data import CLASS_PAIRS, N_CLASSES, mnist_features, split_pairs
from fedbayes.toys.bayesadmm.numerics import newton

if TYPE_CHECKING:
    import torch


class Quadratic(NamedTuple):
    """ℓ(θ) = ½θᵀAθ − bᵀθ + c (a ridge client's sum of squares)."""

    A: np.ndarray
    b: np.ndarray
    c: float = 0.0

    @property
    def dim(self) -> int:
        return self.A.shape[0]

    def value(self, theta):
        return 0.5 * theta @ self.A @ theta - self.b @ theta + self.c

    def grad_hess(self, theta):
        return self.A @ theta - self.b, self.A


class Logistic(NamedTuple):
    """ℓ(θ) = Σ_n [log(1 + e^{z_n}) − y_n z_n],  z = Xθ (binary cross-entropy, sum over the client's data)."""

    X: np.ndarray
    y: np.ndarray

    @property
    def dim(self) -> int:
        return self.X.shape[1]

    def value(self, theta):
        z = self.X @ theta
        return float(np.sum(np.logaddexp(0.0, z) - self.y * z))

    def grad_hess(self, theta):
        p = 1.0 / (1.0 + np.exp(-(self.X @ theta)))
        return self.X.T @ (p - self.y), (self.X * (p * (1.0 - p))[:, None]).T @ self.X


def ridge_clients(x: np.ndarray, targets: np.ndarray, client_idx: Sequence[np.ndarray]) -> list[Quadratic]:
    """Clients ℓ_k(W) = ½‖X_k W − Y_k‖²_F of a multi-output linear model, θ = W.ravel() (W is d×C, row-major):
    A_k = X_kᵀX_k ⊗ I_C, b_k = vec(X_kᵀY_k), c_k = ½‖Y_k‖²."""
    targets = targets.reshape(len(targets), -1)
    n_out = targets.shape[1]
    out = []
    for idx in client_idx:
        xk, yk = x[idx], targets[idx]
        out.append(Quadratic(np.kron(xk.T @ xk, np.eye(n_out)), (xk.T @ yk).ravel(), 0.5 * float(np.sum(yk ** 2))))
    return out


def objective(clients: Sequence, delta: float, theta: np.ndarray) -> float:
    """Global MAP objective F(θ) = Σ_k ℓ_k(θ) + (δ/2)‖θ‖²."""
    return float(sum(cl.value(theta) for cl in clients) + 0.5 * delta * theta @ theta)


def global_map(clients: Sequence, delta: float, tol: float = 1e-12) -> np.ndarray:
    """argmin F (Newton; one step for quadratics: θ* = (δI + ΣA_k)⁻¹Σb_k)."""
    p = clients[0].dim

    def fun(t):
        return objective(clients, delta, t)

    def grad_hess(t):
        gh = [cl.grad_hess(t) for cl in clients]
        return sum(g for g, _ in gh) + delta * t, sum(h for _, h in gh) + delta * np.eye(p)

    return newton(fun, grad_hess, np.zeros(p), tol=tol)


# ------------------------------------------------------------------------------------ Fig. 3b (ridge)
class RidgeProblem(NamedTuple):
    clients: list
    delta: float
    solution: np.ndarray  # exact ridge solution θ* = (δI + ΣA_k)⁻¹Σb_k
    optimum: float        # F(θ*)


def ridge_problem(x: np.ndarray, labels: np.ndarray, delta: float, pairs: Sequence[Sequence[int]] = CLASS_PAIRS,
                  n_classes: int = N_CLASSES) -> RidgeProblem:
    """Federated ridge regression on features ``x`` ``(N, d)`` with one-hot targets, clients = class pairs."""
    targets = np.eye(n_classes)[np.asarray(labels)]
    clients = ridge_clients(np.asarray(x, dtype=np.float64), targets, split_pairs(labels, pairs))
    theta = global_map(clients, delta)
    return RidgeProblem(clients, float(delta), theta, objective(clients, delta, theta))


def mnist_ridge_problem(images: np.ndarray, labels: np.ndarray, *, n: int, size: int, delta: float) -> RidgeProblem:
    """Fig. 3b's problem: first n (class-balanced) digits, /255, size×size nearest, d = size², one-hot, K = 5."""
    x, y = mnist_features(images, labels, n, size)
    return ridge_problem(x, y, delta)


# --------------------------------------------------------------- Fig. 3a (diagonal Gaussians, softmax)
class SoftmaxData(NamedTuple):
    """Clients of a linear softmax model without bias, padded to a common size: ``x`` ``(K, n, d)``,
    one-hot ``y`` ``(K, n, C)``, ``mask`` ``(K, n)`` (1 for a real example), ``sizes`` ``(K,)`` = N_k."""

    x: "torch.Tensor"
    y: "torch.Tensor"
    mask: "torch.Tensor"
    sizes: "torch.Tensor"


def softmax_data(x: np.ndarray, labels: np.ndarray, pairs: Sequence[Sequence[int]] = CLASS_PAIRS,
                 n_classes: int = N_CLASSES) -> SoftmaxData:
    """Split ``(N, d)`` features by class pairs into padded float64 tensors (``SoftmaxData``)."""
    import torch

    idx = split_pairs(labels, pairs)
    n = max(len(i) for i in idx)
    K, d = len(idx), x.shape[1]
    X, Y, M = np.zeros((K, n, d)), np.zeros((K, n, n_classes)), np.zeros((K, n))
    for k, i in enumerate(idx):
        X[k, :len(i)], Y[k, np.arange(len(i)), np.asarray(labels)[i]], M[k, :len(i)] = x[i], 1.0, 1.0
    t = lambda a: torch.from_numpy(a).to(torch.float64)
    return SoftmaxData(t(X), t(Y), t(M), t(np.array([len(i) for i in idx], dtype=np.float64)))


def mnist_softmax_data(images: np.ndarray, labels: np.ndarray, *, n: int, size: int,
                       pairs: Sequence[Sequence[int]] = CLASS_PAIRS) -> SoftmaxData:
    """Fig. 3a's data: first n (class-balanced) digits, /255, size×size nearest (d = 196), K = 5 class pairs."""
    x, y = mnist_features(images, labels, n, size)
    return softmax_data(x, y, pairs)


def mean_ce_grad(data: SoftmaxData, theta: "torch.Tensor") -> "torch.Tensor":
    """∇ of each client's mean cross-entropy (1/N_k)Σ_n CE(x_nᵀW, y_n) at θ = W.ravel(), shape ``(K, d·C)``."""
    K, n, d = data.x.shape
    W = theta.view(K, d, -1)
    p = (data.x @ W).softmax(-1)
    return ((data.x.transpose(1, 2) @ ((p - data.y) * data.mask[..., None])) / data.sizes[:, None, None]).reshape(K, -1)


def variational_objective(data: SoftmaxData, m: "torch.Tensor", s: "torch.Tensor", delta: float, *,
                          n_samples: int, seed: int) -> float:
    """E_q̄[Σ_k Σ_n CE] + ½Σδm̄² + ½Σ log s̄ + ½Σ δ/s̄ (= KL(q̄‖N(0, δ⁻¹I)) + E_q̄[loss] up to a constant).

    The expectation is a Monte-Carlo estimate with ``n_samples`` draws of the logits: for a linear model
    under q̄ = N(m̄, diag(1/s̄)) the logits of example n are independent Gaussians with mean x_nᵀM̄ and
    variance (x_n²)ᵀ(1/S̄) per class (local reparameterisation; same expectation as sampling weights)."""
    import torch

    K, n, d = data.x.shape
    M, Var = m.view(d, -1), (1.0 / s).view(d, -1)
    x = data.x.reshape(K * n, d)
    keep = data.mask.reshape(-1) > 0
    x, y = x[keep], data.y.reshape(K * n, -1)[keep]
    mu, sd = x @ M, ((x * x) @ Var).sqrt()
    gen = torch.Generator().manual_seed(int(seed))
    total = 0.0
    for _ in range(int(n_samples)):
        z = mu + sd * torch.randn(mu.shape, generator=gen, dtype=mu.dtype)
        total += float((z.logsumexp(-1) - (z * y).sum(-1)).sum())
    kl = 0.5 * float((delta * m * m).sum() + s.log().sum() + (delta / s).sum())
    return total / n_samples + kl
