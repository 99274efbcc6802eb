"""Classification metrics for point and Bayesian (sampled) predictions: the definitions the metric
registry (``fedbayes.eval.registry``) names, and ``metric_values``, which computes every metric the registry
lists from a round's predictions.

Pinned definitions (project design). p̄(x) = mean over S posterior samples of
softmax (S = 1 for point estimates; average probabilities, not logits). All
functions below take log p̄ as an (N, C) array of LOG-probabilities and int
labels (N,), work in float64 and return python floats.

- accuracy = mean[argmax p̄ = y];  NLL = −mean log p̄_y (nats).
- ECE: top-label confidence, 15 equal-width bins on [0, 1], L1 norm, weights
  n_b / N. MCE = max over non-empty bins of |acc_b − conf_b|. Bins are closed on
  the right, (lower, upper] (Guo et al. 2017); confidence exactly 0 goes into the
  first bin. (Confidence is ≥ 1/C anyway.)
- Brier: mean_n Σ_c (p̄_nc − 1[y_n = c])², multi-class form, range [0, 2]
  (for C = 2 this is twice the binary Brier score).
- OOD AUROC: in-distribution test set vs OOD set, positive = OOD, score =
  predictive entropy H[p̄] (and score = 1 − max p̄); exact rank AUROC with ties
  counted as 1/2 (Mann–Whitney U).
"""
from __future__ import annotations

import numpy as np
from scipy.special import log_softmax, logsumexp

from fedbayes.eval.registry import Metric, evaluated


def average_ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks, ties sharing their average rank (scipy.stats.rankdata's default, whose import
    alone takes 0.6 s of every training and evaluation process)."""
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    return (np.cumsum(counts) - (counts - 1) / 2.0)[inverse.reshape(-1)]


def _np(x) -> np.ndarray:
    if hasattr(x, "detach"):  # torch tensor
        x = x.detach().cpu()
    return np.asarray(x)


def _check_logp(logp, name: str = "logp") -> np.ndarray:
    logp = _np(logp).astype(np.float64)
    if logp.ndim != 2 or logp.shape[0] == 0 or logp.shape[1] == 0:
        raise ValueError(f"{name} must be a non-empty (N, C) array, got shape {logp.shape}")
    if np.isnan(logp).any():
        raise ValueError(f"{name} contains NaN")
    return logp


def _check(logp, y) -> tuple[np.ndarray, np.ndarray]:
    logp = _check_logp(logp)
    y = _np(y)
    if y.ndim != 1 or y.shape[0] != logp.shape[0]:
        raise ValueError(f"labels must have shape ({logp.shape[0]},), got {y.shape}")
    if not np.issubdtype(y.dtype, np.integer):
        raise ValueError(f"labels must be integers, got dtype {y.dtype}")
    C = logp.shape[1]
    if y.min() < 0 or y.max() >= C:
        raise ValueError(f"labels must lie in [0, {C - 1}], got range [{y.min()}, {y.max()}]")
    return logp, y.astype(np.int64)


def predictive_logprobs(sample_logits) -> np.ndarray:
    """log p̄ (N, C) = logsumexp_s log_softmax(logits_s) − log S. (N, C) input means S = 1."""
    z = _np(sample_logits).astype(np.float64)
    if z.ndim == 2:
        z = z[None]
    if z.ndim != 3 or 0 in z.shape:
        raise ValueError(f"sample_logits must be non-empty (S, N, C) or (N, C), got {z.shape}")
    return logsumexp(log_softmax(z, axis=-1), axis=0) - np.log(z.shape[0])


def accuracy(logp, y) -> float:
    logp, y = _check(logp, y)
    return float(np.mean(logp.argmax(axis=1) == y))


def nll(logp, y) -> float:
    logp, y = _check(logp, y)
    return float(-np.mean(logp[np.arange(len(y)), y]))


def brier(logp, y) -> float:
    logp, y = _check(logp, y)
    p = np.exp(logp)
    p[np.arange(len(y)), y] -= 1.0
    return float(np.mean(np.sum(p**2, axis=1)))


def calibration(logp, y, n_bins: int = 15) -> dict:
    """ECE (L1, weights n_b/N), MCE and per-bin table over (lower, upper] bins."""
    logp, y = _check(logp, y)
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    conf = np.exp(logp.max(axis=1))
    correct = (logp.argmax(axis=1) == y).astype(np.float64)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    # side="left": conf == edges[i] lands in bin i-1, i.e. (edges[i-1], edges[i]]; conf 0 -> bin 0
    idx = np.clip(np.searchsorted(edges, conf, side="left") - 1, 0, n_bins - 1)
    count = np.bincount(idx, minlength=n_bins)
    nz = np.maximum(count, 1)
    acc_b = np.bincount(idx, weights=correct, minlength=n_bins) / nz
    conf_b = np.bincount(idx, weights=conf, minlength=n_bins) / nz
    gap = np.abs(acc_b - conf_b)
    bins = [
        dict(lower=float(edges[b]), upper=float(edges[b + 1]), count=int(count[b]),
             acc=float(acc_b[b]) if count[b] else float("nan"),
             conf=float(conf_b[b]) if count[b] else float("nan"))
        for b in range(n_bins)
    ]
    return {"ece": float(np.sum(count * gap) / len(y)), "mce": float(gap[count > 0].max()), "bins": bins}


def entropy(logp) -> np.ndarray:
    """Predictive entropy H[p̄] per row in nats, with 0·log 0 = 0."""
    logp = _check_logp(logp)
    p = np.exp(logp)
    return -np.sum(p * np.where(p > 0, logp, 0.0), axis=1)


def auroc(scores_neg, scores_pos) -> float:
    """Exact AUROC = P(s_pos > s_neg) + 0.5 P(s_pos = s_neg) via Mann–Whitney U (average ranks)."""
    neg = _np(scores_neg).astype(np.float64).ravel()
    pos = _np(scores_pos).astype(np.float64).ravel()
    if neg.size == 0 or pos.size == 0:
        raise ValueError("auroc needs at least one negative and one positive score")
    if np.isnan(neg).any() or np.isnan(pos).any():
        raise ValueError("auroc scores contain NaN")
    ranks = average_ranks(np.concatenate([neg, pos]))
    u = ranks[neg.size:].sum() - pos.size * (pos.size + 1) / 2.0
    return float(u / (pos.size * neg.size))


def ood_auroc(logp_in, logp_out) -> dict:
    """AUROC of in-distribution (negative) vs OOD (positive) by entropy and by 1 − max p̄."""
    logp_in, logp_out = _check_logp(logp_in, "logp_in"), _check_logp(logp_out, "logp_out")
    if logp_in.shape[1] != logp_out.shape[1]:
        raise ValueError(f"class count differs: {logp_in.shape[1]} vs {logp_out.shape[1]}")
    maxprob = lambda lp: 1.0 - np.exp(lp.max(axis=1))  # noqa: E731
    return {
        "auroc_entropy": auroc(entropy(logp_in), entropy(logp_out)),
        "auroc_maxprob": auroc(maxprob(logp_in), maxprob(logp_out)),
    }


def ece(logp, y) -> float:
    return calibration(logp, y)["ece"]


def mce(logp, y) -> float:
    return calibration(logp, y)["mce"]


def auroc_entropy(logp_in, logp_out) -> float:
    return ood_auroc(logp_in, logp_out)["auroc_entropy"]


def auroc_maxprob(logp_in, logp_out) -> float:
    return ood_auroc(logp_in, logp_out)["auroc_maxprob"]


def metric_values(logp, y, logp_ood=None, metrics: list[Metric] | None = None) -> dict[str, float]:
    """Registry name → value of every metric evaluation computes (``metrics``: those the registry lists, in
    its order): a ``test`` metric from ``logp`` and ``y``, an ``ood`` one from ``logp`` and ``logp_ood``
    (none without an OOD set)."""
    logp, y = _check(logp, y)
    if logp_ood is not None:
        logp_ood = _check_logp(logp_ood, "logp_ood")
    out = {}
    for m in evaluated() if metrics is None else metrics:
        if m.kind == "test":
            out[m.name] = float(m.function()(logp, y))
        elif logp_ood is not None:
            out[m.name] = float(m.function()(logp, logp_ood))
    return out


def classification_metrics(logp, y, logp_ood=None) -> dict[str, float]:
    """``metric_values`` by key (acc, nll, ece, mce, brier; auroc_entropy, auroc_maxprob when logp_ood is
    given)."""
    return {name.partition("/")[2]: v for name, v in metric_values(logp, y, logp_ood).items()}
