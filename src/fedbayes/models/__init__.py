"""Model zoo. Every model is a plain ``nn.Module``; methods never touch its parameters directly but
call it through :class:`FlatModel`, which maps one flat parameter vector onto the module with
``torch.func.functional_call``."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.func import functional_call

ACTIVATIONS = {"relu": nn.ReLU, "sigmoid": nn.Sigmoid, "tanh": nn.Tanh}


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


MODELS = {"mlp": mlp}


def build_model(name: str, in_shape: tuple[int, ...], n_classes: int, **kwargs) -> nn.Module:
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose from {sorted(MODELS)}")
    return MODELS[name](math.prod(in_shape), n_classes, **kwargs)


class FlatModel:
    """A module seen as a function of one flat parameter vector ``w`` of length ``n_params``.

    ``logits = fm(w, x)`` evaluates the module with its parameters replaced by views into ``w``
    (no copies), so gradients flow to ``w`` and optimisers and methods work on flat vectors.
    """

    def __init__(self, module: nn.Module):
        self.module = module
        named = list(module.named_parameters())
        self.names = [n for n, _ in named]
        self.shapes = [p.shape for _, p in named]
        self.numels = [p.numel() for _, p in named]
        self.n_params = sum(self.numels)
        self.buffers = dict(module.named_buffers())

    def flat_params(self) -> torch.Tensor:
        """The module's current parameters as one detached flat vector."""
        return torch.cat([p.detach().reshape(-1) for p in self.module.parameters()]).clone()

    def unflatten(self, w: torch.Tensor) -> dict[str, torch.Tensor]:
        return {n: t.view(s) for n, t, s in zip(self.names, torch.split(w, self.numels), self.shapes)}

    def __call__(self, w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return functional_call(self.module, (self.unflatten(w), self.buffers), (x,))

    def to(self, device) -> "FlatModel":
        self.module.to(device)
        self.buffers = dict(self.module.named_buffers())
        return self
