"""make_train_step: the shard_map'd training step.

Per replica: loss and gradients on its own slice of the batch -> the strategy, which
decides on the device and synchronizes through the sync core (`sync.sync_where`). Nothing
leaves the device: the decision, the trigger's windows and every counter stay there.
"""
from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P

from .parallel import AXIS, num_replicas
from .state import TrainState
from .sync import StepContext, StepStats, Strategy


def grad_norm_sum(grads) -> jax.Array:
    """Sum over parameter tensors of each tensor's L2 norm (SelSync's statistic s_t)."""
    leaves = jax.tree.leaves(grads)
    return sum(jnp.sqrt(jnp.sum(jnp.square(g.astype(jnp.float32)))) for g in leaves)


def _state_specs():
    rep = P(AXIS)
    return TrainState(step=P(), params=rep, opt_state=rep, model_state=rep, strategy_state=rep)


def _map_replica_fields(fn, state: TrainState) -> TrainState:
    """Apply `fn` to every replica-axis leaf (all fields but the replicated step)."""
    step = state.step
    return jax.tree.map(fn, state.replace(step=None)).replace(step=step)


def _as_loss_and_aux(out, stateful: bool):
    """Normalise the loss function's return to (loss, new_model_state_or_None, aux)."""
    if stateful:
        loss, rest = out
        new_ms, aux = rest if isinstance(rest, tuple) else (rest, {})
        return loss, new_ms, aux
    if isinstance(out, tuple):
        return out[0], None, out[1]
    return out, None, {}


def make_train_step(
    loss_fn: Callable,
    optimizer,
    strategy: Strategy,
    mesh,
    *,
    stateful: bool = False,
    donate: bool = True,
    grad_norm_metric: bool = True,
) -> Callable[[TrainState, Any], tuple[TrainState, dict]]:
    """Build the jitted step `step(state, batch) -> (state, metrics)`.

    `loss_fn(params, batch)` returns the mean loss, or `(loss, aux)`. With
    `stateful=True` (models with BatchNorm) it is `loss_fn(params, model_state, batch)`
    returning `(loss, new_model_state)` or `(loss, (new_model_state, aux))`.
    `batch` is a pytree of global arrays whose leading dim is replicas * b.

    metrics: `loss` (mean over replicas), `synced`, `bytes_allreduced` (per replica,
    this step, votes included), per-replica `replica_loss`, `grad_norm` and any
    trigger statistics (SelSync: `delta`, `vote`) as arrays of length `replicas`.

    `grad_norm_metric=False` leaves `grad_norm` out of the metrics. Where the strategy does
    not read it either (all but SelSync), XLA then drops its O(params) pass: measured on
    an 8 x 4 ms CPU MLP step, it is two thirds of the BSP step's overhead over a
    hand-written one (see BENCHMARKS.md). Without it, a non-finite gradient is seen only
    through the loss it leads to (`faults.guard_nonfinite` checks the loss alone).
    """
    n = num_replicas(mesh)

    def replica_step(state: TrainState, batch):
        rs = _map_replica_fields(lambda x: x[0], state)
        if stateful:
            fn = lambda p: loss_fn(p, rs.model_state, batch)
        else:
            fn = lambda p: loss_fn(p, batch)
        (loss, (new_ms, aux)), grads = jax.value_and_grad(
            lambda p: (lambda o: (o[0], o[1:]))(_as_loss_and_aux(fn(p), stateful)), has_aux=True
        )(rs.params)
        if new_ms is not None:
            rs = rs.replace(model_state=new_ms)
        gnorm = grad_norm_sum(grads)
        weight = jnp.float32(jax.tree.leaves(batch)[0].shape[0])
        ctx = StepContext(axis=AXIS, n=n, step=state.step, optimizer=optimizer, weight=weight)
        out = strategy.apply(rs, grads, StepStats(state.step, loss, gnorm), ctx)
        rs = out.state.replace(step=state.step + 1)
        new_state = _map_replica_fields(lambda x: x[None], rs)
        report = out.report
        shared = {"loss": lax.pmean(loss, AXIS), "synced": jnp.asarray(report.synced),
                  "bytes_allreduced": report.payload_bytes, "vote_bytes": report.vote_bytes,
                  **out.shared_metrics}
        per_replica = {"replica_loss": loss, **({"grad_norm": gnorm} if grad_norm_metric else {}),
                       **out.replica_metrics, **aux}
        per_replica = jax.tree.map(lambda x: jnp.asarray(x)[None], per_replica)
        return new_state, shared, per_replica

    sharded = jax.shard_map(
        replica_step,
        mesh=mesh,
        in_specs=(_state_specs(), P(AXIS)),
        out_specs=(_state_specs(), P(), P(AXIS)),
    )

    def step(state, batch):
        batch = jax.tree.map(lambda x: jax.reshard(x, NamedSharding(mesh, P(AXIS))), batch)
        new_state, shared, per_replica = sharded(state, batch)
        return new_state, {**shared, **per_replica}

    state_shardings = jax.tree.map(lambda spec: NamedSharding(mesh, spec), _state_specs())
    return jax.jit(
        step,
        in_shardings=(state_shardings, NamedSharding(mesh, P(AXIS))),
        donate_argnums=(0,) if donate else (),
    )
