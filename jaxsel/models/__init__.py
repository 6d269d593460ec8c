"""Flax NNX models by name. `build_model(name, input_shape, num_classes, seed)`.

Each registry entry maps a name to a factory `(input_shape, num_classes, rngs) -> nnx.Module`,
where `input_shape` excludes the batch dim (e.g. (32, 32, 3) or (40,)).
"""
from __future__ import annotations

import math
from typing import Callable

from flax import nnx

from .cnn import SmallCNN
from .functional import FunctionalModel, count_params
from .mlp import MLP


def _mlp(input_shape, num_classes, rngs):
    return MLP(math.prod(input_shape), num_classes, rngs=rngs)


def _cnn(input_shape, num_classes, rngs):
    channels = input_shape[-1] if len(input_shape) == 3 else 1
    return SmallCNN(channels, num_classes, rngs=rngs)


MODEL_REGISTRY: dict[str, Callable] = {
    "mlp": _mlp,
    "cnn": _cnn,
}


def build_model(name: str, input_shape, num_classes: int, seed: int = 0) -> nnx.Module:
    if name not in MODEL_REGISTRY:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(sorted(MODEL_REGISTRY))}")
    return MODEL_REGISTRY[name](tuple(input_shape), int(num_classes), nnx.Rngs(seed))
