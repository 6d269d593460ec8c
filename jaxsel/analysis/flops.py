"""Model FLOPs counted from the program itself, for MFU that means something.

XLA's `cost_analysis()` of a compiled GPU step leaves out the convolutions and matmuls
that run as library calls (cuDNN, cuBLAS custom calls), so it undercounts a ResNet step by
one to two orders of magnitude. Here the forward pass's jaxpr is walked and every
`dot_general` and `conv_general_dilated` is counted exactly from its shapes (2 FLOPs per
multiply-add); a training step's model FLOPs are 3 x the forward's (the backward pass
costs two forwards: PaLM's MFU convention). Elementwise work (activations, BatchNorm,
the optimizer) is not counted, as in that convention.

Every program JAX builds is read through its public `jax.extend.core` (the jaxprs an
equation holds) and each counted primitive's params by name; a param JAX renamed or
reshaped is LibraryChanged naming the primitive, never a count that quietly drops it.
"""
from __future__ import annotations

import math
import re
from typing import Callable

import jax
from jax.extend.core import jaxprs_in_params

from ..core.library_changes import LibraryChanged

TRAINING_MULTIPLIER = 3


class Uncountable(ValueError):
    """The program does matmul or convolution work flops.py cannot count: a `while` loop's
    (its trip count is not in the program), or a primitive other than dot_general and
    conv_general_dilated (cuDNN attention, ragged_dot, scaled_matmul, ...)."""


#: primitive names of matmul or convolution work (JAX 0.10.2 and 0.12.0.1 have, besides the
#: two counted: dot_product_attention_*, ragged_dot_general, scaled_dot, scaled_matmul*)
MATMUL_LIKE = re.compile(r"(^|_)(dot|conv|matmul|einsum|gemm)(_|$)")


def param(eqn, key: str):
    """`eqn.params[key]`; LibraryChanged naming the primitive where JAX renamed the param
    (a silent default would undercount)."""
    try:
        return eqn.params[key]
    except KeyError:
        raise LibraryChanged(f"jax {jax.__version__}: primitive {eqn.primitive.name!r} has no param {key!r} "
                             f"(it has {sorted(eqn.params)}); jaxsel/analysis/flops.py counts its FLOPs "
                             f"from it") from None


def reshaped(eqn, what: str, err: Exception) -> LibraryChanged:
    """The error for a param that is there but not in the shape flops.py reads."""
    return LibraryChanged(f"jax {jax.__version__}: primitive {eqn.primitive.name!r}'s {what} has another "
                          f"shape ({type(err).__name__}: {err}); jaxsel/analysis/flops.py cannot count it")


def dot_flops(eqn) -> int:
    """2 x (batch x contracted x lhs-free x rhs-free) of a dot_general."""
    lhs, rhs = (v.aval.shape for v in eqn.invars[:2])
    try:
        (lc, rc), (lb, rb) = param(eqn, "dimension_numbers")
        batch = math.prod(lhs[d] for d in lb)
        contracted = math.prod(lhs[d] for d in lc)
    except (TypeError, ValueError, IndexError) as err:
        raise reshaped(eqn, "dimension_numbers", err) from None
    lhs_free = math.prod(s for d, s in enumerate(lhs) if d not in (*lc, *lb))
    rhs_free = math.prod(s for d, s in enumerate(rhs) if d not in (*rc, *rb))
    return 2 * batch * contracted * lhs_free * rhs_free


def conv_flops(eqn) -> int:
    """2 x output elements x multiply-adds per output (kernel size x input channels per group)."""
    rhs = eqn.invars[1].aval.shape
    out = eqn.outvars[0].aval.shape
    try:
        out_features = rhs[param(eqn, "dimension_numbers").rhs_spec[0]]
    except (AttributeError, TypeError, IndexError) as err:
        raise reshaped(eqn, "dimension_numbers", err) from None
    return 2 * math.prod(out) * math.prod(rhs) // out_features


COUNTERS = {"dot_general": dot_flops, "conv_general_dilated": conv_flops}


def bodies(eqn, count: int | None = None) -> list[int]:
    """FLOPs of each jaxpr `eqn` holds (jax.extend.core.jaxprs_in_params); with `count`,
    LibraryChanged unless it holds exactly that many."""
    found = [jaxpr_flops(j) for j in jaxprs_in_params(eqn.params)]
    if count is not None and len(found) != count:
        raise LibraryChanged(f"jax {jax.__version__}: primitive {eqn.primitive.name!r} holds {len(found)} "
                             f"jaxprs, jaxsel/analysis/flops.py expects {count}")
    return found


def eqn_flops(eqn) -> int:
    """One equation's FLOPs: a matmul or convolution counted from its shapes; a cond's most
    expensive branch; a scan's body times its length; any other call its jaxprs' sum."""
    name = eqn.primitive.name
    if name in COUNTERS:
        return COUNTERS[name](eqn)
    if name == "cond":
        return max(bodies(eqn, len(param(eqn, "branches"))))
    if name == "scan":
        length = param(eqn, "length")
        if not isinstance(length, int):
            raise reshaped(eqn, "length", TypeError(f"{type(length).__name__}, not int"))
        return length * bodies(eqn, 1)[0]
    if name == "while":   # cond_jaxpr and body_jaxpr
        if sum(bodies(eqn, 2)):
            raise Uncountable("a lax.while_loop does matmuls or convolutions, and its trip count is not "
                              "in the program: use lax.scan or lax.fori_loop with static bounds")
        return 0
    if MATMUL_LIKE.search(name):
        raise Uncountable(f"primitive {name!r} does matmul or convolution work that jaxsel/analysis/flops.py "
                          f"does not count (it counts dot_general and conv_general_dilated)")
    return sum(bodies(eqn))


def jaxpr_flops(jaxpr) -> int:
    """Matmul and convolution FLOPs of a jaxpr (nested calls included)."""
    return sum(eqn_flops(eqn) for eqn in jaxpr.eqns)


def forward_flops(fn: Callable, *args) -> int:
    """FLOPs of one call of `fn(*args)` (traced, never run)."""
    return jaxpr_flops(jax.make_jaxpr(fn)(*args))


def training_flops(forward: Callable, *args) -> int:
    """Model FLOPs of one training step whose forward pass is `forward(*args)`."""
    return TRAINING_MULTIPLIER * forward_flops(forward, *args)
