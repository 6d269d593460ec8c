"""SSP / ASP, emulated: stale gradients on lock-step collectives.

Real SSP lets workers run up to s steps apart on a parameter server. Here every replica
steps together, so staleness is emulated honestly: replica i applies its own gradient at
once and the others' s steps late,

    theta_i <- theta_i - lr * (g_i(t) + sum_{j != i} g_j(t - s)) / N,

through a ring buffer of the last s "others' sum" aggregates (slot t % s is read, then
overwritten). The all-reduce of step t is consumed only at t + s, so nothing waits on it.
With a general optax optimizer the combined gradient goes through the replica's optimizer.
SSP(0) is exactly BSP; ASP is s = N - 1. Gradients of the final s steps never reach the
other replicas (they are still "in flight" when training ends).

Relation to a parameter server: each gradient enters every replica with weight lr / N,
i.e. this is PS-ASP with a per-push learning rate of lr / N (Sync-Switch's rule for
ASP after BSP at lr). Metrics: `synced` is False for s > 0 (no replica waits on a
collective), `bytes_allreduced` counts the gradients reduced every step, `vote_bytes` 0.
Memory: s extra gradient-sized buffers per replica. There is no `aggregator` option: the
rule is a sum of every replica's gradient, not a choice among them.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import optax
from jax import lax

from ..state import tree_bytes
from .base import StepContext, Strategy, byte_count


def scaled_update(rs, grads, ctx: StepContext, scale: float = 1.0):
    """One optimizer step with the updates multiplied by `scale`. For optimizers whose
    output is linear in the learning rate (sgd with or without momentum, adam, adamw)
    this is the same as training at lr * scale; the optimizer's state is unaffected."""
    updates, opt_state = ctx.optimizer.update(grads, rs.opt_state, rs.params)
    if scale != 1.0:
        updates = jax.tree.map(lambda u: (u * scale).astype(u.dtype), updates)
    return rs.replace(params=optax.apply_updates(rs.params, updates), opt_state=opt_state)


def init_ring(params, staleness: int):
    """`staleness` zero slots shaped like the gradients (= the parameters)."""
    return jax.tree.map(lambda p: jnp.zeros((staleness,) + jnp.shape(p), jnp.result_type(p)), params)


def stale_combine(grads, ring, step, staleness: int, axis: str, n: int):
    """(combined gradient (g_i(t) + others(t - s)) / N, ring after storing others(t)).

    The all-reduce result of this step is written to slot t % s and read back at t + s.
    """
    total = lax.psum(grads, axis)
    idx = step % staleness
    old = jax.tree.map(lambda r: lax.dynamic_index_in_dim(r, idx, 0, keepdims=False), ring)
    ring = jax.tree.map(lambda r, t, g: lax.dynamic_update_index_in_dim(r, (t - g).astype(r.dtype), idx, 0),
                        ring, total, grads)
    combined = jax.tree.map(lambda g, o: (g + o) / n, grads, old)
    return combined, ring


def resolve_staleness(staleness, n: int) -> int:
    """None means ASP: s = N - 1."""
    s = n - 1 if staleness is None else int(staleness)
    if s < 0:
        raise ValueError(f"staleness must be an integer >= 0 (or None for ASP, s = N-1), got {staleness!r}")
    return s


@dataclasses.dataclass(frozen=True)
class SSP(Strategy):
    """Stale-synchronous parallel, emulated (see the module docstring).

    staleness: s >= 0, or None for ASP (s = N - 1, resolved from the mesh).
    lr_scale: multiplies the optimizer's updates (1.0: the formula above as written).
    """

    staleness: int | None = 1
    lr_scale: float = 1.0
    name: str = "ssp"

    def __post_init__(self):
        if self.staleness is not None:
            resolve_staleness(self.staleness, 1)
        if not float(self.lr_scale) > 0.0:
            raise ValueError(f"lr_scale must be a number > 0, got {self.lr_scale!r}")

    def init(self, params, opt_state, n):
        s = resolve_staleness(self.staleness, n)
        return {"ring": init_ring(params, s)} if s > 0 else {}

    def apply(self, rs, grads, grad_norm, ctx):
        s = resolve_staleness(self.staleness, ctx.n)
        if s == 0:  # exactly BSP: the same pmean
            combined = lax.pmean(grads, ctx.axis)
        else:
            combined, ring = stale_combine(grads, rs.strategy_state["ring"], ctx.step, s, ctx.axis, ctx.n)
            rs = rs.replace(strategy_state={**rs.strategy_state, "ring": ring})
        rs = scaled_update(rs, combined, ctx, float(self.lr_scale))
        shared = {
            "synced": jnp.asarray(s == 0),
            "bytes_allreduced": byte_count(tree_bytes(grads)),
            "vote_bytes": byte_count(0),
        }
        return rs, shared, {}

    def timing(self, n: int) -> dict:
        """Real SSP lets a worker run `staleness` steps ahead of the slowest; ASP unbounded."""
        return {**super().timing(n), "staleness": self.staleness}

    def describe(self) -> str:
        s = "N-1" if self.staleness is None else self.staleness
        return f"{self.name} (emulated, s={s})"


def ASP(lr_scale: float = 1.0) -> SSP:
    """Asynchronous parallel, emulated as SSP with the largest staleness s = N - 1."""
    return SSP(staleness=None, lr_scale=lr_scale, name="asp")
