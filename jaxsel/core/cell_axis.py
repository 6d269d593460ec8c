"""The cell axis: several runs' steps batched by one `jax.vmap` around jaxsel's own step
(training/cell_batch.py), one cell per index, nothing shared between them.

The collectives' `custom_vmap` rules (collectives.py) are written for the vmap of a
device's packed replicas (axis `LOCAL`): their rule sees the device's stack of k values.
Under a cell batch the same primitives are batched a second time, by the cell vmap, once
the step's own vmap has been traced away; that batch is no stack of replicas but C
independent runs, so there each rule computes its primal per cell (`per_cell`). Which vmap
calls a rule: inside the replicas' vmap `LOCAL` is a bound axis name; the cell vmap
batches the step's traced program, where it is not. Outside `cells_batched()` nothing
changes: a lone run's program is today's, bit for bit.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Callable, Iterator

import jax
from jax import lax


class _Tracing(threading.local):
    """Cell batches this thread is tracing (a Python counter, per thread: a job trains two
    batches at once on two threads, analysis/batch_queue.py, and one of them may be a
    lone run, which must not see the other's batch)."""

    depth = 0


_tracing = _Tracing()


@contextlib.contextmanager
def cells_batched() -> Iterator[None]:
    """Trace a cell batch's step inside this: the collectives' rules then know the cell vmap."""
    _tracing.depth += 1
    try:
        yield
    finally:
        _tracing.depth -= 1


def under_cell_vmap(local: str) -> bool:
    """True when a custom_vmap rule is being called by a cell batch's vmap, not by the vmap
    of a device's packed replicas (axis name `local`)."""
    if not _tracing.depth:
        return False
    try:
        lax.axis_size(local)
    except NameError:
        return True
    return False


def per_cell(primal: Callable, in_batched, *args):
    """The rule's answer under the cell vmap: `primal` on each cell's values, batched."""
    return jax.vmap(primal, in_axes=tuple(0 if b else None for b in in_batched))(*args), True
