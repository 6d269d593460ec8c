"""A multilayer perceptron classifier (flattens its input)."""
from __future__ import annotations

from typing import Sequence

from flax import nnx


class MLP(nnx.Module):
    def __init__(self, in_features: int, num_classes: int, hidden: Sequence[int] = (128, 128), *, rngs: nnx.Rngs):
        sizes = [in_features, *hidden]
        self.hidden = nnx.List([nnx.Linear(a, b, rngs=rngs) for a, b in zip(sizes[:-1], sizes[1:])])
        self.head = nnx.Linear(sizes[-1], num_classes, rngs=rngs)

    def __call__(self, x):
        x = x.reshape(x.shape[0], -1)
        for layer in self.hidden:
            x = nnx.relu(layer(x))
        return self.head(x)
