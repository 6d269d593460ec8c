"""Compressed sync payloads: what a replica puts on the wire is bf16 or int8, not float32.

Only a linear aggregate (sum_i c_i x_i: mean, weighted mean, sum; see
`Aggregator.linear`) can be computed from compressed values; only floating leaves are
compressed (integer leaves, e.g. counters, go through the aggregator unchanged). The
result is cast back to each leaf's dtype.

- "bf16": each replica sends bf16(c_i * x_i) and the sum is an all-reduce *in bf16*.
  Why not gather: a ring all-gather moves (N-1) * B per replica against the all-reduce's
  2(N-1)/N * B, so a gathered bf16 payload costs N/4 x float32's all-reduce (2x at N = 8).
  The price: partial sums are rounded to bf16 on the way, so the error bound is
  ~N * 2^-8 * mean_i |x_i| per element instead of 2^-8 * mean_i |x_i| (the errors and
  times measured: BENCHMARKS.md, "Compressed payloads"). Packed and
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

Error-feedback codecs (`FEEDBACK`: "topk:F", "sign") send a lossy, biased summary and keep
what they did not send, per replica and tensor, as a residual e (strategy state):

    u = payload + e;  sent = C(u);  e <- u - sent;  aggregate = sum_i c_i * sent_i

- "topk:F" (0 < F <= 1): the k = ceil(F * size) entries of largest |u| (F the exact
  decimal as written: Fraction("0.07") * 100 is 7, where 0.07 * 100 in floating point
  rounds up to 8), ties to the lowest flat index (`lax.top_k`'s order), sent as float32
  values and int32 flat indices: 8 bytes per kept entry.
- "sign": scale * s with s = +1 where u >= 0 (sign(0) = +1: one bit has no zero) else -1,
  scale = mean|u| (float32): ceil(size / 8) bytes of packed bits + 4 per tensor.
Every replica gathers every replica's sent values and adds c_j * sent_j densely in replica
order j = 0 ... N-1 (an all-gather, bit-identical on every replica and layout). The sync
compresses only the payload leaves the strategy gives a residual for
(`sync_where(residual=...)`); the others (BatchNorm statistics) go uncompressed.
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from .collectives import replica_gather, replica_sum

CODECS = ("none", "bf16", "int8", "topk:F", "sign")
FEEDBACK = ("topk", "sign")          # codecs with an error-feedback residual
GATHERS = ("int8", "topk", "sign")   # codecs whose collective is an all-gather


def check_codec(codec: str | None) -> str | None:
    """The codec's name, None for no compression; anything else is a one-line ValueError."""
    if codec is None or codec == "none":
        return None
    if isinstance(codec, str) and codec.startswith("topk:"):
        topk_fraction(codec)
        return codec
    if codec not in CODECS:
        raise ValueError(f"compress must be one of {', '.join(CODECS)} (0 < F <= 1); got {codec!r}")
    return codec


def topk_fraction(codec: str) -> Fraction:
    """F of "topk:F", exactly as written; a one-line ValueError unless 0 < F <= 1."""
    text = codec.split(":", 1)[1]
    try:
        f = Fraction(text.strip())
    except (ValueError, ZeroDivisionError):
        f = None
    if f is None or not 0 < f <= 1:
        raise ValueError(f"compress={codec!r}: topk:F needs a fraction 0 < F <= 1 of each tensor's "
                         f"entries (e.g. topk:0.01), got F={text!r}")
    return f


def codec_kind(codec: str | None) -> str | None:
    """"topk" for "topk:F", else the codec's name (None: no compression)."""
    codec = check_codec(codec)
    return None if codec is None else codec.split(":", 1)[0]


def has_feedback(codec: str | None) -> bool:
    """Whether `codec` keeps an error-feedback residual (top-k, sign)."""
    return codec_kind(codec) in FEEDBACK


def topk_count(codec: str, size: int) -> int:
    """k = ceil(F * size) of "topk:F", computed exactly (at least 1)."""
    return max(1, math.ceil(topk_fraction(codec) * size))


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
    return "allgather" if codec_kind(codec) in GATHERS else aggregator.collective


def tags(codec: str | None, aggregator=None, error_feedback: bool = True) -> str:
    """What a strategy's description adds for its sync: " [median, int8]" (a non-mean
    aggregator, then the codec, then "no error feedback" where a top-k / sign codec runs
    without it), "" for a mean without a codec."""
    from .aggregate import describe_aggregator

    names = [] if aggregator is None else [describe_aggregator(aggregator)]
    names = [n for n in names if n != "mean"] + [c for c in [check_codec(codec)] if c is not None]
    names += ["no error feedback"] if has_feedback(codec) and not error_feedback else []
    return f" [{', '.join(names)}]" if names else ""


def _floating(x) -> bool:
    return jnp.issubdtype(jnp.asarray(x).dtype, jnp.floating)


def tensor_bytes(x, codec: str | None) -> int:
    """Bytes one replica sends for the tensor `x` compressed with `codec`."""
    kind = codec_kind(codec)
    if kind is None or not _floating(x):
        return x.size * x.dtype.itemsize
    return {"bf16": lambda: 2 * x.size, "int8": lambda: x.size + 4,
            "topk": lambda: 8 * topk_count(codec, x.size), "sign": lambda: -(-x.size // 8) + 4}[kind]()


def payload_bytes(tree: Any, codec: str | None, residual: Any = None) -> int:
    """Bytes one replica sends for `tree` compressed with `codec` (an error-feedback codec:
    only the leaves `residual` has a tensor for)."""
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    compressed = _paths(residual) if has_feedback(codec) else None
    return int(sum(tensor_bytes(x, codec if compressed is None or path in compressed else None)
                   for path, x in leaves))


def _paths(tree) -> set:
    return {path for path, _ in jax.tree_util.tree_flatten_with_path(tree)[0]}


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


# ------------------------------------------------------------------- error feedback

def topk_send(u: jax.Array, codec: str) -> tuple[tuple[jax.Array, jax.Array], jax.Array]:
    """((float32 values, int32 flat indices), dense sent) of "topk:F" for one replica's u."""
    flat = u.reshape(-1).astype(jnp.float32)
    _, idx = lax.top_k(jnp.abs(flat), topk_count(codec, flat.size))   # equal |u|: lower index first
    values = flat[idx]
    sent = jnp.zeros_like(flat).at[idx].set(values)
    return (values, idx.astype(jnp.int32)), sent.reshape(u.shape)


def ordered_sum(flat: jax.Array) -> jax.Array:
    """The sum of a 1-D array in one fixed order: a pairwise tree of elementwise adds
    (zero-padded to a power of two; x[:h] + x[h:] until one value is left).

    Why not `jnp.sum`: XLA picks a reduction's order per program, and a replica's program
    differs by layout (one replica per device, or k packed and vmapped): measured on an AVX2
    host with jaxlib 0.12 at the suite's LLVM level 1, the sign codec's mean|u| of the same
    42 values came out 1 ulp apart on 8 devices and on 2 x 4 (tests/test_codecs_ef.py).
    Elementwise adds are rounded one by one as written, so every layout, batch size and
    compile flag gives the same bits. Cost: about twice the memory traffic of one sum."""
    x = jnp.pad(flat, (0, (1 << max(0, flat.size - 1).bit_length()) - flat.size))
    while x.size > 1:
        half = x.size // 2
        x = x[:half] + x[half:]
    return x[0]


def sign_send(u: jax.Array) -> tuple[tuple[jax.Array, jax.Array], jax.Array]:
    """((packed bits, float32 scale), dense sent) of "sign": bit 1 where u >= 0; scale =
    mean|u| summed in a fixed order (`ordered_sum`), so every layout sends the same bits."""
    flat = u.reshape(-1).astype(jnp.float32)
    scale = ordered_sum(jnp.abs(flat)) / flat.size
    positive = flat >= 0
    sent = scale * jnp.where(positive, 1.0, -1.0)
    return (jnp.packbits(positive), scale), sent.reshape(u.shape)


def _dense(kind: str, wire, shape) -> jax.Array:
    """One replica's weighted sent tensor, rebuilt from what it put on the wire."""
    size = math.prod(shape)
    if kind == "topk":
        values, idx = wire
        return jnp.zeros((size,), jnp.float32).at[idx].set(values).reshape(shape)
    bits, scale = wire
    s = jnp.unpackbits(bits, count=size).astype(jnp.float32) * 2.0 - 1.0
    return (scale * s).reshape(shape)


def _feedback_sum(u, c, codec: str, axis):
    """(sum_j c_j * sent_j in replica order, this replica's new residual u - sent) for one
    tensor. The weight c_j rides on the float32 part of the wire (values, or the scale)."""
    kind = codec_kind(codec)
    (a, b), sent = topk_send(u, codec) if kind == "topk" else sign_send(u)
    wire = (c * a, b) if kind == "topk" else (a, c * b)
    every = replica_gather(wire, axis)
    out = _dense(kind, jax.tree.map(lambda w: w[0], every), u.shape)
    for j in range(1, every[0].shape[0]):
        out = out + _dense(kind, jax.tree.map(lambda w, j=j: w[j], every), u.shape)
    return out.astype(u.dtype), (u.astype(jnp.float32) - sent).astype(u.dtype)


def feedback_aggregate(codec: str, bound, residual: Any):
    """(payload, residual) -> (aggregate, new residual) of `payload` over replicas: the leaves
    `residual` has a tensor for are sent as `codec` with error feedback (u = payload + e),
    the others go through `bound`'s linear aggregator exactly. `bound`: a
    `jaxsel.aggregate.Bound`."""
    check_compressible(codec, bound.aggregator)
    compressed = _paths(residual)

    def aggregate(payload, residual):
        with_paths, treedef = jax.tree_util.tree_flatten_with_path(payload)
        e = dict(jax.tree_util.tree_flatten_with_path(residual)[0])
        others = [x for path, x in with_paths if path not in compressed or not _floating(x)]
        it = iter(bound(others) if others else [])
        c = bound.coefficient()
        out, new_e = [], {}
        for path, x in with_paths:
            if path in compressed and _floating(x):
                agg, new_e[path] = _feedback_sum(x + e[path], c, codec, bound.axis)
                out.append(agg)
            else:
                out.append(next(it))
        rleaves, rdef = jax.tree_util.tree_flatten_with_path(residual)
        return jax.tree.unflatten(treedef, out), jax.tree.unflatten(rdef, [new_e.get(p, x) for p, x in rleaves])
    return aggregate
