"""Model zoo: the builders the index (``fedbayes.models``, torch-free) names. Every model is a plain
``nn.Module``; methods never touch its parameters directly but call it through :class:`FlatModel`, which
maps one flat parameter vector onto the module with ``torch.func.functional_call``."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.func import functional_call

from fedbayes.models import INDEX, ModelEntry

ACTIVATIONS = {"relu": nn.ReLU, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh}


def _windows(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The four positions of the non-overlapping 2×2 windows (odd last rows/columns dropped, as pooling
    does)."""
    h, w = x.shape[-2] // 2 * 2, x.shape[-1] // 2 * 2
    return x[..., 0:h:2, 0:w:2], x[..., 0:h:2, 1:w:2], x[..., 1:h:2, 0:w:2], x[..., 1:h:2, 1:w:2]


class MaxPool2(nn.MaxPool2d):
    """``nn.MaxPool2d(2)``, evaluated without a gradient on the CPU as the maximum of the windows' four
    strided views: the same values (a maximum is exact), 11× faster than PyTorch's kernel, which loops
    over the windows one value at a time (20 ms → 1.9 ms for the first pooling of FedIVON's CNN on 256
    images). With a gradient, PyTorch's kernel: its backward needs the positions it records, and neither
    an elementwise version nor a compiled loop of both passes was faster at a training batch of 32."""

    def __init__(self):
        super().__init__(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cpu" or x.dim() != 4 or (torch.is_grad_enabled() and x.requires_grad):
            return super().forward(x)
        a, b, c, d = _windows(x)
        return torch.maximum(torch.maximum(a, b), torch.maximum(c, d))


def mlp(in_features: int, n_classes: int, hidden=(200, 100), activation: str = "sigmoid") -> nn.Module:
    """Fully connected network, e.g. 784-200-100-10 (FedLap / BayesADMM FMNIST and MNIST MLP)."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; choose from {sorted(ACTIVATIONS)}")
    layers: list[nn.Module] = [nn.Flatten()]
    width = in_features
    for h in hidden:
        layers += [nn.Linear(width, h), ACTIVATIONS[activation]()]
        width = h
    layers.append(nn.Linear(width, n_classes))
    return nn.Sequential(*layers)


class PadZeroLogit(nn.Module):
    """(N, 1) → (N, 2) logits [0, z]: softmax over them is [1 − σ(z), σ(z)], so cross-entropy on these
    two logits is exactly the binary cross-entropy of a sigmoid output (and the GGN is σ(1 − σ) JᵀJ)."""

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return torch.cat([torch.zeros_like(z), z], dim=-1)


def logistic(in_features: int, n_classes: int = 2) -> nn.Module:
    """Logistic regression (UCI Credit, FLamby-Heart; FedLap spec §4.3): Linear(D → 1) with bias and a
    sigmoid likelihood, written as two-class logits [0, z] so every method and metric treats it like
    any classifier. ``n_classes`` > 2 gives multinomial logistic regression (Linear(D → C))."""
    if n_classes == 2:
        return nn.Sequential(nn.Flatten(), nn.Linear(in_features, 1), PadZeroLogit())
    return nn.Sequential(nn.Flatten(), nn.Linear(in_features, n_classes))


def cifar_cnn(in_shape: tuple[int, ...], n_classes: int = 10) -> nn.Module:
    """The CIFAR-10 CNN of FROMP (Pan et al. 2020) and Zenke et al. 2017, used by FedLap (spec §4.3):
    conv32-conv32-pool-drop.25, conv64-conv64-pool-drop.25, fc512-drop.5, fc10; 1,250,858 parameters
    for 3×32×32 inputs. Dropout is on in local training and off in evaluation and curvature passes."""
    c, h, w = in_shape
    size = lambda s: ((s - 2) // 2 - 2) // 2  # noqa: E731  (padding 1, then 0, then pool; twice)
    return nn.Sequential(
        nn.Conv2d(c, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3), nn.ReLU(), MaxPool2(), nn.Dropout(0.25),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 64, 3), nn.ReLU(), MaxPool2(), nn.Dropout(0.25),
        nn.Flatten(), nn.Linear(64 * size(h) * size(w), 512), nn.ReLU(), nn.Dropout(0.5), nn.Linear(512, n_classes))


def _image(in_shape: tuple[int, ...]) -> tuple[list[nn.Module], tuple[int, int, int]]:
    """(N, H, W) grey images get a channel axis; (N, C, H, W) pass through."""
    if len(in_shape) == 2:
        return [nn.Unflatten(1, (1, in_shape[0]))], (1, *in_shape)
    return [], tuple(in_shape)


def emnist_cnn(in_shape: tuple[int, ...], n_classes: int = 26) -> nn.Module:
    """FedIVON's CNN for 28×28 grey images (FedPPD's CNN_FEMNIST without dropout, FedIVON spec §6.3):
    conv5×5(32)-pool-ReLU, conv5×5(64)-pool-ReLU, fc128-ReLU, fc; 186,650 parameters for 26 classes."""
    pre, (c, h, w) = _image(in_shape)
    size = lambda s: ((s - 4) // 2 - 4) // 2  # noqa: E731
    return nn.Sequential(*pre, nn.Conv2d(c, 32, 5), MaxPool2(), nn.ReLU(), nn.Conv2d(32, 64, 5), MaxPool2(),
                         nn.ReLU(), nn.Flatten(), nn.Linear(64 * size(h) * size(w), 128), nn.ReLU(),
                         nn.Linear(128, n_classes))


def lenet5(in_shape: tuple[int, ...], n_classes: int = 10) -> nn.Module:
    """FedIVON's CNN for SVHN / CIFAR-10 (LeNet-5 style, spec §6.3): conv5×5(6)-ReLU-pool,
    conv5×5(16)-ReLU-pool, fc120, fc84, fc; 62,006 parameters for 3×32×32 inputs."""
    pre, (c, h, w) = _image(in_shape)
    size = lambda s: ((s - 4) // 2 - 4) // 2  # noqa: E731
    return nn.Sequential(*pre, nn.Conv2d(c, 6, 5), nn.ReLU(), MaxPool2(), nn.Conv2d(6, 16, 5), nn.ReLU(),
                         MaxPool2(), nn.Flatten(), nn.Linear(16 * size(h) * size(w), 120), nn.ReLU(),
                         nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, n_classes))


def acar_cnn(in_shape: tuple[int, ...], n_classes: int = 10) -> nn.Module:
    """The CIFAR-10 CNN of Acar et al. (FedDyn), BayesADMM's second CIFAR-10 model (spec §4.4):
    conv5×5(64)-ReLU-pool, conv5×5(64)-ReLU-pool, fc384, fc192, fc; no dropout; 797,962 parameters."""
    pre, (c, h, w) = _image(in_shape)
    size = lambda s: ((s - 4) // 2 - 4) // 2  # noqa: E731
    return nn.Sequential(*pre, nn.Conv2d(c, 64, 5), nn.ReLU(), MaxPool2(), nn.Conv2d(64, 64, 5), nn.ReLU(),
                         MaxPool2(), nn.Flatten(), nn.Linear(64 * size(h) * size(w), 384), nn.ReLU(),
                         nn.Linear(384, 192), nn.ReLU(), nn.Linear(192, n_classes))


def mcmahan_cnn(in_shape: tuple[int, ...], n_classes: int = 10) -> nn.Module:
    """The CNN of McMahan et al. (2017) as the FOLA paper uses it for CIFAR-10 (spec 004 §5.3, the
    authors' BasicCNN): conv5×5(32)-ReLU-pool, conv5×5(64)-ReLU-pool, fc512-ReLU, fc; no padding, no
    dropout; 878,538 parameters for 3×32×32 inputs."""
    pre, (c, h, w) = _image(in_shape)
    size = lambda s: ((s - 4) // 2 - 4) // 2  # noqa: E731
    return nn.Sequential(*pre, nn.Conv2d(c, 32, 5), nn.ReLU(), MaxPool2(), nn.Conv2d(32, 64, 5), nn.ReLU(),
                         MaxPool2(), nn.Flatten(), nn.Linear(64 * size(h) * size(w), 512), nn.ReLU(),
                         nn.Linear(512, n_classes))


class _Block(nn.Module):
    """ResNet BasicBlock with GroupNorm (2 groups) and the option-A shortcut (stride-2 subsampling,
    zero-padded channels), as in the CIFAR ResNets of He et al. 2016."""

    def __init__(self, cin: int, cout: int, stride: int, groups: int = 2):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.gn1 = nn.GroupNorm(groups, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.gn2 = nn.GroupNorm(groups, cout)
        self.stride, self.pad = stride, (cout - cin) // 2

    def forward(self, x):
        out = torch.relu(self.gn1(self.conv1(x)))
        out = self.gn2(self.conv2(out))
        short = x
        if self.stride != 1 or self.pad:
            short = nn.functional.pad(x[:, :, ::self.stride, ::self.stride], (0, 0, 0, 0, self.pad, self.pad))
        return torch.relu(out + short)


def resnet20_gn(in_shape: tuple[int, ...], n_classes: int = 100) -> nn.Module:
    """ResNet-20 for 32×32 images with GroupNorm(2) instead of BatchNorm (BayesADMM's CIFAR-100 model,
    spec §4.4): 3 stages × 3 blocks of 16/32/64 channels, no conv bias, Kaiming-normal init, global
    average pooling, linear head; 275,572 parameters for 100 classes."""
    pre, (c, _, _) = _image(in_shape)
    layers = [*pre, nn.Conv2d(c, 16, 3, 1, 1, bias=False), nn.GroupNorm(2, 16), nn.ReLU()]
    cin = 16
    for cout, stride in ((16, 1), (32, 2), (64, 2)):
        for i in range(3):
            layers.append(_Block(cin, cout, stride if i == 0 else 1))
            cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, n_classes)]
    net = nn.Sequential(*layers)
    for m in net.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.kaiming_normal_(m.weight)
    return net


class _PreActBlock(nn.Module):
    """Pre-activation (v2) basic block: GN → ReLU → conv3×3(stride) → GN → ReLU → conv3×3, plus the
    shortcut (a 1×1 projection of the pre-activated input where the shape changes)."""

    def __init__(self, cin: int, cout: int, stride: int, norm):
        super().__init__()
        self.gn1, self.conv1 = norm(cin), nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.gn2, self.conv2 = norm(cout), nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.proj = nn.Conv2d(cin, cout, 1, stride, bias=False) if stride != 1 or cin != cout else None

    def forward(self, x):
        a = torch.relu(self.gn1(x))
        short = self.proj(a) if self.proj is not None else x
        return self.conv2(torch.relu(self.gn2(self.conv1(a)))) + short


def resnet18_gn(in_shape: tuple[int, ...], n_classes: int = 100) -> nn.Module:
    """The FedEP paper's CIFAR-100 ResNet-18 (spec 002 §3.3, TFF/Haiku): pre-activation v2 blocks,
    GroupNorm with 2 groups and no scale/offset (eps 1e-3), a 7×7/2 stem conv and 3×3/2 max-pool, stages
    of 64/128/256/512 channels × 2 blocks, final GN → ReLU → average pool → linear head with zero-initialised
    weights; no conv bias; 11,218,212 parameters for 100 classes."""
    pre, (c, _, _) = _image(in_shape)
    norm = lambda ch: nn.GroupNorm(2, ch, eps=1e-3, affine=False)  # noqa: E731
    layers = [*pre, nn.Conv2d(c, 64, 7, 2, 3, bias=False), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        for i in range(2):
            layers.append(_PreActBlock(cin, cout, stride if i == 0 else 1, norm))
            cin = cout
    head = nn.Linear(512, n_classes)
    nn.init.zeros_(head.weight)
    nn.init.zeros_(head.bias)
    layers += [norm(512), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), head]
    return nn.Sequential(*layers)


def cnn_dropout(in_shape: tuple[int, ...], n_classes: int = 62) -> nn.Module:
    """The FedEP paper's EMNIST-62 CNN (TFF ``cnn_dropout`` = FedJAX ConvDropoutModule, spec 002 §3.3):
    conv3×3(32)-ReLU, conv3×3(64)-ReLU, max-pool 2, dropout 0.25, fc128-ReLU, dropout 0.5, fc;
    1,206,590 parameters for 28×28 inputs and 62 classes."""
    pre, (c, h, w) = _image(in_shape)
    return nn.Sequential(*pre, nn.Conv2d(c, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), MaxPool2(),
                         nn.Dropout(0.25), nn.Flatten(), nn.Linear(64 * ((h - 4) // 2) * ((w - 4) // 2), 128),
                         nn.ReLU(), nn.Dropout(0.5), nn.Linear(128, n_classes))


def _builder(entry: ModelEntry):
    """builder(input shape, number of classes, **params.yaml model options) of an index entry."""
    fn = globals()[entry.builder]
    if entry.flat_input:
        return lambda shape, n_classes, **kw: fn(math.prod(shape), n_classes, **kw)
    return lambda shape, n_classes, **kw: fn(tuple(shape), n_classes, **kw)


# name → builder(input shape, number of classes, **params.yaml model options), one per index entry
MODELS = {name: _builder(entry) for name, entry in INDEX.items()}


def _has_hooks(module: nn.Module) -> bool:
    """Forward hooks (e.g. the curvature code's) need the real module call."""
    return any(m._forward_hooks or m._forward_pre_hooks for m in module.modules())


def build_model(name: str, in_shape: tuple[int, ...], n_classes: int, **kwargs) -> nn.Module:
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose from {sorted(MODELS)}")
    return MODELS[name](tuple(in_shape), n_classes, **kwargs)


# A CPU evaluation of a convolutional network (no gradient) runs EVAL_ROWS rows at a time: the first
# layers' activations of 4,096 rows (300 MB for FedIVON's CNN) do not fit in cache, and their pooling
# then costs more than the convolutions. Rows are computed alike in any batch (oneDNN and MKL kernels do
# not mix rows): the same bits at 32 … 4,096 rows (checked for the MLPs and the CNN, tests/test_models.py),
# 1.55× faster for the CNN at 256 rows (2.7 → 1.74 s for 10,000 images); the MLPs' direct path is not
# split (no gain there).
EVAL_ROWS = 256


class FlatModel:
    """A module seen as a function of one flat parameter vector ``w`` of length ``n_params``.

    ``logits = fm(w, x)`` evaluates the module with its parameters replaced by views into ``w``
    (no copies), so gradients flow to ``w`` and optimisers and methods work on flat vectors.
    Any module goes through ``torch.func.functional_call``; a plain ``nn.Sequential`` of Flatten,
    Linear and activation layers (the MLPs, logistic regression) takes a direct path with the same
    operations and ~15 % less per-call overhead (bit-identical results, checked in the tests).
    """

    def __init__(self, module: nn.Module):
        self.module = module
        named = list(module.named_parameters())
        self.names = [n for n, _ in named]
        self.shapes = [p.shape for _, p in named]
        self.numels = [p.numel() for _, p in named]
        self.n_params = sum(self.numels)
        self.buffers = dict(module.named_buffers())
        self.ops = self._sequential_ops(module)
        # rows are independent (no batch statistics, no dropout draws): an evaluation may split them
        self.row_wise = not any(isinstance(m, (nn.modules.batchnorm._BatchNorm, nn.modules.dropout._DropoutNd))
                                for m in module.modules())

    def _sequential_ops(self, module: nn.Module):
        if not isinstance(module, nn.Sequential) or self.buffers:
            return None
        ops, index = [], {n: i for i, n in enumerate(self.names)}
        for name, layer in module.named_children():
            if isinstance(layer, nn.Flatten) and layer.start_dim == 1 and layer.end_dim == -1:
                ops.append(("flatten", None))
            elif type(layer) is nn.Linear:
                ops.append(("linear", (index[f"{name}.weight"], index.get(f"{name}.bias"))))
            elif type(layer) in (nn.ReLU, nn.Sigmoid, nn.Tanh):
                ops.append(("act", {nn.ReLU: torch.relu, nn.Sigmoid: torch.sigmoid, nn.Tanh: torch.tanh}[type(layer)]))
            else:
                return None
        return ops

    def _direct(self, w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        parts = torch.split(w, self.numels)
        h = x
        for kind, arg in self.ops:
            if kind == "flatten":
                h = h.flatten(1)
            elif kind == "linear":
                wi, bi = arg
                h = torch.nn.functional.linear(h, parts[wi].view(self.shapes[wi]), None if bi is None else parts[bi])
            else:
                h = arg(h)
        return h

    def flat_params(self) -> torch.Tensor:
        """The module's current parameters as one detached flat vector."""
        return torch.cat([p.detach().reshape(-1) for p in self.module.parameters()]).clone()

    def unflatten(self, w: torch.Tensor) -> dict[str, torch.Tensor]:
        return {n: t.view(s) for n, t, s in zip(self.names, torch.split(w, self.numels), self.shapes)}

    def __call__(self, w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        if self.ops is not None and not _has_hooks(self.module):
            return self._direct(w, x)
        params = (self.unflatten(w), self.buffers)
        if (len(x) > EVAL_ROWS and self.row_wise and x.device.type == "cpu" and not torch.is_grad_enabled()
                and not _has_hooks(self.module)):
            return torch.cat([functional_call(self.module, params, (x[i:i + EVAL_ROWS],))
                              for i in range(0, len(x), EVAL_ROWS)])
        return functional_call(self.module, params, (x,))

    def to(self, device) -> "FlatModel":
        self.module.to(device)
        self.buffers = dict(self.module.named_buffers())
        return self
