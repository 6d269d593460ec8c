"""Residual networks: the ImageNet family (He et al. 2016: 18/34/50/101) and the CIFAR family
(20/32/56), the models SelSync and Sync-Switch train.

Layout is NHWC. Padding is explicit (torch-style, symmetric) rather than "SAME" so a strided
3x3 conv samples the same positions as the published models. BatchNorm statistics are
`nnx.BatchStat` variables, so `FunctionalModel` keeps them in the per-replica model state.

Two stems: ``"imagenet"`` (7x7/2 conv + 3x3/2 max-pool, for 224-pixel inputs) and ``"cifar"``
(3x3/1 conv, no pool, so 32-pixel inputs are not shrunk to nothing).

Shortcuts when a block changes shape: ``"B"`` is a 1x1 strided conv + BatchNorm projection
(the ImageNet models' choice); ``"A"`` is parameter-free (subsample, zero-pad the new
channels), which He et al. used for the CIFAR family and which gives its published parameter
counts (ResNet-20 0.27M, ResNet-32 0.46M, ResNet-56 0.85M).
"""
from __future__ import annotations

from typing import Sequence

import jax.numpy as jnp
from flax import nnx

from .traced_updates import RunningStat

# torchvision's conv init (He normal, fan-out); Flax's default (LeCun) trains deep nets slower.
_CONV_INIT = nnx.initializers.variance_scaling(2.0, "fan_out", "normal")

_STEMS = ("cifar", "imagenet")
_SHORTCUTS = ("A", "B")


def conv(cin: int, cout: int, k: int, stride: int = 1, *, rngs: nnx.Rngs) -> nnx.Conv:
    """k x k conv, no bias (BatchNorm follows), padding k // 2 on each side."""
    p = k // 2
    return nnx.Conv(cin, cout, (k, k), strides=(stride, stride), padding=((p, p), (p, p)),
                    use_bias=False, kernel_init=_CONV_INIT, rngs=rngs)


def batch_norm(features: int, *, rngs: nnx.Rngs) -> nnx.BatchNorm:
    """torch's defaults: running = 0.9 * running + 0.1 * batch, eps 1e-5."""
    bn = nnx.BatchNorm(features, momentum=0.9, epsilon=1e-5, rngs=rngs)
    bn.mean, bn.var = RunningStat(bn.mean.get_value()), RunningStat(bn.var.get_value())
    return bn


class Shortcut(nnx.Module):
    """The residual branch's skip path when a block changes resolution or width."""

    def __init__(self, cin: int, cout: int, stride: int, kind: str, *, rngs: nnx.Rngs):
        if kind not in _SHORTCUTS:
            raise ValueError(f"shortcut must be one of {_SHORTCUTS}, got {kind!r}")
        self.kind, self.stride, self.extra = kind, stride, cout - cin
        if kind == "B":
            self.conv = conv(cin, cout, 1, stride, rngs=rngs)
            self.bn = batch_norm(cout, rngs=rngs)

    def __call__(self, x):
        if self.kind == "B":
            return self.bn(self.conv(x))
        x = x[:, :: self.stride, :: self.stride, :]
        lo = self.extra // 2
        return jnp.pad(x, ((0, 0), (0, 0), (0, 0), (lo, self.extra - lo)))


class BasicBlock(nnx.Module):
    """Two 3x3 convs (ResNet-18/34 and the CIFAR family)."""

    expansion = 1

    def __init__(self, cin: int, planes: int, stride: int = 1, shortcut: str = "B", *, rngs: nnx.Rngs):
        cout = planes * self.expansion
        self.conv1 = conv(cin, planes, 3, stride, rngs=rngs)
        self.bn1 = batch_norm(planes, rngs=rngs)
        self.conv2 = conv(planes, cout, 3, rngs=rngs)
        self.bn2 = batch_norm(cout, rngs=rngs)
        self.shortcut = Shortcut(cin, cout, stride, shortcut, rngs=rngs) if stride != 1 or cin != cout else None

    def __call__(self, x):
        y = nnx.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        skip = x if self.shortcut is None else self.shortcut(x)
        return nnx.relu(y + skip)


class Bottleneck(nnx.Module):
    """1x1 reduce, 3x3 (strided, as torchvision's "v1.5"), 1x1 expand x4 (ResNet-50/101)."""

    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int = 1, shortcut: str = "B", *, rngs: nnx.Rngs):
        cout = planes * self.expansion
        self.conv1 = conv(cin, planes, 1, rngs=rngs)
        self.bn1 = batch_norm(planes, rngs=rngs)
        self.conv2 = conv(planes, planes, 3, stride, rngs=rngs)
        self.bn2 = batch_norm(planes, rngs=rngs)
        self.conv3 = conv(planes, cout, 1, rngs=rngs)
        self.bn3 = batch_norm(cout, rngs=rngs)
        self.shortcut = Shortcut(cin, cout, stride, shortcut, rngs=rngs) if stride != 1 or cin != cout else None

    def __call__(self, x):
        y = nnx.relu(self.bn1(self.conv1(x)))
        y = nnx.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        skip = x if self.shortcut is None else self.shortcut(x)
        return nnx.relu(y + skip)


class ResNet(nnx.Module):
    """Stem -> stages of residual blocks (the first block of each later stage strides 2)
    -> global average pool -> linear classifier."""

    def __init__(
        self,
        block: type,
        stage_sizes: Sequence[int],
        widths: Sequence[int],
        num_classes: int,
        in_channels: int = 3,
        stem: str = "imagenet",
        shortcut: str = "B",
        *,
        rngs: nnx.Rngs,
    ):
        if stem not in _STEMS:
            raise ValueError(f"stem must be one of {_STEMS}, got {stem!r}")
        self.stem = stem
        self.conv1 = conv(in_channels, widths[0], 7 if stem == "imagenet" else 3,
                          2 if stem == "imagenet" else 1, rngs=rngs)
        self.bn1 = batch_norm(widths[0], rngs=rngs)
        blocks, cin = [], widths[0]
        for i, (n, planes) in enumerate(zip(stage_sizes, widths)):
            for j in range(n):
                stride = 2 if i > 0 and j == 0 else 1
                blocks.append(block(cin, planes, stride, shortcut, rngs=rngs))
                cin = planes * block.expansion
        self.blocks = nnx.List(blocks)
        self.head = nnx.Linear(cin, num_classes, rngs=rngs)

    def __call__(self, x):
        if x.ndim == 3:  # (batch, H, W): single-channel images
            x = x[..., None]
        x = nnx.relu(self.bn1(self.conv1(x)))
        if self.stem == "imagenet":
            x = nnx.max_pool(x, (3, 3), strides=(2, 2), padding=((1, 1), (1, 1)))
        for blk in self.blocks:
            x = blk(x)
        return self.head(x.mean(axis=(1, 2)))


_IMAGENET_DEPTHS = {
    18: (BasicBlock, (2, 2, 2, 2)),
    34: (BasicBlock, (3, 4, 6, 3)),
    50: (Bottleneck, (3, 4, 6, 3)),
    101: (Bottleneck, (3, 4, 23, 3)),
}
_IMAGENET_WIDTHS = (64, 128, 256, 512)
_CIFAR_DEPTHS = (20, 32, 56)
_CIFAR_WIDTHS = (16, 32, 64)


def resnet(depth: int, num_classes: int, in_channels: int = 3, stem: str = "imagenet",
           shortcut: str = "B", *, rngs: nnx.Rngs) -> ResNet:
    """ImageNet-family ResNet-`depth` (18, 34, 50, 101) with either stem."""
    if depth not in _IMAGENET_DEPTHS:
        raise ValueError(f"ImageNet ResNet depth must be one of {sorted(_IMAGENET_DEPTHS)}, got {depth}")
    block, sizes = _IMAGENET_DEPTHS[depth]
    return ResNet(block, sizes, _IMAGENET_WIDTHS, num_classes, in_channels, stem, shortcut, rngs=rngs)


def cifar_resnet(depth: int, num_classes: int, in_channels: int = 3, shortcut: str = "A",
                 *, rngs: nnx.Rngs) -> ResNet:
    """CIFAR-family ResNet-`depth` (6n+2 layers: 3 stages of n BasicBlocks, 16/32/64 wide)."""
    if depth < 8 or (depth - 2) % 6:
        raise ValueError(f"CIFAR ResNet depth must be 6n+2 (e.g. {_CIFAR_DEPTHS}), got {depth}")
    n = (depth - 2) // 6
    return ResNet(BasicBlock, (n, n, n), _CIFAR_WIDTHS, num_classes, in_channels, "cifar", shortcut, rngs=rngs)
