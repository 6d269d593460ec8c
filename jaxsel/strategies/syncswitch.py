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
`jaxsel.core.stragglers` (`stragglers`, `seed`, `total_steps`: the same draws a cost-model
projection with that seed charges) and feeds step t the times of step t - 1, the last
ones a real worker could have measured; `step_times="state"` reads
the monitor state's `step_time`, which the training loop fills before each step with
`feed_step_times(state, times)`.

Metrics: `synced` is True on BSP steps, `asynchronous` on emulated-ASP ones, and
`bytes_allreduced` counts the gradients reduced every step, the online policy's 12-byte
step-time exchange and, on a return to BSP, the averaged parameters and optimizer state.
`vote_bytes` is 0: Sync-Switch's straggler monitor does not hold asynchronous workers
at a barrier, although the lock-step emulation exchanges the times every step.
"""
from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..core.budget import sweep
from ..core.checks import as_int
from ..core.aggregate import get_aggregator
from ..core.collectives import replica_gather, replica_index, replica_max
from ..core.stragglers import get_stragglers, straggler_factors
from ..core.sync import STRATEGIES, Strategy, local_cond, local_update, tree_where
from .payload import Aggregated
from .staleness import drain, init_ring, resolve_staleness, stale_gradient
from .traits import method_traits

POLICIES = ("offline", "online")
MOMENTUM_RULES = ("keep", "reset", "scale")
STEP_TIME_SOURCES = ("simulated", "state")
ONLINE_EXCHANGE_BYTES = 4 + 8  # all_gather of one float32 time + pmax of two int32 flags


class MonitorState(NamedTuple):
    asynchronous: Any   # the previous step's mode (int32, the same on every replica)
    slow_steps: Any     # this replica's consecutive slow steps (int32)
    step_time: Any      # this replica's step time fed by the loop (float32; step_times="state")


class SyncSwitchState(NamedTuple):
    ring: Any = None      # StaleRing of the asynchronous phase (None for s = 0)
    monitor: Any = None   # MonitorState (online policy)


class Switch(NamedTuple):
    """This step's mode, replicated: asynchronous, and whether it changed at this step."""

    go_async: Any
    switching_in: Any
    switching_out: Any


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
    st = state.strategy_state
    slot = st.monitor.step_time
    new = jax.device_put(jnp.asarray(times, jnp.float32).reshape(slot.shape), slot.sharding)
    return state.replace(strategy_state=st._replace(monitor=st.monitor._replace(step_time=new)))


def simulated_step_times(stragglers, total_steps: int, n: int, seed: int) -> np.ndarray:
    """(total_steps + 1, n) step-time factors: step t sees the draws of step t - 1 (the
    last ones a real worker could have measured); step 0 saw nothing yet. The same draws a
    cost-model projection with that seed charges."""
    return np.vstack([np.ones((1, n)), straggler_factors(stragglers, total_steps, n, seed)])


@STRATEGIES.register("syncswitch")
# adaptive online, where the straggler monitor decides when to run BSP (offline: a fixed first share)
@method_traits(budget=sweep("bsp_fraction", None, 0.5), adaptive=lambda s: s.policy == "online")
@dataclasses.dataclass(frozen=True)
class SyncSwitch(Aggregated, Strategy):
    """Hybrid BSP / emulated-ASP training (see the module docstring).

    offline: `switch_step` (first asynchronous step), or `bsp_fraction` x `total_steps`.
    online:  `straggler_factor`, `straggler_steps`, `step_times`, and for simulated times
             `stragglers` (a jaxsel.core.stragglers spec, e.g. "transient:probability=0.05,factor=4"),
             `total_steps`, `seed`.
    """

    policy: str = "offline"
    """offline: BSP, then asynchronous from the switch on; online: asynchronous while a straggler exists"""
    bsp_fraction: float = 0.25
    """offline: the share of the run trained with BSP first"""
    total_steps: int | None = None
    switch_step: int | None = None
    """offline: the first asynchronous step (none: bsp_fraction x the run)"""
    staleness: int | None = None
    """s of the asynchronous steps (none: N - 1)"""
    lr_scale: float = 1.0
    """multiplies the optimizer's updates in the asynchronous steps (1.0: the paper's lr / N, built in)"""
    momentum: str = "keep"
    """at a switch to asynchronous: keep, reset or scale the optimizer's momentum"""
    momentum_scale: float | None = None
    """the factor of momentum=scale (none: 1/N)"""
    straggler_factor: float = 1.5
    """online: a step slower than this x the median marks a straggler"""
    straggler_steps: int = 3
    """online: consecutive slow steps before a replica counts as a straggler"""
    step_times: str = "simulated"
    """online: simulated (drawn from `stragglers`) or state (fed by the loop)"""
    stragglers: str = "transient:probability=0.02,factor=4"
    """the simulated slowdowns, a straggler model (e.g. transient:probability=0.05,factor=4)"""
    seed: int = 0
    name: ClassVar[str] = "syncswitch"
    context_fields: ClassVar[tuple[str, ...]] = ("total_steps", "seed")   # seed unset: the run's
    # the offline switch, read only in the step's comparisons, and the share it is settled
    # from (read on the host only): the budget points of one run length train as one program
    cell_options: ClassVar[tuple[str, ...]] = ("bsp_fraction", "switch_step")

    def __post_init__(self):
        self.check_choices()
        self.check_numbers()
        self.settle(aggregator=get_aggregator(self.aggregator))
        if self.policy == "offline":
            if self.switch_step is None:
                if self.total_steps is None:
                    raise ValueError("offline SyncSwitch needs switch_step, or bsp_fraction with total_steps "
                                     "(the training loop passes total_steps)")
                self.settle(switch_step=int(round(float(self.bsp_fraction) * int(self.total_steps))))
            if isinstance(self.switch_step, bool) or int(self.switch_step) < 0:
                raise ValueError(f"switch_step must be an integer >= 0, got {self.switch_step!r}")
        elif self.step_times == "simulated":
            if self.total_steps is None or int(self.total_steps) < 1:
                raise ValueError("online SyncSwitch with simulated step times needs total_steps >= 1, "
                                 f"got {self.total_steps!r}")
            get_stragglers(self.stragglers)  # validate the spec now, not at trace time

    def check_choices(self):
        for name, value, allowed in (("policy", self.policy, POLICIES), ("momentum rule", self.momentum,
                                     MOMENTUM_RULES), ("step_times", self.step_times, STEP_TIME_SOURCES)):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}")

    def check_numbers(self):
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

    # ------------------------------------------------------------------ state
    def init(self, params, opt_state, n):
        monitor = None
        if self.policy == "online":
            monitor = MonitorState(jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32), jnp.ones((), jnp.float32))
        return SyncSwitchState(init_ring(params, resolve_staleness(self.staleness, n)), monitor)

    def optax_refusal(self):
        if self.staleness is None:
            return ("its asynchronous phase's staleness s = N - 1 sizes a ring of s gradient buffers, and an "
                    "optimizer's init sees one replica, not N: set staleness=s")
        if self.policy == "online" and self.step_times == "state":
            return ("its step times are fed into its state by the training loop between steps "
                    "(feed_step_times), which an optimizer's update cannot receive: use step_times='simulated'")
        return None

    # --------------------------------------------------------------- the switch
    def own_step_time(self, monitor: MonitorState, ctx):
        if self.step_times == "state":
            return monitor.step_time
        table = simulated_step_times(self.stragglers, int(self.total_steps), ctx.n, int(self.seed))
        row = jnp.clip(ctx.step, 0, table.shape[0] - 1)
        return jnp.asarray(table, jnp.float32)[row, replica_index(ctx.axis, ctx)]

    def switch(self, monitor: MonitorState | None, ctx):
        """(Switch, new monitor state, per-replica metrics); every decision replicated."""
        if self.policy == "offline":
            switch = as_int(self.switch_step)
            return Switch(ctx.step >= switch, ctx.step == switch, False), None, {}
        mine = self.own_step_time(monitor, ctx)
        slow = mine > float(self.straggler_factor) * jnp.median(replica_gather(mine, ctx.axis))
        count = jnp.where(slow, monitor.slow_steps + 1, 0)
        flags = replica_max(jnp.stack([(count >= int(self.straggler_steps)).astype(jnp.int32), monitor.asynchronous]),
                         ctx.axis)
        go_async, was_async = flags[0] > 0, flags[1] > 0
        new = MonitorState(go_async.astype(jnp.int32), count, monitor.step_time)
        return Switch(go_async, go_async & ~was_async, was_async & ~go_async), new, \
            {"step_time": mine, "slow_steps": count}

    def momentum_rule(self, params, opt_state, ctx):
        if self.momentum == "reset":
            return ctx.optimizer.init(params)
        factor = 1.0 / ctx.n if self.momentum_scale is None else float(self.momentum_scale)
        return scale_momentum(opt_state, factor)

    # ---------------------------------------------------------------- the step
    def gradient(self, grads, ring, sw: Switch, ctx, s: int):
        """(the gradient this step applies, ring): the aggregate in BSP steps (plus what was
        in flight on a return to BSP), the stale combination in asynchronous ones."""
        bsp_g = ctx.sync(~sw.go_async, grads, self.aggregator)
        if s == 0:   # the asynchronous phase is BSP's all-reduce too: replicas wait on it
            async_g = ctx.sync(sw.go_async, grads, "mean")
            return tree_where(sw.go_async, async_g, bsp_g), ring
        async_g, ring = stale_gradient(grads, ring, ctx, s, when=sw.go_async)
        bsp_g, ring = local_cond(sw.switching_out, lambda g, r: (jax.tree.map(jnp.add, g, drain(r, ctx.n)),
                                                                 jax.tree.map(jnp.zeros_like, r)),
                                 lambda g, r: (g, r), bsp_g, ring)
        return tree_where(sw.go_async, async_g, bsp_g), ring

    def apply(self, rs, grads, stats, ctx):
        s = resolve_staleness(self.staleness, ctx.n)
        st: SyncSwitchState = rs.strategy_state
        sw, monitor, metrics = self.switch(st.monitor, ctx)
        opt_state = rs.opt_state
        if self.momentum != "keep":
            opt_state = local_cond(sw.switching_in, lambda p, o: self.momentum_rule(p, o, ctx),
                                   lambda p, o: o, rs.params, opt_state)
        g, ring = self.gradient(grads, st.ring, sw, ctx, s)
        scale = 1.0 if float(self.lr_scale) == 1.0 else jnp.where(sw.go_async, float(self.lr_scale), 1.0)
        params, opt_state = local_update(rs.params, opt_state, g, ctx.optimizer, scale)
        if self.policy == "online" and s > 0:   # BSP restarts from one model, as a server's single copy
            params, opt_state = ctx.sync(sw.switching_out, (params, opt_state), "mean")
        if self.policy == "online":   # the step-time exchange: no barrier for asynchronous workers
            ctx.count(ONLINE_EXCHANGE_BYTES)
        ctx.log(**metrics)
        ctx.log(shared=True, asynchronous=jnp.asarray(sw.go_async))
        return rs.replace(params=params, opt_state=opt_state, strategy_state=SyncSwitchState(ring, monitor))


    def describe(self) -> str:
        s = "N-1" if self.staleness is None else self.staleness
        when = f"switch at step {self.switch_step}" if self.policy == "offline" else "online stragglers"
        return f"{self.name} (BSP -> emulated ASP s={s}, {when})"
