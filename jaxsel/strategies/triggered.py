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
from typing import Any, ClassVar, NamedTuple

import jax.numpy as jnp

from ..core import compression
from ..core.aggregate import Bound, get_aggregator
from ..core.collectives import Groups
from ..core.sync import STRATEGIES, Strategy, ensure_replicated, local_update, tree_where
from ..core.triggers import UNKNOWN, Trigger, first_sync_step, get_trigger, init_trigger
from .feedback import feedback_step, init_feedback, refuse_in_composition
from .payload import GradientPayload
from .traits import method_traits

SYNC_MODES = ("grads", "params", "model")


class TriggeredState(NamedTuple):
    trigger: Any          # the trigger's own state
    samples: Any = None   # samples in the parameters since the last sync (weighted aggregators)
    feedback: Any = None  # an error-feedback codec's residual and anchor (`feedback.FeedbackState`)


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


class Level(NamedTuple):
    """One trigger-based strategy's part in a step: its decision, where its sync combines
    (all replicas, or `groups` groups), and what it carries into its next state. A step is
    its levels' syncs around one optimizer update (`around_update`): a plain strategy has
    one level, a composition (`Hierarchical`, `Phases`) several."""

    strategy: "Triggered"
    state: "TriggeredState"   # the level's state before this step
    tstate: Any               # its trigger's state after this step
    decide: Any               # replicated over all replicas
    metrics: dict             # its trigger's metrics
    groups: int | None = None

    def aggregate(self, ctx) -> Bound:
        """The aggregate of this level's sync: all replicas, or within its groups."""
        st, s = self.state, self.strategy
        weight = ctx.weight if st.samples is None else sample_weight(s.sync, st.samples, ctx.weight)
        scope = ctx.axis if self.groups is None else Groups(ctx.axis, self.groups)
        return Bound(s.aggregator, scope, dataclasses.replace(ctx, weight=weight))

    def next_state(self, ctx, synced=None, active=True) -> "TriggeredState":
        """The level's state after the step (`synced`: when its payload was aggregated, by
        default its own decision; `active`: where the level took part in the step)."""
        st = self.state
        synced = self.decide if synced is None else synced
        samples = None if st.samples is None else samples_after(self.strategy.sync, synced, st.samples, ctx.weight)
        new = st._replace(trigger=self.tstate, samples=samples)
        return new if active is True else tree_where(active, new, st)


def around_update(rs, grads, ctx, levels) -> Any:
    """The levels' syncs around one optimizer update: each level's sync of gradients or
    pre-update parameters (in order), the update, each level's sync of the updated model
    (in order, so a later level's result stands)."""
    for lv in levels:
        refuse_in_composition(lv.strategy.compress, lv.strategy.name)
    for lv in levels:
        rs, grads = lv.strategy.sync_before(rs, grads, lv.decide, ctx, lv.aggregate(ctx), lv.groups)
    rs = update(rs, grads, ctx)
    for lv in levels:
        rs = lv.strategy.sync_after(rs, lv.decide, ctx, lv.aggregate(ctx), lv.groups)
    return rs


def trigger_decides(strategy) -> bool:
    """A trigger whose firing steps are not known in advance (SelSync's significance test,
    a user's trigger) makes the sync pattern adaptive (`traits.MethodTraits.adaptive`)."""
    return first_sync_step(strategy.trigger) == UNKNOWN


@method_traits(adaptive=trigger_decides)
class Triggered(Strategy):
    """Base of the trigger x what x aggregator strategies. Subclasses are frozen dataclasses
    that provide `trigger` (a field, or a property built from their options), `sync` (one
    of SYNC_MODES) and the payload's options (a class of payload.py first among their
    bases: `aggregator`, `sync_model_state`, `compress`, `error_feedback`), and may set
    `sync_opt_state`."""

    # for a subclass without these options: the optimizer's state stays local, and
    # error_feedback matters only with top-k or sign, which SPARTA refuses
    sync_opt_state: bool = False
    error_feedback: bool = True
    opt_state_period = None   # LocalSGD / FedAvg: optimizer state averaged on its own period (DES-LOC)

    def __post_init__(self):
        """What every trigger-based strategy checks: its sync mode, its trigger's options,
        the aggregator (a name -> the Aggregator), and the codec against it ("none" -> None)."""
        check_mode(self.sync)
        self.trigger
        self.settle(aggregator=get_aggregator(self.aggregator))
        self.settle(compress=compression.check_compressible(self.compress, self.aggregator))

    @property
    def trigger(self) -> Trigger:
        raise NotImplementedError

    def init(self, params, opt_state, n):
        weighted = self.aggregator.uses_sample_weights
        feedback = (init_feedback(params, self.sync, bool(self.error_feedback))
                    if compression.has_feedback(self.compress) else None)
        return TriggeredState(init_trigger(self.trigger, params), jnp.zeros((), jnp.float32) if weighted else None,
                              feedback)

    def level(self, st: TriggeredState, stats, ctx, groups: int | None = None, gate=True) -> Level:
        """This strategy's part in a step: its trigger decides (a replicated decision, its
        vote counted in the step's ledger), and only where `gate` holds."""
        tstate, decide, metrics = self.trigger(st.trigger, stats, ctx.axis)
        ensure_replicated(decide, ctx.axis, who=type(self.trigger).__name__)
        ctx.count(self.trigger.vote_bytes, vote=True)
        return Level(self, st, tstate, decide if gate is True else gate & decide, metrics, groups)

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

    def apply(self, rs, grads, stats, ctx):
        lv = self.level(rs.strategy_state, stats, ctx)
        if lv.state.feedback is None:
            rs, feedback = around_update(rs, grads, ctx, [lv]), None
        else:
            rs, feedback = feedback_step(self, rs, grads, lv, ctx)
        ctx.log(**lv.metrics)
        return rs.replace(strategy_state=lv.next_state(ctx)._replace(feedback=feedback))

    def describe(self) -> str:
        return self.name + compression.tags(self.compress, self.aggregator, self.error_feedback)


#: what each sync mode averages, and when, as tables and descriptions say it
ORDERS = {"params": "averages before the update", "model": "averages after the update", "grads": "averages gradients"}


def sync_order(strategy) -> str:
    """Which order a trigger-based strategy's syncs run in, in a few words for its label:
    the same trigger averaging before or after the update trains differently (issue 58)."""
    state = ", momentum too" if strategy.sync_opt_state else ""
    return ORDERS[strategy.sync] + state


def check_mode(sync: str) -> None:
    if sync not in SYNC_MODES:
        raise ValueError(f"sync must be one of {SYNC_MODES}, got {sync!r}")


@STRATEGIES.register("triggered")
@dataclasses.dataclass(frozen=True)
class TriggeredStrategy(GradientPayload, Triggered):
    """Any trigger with any aggregator: `TriggeredStrategy(trigger=Periodic(10),
    sync="model", aggregator="median")`. From the CLI: `--strategy triggered --opt
    trigger=NAME --opt trigger.FIELD=VALUE --opt sync=params` (triggers by registered
    name, see `jaxsel.register_trigger`)."""

    trigger: Any = "never"
    """when to sync: a registered trigger by name; trigger.FIELD=VALUE sets its options"""
    sync: str = "params"
    """what a sync averages: grads, params (before the update) or model (after it)"""
    sync_opt_state: bool = False
    trigger_options: dict = dataclasses.field(default_factory=dict)
    """the trigger's options (trigger.FIELD=VALUE)"""
    name: ClassVar[str] = "triggered"
    cell_options: ClassVar[tuple[str, ...]] = ("trigger",)   # the trigger's own (core/cell_options.py)

    def __post_init__(self):
        self.settle(trigger=get_trigger(self.trigger, self.trigger_options or None), trigger_options={})
        super().__post_init__()

    def describe(self) -> str:
        return f"{super().describe()} ({type(self.trigger).__name__}, sync {self.sync}: {sync_order(self)})"
