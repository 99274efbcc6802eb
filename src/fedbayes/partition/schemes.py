"""Federated client partition schemes.

Every function takes an explicit :class:`numpy.random.Generator` and never
touches numpy's global random state, so a partition is a pure function of
``(labels, n_clients, scheme, parameters, seed)``.

All schemes return a list of ``n_clients`` sorted ``int64`` arrays of indices
into the ``labels`` array that was passed in.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

__all__ = [
    "SCHEMES",
    "PARTITION_SCHEMES",
    "Scheme",
    "subsample",
    "iid",
    "dirichlet",
    "label_dirichlet",
    "shards",
    "make_partition",
    "class_counts",
]


# --------------------------------------------------------------------------- helpers


def _check_rng(rng: Any) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise TypeError(
            f"rng must be a numpy.random.Generator (e.g. np.random.default_rng(seed)), "
            f"got {type(rng).__name__}"
        )
    return rng


def _as_labels(labels: Any) -> np.ndarray:
    """Validate labels: 1-D, non-negative integers. Returns an int64 array."""
    arr = np.asarray(labels)
    if arr.ndim != 1:
        raise ValueError(f"labels must be 1-D, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError("labels is empty")
    if not np.issubdtype(arr.dtype, np.integer):
        if np.issubdtype(arr.dtype, np.bool_):
            arr = arr.astype(np.int64)
        elif np.issubdtype(arr.dtype, np.floating) and np.all(np.isfinite(arr)) and np.all(
            arr == np.round(arr)
        ):
            arr = arr.astype(np.int64)
        else:
            raise ValueError(f"labels must be integer class ids, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    if arr.min() < 0:
        raise ValueError(f"labels must be non-negative, found {int(arr.min())}")
    return arr


def _check_n_clients(n_clients: Any, n: int) -> int:
    if isinstance(n_clients, bool) or not isinstance(n_clients, (int, np.integer)):
        raise TypeError(f"n_clients must be an int, got {type(n_clients).__name__}")
    k = int(n_clients)
    if k < 1:
        raise ValueError(f"n_clients must be >= 1, got {k}")
    if k > n:
        raise ValueError(f"n_clients={k} exceeds the number of data points ({n})")
    return k


def _check_alpha(name: str, value: Any) -> float:
    a = float(value)
    if not np.isfinite(a) or a <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return a


def _check_min_size(min_size: Any, n_clients: int, n: int) -> int:
    m = int(min_size)
    if m < 0:
        raise ValueError(f"min_size must be >= 0, got {min_size!r}")
    if n_clients * m > n:
        raise ValueError(
            f"impossible partition: n_clients={n_clients} clients with min_size={m} "
            f"need at least {n_clients * m} points, but the data has only {n}"
        )
    return m


def _finalize(parts: list[list[np.ndarray]] | list[np.ndarray]) -> list[np.ndarray]:
    out = []
    for p in parts:
        if isinstance(p, list):
            p = np.concatenate(p) if p else np.empty(0, dtype=np.int64)
        out.append(np.sort(np.asarray(p, dtype=np.int64)))
    return out


def _split_by_proportions(idx: np.ndarray, w: np.ndarray) -> list[np.ndarray]:
    """Split ``idx`` into ``len(w)`` consecutive chunks with sizes proportional to ``w``.

    Cut points are ``floor(cumsum(w)[:-1] * n)`` with ``w`` normalised to sum 1, so
    every element of ``idx`` is assigned to exactly one chunk.
    """
    n = idx.size
    w = np.asarray(w, dtype=np.float64)
    s = w.sum()
    if not np.isfinite(s) or s <= 0:  # numerical underflow of every weight: fall back to uniform
        w = np.full(w.shape, 1.0 / w.size)
    else:
        w = w / s
    cuts = np.floor(np.cumsum(w)[:-1] * n).astype(np.int64)
    cuts = np.clip(cuts, 0, n)
    cuts = np.maximum.accumulate(cuts) if cuts.size else cuts
    return np.split(idx, cuts)


def _class_index_lists(labels: np.ndarray) -> list[np.ndarray]:
    n_classes = int(labels.max()) + 1
    order = np.argsort(labels, kind="stable")
    bounds = np.searchsorted(labels[order], np.arange(n_classes + 1))
    return [order[bounds[c] : bounds[c + 1]] for c in range(n_classes)]


def _too_small_error(scheme: str, k: int, min_size: int, n: int, tries: int, smallest: int):
    return ValueError(
        f"{scheme}: could not draw a partition of {n} data points into n_clients={k} "
        f"clients with every client holding >= min_size={min_size} points after "
        f"max_tries={tries} attempts (smallest client in last attempt: {smallest}). "
        f"Use fewer clients, a smaller min_size, or larger concentration parameters."
    )


# --------------------------------------------------------------------------- schemes


def subsample(n: int, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """Uniform (not stratified) random subset of ``range(n)`` of size ``round(fraction*n)``, sorted."""
    _check_rng(rng)
    n = int(n)
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    f = float(fraction)
    if not (0.0 < f <= 1.0):
        raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
    size = int(round(f * n))
    size = min(size, n)
    return np.sort(rng.choice(n, size=size, replace=False).astype(np.int64))


def iid(labels: Any, n_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Random permutation split into ``n_clients`` (near-)equal parts."""
    _check_rng(rng)
    lab = _as_labels(labels)
    k = _check_n_clients(n_clients, lab.size)
    perm = rng.permutation(lab.size).astype(np.int64)
    return _finalize(np.array_split(perm, k))


def dirichlet(
    labels: Any,
    n_clients: int,
    rng: np.random.Generator,
    alpha1: float = 1.0,
    alpha2: float = 0.5,
    min_size: int = 1,
    max_tries: int = 1000,
) -> list[np.ndarray]:
    """Two-level Dirichlet split (client sizes and per-client class mixes).

    ``p ~ Dir(alpha1 * 1_K)`` gives client size shares, ``pi_k ~ Dir(alpha2 * 1_C)``
    the class mix of client ``k``; ``W[k, c] = p[k] * pi[k, c]``. The shuffled indices of
    class ``c`` are split among clients in proportion to ``W[:, c]``. If any client ends
    up with fewer than ``min_size`` points everything is redrawn from ``rng``.
    """
    _check_rng(rng)
    lab = _as_labels(labels)
    n = lab.size
    k = _check_n_clients(n_clients, n)
    a1 = _check_alpha("alpha1", alpha1)
    a2 = _check_alpha("alpha2", alpha2)
    m = _check_min_size(min_size, k, n)
    tries = int(max_tries)
    if tries < 1:
        raise ValueError(f"max_tries must be >= 1, got {max_tries!r}")
    by_class = _class_index_lists(lab)
    n_classes = len(by_class)

    smallest = 0
    for _ in range(tries):
        p = rng.dirichlet(np.full(k, a1))
        pi = rng.dirichlet(np.full(n_classes, a2), size=k)
        w = p[:, None] * pi
        parts: list[list[np.ndarray]] = [[] for _ in range(k)]
        for c in range(n_classes):
            idx = rng.permutation(by_class[c])
            for j, chunk in enumerate(_split_by_proportions(idx, w[:, c])):
                parts[j].append(chunk)
        out = _finalize(parts)
        smallest = min(part.size for part in out)
        if smallest >= m:
            return out
    raise _too_small_error("dirichlet", k, m, n, tries, smallest)


def label_dirichlet(
    labels: Any,
    n_clients: int,
    rng: np.random.Generator,
    alpha: float = 0.5,
    min_size: int = 1,
    max_tries: int = 1000,
    fill_empty: bool = False,
) -> list[np.ndarray]:
    """NIID-Bench style label skew: class ``c`` is split among clients by ``q_c ~ Dir(alpha * 1_K)``.

    Same ``min_size`` redraw rule as :func:`dirichlet`. ``fill_empty`` instead keeps the first draw and
    gives every empty client one point of class 0 (a copy: that point then belongs to two clients), as
    the FOLA authors' ``dirichlet_data.py`` does; at α = 0.01 most draws leave some of 20 clients empty
    (FOLA spec D7).
    """
    _check_rng(rng)
    lab = _as_labels(labels)
    n = lab.size
    k = _check_n_clients(n_clients, n)
    a = _check_alpha("alpha", alpha)
    m = 0 if fill_empty else _check_min_size(min_size, k, n)
    tries = int(max_tries)
    if tries < 1:
        raise ValueError(f"max_tries must be >= 1, got {max_tries!r}")
    by_class = _class_index_lists(lab)

    smallest = 0
    for _ in range(tries):
        parts: list[list[np.ndarray]] = [[] for _ in range(k)]
        for idx_c in by_class:
            q = rng.dirichlet(np.full(k, a))
            idx = rng.permutation(idx_c)
            for j, chunk in enumerate(_split_by_proportions(idx, q)):
                parts[j].append(chunk)
        out = _finalize(parts)
        if fill_empty:
            first = np.sort(by_class[0])[:1]
            return [part if part.size else first.copy() for part in out]
        smallest = min(part.size for part in out)
        if smallest >= m:
            return out
    raise _too_small_error("label_dirichlet", k, m, n, tries, smallest)


def shards(
    labels: Any,
    n_clients: int,
    rng: np.random.Generator,
    classes_per_client: int = 2,
    shard_size: int = 300,
) -> list[np.ndarray]:
    """McMahan et al. pathological non-IID split.

    Indices are shuffled, stably sorted by label, cut into shards of ``shard_size``
    consecutive indices, and each client receives ``classes_per_client`` shards drawn
    without replacement. Points in a trailing partial shard or in unassigned shards are
    left out.
    """
    _check_rng(rng)
    lab = _as_labels(labels)
    n = lab.size
    k = _check_n_clients(n_clients, n)
    cpc = int(classes_per_client)
    ss = int(shard_size)
    if cpc < 1:
        raise ValueError(f"classes_per_client must be >= 1, got {classes_per_client!r}")
    if ss < 1:
        raise ValueError(f"shard_size must be >= 1, got {shard_size!r}")
    need = k * cpc * ss
    if need > n:
        raise ValueError(
            f"shards: n_clients={k} x classes_per_client={cpc} x shard_size={ss} = {need} "
            f"points needed, but the data has only {n}"
        )
    perm = rng.permutation(n)
    order = perm[np.argsort(lab[perm], kind="stable")].astype(np.int64)
    n_shards = n // ss
    shard_ids = rng.permutation(n_shards)[: k * cpc].reshape(k, cpc)
    return _finalize(
        [[order[s * ss : (s + 1) * ss] for s in shard_ids[j]] for j in range(k)]
    )


def pachinko(
    labels: Any,
    n_clients: int,
    rng: np.random.Generator,
    groups: Any = None,
    alpha: float = 0.1,
    alpha2: float = 10.0,
    per_client: int = 100,
) -> list[np.ndarray]:
    """The Pachinko Allocation split of Reddi et al. (TFF's CIFAR-100; FedEP spec §3.2, §6).

    ``groups[c]`` is the superclass of class ``c`` (CIFAR-100's 20 coarse labels). Every client draws
    a multinomial over the superclasses from a symmetric Dirichlet(``alpha``) and, for each superclass,
    one over its classes from a symmetric Dirichlet(``alpha2``); then ``per_client`` times: a
    superclass, a class within it, and a point of that class without replacement. A class that runs
    out is removed from every client's multinomial (renormalised), a superclass with no class left
    likewise. Clients are filled one after another.
    """
    _check_rng(rng)
    lab = _as_labels(labels)
    k = _check_n_clients(n_clients, lab.size)
    if groups is None:
        raise ValueError("pachinko needs the class → superclass map (groups); the dataset must provide one")
    groups = np.asarray(groups, dtype=np.int64)
    n_classes = int(lab.max()) + 1
    if groups.shape[0] < n_classes:
        raise ValueError(f"pachinko: groups maps {groups.shape[0]} classes, the labels have {n_classes}")
    a1, a2 = _check_alpha("alpha", alpha), _check_alpha("alpha2", alpha2)
    m = int(per_client)
    if m < 1 or k * m > lab.size:
        raise ValueError(f"pachinko: {k} clients × per_client={per_client} points exceed the {lab.size} data points")
    supers = np.unique(groups[:n_classes])
    members = [np.flatnonzero(groups[:n_classes] == g) for g in supers]
    pools = [list(rng.permutation(np.flatnonzero(lab == c))) for c in range(n_classes)]
    alive = np.array([len(pl) > 0 for pl in pools])
    parts = []
    for _ in range(k):
        p_super = rng.dirichlet(np.full(len(supers), a1))
        p_class = [rng.dirichlet(np.full(len(mem), a2)) for mem in members]
        took = []
        for _ in range(m):
            w_cls = [pc * alive[mem] for pc, mem in zip(p_class, members)]
            mass = np.array([w.sum() for w in w_cls])
            w_sup = p_super * (mass > 0)
            if w_sup.sum() <= 0:  # this client's superclasses are used up: renormalise over what is left
                w_sup = (mass > 0).astype(float)
            g = rng.choice(len(supers), p=w_sup / w_sup.sum())
            w = w_cls[g] if w_cls[g].sum() > 0 else alive[members[g]].astype(float)
            c = members[g][rng.choice(len(w), p=w / w.sum())]
            took.append(pools[c].pop())
            alive[c] = len(pools[c]) > 0
        parts.append(np.array(took, dtype=np.int64))
    return _finalize(parts)


def credit_heterogeneous_split(y_train: np.ndarray, n_clients: int = 10,
                               client_size_factor: float = 0.3,
                               class_balance_factor: float = 0.9,
                               rng: np.random.Generator | int | None = 0) -> list[np.ndarray]:
    """PVI's heterogeneous UCI split (Ashman et al. 2022; spec §4.1): indices per client.

    With N points and K clients, the first ``K // 2`` clients are *small*, of
    ``floor((1 - client_size_factor) N / K)`` points, the rest *big*, of
    ``floor((1 + client_size_factor) N / K)`` points.  A small client's class
    mix is ``c * [1, 0] + (1 - c) * (overall class distribution)`` with
    ``c = class_balance_factor``: it gets ``floor(size * that negative share)``
    points of class 0 and the rest of class 1, drawn without replacement.  The
    big clients are then drawn uniformly without replacement from the pool
    left over, so they are enriched in class 1; points left after that are
    unused.  On N = 522 with 236 positives: 5 x 36 points (34 negatives + 2
    positives; any c in about [0.8771, 0.9386) gives this) and 5 x 67 points from a
    pool 66% positive; 7 points unused.
    """
    y = np.asarray(y_train)
    if y.ndim != 1 or (len(y) and not np.isin(y, (0, 1)).all()):
        raise ValueError("y_train must be a 1-d array of 0/1 labels")
    if not 0.0 <= client_size_factor < 1.0 or not 0.0 <= class_balance_factor <= 1.0:
        raise ValueError("client_size_factor must be in [0, 1), class_balance_factor in [0, 1]")
    gen = np.random.default_rng(rng)
    n = len(y)
    n_small = n_clients // 2
    small = int(math.floor((1.0 - client_size_factor) * n / n_clients))
    big = int(math.floor((1.0 + client_size_factor) * n / n_clients))
    neg_share = class_balance_factor + (1.0 - class_balance_factor) * float((y == 0).mean())
    n_neg = int(math.floor(small * neg_share))
    n_pos = small - n_neg
    neg, pos = np.flatnonzero(y == 0), np.flatnonzero(y == 1)
    if n_small * n_neg > len(neg) or n_small * n_pos > len(pos):
        raise ValueError(f"not enough points per class for {n_small} small clients of "
                         f"{n_neg} negatives + {n_pos} positives")
    neg, pos = gen.permutation(neg), gen.permutation(pos)
    clients = []
    for k in range(n_small):
        idx = np.concatenate([neg[k * n_neg:(k + 1) * n_neg], pos[k * n_pos:(k + 1) * n_pos]])
        clients.append(np.sort(idx))
    pool = np.concatenate([neg[n_small * n_neg:], pos[n_small * n_pos:]])
    n_big = n_clients - n_small
    if n_big * big > len(pool):
        raise ValueError(f"pool of {len(pool)} points too small for {n_big} clients of {big}")
    pool = gen.permutation(pool)
    for k in range(n_big):
        clients.append(np.sort(pool[k * big:(k + 1) * big]))
    return clients


def pvi_heterogeneous(labels: Any, n_clients: int, rng: np.random.Generator, client_size_factor: float = 0.3,
                      class_balance_factor: float = 0.9, split_seed: int = 0) -> list[np.ndarray]:
    """PVI's heterogeneous split of a binary dataset (UCI Credit; FedLap spec §4.1): half the clients
    small and mostly negative, half big from the positive-enriched rest. The split is fixed by
    ``split_seed`` ("the same split as Ashman et al."); ``rng`` (the run seed) is not used."""
    return credit_heterogeneous_split(_as_labels(labels), n_clients, client_size_factor, class_balance_factor,
                                      rng=int(split_seed))


@dataclass(frozen=True)
class Scheme:
    """A partition scheme params.yaml may name (``experiments.<e>.partition.scheme``)."""
    fn: Callable[..., list[np.ndarray]] | None   # fn(labels, n_clients, rng, **options); None: not from labels
    seeded: bool = True          # re-drawn per run seed (else fixed: by its own ``split_seed``, or the data's)
    reads: str | None = None     # what it reads of the dataset beyond its labels: a DatasetSpec field


# The one table of the schemes (params.schema.yaml's enum is checked against it, tests/test_partition.py)
PARTITION_SCHEMES: dict[str, Scheme] = {
    "iid": Scheme(iid),
    "dirichlet": Scheme(dirichlet),
    "label_dirichlet": Scheme(label_dirichlet),
    "shards": Scheme(shards),
    "pvi_heterogeneous": Scheme(pvi_heterogeneous, seeded=False),
    "pachinko": Scheme(pachinko, reads="label_groups"),            # the superclass of each class
    "natural": Scheme(None, seeded=False, reads="natural_groups"),  # the dataset's own clients (hospitals)
}
# random splits of the labels alone, re-drawn per run seed
SCHEMES = tuple(n for n, s in PARTITION_SCHEMES.items() if s.seeded and s.reads is None)
_DISPATCH = {n: s.fn for n, s in PARTITION_SCHEMES.items() if s.fn is not None}


def make_partition(
    labels: Any, n_clients: int, scheme: str, rng: np.random.Generator, **kwargs: Any
) -> list[np.ndarray]:
    """Dispatch to one of :data:`SCHEMES` with scheme-specific keyword arguments."""
    if scheme not in _DISPATCH:
        raise ValueError(f"unknown partition scheme {scheme!r}; expected one of {tuple(_DISPATCH)}")
    _check_rng(rng)
    lab = _as_labels(labels)
    _check_n_clients(n_clients, lab.size)
    for key in ("alpha", "alpha1", "alpha2"):
        if key in kwargs and kwargs[key] is not None:
            _check_alpha(key, kwargs[key])
    fn = _DISPATCH[scheme]
    accepted = [
        name
        for name, prm in inspect.signature(fn).parameters.items()
        if name not in ("labels", "n_clients", "rng")
    ]
    unknown = sorted(set(kwargs) - set(accepted))
    if unknown:
        raise TypeError(
            f"scheme {scheme!r} does not accept {unknown}; accepted keyword arguments: {accepted}"
        )
    return fn(lab, n_clients, rng, **kwargs)


def class_counts(labels: Any, parts: list[np.ndarray], n_classes: int) -> np.ndarray:
    """``(K, C)`` int64 histogram of labels per client."""
    lab = _as_labels(labels)
    c = int(n_classes)
    if c < 1:
        raise ValueError(f"n_classes must be >= 1, got {n_classes!r}")
    if lab.max() >= c:
        raise ValueError(f"labels contain class {int(lab.max())} but n_classes={c}")
    out = np.zeros((len(parts), c), dtype=np.int64)
    for j, p in enumerate(parts):
        idx = np.asarray(p, dtype=np.int64)
        if idx.size:
            if idx.min() < 0 or idx.max() >= lab.size:
                raise ValueError(f"client {j} has indices outside [0, {lab.size})")
            out[j] = np.bincount(lab[idx], minlength=c)
    return out
