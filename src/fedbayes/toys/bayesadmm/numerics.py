"""Dense numerics the toys share: Newton's method with Hessian modification, positive-definite solves,
symmetrisation, and running a function with one BLAS thread."""

from __future__ import annotations

import functools
from typing import Callable

import numpy as np
from scipy import linalg


class ClientDivergence(RuntimeError):
    """A client subproblem has no (local) minimum that Newton's method reaches from the server's mean."""


def one_blas_thread(fn):
    """Run ``fn`` with one BLAS thread (threadpoolctl, if installed): its 490×490 solves ran ~1000× slower
    with two BLAS threads on a loaded two-core machine."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:  # pragma: no cover
            return fn(*args, **kwargs)
        with threadpool_limits(limits=1, user_api="blas"):
            return fn(*args, **kwargs)
    return wrapper


def newton(fun: Callable, grad_hess: Callable, x0: np.ndarray, tol: float = 1e-12, max_iter: int = 100) -> np.ndarray:
    """Local minimiser of ``fun`` by Newton's method from ``x0``: Armijo backtracking, and where the Hessian
    is not positive definite the smallest tried shift h + εI that is (Hessian modification); stops when an
    unmodified Newton step is below ``tol·(1 + ‖x‖)``.  From any start the first step is the exact
    minimiser of a convex quadratic.  (The Laplace-mode BayesADMM client objective is bounded below only
    locally when V_k ≻ ρS̄ in some direction, see ``solvers.gaussian_admm``; this finds the local minimum
    near x0.)"""
    x = np.array(x0, dtype=np.float64)
    for _ in range(max_iter):
        g, h = grad_hess(x)
        step, shifted = pd_solve(h, g)
        small = not shifted and np.linalg.norm(step) <= tol * (1.0 + np.linalg.norm(x))
        f0, t, slope = fun(x), 1.0, float(g @ step)
        while t > 1e-10 and not fun(x - t * step) <= f0 - 1e-4 * t * slope + 1e-12 * abs(f0):
            t *= 0.5
        x = x - t * step
        if small:
            return x
        if not np.all(np.isfinite(x)):
            break
    raise ClientDivergence(f"Newton did not converge in {max_iter} steps (last |x| = {np.linalg.norm(x):.3g})")


def pd_solve(h: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, bool]:
    """(h + εI)⁻¹g with ε = 0 if h is positive definite, else the smallest of 1e-8·s·2^j that makes it so."""
    eye, shift = np.eye(len(h)), 0.0
    scale = max(1.0, float(np.abs(np.diag(h)).max()))
    while True:
        try:
            return linalg.cho_solve(linalg.cho_factor(h + shift * eye), g), shift > 0
        except linalg.LinAlgError:
            shift = 1e-8 * scale if shift == 0 else 2.0 * shift


def sym(a: np.ndarray) -> np.ndarray:
    """The symmetric part ½(a + aᵀ) of (a stack of) square matrices."""
    return 0.5 * (a + np.swapaxes(a, -1, -2))
