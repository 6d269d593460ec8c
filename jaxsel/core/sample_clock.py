"""Epochs counted from processed samples, as SelSync's authors count them: a clock that an
optimizer keeps in its state and the one replica step advances.

Why: SelSync's reference recipes decay the learning rate at epochs, and count an epoch
from the samples processed so far, where a local step processes the replica's own batch
b and a synchronized step the whole cluster's b*N (their `processed_samples += bsz` and
`+= bsz * world_size`, `epoch = processed_samples // dataset_size`). So the epoch a step
falls in depends on the sync pattern, which is decided on the device: the count lives on
the device, in the replica's optimizer state (checkpointed with it, so a resumed run goes
on bit for bit), and `transformation.replica_step` advances every clock in that state
from its step's own fact `synced` (`advance_sample_clocks`). A state without a clock is
returned as it is: nothing runs.

The count is (whole epochs, samples into the current epoch), both int32: it never
overflows, however long the run, as long as `epoch_samples + synced` fits in an int32
(checked). The increments and the epoch size are static fields, not state: they are the
run's settings, and a checkpoint holds only the two counters.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from .checks import INT32_MAX, check_int


@struct.dataclass
class SampleClock:
    """Samples processed, as whole epochs of `epoch_samples` plus the remainder."""

    epochs: jax.Array                                      # int32: whole epochs processed
    samples: jax.Array                                     # int32: samples into the current epoch
    local: int = struct.field(pytree_node=False)           # samples a local step counts (b)
    synced: int = struct.field(pytree_node=False)          # samples a synchronized step counts (b*N)
    epoch_samples: int = struct.field(pytree_node=False)   # samples in an epoch (the training set's)

    @classmethod
    def start(cls, local: int, synced: int, epoch_samples: int) -> "SampleClock":
        """A clock at zero samples; ValueError naming a count that is not a positive int32 or
        an epoch size whose count could overflow one."""
        for name, value in (("local", local), ("synced", synced), ("epoch_samples", epoch_samples)):
            check_int(f"sample clock {name} samples", value, 1)
        if epoch_samples + synced > INT32_MAX:
            raise ValueError(f"sample clock: an epoch of {epoch_samples} samples plus a synchronized step's "
                             f"{synced} exceed an int32 ({INT32_MAX})")
        zero = jnp.zeros((), jnp.int32)
        return cls(zero, zero, int(local), int(synced), int(epoch_samples))

    def advance(self, synced) -> "SampleClock":
        """The clock after one step: `synced` (a traced bool) counts `self.synced` samples,
        else `self.local`."""
        total = self.samples + jnp.where(synced, jnp.int32(self.synced), jnp.int32(self.local))
        return self.replace(epochs=self.epochs + total // self.epoch_samples, samples=total % self.epoch_samples)


def _is_clock(x) -> bool:
    return isinstance(x, SampleClock)


def advance_sample_clocks(tree, synced):
    """`tree` (an optimizer state) with every `SampleClock` in it advanced by one step."""
    return jax.tree.map(lambda x: x.advance(synced) if _is_clock(x) else x, tree, is_leaf=_is_clock)


def has_sample_clock(tree) -> bool:
    """Whether `tree` holds a `SampleClock`."""
    return any(_is_clock(x) for x in jax.tree.leaves(tree, is_leaf=_is_clock))
