"""Strategies of the form "trigger x what is synced x aggregator".

At each step a trigger decides on the device; the sync core aggregates what is synced
where the decision holds; the optimizer update runs outside the conditional:

  sync="grads":  aggregate gradients, then every replica applies them (BSP).
  sync="params": aggregate the pre-update parameters, then each replica applies its own
                 gradient (taken at its pre-average parameters) - SelSync's default.
  sync="model":  each replica applies its own update, then the updated parameters are
                 replaced by their aggregate (local SGD / FedAvg).

Optimizer state stays local unless `sync_opt_state`; model state (BatchNorm statistics)
is averaged at a sync only when `sync_model_state`. Aggregators that weight replicas by
the samples they saw since the last sync (FedAvg's) get that count from the state.
"""
from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax.numpy as jnp

from ..core import compression
from ..core.aggregate import Aggregator, Bound, get_aggregator
from ..core.sync import STRATEGIES, Strategy, ensure_replicated, local_update
from ..core.triggers import UNKNOWN, Trigger, first_sync_step, get_trigger

SYNC_MODES = ("grads", "params", "model")


class TriggeredState(NamedTuple):
    trigger: Any          # the trigger's own state
    samples: Any = None   # samples in the parameters since the last sync (weighted aggregators)


class Synced(NamedTuple):
    """What a sync carries (None: not synced)."""

    grads: Any = None
    params: Any = None
    model_state: Any = None
    opt_state: Any = None


def sample_weight(mode: str, seen, batch):
    """What a sync of `mode` weighs a replica by: the samples in what it aggregates."""
    return {"params": seen, "model": seen + batch, "grads": batch}[mode]


def samples_after(mode: str, decide, seen, batch):
    """The counter after this step: after a params sync this step's own update is in."""
    after_sync = batch if mode == "params" else jnp.zeros_like(seen)
    return jnp.where(decide, after_sync, seen + batch)


def sync_before_update(rs, grads, decide, ctx, agg, *, what, model_state=False, opt_state=False,
                       compress=None, groups=None):
    """Aggregate the gradients or the pre-update parameters (and model/optimizer state)
    where `decide` holds, sent as `compress` (`groups`: `agg` combines within groups, see
    `sync_where`). Returns (replica state, gradients)."""
    payload = Synced(grads=grads if what == "grads" else None,
                     params=rs.params if what == "params" else None,
                     model_state=rs.model_state if model_state else None,
                     opt_state=rs.opt_state if opt_state else None)
    if not any(x is not None for x in payload):
        return rs, grads
    out = ctx.sync(decide, payload, agg, compress=compress, groups=groups)
    rs = rs.replace(**{k: v for k, v in out._asdict().items() if k != "grads" and v is not None})
    return rs, (out.grads if what == "grads" else grads)


def sync_after_update(rs, decide, ctx, agg, *, model_state=False, compress=None, groups=None):
    """Replace the updated parameters (and model state) by their aggregate where `decide`
    holds, sent as `compress`."""
    payload = Synced(params=rs.params, model_state=rs.model_state if model_state else None)
    out = ctx.sync(decide, payload, agg, compress=compress, groups=groups)
    return rs.replace(params=out.params, **({"model_state": out.model_state} if model_state else {}))


def update(rs, grads, ctx):
    params, opt_state = local_update(rs.params, rs.opt_state, grads, ctx.optimizer)
    return rs.replace(params=params, opt_state=opt_state)


class Triggered(Strategy):
    """Base of the trigger x what x aggregator strategies. Subclasses provide `trigger`,
    `sync` (one of SYNC_MODES), `aggregator`, `sync_model_state`, `sync_opt_state` and
    `compress` (a payload codec of `jaxsel.core.compression`, or None)."""

    sync_opt_state: bool = False
    compress: str | None = None

    def check_compress(self) -> None:
        """Normalize `compress` ("none" -> None) and check the aggregator can use it."""
        object.__setattr__(self, "compress", compression.check_compressible(self.compress, self.combiner()))

    @property
    def trigger(self) -> Trigger:
        raise NotImplementedError

    def combiner(self) -> Aggregator:
        return get_aggregator(self.aggregator)

    def init(self, params, opt_state, n):
        weighted = self.combiner().uses_sample_weights
        return TriggeredState(self.trigger.init(), jnp.zeros((), jnp.float32) if weighted else None)

    # The step in pieces, so that a two-level strategy (`Hierarchical`) can interleave two
    # levels' syncs around one optimizer update.

    def decide(self, st: TriggeredState, stats, ctx):
        """(trigger state, decision replicated over all replicas, trigger metrics); the
        decision's vote goes into the step's ledger."""
        tstate, decide, tmetrics = self.trigger(st.trigger, stats, ctx.axis)
        ensure_replicated(decide, ctx.axis, who=type(self.trigger).__name__)
        ctx.count(self.trigger.vote_bytes, vote=True)
        return tstate, decide, tmetrics

    def aggregate_fn(self, st: TriggeredState, ctx, scope=None) -> Bound:
        """The aggregate of a sync over `scope`: all replicas (None) or `collectives.Groups`."""
        weight = ctx.weight if st.samples is None else sample_weight(self.sync, st.samples, ctx.weight)
        return Bound(self.combiner(), ctx.axis if scope is None else scope, dataclasses.replace(ctx, weight=weight))

    def sync_before(self, rs, grads, decide, ctx, agg, groups=None):
        """The sync before the optimizer update: gradients or parameters (and extra state)."""
        mode = self.sync
        return sync_before_update(rs, grads, decide, ctx, agg, what=mode if mode != "model" else None,
                                  model_state=self.sync_model_state and mode != "model",
                                  opt_state=self.sync_opt_state, compress=self.compress, groups=groups)

    def sync_after(self, rs, decide, ctx, agg, groups=None):
        """The sync after the update (sync="model")."""
        if self.sync != "model":
            return rs
        return sync_after_update(rs, decide, ctx, agg, model_state=self.sync_model_state,
                                 compress=self.compress, groups=groups)

    def next_state(self, st: TriggeredState, tstate, decide, ctx) -> TriggeredState:
        samples = None if st.samples is None else samples_after(self.sync, decide, st.samples, ctx.weight)
        return TriggeredState(tstate, samples)

    def apply(self, rs, grads, stats, ctx):
        st: TriggeredState = rs.strategy_state
        tstate, decide, tmetrics = self.decide(st, stats, ctx)
        agg = self.aggregate_fn(st, ctx)
        rs, grads = self.sync_before(rs, grads, decide, ctx, agg)
        rs = update(rs, grads, ctx)
        rs = self.sync_after(rs, decide, ctx, agg)
        ctx.log(**tmetrics)
        return rs.replace(strategy_state=self.next_state(st, tstate, decide, ctx))


    def adaptive_sync(self) -> bool:
        """A trigger whose firing steps are not known in advance (SelSync's significance
        test, a user's trigger) makes the pattern adaptive."""
        return first_sync_step(self.trigger) == UNKNOWN

    def describe(self) -> str:
        return self.name + compression.tags(self.compress, self.combiner())


def check_mode(sync: str) -> None:
    if sync not in SYNC_MODES:
        raise ValueError(f"sync must be one of {SYNC_MODES}, got {sync!r}")


@STRATEGIES.register("triggered")
@dataclasses.dataclass(frozen=True)
class TriggeredStrategy(Triggered):
    """Any trigger with any aggregator: `TriggeredStrategy(trigger=Periodic(10),
    sync="model", aggregator="median")`. From the CLI: `--strategy triggered --opt
    trigger=NAME --opt trigger.FIELD=VALUE --opt sync=params` (triggers by registered
    name, see `jaxsel.register_trigger`)."""

    trigger: Any = "never"
    sync: str = "params"
    aggregator: Any = "mean"
    sync_model_state: bool = False
    sync_opt_state: bool = False
    trigger_options: dict = dataclasses.field(default_factory=dict)
    name: str = "triggered"
    compress: str | None = None

    def __post_init__(self):
        check_mode(self.sync)
        object.__setattr__(self, "trigger", get_trigger(self.trigger, self.trigger_options or None))
        object.__setattr__(self, "trigger_options", {})
        get_aggregator(self.aggregator)
        self.check_compress()

    def describe(self) -> str:
        return f"{super().describe()} ({type(self.trigger).__name__}, sync {self.sync})"
