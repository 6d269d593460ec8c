"""The device core: what runs inside the jitted, shard_map'd training step.

Replicas and their mesh (`parallel`), the collectives over packed replicas and devices
(`collectives`), how replicas are combined (`aggregate`) and compressed (`compression`),
the one guarded sync primitive, the step's ledger and the strategy protocol (`sync`), when
to sync (`triggers`), the replicated training state (`state`), a method's per-replica
step and the method as an optax transformation (`transformation`), jaxsel's own
shard_map'd step that drives it (`step`), how far a loop may run ahead of CPU devices
(`pacing`), epochs counted from samples in an optimizer's state (`sample_clock`),
options as dataclass fields (`options`), the leaf registry of names (`registry`), the
straggler models that Sync-Switch's emulation and the cost model share (`stragglers`), a
method's budget knob (`budget`), and the error for an installed JAX, Flax or Orbax that lost
what jaxsel relies on (`library_changes`).

Imports nothing of jaxsel's above it (tests/test_layers.py).
"""
