"""Model FLOPs counted from the program itself, for MFU that means something.

XLA's `cost_analysis()` of a compiled GPU step leaves out the convolutions and matmuls
that run as library calls (cuDNN, cuBLAS custom calls), so it undercounts a ResNet step by
one to two orders of magnitude. Here the forward pass's jaxpr is walked and every
`dot_general` and `conv_general_dilated` is counted exactly from its shapes (2 FLOPs per
multiply-add); a training step's model FLOPs are 3 x the forward's (the backward pass
costs two forwards: PaLM's MFU convention). Elementwise work (activations, BatchNorm,
the optimizer) is not counted, as in that convention.
"""
from __future__ import annotations

import math
from typing import Callable

import jax

TRAINING_MULTIPLIER = 3


def dot_flops(eqn) -> int:
    """2 x (batch x contracted x lhs-free x rhs-free) of a dot_general."""
    lhs, rhs = (v.aval.shape for v in eqn.invars[:2])
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    batch = math.prod(lhs[d] for d in lb)
    contracted = math.prod(lhs[d] for d in lc)
    lhs_free = math.prod(s for d, s in enumerate(lhs) if d not in (*lc, *lb))
    rhs_free = math.prod(s for d, s in enumerate(rhs) if d not in (*rc, *rb))
    return 2 * batch * contracted * lhs_free * rhs_free


def conv_flops(eqn) -> int:
    """2 x output elements x multiply-adds per output (kernel size x input channels per group)."""
    rhs = eqn.invars[1].aval.shape
    out = eqn.outvars[0].aval.shape
    out_features = rhs[eqn.params["dimension_numbers"].rhs_spec[0]]
    return 2 * math.prod(out) * math.prod(rhs) // out_features


COUNTERS = {"dot_general": dot_flops, "conv_general_dilated": conv_flops}


def jaxpr_flops(jaxpr) -> int:
    """Matmul and convolution FLOPs of a jaxpr, nested calls included (a scan's body times
    its length; a cond's most expensive branch)."""
    total = 0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name in COUNTERS:
            total += COUNTERS[name](eqn)
        elif name == "cond":
            total += max(jaxpr_flops(b.jaxpr) for b in eqn.params["branches"])
        elif name in ("scan", "while"):
            body = eqn.params.get("jaxpr") or eqn.params.get("body_jaxpr")
            total += eqn.params.get("length", 1) * jaxpr_flops(body.jaxpr)
        else:
            for value in eqn.params.values():
                for sub in value if isinstance(value, (tuple, list)) else [value]:
                    if hasattr(sub, "jaxpr") and hasattr(sub, "consts"):
                        total += jaxpr_flops(sub.jaxpr)
                    elif hasattr(sub, "eqns"):
                        total += jaxpr_flops(sub)
    return total


def forward_flops(fn: Callable, *args) -> int:
    """FLOPs of one call of `fn(*args)` (traced, never run)."""
    return jaxpr_flops(jax.make_jaxpr(fn)(*args).jaxpr)


def training_flops(forward: Callable, *args) -> int:
    """Model FLOPs of one training step whose forward pass is `forward(*args)`."""
    return TRAINING_MULTIPLIER * forward_flops(forward, *args)
