"""Host-side batches: per-replica indices -> one global batch (leading dim replicas*b).

Batches are a pure function of the step (see partition.py and injection.py), so the
loader has no state to checkpoint. `workers` build the next `prefetch` batches while the
device works: threads (in-memory tables: a gather, cheap), or, with `processes`, Grain
worker processes (datasets decoded on the host: JPEG decoding holds the GIL, see
grain_batches.py); the batches are the same either way. With a `mesh` the loader also
puts batches on the devices a step ahead (prefetch.py), so `iterate` yields global
arrays ready for the step.
"""
from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator, Mapping, Sequence

import numpy as np

from .injection import Injection
from .partition import Partition
from .records import ArrayTable


class Loader:
    def __init__(self, table, partition: Partition, batch_size: int,
                 replica_ids: Sequence[int] | None = None, transform=None,
                 injection: Injection | None = None, mesh=None, workers: int = 1,
                 device_prefetch: int = 2, processes: bool = False):
        """`table`: a dict of arrays or anything with `take(indices)` (records.py, text.py).
        `replica_ids`: the replicas this process feeds (multi-host); default all.
        `transform`: optional host function applied to each batch.
        `processes`: `workers` are Grain worker processes instead of threads."""
        self.table = ArrayTable(table) if isinstance(table, Mapping) else table
        self.partition = partition
        self.batch_size = int(batch_size)
        self.replica_ids = list(range(partition.replicas)) if replica_ids is None else list(replica_ids)
        self.transform = transform
        self.injection = injection
        self.mesh = mesh
        self.workers = max(1, int(workers))
        self.device_prefetch = int(device_prefetch)
        self.processes = bool(processes)

    def __getstate__(self) -> dict:
        """What a worker process gets: everything `batch` needs, not the device mesh."""
        return {**self.__dict__, "mesh": None}

    def describe(self) -> str:
        """How batches are built, as a run records it."""
        kind, plural = ("Grain worker process", "es") if self.processes else ("loader thread", "s")
        return f"{self.workers} {kind}{plural if self.workers > 1 else ''}"

    @property
    def arrays(self):
        return getattr(self.table, "arrays", None)

    @property
    def rows_per_replica(self) -> int:
        """b, plus the injected samples when data injection is on."""
        return self.batch_size + (self.injection.extra if self.injection else 0)

    def replica_indices(self, replica: int, step: int) -> np.ndarray:
        idx = self.partition.indices(replica, step, self.batch_size)
        if self.injection is not None:
            idx = np.concatenate([idx, self.injection.indices(replica, step)])
        return idx

    def indices(self, step: int) -> np.ndarray:
        return np.concatenate([self.replica_indices(r, step) for r in self.replica_ids])

    def batch(self, step: int) -> dict[str, np.ndarray]:
        """This process's rows of the global batch for `step` (host arrays)."""
        out = self.table.take(self.indices(step))
        return self.transform(out) if self.transform else out

    def host_batches(self, start: int, stop: int, prefetch: int = 2) -> Iterator[tuple[int, dict]]:
        """(step, host batch) for start <= step < stop, built `prefetch` steps ahead."""
        if self.processes:
            from .grain_batches import grain_batches

            yield from grain_batches(self.batch, start, stop, self.workers, prefetch)
            return
        ahead = max(1, prefetch, self.workers)
        pool = ThreadPoolExecutor(self.workers, thread_name_prefix="jaxsel-loader")
        pending: deque = deque()
        t = start
        try:
            while t < stop or pending:
                while t < stop and len(pending) < ahead:
                    pending.append((t, pool.submit(self.batch, t)))
                    t += 1
                step, fut = pending.popleft()
                yield step, fut.result()
        finally:
            pool.shutdown(wait=False, cancel_futures=True)

    def iterate(self, start: int, stop: int, prefetch: int = 2) -> Iterator[tuple[int, dict]]:
        """Yield (step, batch); global device arrays when the loader has a mesh."""
        batches = self.host_batches(start, stop, prefetch)
        if self.mesh is None:
            return batches
        from .prefetch import prefetch_to_device

        return prefetch_to_device(batches, self.mesh, self.device_prefetch)
