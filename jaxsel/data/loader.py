"""Host-side batches: per-replica indices -> one global batch (leading dim replicas*b).

Batches are a pure function of the step (see partition.py), so the loader has no state
to checkpoint. A background thread keeps the next batches ready while the device works.
"""
from __future__ import annotations

import queue
import threading
from typing import Iterator, Sequence

import numpy as np

from .partition import Partition


class Loader:
    def __init__(self, arrays: dict[str, np.ndarray], partition: Partition, batch_size: int,
                 replica_ids: Sequence[int] | None = None, transform=None):
        """`replica_ids`: the replicas this process feeds (multi-host); default all."""
        self.arrays = arrays
        self.partition = partition
        self.batch_size = int(batch_size)
        self.replica_ids = list(range(partition.replicas)) if replica_ids is None else list(replica_ids)
        self.transform = transform

    def indices(self, step: int) -> np.ndarray:
        return np.concatenate([self.partition.indices(r, step, self.batch_size) for r in self.replica_ids])

    def batch(self, step: int) -> dict[str, np.ndarray]:
        """This process's rows of the global batch for `step`."""
        idx = self.indices(step)
        out = {k: v[idx] for k, v in self.arrays.items()}
        return self.transform(out) if self.transform else out

    def iterate(self, start: int, stop: int, prefetch: int = 2) -> Iterator[tuple[int, dict]]:
        """Yield (step, batch) for start <= step < stop, prepared `prefetch` steps ahead."""
        q: queue.Queue = queue.Queue(maxsize=max(1, prefetch))
        done = object()

        def work():
            try:
                for t in range(start, stop):
                    q.put((t, self.batch(t)))
                q.put(done)
            except BaseException as err:  # surface loader errors in the consumer
                q.put(err)

        threading.Thread(target=work, daemon=True).start()
        while True:
            item = q.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
