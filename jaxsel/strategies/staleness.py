"""The staleness ring shared by SSP, ASP and Sync-Switch's asynchronous phase.

Collectives run in lock-step, so staleness is emulated honestly: replica i applies its
own gradient at once and the others' s steps late,

    theta_i <- theta_i - lr * (g_i(t) + sum_{j != i} g_j(t - s)) / N,

through a ring of the last s "others' sum" aggregates (slot t % s is read, then
overwritten). The all-reduce of step t is consumed only at t + s, so nothing waits on it.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from ..core.aggregate import Sum
from ..core.sync import StepContext


class StaleRing(NamedTuple):
    slots: Any   # (s, *param_shape) per leaf: others' gradient sums of the last s steps


def resolve_staleness(staleness, n: int) -> int:
    """None means ASP: s = N - 1."""
    s = n - 1 if staleness is None else staleness
    if isinstance(s, bool) or not isinstance(s, int) or s < 0:
        raise ValueError(f"staleness must be an integer >= 0 (or None for ASP, s = N-1), got {staleness!r}")
    return s


def init_ring(params, staleness: int) -> StaleRing | None:
    """`staleness` zero slots shaped like the gradients (= the parameters); None for s = 0."""
    if staleness == 0:
        return None
    return StaleRing(jax.tree.map(lambda p: jnp.zeros((staleness,) + jnp.shape(p), jnp.result_type(p)), params))


def stale_gradient(grads, ring: StaleRing, ctx: StepContext, staleness: int,
                   when=True) -> tuple[Any, StaleRing]:
    """(combined gradient (g_i(t) + others(t - s)) / N, ring) for a step that runs the
    asynchronous protocol where `when` holds; elsewhere the ring is left as it was. The
    all-reduce is not blocking: nobody waits on it before step t + s."""
    total = ctx.sync(when, grads, Sum(), who="staleness ring", blocking=False)
    idx = ctx.step % staleness
    old = jax.tree.map(lambda r: lax.dynamic_index_in_dim(r, idx, 0, keepdims=False), ring.slots)

    def store(r, t, g, o):
        others = (t - g).astype(r.dtype)
        return lax.dynamic_update_index_in_dim(r, others if when is True else jnp.where(when, others, o), idx, 0)

    slots = jax.tree.map(store, ring.slots, total, grads, old)
    combined = jax.tree.map(lambda g, o: (g + o) / ctx.n, grads, old)
    return combined, StaleRing(slots)


def drain(ring: StaleRing, n: int):
    """The gradients still in flight, summed and divided by N: what a return to a
    synchronous protocol applies at once."""
    return jax.tree.map(lambda r: jnp.sum(r, axis=0) / n, ring.slots)
