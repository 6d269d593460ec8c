"""Convolutions as matrix products, so that packed replicas' convolutions batch as GEMMs.

Why: a device's k packed replicas each hold their own weights. `jax.vmap` over them turns
every convolution into a grouped one (k groups), which cuDNN runs far below the speed of
the same convolutions one replica at a time (issue 34: ResNet-18, 8 packed replicas at
batch 128 per replica, 0.36 of one replica at 8x the batch with vmap, 0.72 unrolled). Written
as an im2col product, a convolution is `patches(x) @ W`; under `vmap` that becomes one
`dot_general` with a replica batch dimension (a strided batched GEMM), whatever k is.

`with_convs_as_matmuls(fn)` runs `fn` with every convolution of its program (the forward
ones and those of its gradient, which is why it works on the traced program rather than on
a model's layers) computed by `conv_as_matmul`; everything else is bound as traced. It is
the "matmul" way of computing packed replicas (`core/step.py`, `local_replicas`), one of
`local_replicas="auto"`'s candidates. It equals the plain computation to float32 rounding
(the products add in another order), not bit for bit.

The patches are built from strided slices (one per kernel offset, or per output position
when there are fewer of those: the weight gradient's "kernel" is the whole image), not
with `lax.conv_general_dilated_patches`, which is itself a convolution with a one-hot
kernel of (kernel size)^2 x channels taps: unusable for the weight gradient, and a grouped
convolution again under vmap's batching. Grouped convolutions (`feature_group_count` or
`batch_group_count` > 1) and convolutions inside control flow (`lax.cond`, `scan`,
`custom_vjp` rules) are left as they are.
"""
from __future__ import annotations

import itertools
import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax import lax
from jax.extend.core import Literal
from jax.extend.core.primitives import conv_general_dilated_p, jit_p


def conv_as_matmul(lhs, rhs, *, window_strides, padding, lhs_dilation, rhs_dilation, dimension_numbers,
                   precision=None, preferred_element_type=None, **unused):
    """`lax.conv_general_dilated` with one feature group, as patches times weights (one
    `dot_general`); `dimension_numbers` is the primitive's `ConvDimensionNumbers`."""
    lhs_spec, rhs_spec, out_spec = dimension_numbers
    spatial = len(lhs_spec) - 2
    x = jnp.transpose(lhs, (lhs_spec[0], *lhs_spec[2:], lhs_spec[1]))              # N, *S, C
    w = jnp.transpose(rhs, (*rhs_spec[2:], rhs_spec[1], rhs_spec[0]))              # *K, C, O
    pads = [(0, 0, 0)] + [(lo, hi, d - 1) for (lo, hi), d in zip(padding, lhs_dilation)] + [(0, 0, 0)]
    x = lax.pad(x, jnp.zeros((), x.dtype), pads)
    kernel = w.shape[:spatial]
    reach = [(k - 1) * d + 1 for k, d in zip(kernel, rhs_dilation)]
    out = [(x.shape[1 + i] - reach[i]) // window_strides[i] + 1 for i in range(spatial)]
    patches = _patches(x, kernel, out, window_strides, rhs_dilation)                # N, P, Q * C
    flat_w = w.reshape((math.prod(kernel) * w.shape[-2], w.shape[-1]))
    y = lax.dot_general(patches, flat_w, (((2,), (0,)), ((), ())), precision=precision,
                        preferred_element_type=preferred_element_type)               # N, P, O
    y = y.reshape((x.shape[0], *out, w.shape[-1]))
    order = [0] * (spatial + 2)   # our axes are (batch, *spatial, feature); put them where out_spec says
    order[out_spec[0]], order[out_spec[1]] = 0, spatial + 1
    for i, axis in enumerate(out_spec[2:]):
        order[axis] = 1 + i
    return jnp.transpose(y, order)


def _patches(x, kernel, out, strides, dilation):
    """(N, P, Q * C): for each of the P output positions, the Q kernel taps' C channels,
    taps in row-major order (the weights' reshape order). Built from the fewer slices:
    one strided slice per tap (each covers every output position), or one per output
    position (each covers the whole kernel)."""
    n, c = x.shape[0], x.shape[-1]
    spatial = len(kernel)
    if math.prod(kernel) <= math.prod(out):
        taps = []
        for tap in itertools.product(*map(range, kernel)):
            start = [t * d for t, d in zip(tap, dilation)]
            limit = [s + (o - 1) * st + 1 for s, o, st in zip(start, out, strides)]
            taps.append(lax.slice(x, (0, *start, 0), (n, *limit, c), (1, *strides, 1)))   # N, *out, C
        stacked = jnp.stack(taps, axis=spatial + 1)                                      # N, *out, Q, C
    else:
        windows = []
        for pos in itertools.product(*map(range, out)):
            start = [p * st for p, st in zip(pos, strides)]
            limit = [s + (k - 1) * d + 1 for s, k, d in zip(start, kernel, dilation)]
            windows.append(lax.slice(x, (0, *start, 0), (n, *limit, c), (1, *dilation, 1)))  # N, *kernel, C
        stacked = jnp.stack(windows, axis=1)                                               # N, P, *kernel, C
    return stacked.reshape((n, math.prod(out), math.prod(kernel) * c))


def with_convs_as_matmuls(fn: Callable) -> Callable:
    """`fn` (pytrees in, pytree out) with every ungrouped convolution of its traced program
    computed as a matrix product (`conv_as_matmul`); under `jax.vmap` over per-replica
    weights those become batched GEMMs instead of grouped convolutions."""

    def wrapped(*args):
        closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(*args)
        outs = _evaluate(closed.jaxpr, closed.consts, jax.tree.leaves(args))
        return jax.tree.unflatten(jax.tree.structure(out_shape), outs)

    return wrapped


def _evaluate(jaxpr, consts, args) -> list:
    """Run `jaxpr` eqn by eqn, convolutions through `conv_as_matmul`, nested `jit`s inlined."""
    env: dict = {}

    def read(v):
        return v.val if isinstance(v, Literal) else env[v]

    env.update(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))
    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        outs = _apply(eqn, ins)
        env.update(zip(eqn.outvars, outs))
    return [read(v) for v in jaxpr.outvars]


def _apply(eqn, ins) -> list[Any]:
    params = eqn.params
    if eqn.primitive is conv_general_dilated_p and params["feature_group_count"] == 1 \
            and params["batch_group_count"] == 1:
        return [conv_as_matmul(*ins, **params)]
    if eqn.primitive is jit_p:
        inner = params["jaxpr"]
        return _evaluate(inner.jaxpr, inner.consts, ins)
    with eqn.ctx.manager:   # as `jax.core.eval_jaxpr` binds an eqn
        out = eqn.primitive.bind(*ins, **eqn.primitive.get_bind_params(params))
    return list(out) if eqn.primitive.multiple_results else [out]
