"""Sparse payloads (SPARTA's): a random subset of a tree's entries, the same on every replica.

SPARTA (sparse parameter averaging) averages only a fraction p of the model's entries at a
sync and leaves the rest local. This module is that payload: which entries, and how they
are taken out of the tree and put back; the strategy sends them through the sync core.

**The entries.** The floating leaves of the tree, each flattened row-major and joined in
`jax.tree.leaves` order: entry e is element e - o_l of leaf l, where o_l is the number of
entries in the leaves before it. Integer leaves hold no entries (they stay local).

**How many.** Exactly k = max(1, round(p * P)) of the P entries per sync (halves round up),
not a Bernoulli(p) draw per entry: a program of static shapes sends a fixed count as a
k-entry vector, so the payload is exactly k entries every sync, and nothing is padded.
At least one, so a small fraction of a small model still exchanges something; a model of
P entries exchanges a fraction k / P, which is p to within 1 / (2P).

**Which.** A uniformly random k-subset of the P entries, from `jax.random.key(seed)` folded
with this module's stream number and the step: every replica computes the same subset from
the replicated step, so the choice costs no bytes. It is drawn as the first k distinct
values of m uniform draws from 0..P-1 (with replacement): in draw order, those are a
uniformly random ordered k-subset, whatever m. m is the expected number of draws to see k
distinct values plus a margin (4 sqrt(k) + 16); in the rare case of fewer than k, the step
draws again with the next key (a `lax.while_loop`), which keeps the subset uniform (the
event does not depend on which values). Above k = P / 2 it draws the P - k entries left out
instead. The cost is a sort of m ~ k (1 + k / 2P) values, not of P keys: on XLA:CPU, which
sorts slowly, the top k of P random 32-bit keys took 3.6x to 30x as long, and a permutation
of P (`jax.random.choice(..., replace=False)`) 4x to 41x, for P = 23,050 and k = 1,152 (two
runs in one process on the shared 2-core dev box at load average 19-21: ratios only).

**In what dtype.** The result type of the floating leaves: a model of one precision sends
its own dtype; a bfloat16 / float32 mix sends float32 (and its bytes are counted as such).
"""
from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

#: folded into the run's key so that this draw is a stream of its own
SPARSE_STREAM = 0x5350


def _floating(x) -> bool:
    return jnp.issubdtype(jnp.result_type(x), jnp.floating)


def entry_count(tree: Any) -> int:
    """P: the entries of `tree`'s floating leaves."""
    return sum(math.prod(jnp.shape(x)) for x in jax.tree.leaves(tree) if _floating(x))


def sparse_count(fraction: float, total: int) -> int:
    """k = max(1, round(fraction * total)), halves up: the entries a sync sends."""
    return max(1, min(total, int(math.floor(float(fraction) * total + 0.5))))


def draw_entries(seed: int, step, total: int, count: int) -> jax.Array:
    """`count` distinct entries of `total`, a uniformly random subset, sorted (int32): the
    same wherever `seed` and `step` are."""
    if count >= total:
        return jnp.arange(total, dtype=jnp.int32)
    key = jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), SPARSE_STREAM), step)
    if 2 * count <= total:
        return jnp.sort(_distinct(key, total, count))
    left_out = _distinct(key, total, total - count)
    return jnp.nonzero(jnp.ones((total,), bool).at[left_out].set(False), size=count)[0].astype(jnp.int32)


def _draws(total: int, count: int) -> int:
    """m: the draws expected to show `count` distinct values of `total`, and a margin."""
    return int(math.ceil(-total * math.log1p(-count / total) + 4 * math.sqrt(count) + 16))


def _distinct(key, total: int, count: int) -> jax.Array:
    """The first `count` distinct values of uniform draws from 0..total-1, in draw order
    (`count` <= total / 2); drawn again with the next key while m draws show fewer."""
    m = _draws(total, count)

    def attempt(state):
        tries, _, _ = state
        draws = jax.random.randint(jax.random.fold_in(key, tries), (m,), 0, total, dtype=jnp.int32)
        values, order = lax.sort_key_val(draws, jnp.arange(m, dtype=jnp.int32))   # stable: draw order kept
        first = jnp.concatenate([jnp.ones((1,), bool), values[1:] != values[:-1]])
        firsts = jnp.sort(jnp.where(first, order, m))[:count]   # where each of the first `count` appeared
        return tries + 1, draws[jnp.minimum(firsts, m - 1)], firsts[-1] < m

    start = (jnp.int32(0), jnp.zeros((count,), jnp.int32), jnp.bool_(False))
    return lax.while_loop(lambda state: ~state[2], attempt, start)[1]


def payload_dtype(tree: Any):
    """The dtype the entries travel in: the floating leaves' result type."""
    return jnp.result_type(*[x for x in jax.tree.leaves(tree) if _floating(x)])


def _flat(tree: Any) -> jax.Array:
    dtype = payload_dtype(tree)
    return jnp.concatenate([jnp.ravel(x).astype(dtype) for x in jax.tree.leaves(tree) if _floating(x)])


def take_entries(tree: Any, entries: jax.Array) -> jax.Array:
    """The values of `entries` (sorted, from `draw_entries`), in the payload dtype: (k,)."""
    return _flat(tree)[entries]


def put_entries(tree: Any, entries: jax.Array, values: jax.Array) -> Any:
    """`tree` with `entries` set to `values` (each leaf keeps its dtype); the rest unchanged."""
    flat = _flat(tree).at[entries].set(values.astype(payload_dtype(tree)))
    leaves, treedef = jax.tree.flatten(tree)
    out, offset = [], 0
    for x in leaves:
        if not _floating(x):
            out.append(x)
            continue
        size = math.prod(jnp.shape(x))
        out.append(flat[offset:offset + size].reshape(jnp.shape(x)).astype(jnp.result_type(x)))
        offset += size
    return jax.tree.unflatten(treedef, out)
