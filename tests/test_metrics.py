"""Oracle tests for fedbayes.eval.metrics against sklearn, torchmetrics and brute-force loops."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.special import log_softmax
from sklearn.metrics import accuracy_score, brier_score_loss, log_loss, roc_auc_score
from torchmetrics.functional.classification import multiclass_accuracy, multiclass_calibration_error

from fedbayes.eval import metrics as M

CASES = [(seed, n, c) for seed in (0, 1, 2) for n, c in ((500, 10), (2000, 10), (800, 2))]


def make(seed, n, c):
    """Random log-probs with varied sharpness; labels partly drawn from p (so calibration is non-trivial)."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, c)) * rng.uniform(0.3, 4.0, size=(n, 1))
    logp = log_softmax(logits, axis=1)
    p = np.exp(logp)
    y_model = (p.cumsum(1) > rng.uniform(size=(n, 1))).argmax(1)
    y = np.where(rng.uniform(size=n) < 0.7, y_model, rng.integers(0, c, size=n))
    return logp, y


def brute_calibration(logp, y, n_bins=15):
    """Python-loop ECE/MCE with (lower, upper] bins, confidence 0 in the first bin."""
    p = np.exp(logp)
    bins = [[] for _ in range(n_bins)]
    for n in range(len(y)):
        conf = p[n].max()
        for b in range(n_bins):
            lo, hi = b / n_bins, (b + 1) / n_bins
            if lo < conf <= hi or (b == 0 and conf == 0.0):
                bins[b].append((float(p[n].argmax() == y[n]), conf))
                break
    ece, mce = 0.0, 0.0
    for items in bins:
        if items:
            gap = abs(np.mean([a for a, _ in items]) - np.mean([c for _, c in items]))
            ece += len(items) / len(y) * gap
            mce = max(mce, gap)
    return ece, mce, [len(b) for b in bins]


@pytest.mark.parametrize("seed,n,c", CASES)
def test_accuracy_oracles(seed, n, c):
    logp, y = make(seed, n, c)
    ours = M.accuracy(logp, y)
    tm = multiclass_accuracy(torch.from_numpy(logp), torch.from_numpy(y), num_classes=c, average="micro")
    assert ours == pytest.approx(accuracy_score(y, logp.argmax(1)), abs=1e-12)
    assert ours == pytest.approx(float(tm), abs=1e-6)
    assert isinstance(ours, float)


@pytest.mark.parametrize("seed,n,c", CASES)
def test_nll_oracles(seed, n, c):
    logp, y = make(seed, n, c)
    ours = M.nll(logp.astype(np.float32), y)  # float32 input is upcast
    assert ours == pytest.approx(log_loss(y, np.exp(logp), labels=range(c)), rel=1e-6)
    assert ours == pytest.approx(float(F.nll_loss(torch.from_numpy(logp), torch.from_numpy(y))), rel=1e-6)


@pytest.mark.parametrize("seed,n,c", CASES)
def test_calibration_vs_torchmetrics_and_loop(seed, n, c):
    logp, y = make(seed, n, c)
    conf = np.exp(logp.max(1))
    # torchmetrics uses [lower, upper) bins: make sure no confidence sits on an edge
    assert np.min(np.abs(conf * 15 - np.round(conf * 15))) > 1e-9
    cal = M.calibration(logp, y, n_bins=15)
    probs, tgt = torch.from_numpy(np.exp(logp)), torch.from_numpy(y)
    for key, norm in (("ece", "l1"), ("mce", "max")):
        tm = multiclass_calibration_error(probs, tgt, num_classes=c, n_bins=15, norm=norm)
        assert cal[key] == pytest.approx(float(tm), abs=1e-6)
    ece, mce, counts = brute_calibration(logp, y)
    assert cal["ece"] == pytest.approx(ece, abs=1e-12)
    assert cal["mce"] == pytest.approx(mce, abs=1e-12)
    assert [b["count"] for b in cal["bins"]] == counts
    assert sum(counts) == n and len(cal["bins"]) == 15
    assert cal["bins"][0]["lower"] == 0.0 and cal["bins"][-1]["upper"] == 1.0


def test_calibration_bin_edge_closure():
    # confidences exactly on the edge 0.6 = 9/15 go to bin 8 = (8/15, 9/15], not bin 9
    p = np.array([[0.6, 0.4], [0.6, 0.4], [0.8, 0.2], [0.6, 0.4]])
    assert 0.6 == np.linspace(0, 1, 16)[9]
    logp, y = np.log(p), np.array([0, 1, 0, 0])
    cal = M.calibration(logp, y)
    counts = [b["count"] for b in cal["bins"]]
    assert counts[8] == 3 and counts[9] == 0 and counts[11] == 1  # 0.8 = 12/15 -> bin 11
    ece, mce, brute_counts = brute_calibration(logp, y)
    assert counts == brute_counts
    assert cal["ece"] == pytest.approx(ece) and cal["mce"] == pytest.approx(mce)
    assert cal["bins"][8]["acc"] == pytest.approx(2 / 3) and cal["bins"][8]["conf"] == pytest.approx(0.6)
    assert np.isnan(cal["bins"][9]["acc"])
    # confidence exactly 0 (degenerate input) lands in the first bin
    zero = M.calibration(np.array([[-np.inf, -np.inf]]), np.array([0]))
    assert zero["bins"][0]["count"] == 1


@pytest.mark.parametrize("seed,n,c", CASES)
def test_brier(seed, n, c):
    logp, y = make(seed, n, c)
    p = np.exp(logp)
    brute = np.mean([sum((p[i, k] - (y[i] == k)) ** 2 for k in range(c)) for i in range(n)])
    ours = M.brier(logp, y)
    assert ours == pytest.approx(brute, rel=1e-12)
    assert 0.0 <= ours <= 2.0
    if c == 2:  # (p0 - [y=0])^2 + (p1 - [y=1])^2 = 2 (p1 - y)^2
        assert ours == pytest.approx(2 * brier_score_loss(y, p[:, 1]), rel=1e-10)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("c", [10, 2])
@pytest.mark.parametrize("decimals", [None, 1])
def test_ood_auroc_vs_sklearn(seed, c, decimals):
    rng = np.random.default_rng(seed)
    lp_in = log_softmax(rng.normal(size=(700, c)) * 3.0, axis=1)
    lp_out = log_softmax(rng.normal(size=(500, c)) * 1.5, axis=1)
    if decimals is not None:  # heavy ties: quantise probabilities, renormalise
        def q(lp):
            p = np.round(np.exp(lp), decimals) + 1e-3
            return np.log(p / p.sum(1, keepdims=True))
        lp_in, lp_out = q(lp_in), q(lp_out)
    ours = M.ood_auroc(lp_in, lp_out)
    labels = np.r_[np.zeros(len(lp_in)), np.ones(len(lp_out))]
    ent = np.r_[M.entropy(lp_in), M.entropy(lp_out)]
    mp = 1 - np.exp(np.r_[lp_in.max(1), lp_out.max(1)])
    if decimals is not None:
        assert len(np.unique(mp)) < 0.2 * len(mp)  # really heavy ties
    assert ours["auroc_entropy"] == pytest.approx(roc_auc_score(labels, ent), abs=1e-12)
    assert ours["auroc_maxprob"] == pytest.approx(roc_auc_score(labels, mp), abs=1e-12)
    assert set(ours) == {"auroc_entropy", "auroc_maxprob"}


def test_auroc_ties_brute_force():
    rng = np.random.default_rng(3)
    neg, pos = rng.integers(0, 5, 60).astype(float), rng.integers(1, 6, 40).astype(float)
    brute = np.mean([(p > n) + 0.5 * (p == n) for p in pos for n in neg])
    assert M.auroc(neg, pos) == pytest.approx(brute, abs=1e-12)
    assert M.auroc([1.0, 1.0], [1.0]) == 0.5
    assert M.auroc([0.0], [1.0]) == 1.0 and M.auroc([1.0], [0.0]) == 0.0


@pytest.mark.parametrize("seed", range(5))
def test_average_ranks_equal_scipy_rankdata(seed):
    from scipy.stats import rankdata
    rng = np.random.default_rng(seed)
    for x in (rng.integers(0, 1 + seed * 7, 500).astype(float), rng.normal(size=300), np.zeros(7), np.array([2.0])):
        assert np.array_equal(M.average_ranks(x), rankdata(x))


def test_entropy():
    assert M.entropy(np.log(np.full((3, 4), 0.25))) == pytest.approx(np.full(3, np.log(4)))
    assert M.entropy(np.array([[0.0, -np.inf, -np.inf]])) == pytest.approx([0.0])  # 0 log 0 = 0


def test_predictive_logprobs():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(50, 10)) * 5
    assert M.predictive_logprobs(z) == pytest.approx(log_softmax(z, axis=1), abs=1e-12)
    zs = rng.normal(size=(7, 50, 10)) * 5
    naive = np.log(np.mean(np.exp(zs) / np.exp(zs).sum(-1, keepdims=True), axis=0))
    assert M.predictive_logprobs(zs) == pytest.approx(naive, abs=1e-10)
    assert M.predictive_logprobs(torch.from_numpy(zs).float()) == pytest.approx(naive, abs=1e-5)
    extreme = np.array([[[1e3, -1e3, 0.0]], [[-1e3, 1e3, 0.0]]])
    out = M.predictive_logprobs(extreme)
    assert np.all(np.isfinite(out)) and out.dtype == np.float64
    assert out[0] == pytest.approx([np.log(0.5), np.log(0.5), -1e3])


def test_perfect_predictions_and_aggregate():
    y = np.arange(1000) % 10
    logp = log_softmax(100.0 * np.eye(10)[y], axis=1)
    res = M.classification_metrics(logp, y)
    assert res["acc"] == 1.0 and res["ece"] == pytest.approx(0.0, abs=1e-12)
    assert res["mce"] == pytest.approx(0.0, abs=1e-12) and res["nll"] < 1e-30 and res["brier"] < 1e-30
    logp2, y2 = make(0, 500, 10)
    res = M.classification_metrics(torch.from_numpy(logp2), torch.from_numpy(y2), logp_ood=logp)
    assert tuple(res) == ("acc", "nll", "ece", "mce", "brier", "auroc_entropy", "auroc_maxprob")
    assert all(type(v) is float for v in res.values())
    assert res["auroc_entropy"] < 0.01  # OOD set here is maximally confident


@pytest.mark.parametrize(
    "logp,y,msg",
    [
        (np.zeros((0, 3)), np.zeros(0, int), "non-empty"),
        (np.zeros(5), np.zeros(5, int), r"\(N, C\)"),
        (np.log(np.full((4, 3), 1 / 3)), np.array([0, 1, 3, 0]), r"\[0, 2\]"),
        (np.log(np.full((4, 3), 1 / 3)), np.array([0, -1, 2, 0]), r"\[0, 2\]"),
        (np.log(np.full((4, 3), 1 / 3)), np.array([0, 1, 2]), "shape"),
        (np.log(np.full((4, 3), 1 / 3)), np.array([0.0, 1.0, 2.0, 0.0]), "integers"),
        (np.full((4, 3), np.nan), np.array([0, 1, 2, 0]), "NaN"),
    ],
)
def test_bad_input(logp, y, msg):
    for fn in (M.accuracy, M.nll, M.brier, M.calibration, M.classification_metrics):
        with pytest.raises(ValueError, match=msg):
            fn(logp, y)


def test_bad_input_other():
    with pytest.raises(ValueError, match="at least one"):
        M.auroc([], [1.0])
    with pytest.raises(ValueError, match="class count"):
        M.ood_auroc(np.zeros((3, 2)), np.zeros((3, 4)))
    with pytest.raises(ValueError, match="sample_logits"):
        M.predictive_logprobs(np.zeros((2, 3, 4, 5)))
    with pytest.raises(ValueError, match="n_bins"):
        M.calibration(np.log(np.full((2, 2), 0.5)), np.array([0, 1]), n_bins=0)
