"""A small convolutional classifier with BatchNorm (for 8x8 .. 32x32 images)."""
from __future__ import annotations

from flax import nnx


class SmallCNN(nnx.Module):
    def __init__(self, in_channels: int, num_classes: int, width: int = 32, *, rngs: nnx.Rngs):
        self.conv1 = nnx.Conv(in_channels, width, (3, 3), use_bias=False, rngs=rngs)
        self.bn1 = nnx.BatchNorm(width, momentum=0.9, rngs=rngs)
        self.conv2 = nnx.Conv(width, 2 * width, (3, 3), use_bias=False, rngs=rngs)
        self.bn2 = nnx.BatchNorm(2 * width, momentum=0.9, rngs=rngs)
        self.head = nnx.Linear(2 * width, num_classes, rngs=rngs)

    def __call__(self, x):
        x = nnx.relu(self.bn1(self.conv1(x)))
        x = nnx.max_pool(x, (2, 2), strides=(2, 2))
        x = nnx.relu(self.bn2(self.conv2(x)))
        x = x.mean(axis=(1, 2))
        return self.head(x)
