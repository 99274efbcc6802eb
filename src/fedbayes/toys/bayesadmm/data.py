"""The toys' data: the mnist5k digits as features and class-pair clients (Figs. 3b, 3a), and Fig. 4's
two-client 2-D outlier data.

mnist5k (spec 001 §4.8).  The project's ``mnist5k`` (5,000 MNIST test digits, 500 per class) is stored
sorted by label, so "the first N images" of the authors' (shuffled) MNIST training file is replaced by the
first N/10 images of each class (``first_n_balanced``), class-interleaved.  Images /255, nearest-neighbour
downsampling as PyTorch's ``interpolate(mode="nearest")`` (source index ⌊i·28/size⌋: every 4th pixel for
7×7, every 2nd for 14×14).  Clients = class pairs [(0,1),(2,3),(4,5),(6,7),(8,9)] (spec F.1).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from fedbayes import data as ds

CLASS_PAIRS = ((0, 1), (2, 3), (4, 5), (6, 7), (8, 9))  # spec F.1: K = 5 clients of two classes each
N_CLASSES = 10                                          # the digits


def load_mnist5k(root: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """The project's ``mnist5k`` digits (uint8 ``(5000, 28, 28)``, labels ``(5000,)``; they are in x_test)."""
    a = ds.load("mnist5k", root=root)
    return a.x_test, a.y_test


def downsample_nearest(images: np.ndarray, size: int) -> np.ndarray:
    """Nearest-neighbour resize of ``(N, H, W)`` images to ``(N, size, size)``: source index ⌊i·H/size⌋."""
    h, w = images.shape[-2:]
    rows = np.floor(np.arange(size) * h / size).astype(int)
    cols = np.floor(np.arange(size) * w / size).astype(int)
    return images[..., rows[:, None], cols[None, :]]


def first_n_balanced(labels: np.ndarray, n: int) -> np.ndarray:
    """Indices of the first ``n`` examples when the classes are interleaved (1st of every class, then 2nd, ...).

    For a label-sorted set such as ``mnist5k`` this stands in for "the first n images" of a shuffled set;
    it gives ⌈n/C⌉ or ⌊n/C⌋ images per class, each class's earliest ones, returned in increasing index order.
    """
    labels = np.asarray(labels)
    rank = np.empty(len(labels), dtype=int)
    for c in np.unique(labels):
        idx = np.flatnonzero(labels == c)
        rank[idx] = np.arange(len(idx))
    order = np.lexsort((labels, rank))  # by within-class rank, then by class
    return np.sort(order[:n])


def mnist_features(images: np.ndarray, labels: np.ndarray, n: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """First n (class-balanced) images, /255, nearest-downsampled to size×size, flattened: ``(n, size²)``, labels."""
    idx = first_n_balanced(labels, n)
    x = downsample_nearest(np.asarray(images, dtype=np.float64)[idx] / 255.0, size)
    return x.reshape(len(idx), -1), np.asarray(labels)[idx]


def split_pairs(labels: np.ndarray, pairs: Sequence[Sequence[int]] = CLASS_PAIRS) -> list[np.ndarray]:
    """Index sets of the clients: client k holds the examples whose label is in ``pairs[k]``."""
    return [np.flatnonzero(np.isin(labels, p)) for p in pairs]


def outlier_data(seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Fig. 4's two clients as ``(X, y)`` with X = (x₁, x₂, 1) (bias feature appended, d = 3).

    Client 1: 45 pts N((−5,0), 0.6²I) + 5 pts N((−5,0), 6²I) + the outliers (−2.5,−2.5), (−2.4,−2.6),
    (−2.5,−2.4), label 1; 50 pts N((5,0), 0.6²I), label 0.  Client 2: 100 pts N((−3.2,0.2), 0.25²I), label 1;
    100 pts N((−0.4,0.9), 0.25²I), label 0.  ``np.random.RandomState(seed)`` drawn in that order (the
    authors' draw order is not known, so the points differ from theirs; the construction is the same).
    """
    rng = np.random.RandomState(seed)
    ones1 = np.vstack([rng.randn(45, 2) * 0.6 + [-5.0, 0.0], rng.randn(5, 2) * 6.0 + [-5.0, 0.0],
                       [[-2.5, -2.5], [-2.4, -2.6], [-2.5, -2.4]]])
    zeros1 = rng.randn(50, 2) * 0.6 + [5.0, 0.0]
    ones2 = rng.randn(100, 2) * 0.25 + [-3.2, 0.2]
    zeros2 = rng.randn(100, 2) * 0.25 + [-0.4, 0.9]
    out = []
    for ones, zeros in ((ones1, zeros1), (ones2, zeros2)):
        pts = np.vstack([ones, zeros])
        out.append((np.hstack([pts, np.ones((len(pts), 1))]), np.r_[np.ones(len(ones)), np.zeros(len(zeros))]))
    return out
