"""Strategy = trigger (when) x what is synced x aggregator (how).

`TriggeredStrategy` covers every method whose step is "decide on the device, then
either a collective branch or a local branch"; strategies with their own state
machines (SSP, SSD-SGD, DiLoCo ...) subclass `Strategy` and override `apply`.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax
from jax import lax

from ..aggregate import Aggregator, Mean, get_aggregator
from ..state import TrainState, tree_bytes
from ..triggers import Trigger

SYNC_MODES = ("grads", "params", "model")


class NonReplicatedDecisionError(TypeError):
    """A sync decision differs across replicas: `lax.cond` around a collective would deadlock."""


def varying_axes(x) -> frozenset:
    """Manual mesh axes along which `x` may differ (its varying-manual-axes type)."""
    aval = jax.typeof(x)
    vma = getattr(aval, "vma", None)
    if vma is None:
        vma = getattr(getattr(aval, "manual_axis_type", None), "varying", frozenset())
    return frozenset(vma)


def ensure_replicated(decide, axis: str, who: str = "trigger") -> None:
    """Raise at trace time unless `decide` is provably identical on every replica."""
    if isinstance(decide, (bool, int)):
        return
    if jnp.shape(decide) != ():
        raise NonReplicatedDecisionError(f"{who} must return a scalar decision, got shape {jnp.shape(decide)}")
    if axis in varying_axes(decide):
        raise NonReplicatedDecisionError(
            f"{who} returned a sync decision that varies across the {axis!r} axis; replicas "
            f"could disagree and deadlock inside lax.cond. Reduce per-replica votes with "
            f"lax.pmax(vote, {axis!r}) (any replica) or lax.pmin (all replicas) first."
        )


def to_varying(tree: Any, axis: str) -> Any:
    """Cast invariant leaves to varying so both `lax.cond` branches have equal types."""
    return jax.tree.map(lambda x: x if axis in varying_axes(x) else lax.pcast(x, axis, to="varying"), tree)


@dataclasses.dataclass
class StepContext:
    """What a strategy sees of the step besides the replica's own state."""

    axis: str
    n: int                 # number of replicas
    step: jax.Array        # replicated step counter (before this step)
    optimizer: optax.GradientTransformation
    weight: jax.Array      # this replica's sample count this step (FedAvg weights)


def byte_count(nbytes, when=True) -> jax.Array:
    """`nbytes` where `when` holds, else 0, as the step's integer byte metric."""
    dtype = jnp.int64 if jax.config.jax_enable_x64 else jnp.int32
    return jnp.asarray(when).astype(dtype) * jnp.asarray(nbytes, dtype)


def local_update(rs: TrainState, grads, ctx: StepContext) -> TrainState:
    """One optimizer step of this replica on `grads`."""
    updates, opt_state = ctx.optimizer.update(grads, rs.opt_state, rs.params)
    return rs.replace(params=optax.apply_updates(rs.params, updates), opt_state=opt_state)


class Strategy:
    """Base class. `apply` returns (replica state, shared metrics, per-replica metrics)."""

    name: str = "strategy"

    def init(self, params, opt_state, n: int) -> Any:
        """Per-replica strategy state (unbatched); `init_state` adds the replica axis."""
        return {}

    def apply(self, rs: TrainState, grads, grad_norm, ctx: StepContext):
        raise NotImplementedError

    def eval_params(self, state: TrainState):
        """The replica-axis parameters a run is evaluated on (through their replica mean):
        the replicas' own weights, unless the method keeps a global model of its own."""
        return state.params

    def timing(self, n: int) -> dict:
        """How the cost model charges this strategy's steps (costmodel.Projector keywords):
        the sync collective, and how a local step that still moves bytes is paid."""
        return {"collective": "allreduce", "background": "async", "staleness": None}

    def describe(self) -> str:
        return self.name


@dataclasses.dataclass(frozen=True)
class TriggeredStrategy(Strategy):
    """Decide on the device; the collective runs inside `lax.cond`, the update after it.

    sync="grads":  aggregate gradients, then every replica applies them (BSP).
    sync="params": aggregate the pre-update parameters, then each replica applies its own
                   gradient (taken at its pre-average parameters) - SelSync's default.
    sync="model":  each replica applies its own update, then the updated parameters are
                   replaced by their aggregate (local SGD / FedAvg).
    Optimizer state stays local unless `sync_opt_state`; model state (BatchNorm
    statistics) is averaged at a sync only when `sync_model_state`.
    """

    trigger: Trigger
    sync: str = "params"
    aggregator: Aggregator = Mean()
    sync_model_state: bool = False
    sync_opt_state: bool = False
    name: str = "triggered"

    def __post_init__(self):
        if self.sync not in SYNC_MODES:
            raise ValueError(f"sync must be one of {SYNC_MODES}, got {self.sync!r}")
        object.__setattr__(self, "aggregator", get_aggregator(self.aggregator))

    def init(self, params, opt_state, n):
        state = {"trigger": self.trigger.init()}
        if self.aggregator.uses_sample_weights:
            state["samples"] = jnp.zeros((), jnp.float32)  # samples in params since the last sync
        return state

    def sample_weight(self, strategy_state, ctx: StepContext) -> tuple[StepContext, Any]:
        """(context whose `weight` is what a sync this step aggregates, counter after a
        local step). "params" aggregates the pre-update parameters (samples so far);
        "model" the post-update ones (this batch too); "grads" this batch's gradients."""
        if "samples" not in strategy_state:
            return ctx, None
        seen = strategy_state["samples"]
        weight = {"params": seen, "model": seen + ctx.weight, "grads": ctx.weight}[self.sync]
        return dataclasses.replace(ctx, weight=weight), seen + ctx.weight

    def synced_bytes(self, rs: TrainState, grads) -> int:
        """Exact bytes each replica puts into the sync collective(s)."""
        total = tree_bytes(grads if self.sync == "grads" else rs.params)
        if self.sync_model_state:
            total += tree_bytes(rs.model_state)
        if self.sync_opt_state:
            total += tree_bytes(rs.opt_state)
        return total

    def aggregate_where(self, decide, tree, ctx: StepContext):
        """`tree` aggregated across replicas where `decide` holds, else unchanged. Only the
        collective sits inside `lax.cond`: the optimizer update stays outside, fused with
        the rest of the step (measured on CPU: a never-taken cond around the whole update
        cost ~40% of a local step; see BENCHMARKS.md)."""
        agg = lambda t: self.aggregator(t, ctx.axis, ctx)
        if isinstance(decide, (bool, int)):  # static decision: no cond, no dead branch
            return agg(tree) if decide else tree
        return lax.cond(decide, lambda t: to_varying(agg(t), ctx.axis), lambda t: to_varying(t, ctx.axis), tree)

    def update(self, rs: TrainState, grads, decide, sync_ctx: StepContext, ctx: StepContext) -> TrainState:
        """One step: aggregate what is synced before the update (model/optimizer state, the
        gradients or the pre-update parameters), update, then ("model") the result."""
        before = {}
        if self.sync_model_state:
            before["model_state"] = rs.model_state
        if self.sync_opt_state:
            before["opt_state"] = rs.opt_state
        if self.sync in ("grads", "params"):
            before[self.sync] = grads if self.sync == "grads" else rs.params
        if before:
            before = self.aggregate_where(decide, before, sync_ctx)
            grads = before.pop("grads", grads)
            rs = rs.replace(**before)
        rs = local_update(rs, grads, ctx)
        if self.sync == "model":
            rs = rs.replace(params=self.aggregate_where(decide, rs.params, sync_ctx))
        return rs

    def apply(self, rs, grads, grad_norm, ctx):
        tstate, decide, tmetrics = self.trigger(rs.strategy_state["trigger"], grad_norm, ctx.step, ctx.axis)
        ensure_replicated(decide, ctx.axis, who=type(self.trigger).__name__)
        sync_ctx, seen = self.sample_weight(rs.strategy_state, ctx)
        rs = rs.replace(strategy_state={**rs.strategy_state, "trigger": tstate})
        rs = self.update(rs, grads, decide, sync_ctx, ctx)
        if seen is not None:  # after a params sync this step's own update is already in
            after_sync = ctx.weight if self.sync == "params" else jnp.zeros_like(seen)
            rs = rs.replace(strategy_state={**rs.strategy_state, "samples": jnp.where(decide, after_sync, seen)})
        decide = jnp.asarray(decide)
        moved = byte_count(self.synced_bytes(rs, grads), decide)
        shared = {"synced": decide, "bytes_allreduced": moved + self.trigger.vote_bytes,
                  "vote_bytes": byte_count(self.trigger.vote_bytes)}
        return rs, shared, tmetrics

    def timing(self, n: int) -> dict:
        return {**super().timing(n), "collective": self.aggregator.collective}
