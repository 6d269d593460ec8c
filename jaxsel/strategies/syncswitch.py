"""Sync-Switch (Li et al., ICDCS'21): BSP and the asynchronous protocol, switched on device.

Offline policy: BSP for the first `bsp_fraction` of training, then ASP (the SSP emulation
of `ssp.py` with s = N - 1 unless `staleness` is given). Online policy: a replica whose
step time exceeds `straggler_factor` x the median for `straggler_steps` consecutive steps
is a straggler; training runs asynchronously while one exists and returns to BSP after.
Every decision is replicated: the offline one depends on the step only, the online one on
all-gathered step times and a `pmax`.

Learning rate. Sync-Switch keeps the per-replica batch b and runs ASP at lr / N, so that
each worker's gradient moves the model as much as it did inside BSP's averaged update.
The emulated protocol already applies every gradient with weight lr / N (it divides the
combined gradient by N), so the paper's rescaling is built in and `lr_scale` defaults to
1. Any other `lr_scale` multiplies the optimizer's updates in asynchronous steps, which
for sgd / momentum / adam(w) is the same as training at lr * lr_scale there.

Momentum at a BSP -> async switch: "keep" the buffers; "reset" the whole optimizer state
to `optimizer.init`; "scale" multiplies the first-moment buffers (optax `trace`, Adam's
`mu`) by `momentum_scale` (default 1 / N): asynchrony adds implicit momentum of its own
(Mitliagkas et al., 2016), so the carried velocity is damped.

Returning to BSP (online policy), the gradients still in the ring buffer are applied with
that step's averaged gradient, then parameters and optimizer state are averaged so BSP
restarts from one model, as a parameter server's single copy would.

Step times for the online policy: `step_times="simulated"` draws slowdowns once from
`jaxsel.costmodel` (`stragglers`, `seed`, `total_steps`: the same draws a cost-model
projection with that seed charges) and feeds step t the times of step t - 1, the last
ones a real worker could have measured; `step_times="state"` reads
`strategy_state["step_time"]`, which the training loop fills before each step with
`feed_step_times(state, times)`.

Metrics: `synced` is True on BSP steps, `asynchronous` on emulated-ASP ones, and
`bytes_allreduced` counts the gradients reduced every step, the online policy's 12-byte
step-time exchange and, on a return to BSP, the averaged parameters and optimizer state.
`vote_bytes` is 0: Sync-Switch's straggler monitor does not hold asynchronous workers
at a barrier, although the lock-step emulation exchanges the times every step.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .. import costmodel
from ..aggregate import Mean, get_aggregator
from ..state import tree_bytes
from .base import Strategy, byte_count, to_varying
from .ssp import init_ring, resolve_staleness, scaled_update, stale_combine

POLICIES = ("offline", "online")
MOMENTUM_RULES = ("keep", "reset", "scale")
STEP_TIME_SOURCES = ("simulated", "state")
ONLINE_EXCHANGE_BYTES = 4 + 8  # all_gather of one float32 time + pmax of two int32 flags


def _is_moment_state(x) -> bool:
    return hasattr(x, "_fields") and ("trace" in x._fields or "mu" in x._fields)


def scale_momentum(opt_state, factor):
    """Multiply optax first-moment buffers (`trace`, `mu`) by `factor`; others untouched."""
    def scale(node):
        if not _is_moment_state(node):
            return node
        fields = {f: jax.tree.map(lambda x: (x * factor).astype(x.dtype), getattr(node, f))
                  for f in ("trace", "mu") if f in node._fields}
        return node._replace(**fields)
    return jax.tree.map(scale, opt_state, is_leaf=_is_moment_state)


def feed_step_times(state, times):
    """The training loop's way to give the online policy per-replica step times (seconds,
    or any unit shared by all replicas) before a step, with `step_times="state"`."""
    slot = state.strategy_state["step_time"]
    new = jax.device_put(jnp.asarray(times, jnp.float32).reshape(slot.shape), slot.sharding)
    return state.replace(strategy_state={**state.strategy_state, "step_time": new})


@dataclasses.dataclass(frozen=True)
class SyncSwitch(Strategy):
    """Hybrid BSP / emulated-ASP training (see the module docstring).

    offline: `switch_step` (first asynchronous step), or `bsp_fraction` x `total_steps`.
    online:  `straggler_factor`, `straggler_steps`, `step_times`, and for simulated times
             `stragglers` (a jaxsel.costmodel spec, e.g. "transient:probability=0.05,factor=4"),
             `total_steps`, `seed`.
    """

    policy: str = "offline"
    bsp_fraction: float = 0.25
    total_steps: int | None = None
    switch_step: int | None = None
    staleness: int | None = None
    lr_scale: float = 1.0
    momentum: str = "keep"
    momentum_scale: float | None = None
    aggregator: Any = "mean"
    straggler_factor: float = 1.5
    straggler_steps: int = 3
    step_times: str = "simulated"
    stragglers: Any = "transient:probability=0.02,factor=4"
    seed: int = 0
    name: str = "syncswitch"

    def __post_init__(self):
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {self.policy!r}")
        if self.momentum not in MOMENTUM_RULES:
            raise ValueError(f"momentum rule must be one of {MOMENTUM_RULES}, got {self.momentum!r}")
        if self.step_times not in STEP_TIME_SOURCES:
            raise ValueError(f"step_times must be one of {STEP_TIME_SOURCES}, got {self.step_times!r}")
        if not 0.0 <= float(self.bsp_fraction) <= 1.0:
            raise ValueError(f"bsp_fraction must be in [0, 1], got {self.bsp_fraction!r}")
        if self.staleness is not None:
            resolve_staleness(self.staleness, 1)
        if not float(self.lr_scale) > 0.0:
            raise ValueError(f"lr_scale must be a number > 0, got {self.lr_scale!r}")
        if self.momentum_scale is not None and not float(self.momentum_scale) >= 0.0:
            raise ValueError(f"momentum_scale must be a number >= 0 (or None for 1/N), got {self.momentum_scale!r}")
        if not float(self.straggler_factor) >= 1.0:
            raise ValueError(f"straggler_factor must be a number >= 1, got {self.straggler_factor!r}")
        if int(self.straggler_steps) < 1:
            raise ValueError(f"straggler_steps must be an integer >= 1, got {self.straggler_steps!r}")
        object.__setattr__(self, "aggregator", get_aggregator(self.aggregator))
        if self.policy == "offline":
            if self.switch_step is None:
                if self.total_steps is None:
                    raise ValueError("offline SyncSwitch needs switch_step, or bsp_fraction with total_steps "
                                     "(the training loop passes total_steps)")
                object.__setattr__(self, "switch_step", int(round(float(self.bsp_fraction) * int(self.total_steps))))
            if int(self.switch_step) < 0:
                raise ValueError(f"switch_step must be an integer >= 0, got {self.switch_step!r}")
        elif self.step_times == "simulated":
            if self.total_steps is None or int(self.total_steps) < 1:
                raise ValueError("online SyncSwitch with simulated step times needs total_steps >= 1, "
                                 f"got {self.total_steps!r}")
            costmodel.get_stragglers(self.stragglers)  # validate the spec now, not at trace time

    # ------------------------------------------------------------------ state
    def init(self, params, opt_state, n):
        state = {}
        if resolve_staleness(self.staleness, n) > 0:
            state["ring"] = init_ring(params, resolve_staleness(self.staleness, n))
        if self.policy == "online":
            state["async"] = jnp.zeros((), jnp.int32)     # the previous step's mode (replicated value)
            state["slow_steps"] = jnp.zeros((), jnp.int32)  # this replica's consecutive slow steps
            state["step_time"] = jnp.ones((), jnp.float32)
        return state

    # --------------------------------------------------------------- decision
    def own_step_time(self, st, ctx):
        if self.step_times == "state":
            return st["step_time"]
        table = costmodel.straggler_factors(self.stragglers, int(self.total_steps), ctx.n, int(self.seed))
        table = jnp.asarray(np.vstack([np.ones((1, ctx.n)), table]), jnp.float32)  # step 0 saw nothing yet
        row = jnp.clip(ctx.step, 0, table.shape[0] - 1)
        return table[row, lax.axis_index(ctx.axis)]

    def decide(self, st, ctx):
        """(go_async, switching_in, switching_out, new state entries, per-replica metrics)."""
        if self.policy == "offline":
            go_async = ctx.step >= int(self.switch_step)
            return go_async, ctx.step == int(self.switch_step), False, {}, {}
        mine = self.own_step_time(st, ctx)
        times = lax.all_gather(mine, ctx.axis)
        slow = mine > float(self.straggler_factor) * jnp.median(times)
        count = jnp.where(slow, st["slow_steps"] + 1, 0)
        flags = jnp.stack([(count >= int(self.straggler_steps)).astype(jnp.int32), st["async"]])
        flags = lax.pmax(flags, ctx.axis)
        go_async, was_async = flags[0] > 0, flags[1] > 0
        updates = {"slow_steps": count, "async": go_async.astype(jnp.int32)}
        return go_async, go_async & ~was_async, was_async & ~go_async, updates, {"step_time": mine, "slow_steps": count}

    # ---------------------------------------------------------------- updates
    def momentum_rule(self, rs, ctx):
        if self.momentum == "reset":
            return rs.replace(opt_state=ctx.optimizer.init(rs.params))
        factor = 1.0 / ctx.n if self.momentum_scale is None else float(self.momentum_scale)
        return rs.replace(opt_state=scale_momentum(rs.opt_state, factor))

    def bsp_step(self, rs, grads, ctx, switching_out, s):
        agg = lambda tree: self.aggregator(tree, ctx.axis, ctx)
        if self.policy == "offline" or s == 0:
            return to_varying(scaled_update(rs, agg(grads), ctx), ctx.axis)

        def drain(rs):
            pending = jax.tree.map(lambda r: jnp.sum(r, axis=0), rs.strategy_state["ring"])
            g = jax.tree.map(lambda a, p: a + p / ctx.n, agg(grads), pending)
            rs = scaled_update(rs, g, ctx)
            mean = Mean()
            rs = rs.replace(params=mean(rs.params, ctx.axis), opt_state=mean(rs.opt_state, ctx.axis))
            ring = jax.tree.map(jnp.zeros_like, rs.strategy_state["ring"])
            return to_varying(rs.replace(strategy_state={**rs.strategy_state, "ring": ring}), ctx.axis)

        return lax.cond(switching_out, drain, lambda rs: to_varying(scaled_update(rs, agg(grads), ctx), ctx.axis), rs)

    def async_step(self, rs, grads, ctx, s):
        if s == 0:
            return to_varying(scaled_update(rs, lax.pmean(grads, ctx.axis), ctx, float(self.lr_scale)), ctx.axis)
        combined, ring = stale_combine(grads, rs.strategy_state["ring"], ctx.step, s, ctx.axis, ctx.n)
        rs = rs.replace(strategy_state={**rs.strategy_state, "ring": ring})
        return to_varying(scaled_update(rs, combined, ctx, float(self.lr_scale)), ctx.axis)

    def apply(self, rs, grads, grad_norm, ctx):
        s = resolve_staleness(self.staleness, ctx.n)
        go_async, switching_in, switching_out, updates, per_replica = self.decide(rs.strategy_state, ctx)
        rs = rs.replace(strategy_state={**rs.strategy_state, **updates})
        if self.momentum != "keep":
            rs = lax.cond(switching_in, lambda r: to_varying(self.momentum_rule(r, ctx), ctx.axis),
                          lambda r: to_varying(r, ctx.axis), rs)
        rs = lax.cond(go_async, lambda r: self.async_step(r, grads, ctx, s),
                      lambda r: self.bsp_step(r, grads, ctx, switching_out, s), rs)
        exchange = ONLINE_EXCHANGE_BYTES if self.policy == "online" else 0
        moved = byte_count(tree_bytes(grads) + exchange) + byte_count(
            tree_bytes(rs.params) + tree_bytes(rs.opt_state), switching_out)
        shared = {
            "synced": ~go_async if s > 0 else jnp.asarray(True),
            "asynchronous": jnp.asarray(go_async),
            "bytes_allreduced": moved,
            "vote_bytes": byte_count(0),
        }
        return rs, shared, per_replica

    def timing(self, n: int) -> dict:
        """The asynchronous phase runs like ASP (or SSP with `staleness`)."""
        return {**super().timing(n), "staleness": self.staleness}

    def describe(self) -> str:
        s = "N-1" if self.staleness is None else self.staleness
        when = f"switch at step {self.switch_step}" if self.policy == "offline" else "online stragglers"
        return f"{self.name} (BSP -> emulated ASP s={s}, {when})"
