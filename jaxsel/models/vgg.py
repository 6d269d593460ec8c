"""VGG with BatchNorm (Simonyan & Zisserman 2015), sized for CIFAR: SelSync's VGG-11 / CIFAR-100.

Five 2x2 max-pools take a 32x32 image to 1x1x512, so the ImageNet classifier (7x7x512 ->
4096 -> 4096) is replaced, as CIFAR ports of VGG do, by linear layers on the 512 features.
Default: one linear layer 512 -> classes (VGG-11: 9,231,114 parameters for 10 classes,
9,277,284 for 100); `hidden=(512, 512)` gives the three-layer variant (~9.76M).
Convs keep their bias as in the published BN variant (redundant before BN, but it is what
the parameter counts assume). Larger inputs are average-pooled to 1x1 before the classifier.

`batch_norm=False` is VGG-11 as the paper has it and as SelSync's authors trained it
(torchvision's `vgg11`, no BatchNorm): 5,504 fewer parameters, no model state. Without
BatchNorm nothing rescales the activations, so the layers start as torchvision starts
them: convolutions He-normal over their fan-out, linear layers N(0, 0.01), biases 0
(with Flax's default LeCun init the signal shrinks by half per ReLU, 8 convolutions deep).
"""
from __future__ import annotations

from typing import Sequence

from flax import nnx

# Configuration "A" of the paper (VGG-11): channels of each 3x3 conv, "M" = 2x2 max-pool.
VGG11 = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")
#: torchvision's VGG initialisation, used without BatchNorm
_HE_FAN_OUT = nnx.initializers.variance_scaling(2.0, "fan_out", "normal")
_LINEAR = nnx.initializers.normal(0.01)


class VGG(nnx.Module):
    def __init__(
        self,
        num_classes: int,
        in_channels: int = 3,
        config: Sequence = VGG11,
        hidden: Sequence[int] = (),
        batch_norm: bool = True,
        *,
        rngs: nnx.Rngs,
    ):
        conv_init = {} if batch_norm else {"kernel_init": _HE_FAN_OUT}
        linear_init = {} if batch_norm else {"kernel_init": _LINEAR}
        convs, bns, pools, cin = [], [], [], in_channels
        for item in config:
            if item == "M":  # pool after the last conv so far
                pools.append(len(convs) - 1)
                continue
            convs.append(nnx.Conv(cin, item, (3, 3), padding=((1, 1), (1, 1)), **conv_init, rngs=rngs))
            if batch_norm:
                bns.append(nnx.BatchNorm(item, momentum=0.9, epsilon=1e-5, rngs=rngs))
            cin = item
        self.convs, self.bns, self.pool_after = nnx.List(convs), nnx.List(bns), tuple(pools)
        sizes = [cin, *hidden]
        self.hidden = nnx.List([nnx.Linear(a, b, **linear_init, rngs=rngs) for a, b in zip(sizes[:-1], sizes[1:])])
        self.head = nnx.Linear(sizes[-1], num_classes, **linear_init, rngs=rngs)

    def __call__(self, x):
        if x.ndim == 3:  # (batch, H, W): single-channel images
            x = x[..., None]
        for i, conv in enumerate(self.convs):
            x = conv(x)
            x = nnx.relu(self.bns[i](x) if self.bns else x)
            if i in self.pool_after:
                x = nnx.max_pool(x, (2, 2), strides=(2, 2))
        x = x.mean(axis=(1, 2))
        for layer in self.hidden:
            x = nnx.relu(layer(x))
        return self.head(x)
