"""Device prefetch: start the transfer of the next batches while the current step runs.

`jax.device_put` returns at once and copies in the background, so keeping `size`
batches already placed on the mesh means the step never waits on a host-to-device copy.
Multi-host: each process places only its own rows (`parallel.global_batch`).
"""
from __future__ import annotations

from collections import deque
from typing import Iterable, Iterator

from ..core import parallel


def prefetch_to_device(batches: Iterable[tuple[int, dict]], mesh, size: int = 2) -> Iterator[tuple[int, dict]]:
    """(step, host batch) pairs -> (step, global array batch), `size` batches in flight."""
    queue: deque = deque()
    for step, batch in batches:
        queue.append((step, parallel.global_batch(batch, mesh)))
        if len(queue) >= max(1, size):
            yield queue.popleft()
    while queue:
        yield queue.popleft()
