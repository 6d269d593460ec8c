"""Flax NNX models by name. `build_model(name, input_shape, num_classes, seed)`.

Each registry entry maps a name to a factory `(input_shape, num_classes, rngs) -> nnx.Module`,
where `input_shape` excludes the batch dim (e.g. (32, 32, 3) or (40,)).
"""
from __future__ import annotations

import math
from typing import Callable

from flax import nnx

from .alexnet import AlexNet
from .cnn import SmallCNN
from .functional import FunctionalModel, count_params
from .mlp import MLP
from .resnet import ResNet, cifar_resnet, resnet
from .traced_updates import model_rngs
from .transformer import TransformerLM, lm_loss
from .vgg import VGG


def _mlp(input_shape, num_classes, rngs):
    return MLP(math.prod(input_shape), num_classes, rngs=rngs)


def _cnn(input_shape, num_classes, rngs):
    channels = input_shape[-1] if len(input_shape) == 3 else 1
    return SmallCNN(channels, num_classes, rngs=rngs)


def _channels(input_shape):
    return input_shape[-1] if len(input_shape) == 3 else 1


def _resnet(depth):
    """ImageNet-family ResNet; the CIFAR stem for inputs up to 64 pixels a side, else ImageNet's."""
    def make(input_shape, num_classes, rngs):
        stem = "cifar" if max(input_shape[:2]) <= 64 else "imagenet"
        return resnet(depth, num_classes, _channels(input_shape), stem, rngs=rngs)
    return make


def _cifar_resnet(depth):
    """CIFAR-family ResNet with parameter-free (option A) shortcuts, as He et al."""
    def make(input_shape, num_classes, rngs):
        return cifar_resnet(depth, num_classes, _channels(input_shape), rngs=rngs)
    return make


def _vgg11(batch_norm: bool):
    def make(input_shape, num_classes, rngs):
        if min(input_shape[:2]) < 32:
            raise ValueError(f"vgg11 pools 5 times and needs inputs of at least 32x32, got {input_shape}")
        return VGG(num_classes, _channels(input_shape), batch_norm=batch_norm, rngs=rngs)
    return make


def _alexnet(input_shape, num_classes, rngs):
    return AlexNet(num_classes, _channels(input_shape), rngs=rngs)


def _transformer_lm(input_shape, num_classes, rngs):
    """input_shape = (seq_len,), num_classes = vocabulary size."""
    return TransformerLM(num_classes, int(input_shape[0]), rngs=rngs)


MODEL_REGISTRY: dict[str, Callable] = {
    "mlp": _mlp,
    "cnn": _cnn,
    "resnet18": _resnet(18),
    "resnet34": _resnet(34),
    "resnet50": _resnet(50),
    "resnet101": _resnet(101),
    "resnet20": _cifar_resnet(20),
    "resnet32": _cifar_resnet(32),
    "resnet56": _cifar_resnet(56),
    "vgg11": _vgg11(batch_norm=True),
    "vgg11_nobn": _vgg11(batch_norm=False),   # the paper's, and SelSync's authors' (torchvision vgg11)
    "alexnet": _alexnet,
    "transformer_lm": _transformer_lm,
}


def build_model(name: str, input_shape, num_classes: int, seed: int = 0) -> nnx.Module:
    if name not in MODEL_REGISTRY:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(sorted(MODEL_REGISTRY))}")
    return MODEL_REGISTRY[name](tuple(input_shape), int(num_classes), model_rngs(seed))
