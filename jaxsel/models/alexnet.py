"""AlexNet, single-tower (the torchvision layout; Krizhevsky 2014's "one weird trick" widths):
SelSync's ImageNet model. 61,100,840 parameters for 1000 classes.

The feature map is average-pooled adaptively to 6x6 before the classifier, so any input of
at least 63 pixels works (224 gives 6x6 already). No dropout: it would need an RNG stream in
the per-replica model state and a key per step, and the step's loss is a pure function of
(params, model_state, batch). Train and eval mode therefore compute the same function.
"""
from __future__ import annotations

import numpy as np
import jax.numpy as jnp
from flax import nnx

MIN_SIDE = 63  # smallest input side whose last 3x3/2 max-pool still has one output


def _bins(n_in: int, n_out: int) -> np.ndarray:
    """(n_out, n_in) averaging matrix of adaptive pooling: bin i covers
    [floor(i n_in / n_out), ceil((i+1) n_in / n_out)), as torch's AdaptiveAvgPool does."""
    m = np.zeros((n_out, n_in), np.float32)
    for i in range(n_out):
        lo, hi = (i * n_in) // n_out, -((-(i + 1) * n_in) // n_out)
        m[i, lo:hi] = 1.0 / (hi - lo)
    return m


def adaptive_avg_pool(x, out_hw: tuple[int, int]):
    """Average-pool NHWC `x` to `out_hw` spatial bins (shapes are static, so the bin
    matrices are constants)."""
    h, w = x.shape[1:3]
    return jnp.einsum("oh,nhwc,pw->nopc", _bins(h, out_hw[0]), x, _bins(w, out_hw[1]))


class AlexNet(nnx.Module):
    def __init__(self, num_classes: int, in_channels: int = 3, *, rngs: nnx.Rngs):
        def conv(cin, cout, k, stride, pad):
            return nnx.Conv(cin, cout, (k, k), strides=(stride, stride), padding=((pad, pad), (pad, pad)), rngs=rngs)

        self.convs = nnx.List([
            conv(in_channels, 64, 11, 4, 2),
            conv(64, 192, 5, 1, 2),
            conv(192, 384, 3, 1, 1),
            conv(384, 256, 3, 1, 1),
            conv(256, 256, 3, 1, 1),
        ])
        self.fc1 = nnx.Linear(256 * 6 * 6, 4096, rngs=rngs)
        self.fc2 = nnx.Linear(4096, 4096, rngs=rngs)
        self.head = nnx.Linear(4096, num_classes, rngs=rngs)

    def __call__(self, x):
        if x.ndim == 3:  # (batch, H, W): single-channel images
            x = x[..., None]
        if min(x.shape[1:3]) < MIN_SIDE:
            raise ValueError(f"AlexNet needs inputs of at least {MIN_SIDE}x{MIN_SIDE} pixels, got {x.shape[1:3]}")
        for i, conv in enumerate(self.convs):
            x = nnx.relu(conv(x))
            if i in (0, 1, 4):  # 3x3/2 overlapping max-pool after conv1, conv2, conv5
                x = nnx.max_pool(x, (3, 3), strides=(2, 2))
        x = adaptive_avg_pool(x, (6, 6)).reshape(x.shape[0], -1)
        x = nnx.relu(self.fc1(x))
        x = nnx.relu(self.fc2(x))
        return self.head(x)
