"""Tests for fedbayes.partition (synthetic labels only; fast)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from fedbayes.partition import (
    SCHEMES,
    class_counts,
    dirichlet,
    iid,
    label_dirichlet,
    load_partition,
    make_partition,
    partition_hash,
    plot_partition,
    save_partition,
    shards,
    subsample,
)

C = 10


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


@pytest.fixture(scope="module")
def balanced_labels() -> np.ndarray:
    """10 classes x 600 points, class-blocked."""
    return np.repeat(np.arange(C), 600)


@pytest.fixture(scope="module")
def random_labels() -> np.ndarray:
    """6000 points with uniformly random labels (not sorted)."""
    return np.random.default_rng(12345).integers(0, C, 6000)


@pytest.fixture(scope="module")
def mnist_like_labels() -> np.ndarray:
    """10 classes x 6000 points, shuffled order (60k like MNIST train)."""
    return np.random.default_rng(99).permutation(np.repeat(np.arange(C), 6000))


# scheme name -> (labels fixture, n_clients, kwargs, expected number of covered points or None = all)
SCHEME_CASES = {
    "iid": ("random_labels", 10, {}, None),
    "dirichlet": ("random_labels", 10, {}, None),
    "label_dirichlet": ("random_labels", 10, {"alpha": 0.5}, None),
    "shards": ("mnist_like_labels", 100, {"classes_per_client": 2, "shard_size": 300}, 100 * 2 * 300),
}


def _check_valid(parts, n_clients, n):
    assert isinstance(parts, list) and len(parts) == n_clients
    for p in parts:
        assert isinstance(p, np.ndarray)
        assert p.dtype == np.int64 and p.ndim == 1
        assert np.all(np.diff(p) > 0), "indices must be sorted and unique"
        if p.size:
            assert p[0] >= 0 and p[-1] < n
    allidx = np.concatenate(parts)
    assert np.unique(allidx).size == allidx.size, "clients must be disjoint"
    return allidx


def _top_share(cc: np.ndarray, k: int) -> float:
    sizes = np.sort(cc.sum(axis=1))[::-1]
    return float(sizes[:k].sum() / sizes.sum())


def _mean_topk_class_fraction(cc: np.ndarray, k: int) -> float:
    tot = cc.sum(axis=1)
    ok = tot > 0
    srt = np.sort(cc, axis=1)[:, ::-1]
    return float(np.mean(srt[ok, :k].sum(axis=1) / tot[ok]))


# --------------------------------------------------------------------------- common properties


def test_schemes_constant():
    assert SCHEMES == ("iid", "dirichlet", "label_dirichlet", "shards")


@pytest.mark.parametrize("scheme", SCHEMES)
def test_scheme_disjoint_cover_deterministic(scheme, request):
    fixture, k, kwargs, expected = SCHEME_CASES[scheme]
    labels = request.getfixturevalue(fixture)
    n = labels.size

    parts = make_partition(labels, k, scheme, rng(0), **kwargs)
    allidx = _check_valid(parts, k, n)
    if expected is None:
        np.testing.assert_array_equal(np.sort(allidx), np.arange(n))
    else:
        assert allidx.size == expected

    again = make_partition(labels, k, scheme, rng(0), **kwargs)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))
    assert partition_hash(parts) == partition_hash(again)

    other = make_partition(labels, k, scheme, rng(1), **kwargs)
    assert partition_hash(parts) != partition_hash(other)


def test_does_not_touch_global_random_state(random_labels):
    np.random.seed(0)
    before = np.random.get_state()[1].copy()
    for scheme in SCHEMES:
        kw = {"shard_size": 100} if scheme == "shards" else {}
        make_partition(random_labels, 10, scheme, rng(3), **kw)
    subsample(100, 0.5, rng(3))
    np.testing.assert_array_equal(np.random.get_state()[1], before)


def test_direct_call_matches_dispatch(random_labels):
    a = dirichlet(random_labels, 10, rng(5), alpha1=1.0, alpha2=0.5)
    b = make_partition(random_labels, 10, "dirichlet", rng(5), alpha1=1.0, alpha2=0.5)
    assert partition_hash(a) == partition_hash(b)


# --------------------------------------------------------------------------- iid


def test_iid_sizes_and_class_mix(random_labels):
    parts = iid(random_labels, 7, rng(2))
    sizes = np.array([p.size for p in parts])
    assert sizes.max() - sizes.min() <= 1
    assert sizes.sum() == random_labels.size
    cc = class_counts(random_labels, parts, C)
    global_mix = np.bincount(random_labels, minlength=C) / random_labels.size
    client_mix = cc / cc.sum(axis=1, keepdims=True)
    # ~857 points per client: binomial sd of a class fraction ~0.01
    assert np.abs(client_mix - global_mix).max() < 0.06


# --------------------------------------------------------------------------- dirichlet

# Calibrated with seeds 0..49, K=10, C=10, 6000 balanced labels (alpha1=1, alpha2=0.5):
#   mean top-2 client share ~0.45, mean top-6 share ~0.87, mean top-4-class fraction ~0.83.
#   Other 50-seed windows: 0.43-0.45 / 0.865-0.873 / 0.822-0.834 (standard errors ~0.01 / ~0.003).
#   alpha2=100 gives top-4-class ~0.44, alpha2=2 gives ~0.65.
TOP2_BOUNDS = (0.38, 0.55)
TOP6_BOUNDS = (0.83, 0.93)
TOP4CLASS_BOUNDS = (0.75, 0.92)


def _dirichlet_stats(labels, seeds, **kw):
    t2, t6, t4 = [], [], []
    for s in seeds:
        cc = class_counts(labels, dirichlet(labels, 10, rng(s), **kw), C)
        t2.append(_top_share(cc, 2))
        t6.append(_top_share(cc, 6))
        t4.append(_mean_topk_class_fraction(cc, 4))
    return float(np.mean(t2)), float(np.mean(t6)), float(np.mean(t4))


def test_dirichlet_skew_statistics(balanced_labels):
    t2, t6, t4 = _dirichlet_stats(balanced_labels, range(50))
    assert TOP2_BOUNDS[0] < t2 < TOP2_BOUNDS[1], t2
    assert TOP6_BOUNDS[0] < t6 < TOP6_BOUNDS[1], t6
    assert TOP4CLASS_BOUNDS[0] < t4 < TOP4CLASS_BOUNDS[1], t4


def test_dirichlet_skew_statistics_unsorted_labels(random_labels):
    t2, t6, t4 = _dirichlet_stats(random_labels, range(100, 150))
    assert TOP2_BOUNDS[0] < t2 < TOP2_BOUNDS[1], t2
    assert TOP6_BOUNDS[0] < t6 < TOP6_BOUNDS[1], t6
    assert TOP4CLASS_BOUNDS[0] < t4 < TOP4CLASS_BOUNDS[1], t4


def test_dirichlet_near_uniform_class_mix_fails_top4_check(balanced_labels):
    _, _, t4 = _dirichlet_stats(balanced_labels, range(50), alpha2=100.0)
    assert not (TOP4CLASS_BOUNDS[0] < t4 < TOP4CLASS_BOUNDS[1]), t4
    assert t4 < 0.55


def test_dirichlet_huge_alphas_give_equal_sizes(balanced_labels):
    parts = dirichlet(balanced_labels, 10, rng(0), alpha1=1e6, alpha2=1e6)
    sizes = np.array([p.size for p in parts])
    assert sizes.sum() == balanced_labels.size
    assert np.abs(sizes - 600).max() <= 20, sizes
    cc = class_counts(balanced_labels, parts, C)
    assert np.abs(cc - 60).max() <= 5


def test_dirichlet_handles_missing_class():
    labels = np.array([0] * 50 + [2] * 50)  # class 1 absent
    parts = dirichlet(labels, 4, rng(0))
    allidx = _check_valid(parts, 4, labels.size)
    assert allidx.size == labels.size


# --------------------------------------------------------------------------- label_dirichlet


def test_label_dirichlet_alpha_controls_skew(balanced_labels):
    def mean_max_frac(alpha):
        vals = []
        for s in range(20):
            cc = class_counts(balanced_labels, label_dirichlet(balanced_labels, 10, rng(s), alpha=alpha), C)
            tot = cc.sum(axis=1)
            vals.append(np.mean(cc.max(axis=1)[tot > 0] / tot[tot > 0]))
        return float(np.mean(vals))

    skewed, flat = mean_max_frac(0.1), mean_max_frac(100.0)
    assert skewed > 0.45, skewed  # measured ~0.59
    assert flat < 0.15, flat  # measured ~0.115 (uniform would be 0.1)
    assert skewed > flat + 0.3


# --------------------------------------------------------------------------- shards


def test_shards_mcmahan(mnist_like_labels):
    parts = shards(mnist_like_labels, 100, rng(0), classes_per_client=2, shard_size=300)
    _check_valid(parts, 100, mnist_like_labels.size)
    for p in parts:
        assert p.size == 600
        assert np.unique(mnist_like_labels[p]).size <= 2
    cc = class_counts(mnist_like_labels, parts, C)
    assert cc.sum() == 60000


def test_shards_too_many_clients_raises():
    labels = np.repeat(np.arange(C), 100)  # 1000 points
    with pytest.raises(ValueError, match=r"1200.*1000"):
        shards(labels, 2, rng(0), classes_per_client=2, shard_size=300)


# --------------------------------------------------------------------------- min_size


@pytest.mark.parametrize(
    "scheme,labels_n,k,min_size",
    [("dirichlet", 1000, 20, 5), ("label_dirichlet", 500, 40, 3)],
)
def test_min_size_resampling(scheme, labels_n, k, min_size):
    labels = np.random.default_rng(7).integers(0, C, labels_n)
    needed_redraw = 0
    for s in range(10):
        parts = make_partition(labels, k, scheme, rng(s), min_size=min_size)
        _check_valid(parts, k, labels_n)
        assert min(p.size for p in parts) >= min_size
        try:
            make_partition(labels, k, scheme, rng(s), min_size=min_size, max_tries=1)
        except ValueError:
            needed_redraw += 1
    # the constraint is binding: for some seeds the first draw was rejected
    assert needed_redraw > 0


@pytest.mark.parametrize("fn", [dirichlet, label_dirichlet])
def test_min_size_impossible_raises(fn):
    labels = np.random.default_rng(0).integers(0, C, 100)
    # arithmetically impossible: 20 * 10 > 100
    with pytest.raises(ValueError, match=r"n_clients=20.*min_size=10.*100"):
        fn(labels, 20, rng(0), min_size=10)
    # possible in principle (exactly 2 per client) but never drawn: exhausts max_tries
    labels40 = np.random.default_rng(0).integers(0, C, 40)
    with pytest.raises(ValueError, match=r"40 data points.*n_clients=20.*min_size=2.*max_tries=30"):
        fn(labels40, 20, rng(0), min_size=2, max_tries=30)


# --------------------------------------------------------------------------- validation


def test_make_partition_validation(random_labels):
    with pytest.raises(ValueError, match="iid.*dirichlet.*label_dirichlet.*shards"):
        make_partition(random_labels, 10, "bogus", rng(0))
    with pytest.raises(ValueError, match="n_clients"):
        make_partition(random_labels[:5], 6, "iid", rng(0))
    with pytest.raises(ValueError, match="alpha"):
        make_partition(random_labels, 10, "label_dirichlet", rng(0), alpha=0.0)
    with pytest.raises(ValueError, match="alpha1"):
        make_partition(random_labels, 10, "dirichlet", rng(0), alpha1=-1.0)
    with pytest.raises(ValueError, match="alpha2"):
        make_partition(random_labels, 10, "dirichlet", rng(0), alpha2=0)
    with pytest.raises(TypeError):
        make_partition(random_labels, 10, "iid", np.random.RandomState(0))
    with pytest.raises(TypeError, match="accept"):
        make_partition(random_labels, 10, "iid", rng(0), alpha=0.5)


# --------------------------------------------------------------------------- subsample


def test_subsample():
    a = subsample(1000, 0.25, rng(0))
    assert a.size == 250 and a.dtype == np.int64
    assert np.all(np.diff(a) > 0) and a[0] >= 0 and a[-1] < 1000
    np.testing.assert_array_equal(a, subsample(1000, 0.25, rng(0)))
    assert not np.array_equal(a, subsample(1000, 0.25, rng(1)))
    assert subsample(999, 0.1, rng(0)).size == round(0.1 * 999)
    np.testing.assert_array_equal(subsample(50, 1.0, rng(0)), np.arange(50))
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError):
            subsample(10, bad, rng(0))


# --------------------------------------------------------------------------- class_counts / hash / io


def test_class_counts(random_labels):
    parts = iid(random_labels, 5, rng(0))
    cc = class_counts(random_labels, parts, C)
    assert cc.shape == (5, C) and cc.dtype == np.int64
    np.testing.assert_array_equal(cc.sum(axis=0), np.bincount(random_labels, minlength=C))
    np.testing.assert_array_equal(cc.sum(axis=1), [p.size for p in parts])


def test_partition_hash_properties():
    parts = [np.array([0, 3, 5], dtype=np.int64), np.array([1, 2, 4], dtype=np.int64)]
    h = partition_hash(parts)
    assert isinstance(h, str) and len(h) == 64
    assert partition_hash([p.copy() for p in parts]) == h
    assert partition_hash([p.astype(np.int32) for p in parts]) == h  # dtype-independent
    changed = [parts[0].copy(), parts[1].copy()]
    changed[1][2] = 6
    assert partition_hash(changed) != h
    # client boundaries matter
    assert partition_hash([np.array([0, 1]), np.array([2])]) != partition_hash(
        [np.array([0]), np.array([1, 2])]
    )
    assert partition_hash(parts + [np.array([], dtype=np.int64)]) != h


def test_save_load_roundtrip(tmp_path, random_labels):
    parts = dirichlet(random_labels, 10, rng(4))
    path = tmp_path / "nested" / "dir" / "partition.npz"
    meta = {"scheme": "dirichlet", "seed": 4, "alpha1": 1.0, "alpha2": np.float64(0.5)}
    h = save_partition(path, parts, random_labels, C, meta)
    assert h == partition_hash(parts)
    assert path.exists()
    assert not any(name.endswith(".tmp") for name in os.listdir(path.parent))

    loaded, lmeta = load_partition(path)
    assert len(loaded) == len(parts)
    for a, b in zip(parts, loaded):
        assert b.dtype == np.int64
        np.testing.assert_array_equal(a, b)
    assert lmeta["hash"] == h and lmeta["n_clients"] == 10
    assert lmeta["scheme"] == "dirichlet" and lmeta["seed"] == 4 and lmeta["alpha2"] == 0.5
    assert lmeta["class_counts"] == class_counts(random_labels, parts, C).tolist()

    with np.load(path, allow_pickle=False) as z:
        assert z["meta_json"].shape == ()
        raw = json.loads(str(z["meta_json"][()]))
        assert raw["hash"] == h
        np.testing.assert_array_equal(z["sizes"], [p.size for p in parts])
        assert z["class_counts"].shape == (10, C)
        assert z["client_0"].dtype == np.int64

    # stable: re-saving the same partition gives the same hash; one changed index changes it
    assert save_partition(path, parts, random_labels, C, meta) == h
    changed = [p.copy() for p in parts]
    changed[3][0] = changed[4][0]  # one index changes
    path2 = tmp_path / "p2.npz"
    assert save_partition(path2, changed, random_labels, C, meta) != h
    assert not any(name.endswith(".tmp") for name in os.listdir(tmp_path))


def test_save_rejects_out_of_range_indices(tmp_path):
    labels = np.array([0, 1, 0, 1])
    with pytest.raises(ValueError):
        save_partition(tmp_path / "bad.npz", [np.array([0, 9])], labels, 2, {})
    assert not (tmp_path / "bad.npz").exists()
    assert not list(tmp_path.glob("bad.npz*.tmp"))


# --------------------------------------------------------------------------- plot


@pytest.mark.parametrize("k", [10, 100])
def test_plot_partition_writes_png(tmp_path, random_labels, k):
    parts = dirichlet(random_labels, k, rng(0))
    cc = class_counts(random_labels, parts, C)
    out = tmp_path / "plots" / f"partition_{k}.png"
    plot_partition(cc, out, title=f"dirichlet K={k}")
    assert out.exists() and out.stat().st_size > 1000
    with open(out, "rb") as fh:
        assert fh.read(8) == b"\x89PNG\r\n\x1a\n"


def test_pvi_heterogeneous_is_the_fixed_credit_split():
    """UCI Credit's split (spec §4.1): 5 × 36 points at 2/36 positive, 5 × 67 from the positive-enriched
    rest; fixed by split_seed, the same for every run seed."""
    y = np.array([1] * 236 + [0] * 286)
    rng_ = np.random.default_rng(5)
    y = y[rng_.permutation(len(y))]
    parts = make_partition(y, 10, "pvi_heterogeneous", rng(0), split_seed=0)
    assert [len(p) for p in parts] == [36] * 5 + [67] * 5
    assert all(y[p].sum() == 2 for p in parts[:5])
    assert 0.6 < np.mean([y[p].mean() for p in parts[5:]]) < 0.72
    again = make_partition(y, 10, "pvi_heterogeneous", rng(1), split_seed=0)
    assert partition_hash(parts) == partition_hash(again)
    assert partition_hash(parts) != partition_hash(make_partition(y, 10, "pvi_heterogeneous", rng(0), split_seed=1))


def test_label_dirichlet_fill_empty_gives_empty_clients_one_class0_point():
    """FOLA's α = 0.01 over 20 clients: most draws leave clients empty; the authors' code gives each one
    point of class 0 instead of redrawing (FOLA spec D7)."""
    from fedbayes.partition import make_partition
    labels = np.repeat(np.arange(10), 300)
    parts = make_partition(labels, 20, "label_dirichlet", np.random.default_rng(0), alpha=0.01, fill_empty=True)
    sizes = np.array([len(p) for p in parts])
    assert len(parts) == 20 and sizes.min() >= 1 and (sizes == 1).any()
    counts = np.bincount(np.concatenate(parts), minlength=3000)
    assert counts.min() == 1                               # every point is on a client
    (dup,) = np.flatnonzero(counts > 1)                    # one point of class 0, copied to the empty ones
    assert labels[dup] == 0 and counts[dup] == 1 + sum(1 for p in parts if list(p) == [dup])


def test_pachinko_takes_every_point_once_with_superclass_skew():
    """Reddi et al.'s Pachinko split (FedEP spec §3.2): 100 points a client, drawn without
    replacement; exhausted classes are renormalised away, so k × 100 = N uses every point once; with
    Dirichlet(0.1) over 20 superclasses a client's points come from few superclasses."""
    from fedbayes.partition import make_partition
    groups = np.repeat(np.arange(20), 5)                      # 100 classes, 5 per superclass
    labels = np.repeat(np.arange(100), 30)                    # 3,000 points
    parts = make_partition(labels, 30, "pachinko", np.random.default_rng(0), groups=groups)
    assert [len(p) for p in parts] == [100] * 30
    assert sorted(np.concatenate(parts)) == list(range(3000))
    big = np.repeat(np.arange(100), 500)                      # CIFAR-100's sizes: nothing runs out here
    parts = make_partition(big, 20, "pachinko", np.random.default_rng(1), groups=groups)
    skewed = np.mean([len(np.unique(groups[big[p]])) for p in parts])
    flat = make_partition(big, 20, "pachinko", np.random.default_rng(1), groups=groups, alpha=100.0)
    assert skewed < 10 and np.mean([len(np.unique(groups[big[p]])) for p in flat]) > 18, skewed
    with pytest.raises(ValueError, match="groups"):
        make_partition(labels, 30, "pachinko", np.random.default_rng(0))
    with pytest.raises(ValueError, match="exceed"):
        make_partition(labels, 31, "pachinko", np.random.default_rng(0), groups=groups)


def test_the_schemes_are_one_table():
    """params.schema.yaml's scheme names are the table's (fedbayes.partition.schemes.PARTITION_SCHEMES), and
    what a scheme reads of its dataset is a field every dataset spec has."""
    import dataclasses

    import yaml

    from fedbayes.data import DatasetSpec
    from fedbayes.partition import PARTITION_SCHEMES

    schema = yaml.safe_load((Path(__file__).parents[1] / "workflow/schemas/params.schema.yaml").read_text())
    assert schema["$defs"]["partition"]["properties"]["scheme"]["enum"] == list(PARTITION_SCHEMES)
    fields = {f.name for f in dataclasses.fields(DatasetSpec)}
    assert {s.reads for s in PARTITION_SCHEMES.values()} - {None} <= fields
