"""Models of the FedLap paper beyond the MLP: logistic regression (as two-class logits) and the
CIFAR-10 CNN of FROMP; the BayesADMM and FedIVON papers' CNNs and ResNet-20 (GroupNorm)."""

import pytest
import torch
import torch.nn.functional as F

from fedbayes.methods.core.curvature import diag_ggn, diag_ggn_vjp
from fedbayes.models import FlatModel, build_model


def test_cifar_cnn_is_fromps_cifarnet():
    m = build_model("cifar_cnn", (3, 32, 32), 10)
    assert sum(p.numel() for p in m.parameters()) == 1_250_858  # spec §4.3
    assert m(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    assert sum(isinstance(x, torch.nn.Dropout) for x in m.modules()) == 3


def test_logistic_regression_cross_entropy_is_bce():
    torch.manual_seed(0)
    fm = FlatModel(build_model("logistic", (7,), 2))
    assert fm.n_params == 8  # weights + bias, one output
    w, x, y = torch.randn(fm.n_params), torch.randn(50, 7), torch.randint(0, 2, (50,))
    logits = fm(w, x)
    z = x @ w[:7] + w[7]
    assert torch.allclose(logits[:, 0], torch.zeros(50)) and torch.allclose(logits[:, 1], z, atol=1e-6)
    ce = F.cross_entropy(logits, y)
    bce = F.binary_cross_entropy_with_logits(z, y.float())
    assert torch.allclose(ce, bce, atol=1e-6)


def test_logistic_diag_ggn_is_the_closed_form_hessian():
    """H = Σ_n σ_n(1 − σ_n) x̃_n² (x̃ with the bias 1): FedLap-Cov's curvature for UCI / FLamby."""
    torch.manual_seed(1)
    fm = FlatModel(build_model("logistic", (5,), 2))
    w, x = torch.randn(fm.n_params), torch.randn(40, 5)
    s = torch.sigmoid(x @ w[:5] + w[5])
    xt = torch.cat([x, torch.ones(40, 1)], 1)
    expected = ((s * (1 - s))[:, None] * xt.square()).sum(0)
    assert torch.allclose(diag_ggn(fm, w, x), expected, atol=1e-5)
    assert torch.allclose(diag_ggn_vjp(fm, w, x), expected, atol=1e-5)


def test_multinomial_logistic_regression():
    fm = FlatModel(build_model("logistic", (4,), 3))
    assert fm.n_params == 15 and fm.ops is not None  # a plain Linear: the direct path


@pytest.mark.parametrize("name,shape,classes,n_params", [
    ("emnist_cnn", (28, 28), 26, 186_650),     # FedIVON spec §6.3 (EMNIST-letters)
    ("lenet5", (3, 32, 32), 10, 62_006),       # FedIVON spec §6.3 (SVHN, CIFAR-10)
    ("acar_cnn", (3, 32, 32), 10, 797_962),    # BayesADMM spec §4.4 (FedDyn's CIFAR-10 CNN)
    ("resnet20_gn", (3, 32, 32), 100, 275_572),  # BayesADMM spec §4.4 (CIFAR-100)
    ("mcmahan_cnn", (3, 32, 32), 10, 878_538),   # FOLA spec §5.3 (CIFAR-10)
    ("resnet18_gn", (3, 24, 24), 100, 11_218_212),  # FedEP spec §3.3 (CIFAR-100, 24×24 crops)
    ("cnn_dropout", (28, 28), 62, 1_206_590),    # FedEP spec §3.3 (EMNIST-62)
])
def test_paper_models_have_the_papers_sizes_and_run_flat(name, shape, classes, n_params):
    torch.manual_seed(0)
    m = build_model(name, shape, classes)
    assert sum(p.numel() for p in m.parameters()) == n_params
    fm = FlatModel(m.eval())
    x = torch.randn(3, *shape)
    out = fm(fm.flat_params(), x)
    assert out.shape == (3, classes)
    torch.testing.assert_close(out, m(x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name,shape", [("emnist_cnn", (1, 28, 28)), ("lenet5", (3, 32, 32)), ("resnet20_gn", (3, 32, 32))])
def test_an_evaluation_split_into_row_chunks_is_the_whole_batch_within_round_off(name, shape):
    """FlatModel evaluates a convolutional network EVAL_ROWS rows at a time (no gradient, CPU): the whole
    batch's values up to float32 round-off, the same bits every time, and a network with batch statistics
    or dropout is never split. Bit for bit only where the CPU's matrix product rounds a row alike whatever
    the row count (the goldens' AMD machine); an Intel Xeon's MKL changes the last bit with the row count."""
    import fedbayes.models as models

    torch.manual_seed(0)
    fm = FlatModel(build_model(name, shape, 10))
    w = fm.flat_params()
    x = torch.rand(2 * models.EVAL_ROWS + 37, *shape)
    with torch.no_grad():
        split = fm(w, x)
        whole = torch.func.functional_call(fm.module, (fm.unflatten(w), fm.buffers), (x,))
        again = fm(w, x)
    assert fm.row_wise and torch.equal(split.view(torch.int32), again.view(torch.int32))
    torch.testing.assert_close(split, whole, rtol=1e-5, atol=1e-6)
    assert not FlatModel(torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2))).row_wise
    assert not FlatModel(torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.Dropout(0.5))).row_wise


def test_maxpool2_evaluates_as_torchs_max_pooling():
    """MaxPool2 without a gradient (four strided views): PyTorch's max pooling bit for bit on conv
    outputs with ties (zero background), odd sizes and ±0, NaN where it gives NaN; with a gradient it is
    PyTorch's pooling itself."""
    import torch.nn.functional as F

    from fedbayes.models import MaxPool2

    torch.manual_seed(0)
    conv = torch.nn.Conv2d(1, 8, 5)
    x = torch.rand(16, 1, 28, 28) * 255
    x[:, :, :10] = 0
    with torch.no_grad():
        y = conv(x)
        y[1, 1, 4:6, 4:6] = torch.tensor([[-0.0, 0.0], [-1.0, -2.0]])
        for z in (y, y[..., :23, :21]):
            assert torch.equal(F.max_pool2d(z, 2).view(torch.int32), MaxPool2()(z).view(torch.int32))
        y[0, 0, 7, 7] = float("nan")
        assert torch.equal(F.max_pool2d(y, 2).isnan(), MaxPool2()(y).isnan())
    w = y.clone().requires_grad_(True)
    out = MaxPool2()(w)
    assert out.grad_fn is not None and "MaxPool2DWithIndices" in type(out.grad_fn).__name__
