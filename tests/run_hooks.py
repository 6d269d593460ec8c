"""Shared by the checkpoint and fault tests: compare states, and act inside a run's loader."""
import os
import signal

import jax
import numpy as np


def trees_equal(a, b) -> bool:
    """Bit-for-bit equality of two pytrees (fetched to host)."""
    la, lb = jax.tree.leaves(jax.device_get(a)), jax.tree.leaves(jax.device_get(b))
    return len(la) == len(lb) and all(np.array_equal(x, y) for x, y in zip(la, lb))


def on_batch(run, step, edit):
    """Call `edit(batch)` when the loader builds the batch of `step`; its result replaces it."""
    make = run.loader.batch

    def batch(t):
        b = make(t)
        return edit(b) if t == step else b

    run.loader.batch = batch
    return run


def signal_at(run, step, sig=signal.SIGTERM):
    """Deliver `sig` to this process while the loader builds the batch of `step`."""
    def send(b):
        os.kill(os.getpid(), sig)
        return b

    return on_batch(run, step, send)


def poison_at(run, step):
    """Make the loss of `step` NaN: one example's label is far outside the classes."""
    def poison(b):
        labels = np.array(b["label"])
        labels[0] = 10**6
        return {**b, "label": labels}

    return on_batch(run, step, poison)


def flip_a_byte(step_dir) -> "Path":
    """One byte in the middle of the biggest array file of a checkpoint."""
    from pathlib import Path

    biggest = max((p for p in (Path(step_dir) / "state").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    data = bytearray(biggest.read_bytes())
    data[len(data) // 2] ^= 0x10
    biggest.write_bytes(bytes(data))
    return biggest
