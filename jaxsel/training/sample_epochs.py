"""An optimizer whose learning rate decays at epochs counted from samples (`--lr-schedule
sample-epochs:E1,E2,...[@GAMMA][/SAMPLES]`), the way SelSync's authors count them.

Why: their image classifiers add b to `processed_samples` on a local step and b*N on a
synchronized one, take `epoch = processed_samples // dataset_size` after the step, and
multiply the learning rate by gamma when that epoch reaches a milestone, so the step after
it runs at the new rate (ResNet-101: epochs 110, 150, 190, 250; VGG-11: 50, 75, 100;
gamma 0.1). The epoch therefore moves with the sync pattern, which only the device knows:
the count is a `core.sample_clock.SampleClock` in this optimizer's state, which every
replica step advances from its `synced` fact (`transformation.replica_step`), for every
strategy and in `as_optax` alike; the state is checkpointed, so a resumed run goes on bit for
bit.

Built from public Optax: `optax.inject_hyperparams` makes the learning rate a value in the
optimizer's state, which `update` sets from the clock before the update it applies:
lr * gamma**k, k the milestones at or below the epochs counted before this step. (The
authors test `epoch == milestone` once per step, which equals this whenever no step
processes more than an epoch of samples.)
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax.numpy as jnp
import optax

from ..core.sample_clock import SampleClock


class SampleEpochsState(NamedTuple):
    """The clock, and the optimizer's state with its learning rate injected."""

    clock: SampleClock
    inner: Any   # optax's InjectStatefulHyperparamsState: hyperparams["learning_rate"] is the last update's


def sample_epoch_schedule(make: Callable[[Any], optax.GradientTransformation], lr: float,
                          milestones, gamma: float, clock: SampleClock) -> optax.GradientTransformation:
    """`make(learning_rate)` (the optimizer) run at lr * gamma**k, k the `milestones`
    (epochs) that `clock` had reached before the update; `clock` is the one the state
    starts with (`SampleClock.start(b, b*N, epoch samples)`)."""
    inner = optax.inject_hyperparams(make, hyperparam_dtype=jnp.float32)(learning_rate=lr)
    epochs = sorted(int(m) for m in milestones)
    rates = [float(lr) * float(gamma) ** k for k in range(len(epochs) + 1)]   # float64, rounded once

    def init(params) -> SampleEpochsState:
        return SampleEpochsState(clock, inner.init(params))

    def update(updates, state: SampleEpochsState, params=None):
        reached = jnp.sum(state.clock.epochs >= jnp.asarray(epochs, jnp.int32))
        rate = jnp.asarray(rates, jnp.float32)[reached]
        hyper = {**state.inner.hyperparams, "learning_rate": rate}
        updates, inner_state = inner.update(updates, state.inner._replace(hyperparams=hyper), params)
        return updates, SampleEpochsState(state.clock, inner_state)

    return optax.GradientTransformation(init, update)


def last_learning_rate(opt_state) -> Any:
    """The learning rate of the last update a `sample_epoch_schedule` state applied (its
    initial rate before any), with the state's leading axes (a TrainState's: per replica)."""
    return opt_state.inner.hyperparams["learning_rate"]
