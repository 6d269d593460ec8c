"""Model variables whose whole-value update under a trace is a plain replace.

flax's `variable[...] = new` first compares the old and new values' shardings. On a tracer
that lookup raises an AttributeError whose message walks the whole program traced so far,
so every such update costs time proportional to the program: tracing grew quadratically
with depth. Two updates hit it: a BatchNorm running statistic in a train step, and the RNG
stream's counter (`rngs.params()` bumps it) while a model is built under `nnx.eval_shape`
(ResNet-101 built abstractly: 3.4 s -> 0.6 s). The stored value is the same either way,
so the traced program, the initial parameters and the random streams are unchanged.

Only public flax API: a subclass of a public Variable type (`nnx.BatchStat`, `nnx.RngCount`)
overriding `__setitem__`, `get_value`/`set_value`, and `Rngs.items()` with each stream's
`count` and `tag`. tests/test_models_zoo.py checks that the keys and values stay flax's own,
and that no traced update of these variables reaches flax's indexed `set_value` (the slow
path), so a flax that updates them another way fails a test instead of slowing down.
"""
from __future__ import annotations

import jax
from flax import nnx


class PlainReplace:
    """Mixin for an `nnx.Variable` type: `var[...] = traced value` of the same shape and
    dtype replaces the value directly; anything else takes flax's own path."""

    def __setitem__(self, key, value) -> None:
        old = self.get_value()
        if key is Ellipsis and isinstance(value, jax.core.Tracer) and isinstance(old, jax.Array) \
                and value.shape == old.shape and value.dtype == old.dtype:
            self.set_value(value)
        else:
            super().__setitem__(key, value)


class RunningStat(PlainReplace, nnx.BatchStat):
    """A BatchNorm running statistic (ResNet-101 train-step trace: 9.2 s -> 2.6 s)."""


class RngCounter(PlainReplace, nnx.RngCount):
    """An RNG stream's call counter."""


def model_rngs(seed: int) -> nnx.Rngs:
    """`nnx.Rngs(seed)` whose streams count with `RngCounter`: the same keys, in the same
    order, eagerly or traced."""
    rngs = nnx.Rngs(seed)
    for _, stream in rngs.items():
        stream.count = RngCounter(stream.count.get_value(), tag=stream.tag)
    return rngs
