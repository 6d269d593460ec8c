"""Batches built in worker processes by Grain, for datasets decoded on the host.

Decoding JPEGs holds the GIL for much of its time, so threads share a core or two however
many there are (BENCHMARKS.md, "Input pipeline on JPEG-encoded records"). Here the steps themselves are
a `grain.MapDataset`: element i is the whole batch of step `start + i`, built by the
loader's own `batch(step)` (partition, SelDP order, injection: a pure function of the
step) in one of `workers` processes, which reads its records from the ArrayRecord source
and decodes them. Grain hands the elements back in step order through shared memory,
so the batches, and therefore a resumed run, are exactly the threaded loader's.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from typing import Callable, Iterator


def _flags_ready() -> None:
    """Grain 0.2.18 reads an absl flag when its workers start and fails if the program
    never parsed absl flags (google/grain#1355, fixed upstream after 0.2.18). jaxsel
    defines no absl flags, so marking them parsed keeps every default."""
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()


def _worker_init(*_) -> None:
    """Workers leave SIGINT and SIGTERM to the training process: it stops at a step
    boundary, saves, and closes the workers itself (a worker killed by the same Ctrl-C
    would fail the batch the run still needs before it saves). And a worker ends when the
    training process is gone (SIGKILL, the OOM killer): Grain's workers would otherwise
    wait for it for ever, holding their memory."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True,
                     name="jaxsel-exit-with-parent").start()


def _exit_with_parent(parent: int, every_s: float = 1.0) -> None:
    while os.getppid() == parent:   # an orphan is adopted by another process
        time.sleep(every_s)
    os._exit(1)


def grain_batches(batch: Callable[[int], dict], start: int, stop: int, workers: int,
                  prefetch: int = 2) -> Iterator[tuple[int, dict]]:
    """(step, host batch) for start <= step < stop, `batch(step)` run in `workers`
    processes, each holding up to `prefetch` finished batches."""
    import grain

    _flags_ready()
    steps = grain.MapDataset.range(start, stop).map(batch)
    # one batch in progress per worker (more threads would only contend for its GIL)
    read = grain.ReadOptions(num_threads=1, prefetch_buffer_size=1)
    options = grain.MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=max(1, prefetch))
    it = iter(steps.to_iter_dataset(read).mp_prefetch(options, worker_init_fn=_worker_init))
    try:
        yield from zip(range(start, stop), it)
    finally:
        it.close()   # stops the workers and frees their shared memory now, not at exit
