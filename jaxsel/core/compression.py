"""Compressed sync payloads: what a replica puts on the wire is bf16 or int8, not float32.

Only a linear aggregate (sum_i c_i x_i: mean, weighted mean, sum; see
`Aggregator.linear`) can be computed from compressed values; only floating leaves are
compressed (integer leaves, e.g. counters, go through the aggregator unchanged). The
result is cast back to each leaf's dtype.

- "bf16": each replica sends bf16(c_i * x_i) and the sum is an all-reduce *in bf16*.
  Why not gather: a ring all-gather moves (N-1) * B per replica against the all-reduce's
  2(N-1)/N * B, so a gathered bf16 payload costs N/4 x float32's all-reduce (2x at N = 8;
  10 GbE, 1M parameters: 3.5 ms in-bf16 all-reduce, 11.6 ms bf16 gather, 6.3 ms float32).
  The price: partial sums are rounded to bf16 on the way, so the error bound is
  ~N * 2^-8 * mean_i |x_i| per element instead of 2^-8 * mean_i |x_i|; measured on 8
  replicas x 1M values, rms error 0.10% of mean |x| against 0.07% gathered (independent
  values) and 0.22% against 0.07% (replicas sharing a signal; BENCHMARKS.md). Packed and
  unpacked layouts agree within that bound, not bit for bit (they add in other orders);
  every replica receives the same sum.
- "int8": per tensor and replica, scale = max|x| / 127 and q = round(x / scale) in
  [-127, 127]. An int8 sum overflows, so every replica gathers all replicas' q and their
  float32 scales (`replica_gather`, which handles packed replicas) and computes
  sum_j (c_j * scale_j) * q_j in float32 in replica order j = 0 ... N-1: the same
  operations on the same data everywhere, so every replica and every layout gets the
  bit-identical result, within mean_j scale_j / 2 of the exact mean per element. The
  collective is an all-gather (the cost model charges it as one): at N = 8 it moves as many
  bytes as float32's all-reduce, fewer below 8 replicas, more above.

Bytes sent per replica (`SyncReport.payload_bytes`): bf16 2 per element; int8 1 per
element plus 4 per tensor (its scale); uncompressed leaves at their own size.
A non-finite value makes its tensor's int8 scale non-finite, and the tensor NaN.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from .collectives import replica_gather, replica_sum

CODECS = ("none", "bf16", "int8")
GATHERS = ("int8",)   # codecs whose collective is an all-gather


def check_codec(codec: str | None) -> str | None:
    """The codec's name, None for no compression; anything else is a one-line ValueError."""
    if codec is None or codec == "none":
        return None
    if codec not in CODECS:
        raise ValueError(f"compress must be one of {', '.join(CODECS)}; got {codec!r}")
    return codec


def check_compressible(codec: str | None, aggregator) -> str | None:
    """The codec, checked against the aggregator that will combine the payload."""
    codec = check_codec(codec)
    if codec is not None and not getattr(aggregator, "linear", False):
        from .aggregate import describe_aggregator

        raise ValueError(f"compress={codec!r} needs a mean, weighted mean or sum aggregator; "
                         f"aggregator {describe_aggregator(aggregator)!r} cannot combine compressed payloads")
    return codec


def collective(codec: str | None, aggregator) -> str:
    """The collective a sync with this codec and aggregator runs (for `Timing.collective`)."""
    return "allgather" if check_codec(codec) in GATHERS else aggregator.collective


def tags(codec: str | None, aggregator=None) -> str:
    """What a strategy's description adds for its sync: " [median, int8]" (a non-mean
    aggregator, then the codec), "" for a mean without a codec."""
    from .aggregate import describe_aggregator

    names = [] if aggregator is None else [describe_aggregator(aggregator)]
    names = [n for n in names if n != "mean"] + [c for c in [check_codec(codec)] if c is not None]
    return f" [{', '.join(names)}]" if names else ""


def _floating(x) -> bool:
    return jnp.issubdtype(jnp.asarray(x).dtype, jnp.floating)


def payload_bytes(tree: Any, codec: str | None) -> int:
    """Bytes one replica sends for `tree` compressed with `codec`."""
    codec = check_codec(codec)

    def size(x):
        if codec is None or not _floating(x):
            return x.size * x.dtype.itemsize
        return 2 * x.size if codec == "bf16" else x.size + 4
    return int(sum(size(x) for x in jax.tree.leaves(tree)))


def quantize_int8(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(q, scale): int8 q in [-127, 127] and float32 scale = max|x| / 127, x ~ scale * q."""
    x = x.astype(jnp.float32)
    scale = jnp.max(jnp.abs(x)) / 127.0
    safe = jnp.where(scale > 0, scale, 1.0)
    q = jnp.clip(jnp.round(x / safe), -127, 127).astype(jnp.int8)
    return q, scale


def _int8_sum(x, c, axis: str):
    """sum_j c_j * x_j from every replica's int8 payload, in replica order."""
    q, scale = quantize_int8(x)
    every_q = replica_gather(q, axis)                 # (N, *x.shape) int8
    every_s = replica_gather(c * scale, axis)         # (N,) float32: the weight rides on the scale
    out = every_s[0] * every_q[0].astype(jnp.float32)
    for j in range(1, every_q.shape[0]):
        out = out + every_s[j] * every_q[j].astype(jnp.float32)
    return out.astype(x.dtype)


def _bf16_sum(x, c, axis: str):
    """sum_j c_j * x_j, all-reduced in bf16."""
    return replica_sum((c * x.astype(jnp.float32)).astype(jnp.bfloat16), axis).astype(x.dtype)


def compressed_aggregate(codec: str, bound) -> Any:
    """tree -> aggregate of `tree` over replicas with floating leaves sent as `codec`.
    `bound`: a `jaxsel.aggregate.Bound` of a linear aggregator (its integer leaves go
    through it unchanged)."""
    codec = check_compressible(codec, bound.aggregator)
    combine = {"int8": _int8_sum, "bf16": _bf16_sum}[codec]

    def aggregate(tree):
        leaves, treedef = jax.tree.flatten(tree)
        others = [x for x in leaves if not _floating(x)]
        exact = bound(others) if others else []
        c = bound.coefficient() if any(_floating(x) for x in leaves) else None
        it = iter(exact)
        out = [combine(x, c, bound.axis) if _floating(x) else next(it) for x in leaves]
        return jax.tree.unflatten(treedef, out)
    return aggregate
