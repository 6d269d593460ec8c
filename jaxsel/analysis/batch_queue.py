"""A job's batches trained on background threads, several at once, where its cells run on one
CPU device.

A batch of cells (training/cell_batch.py) keeps about one core busy while it steps: its
program is one small vmapped step after another on one device (the frontier, one batch at
a time on 2 cores: 1.36 CPU-seconds a second, compiling, which takes both, included). On a
machine with more cores the rest idle, and so does every core while the job plans its next
cells or records the last ones. So a job whose replicas are packed on one CPU device
(analysis/job_layout.py) hands each batch to a queue, whose threads train up to `width` of
them at once, while the job's own thread plans the cells after them; a cell it needs
before planning on (a budget-matched baseline is planned from its method's sync count) it
waits for (`Cells.need`), as it waits for another shard's.

Nothing a cell computes depends on what trains beside it: each batch is its own program on
its own state and data, so a job's records are the same bits with one batch at a time as
with several (tests/test_batch_queue.py). On 2 cores the gain is small (BENCHMARKS.md,
"Batches at once on one CPU device": the frontier 0.72-0.91 of one at a time, the default
job none, its baselines waiting for SelSync's batch). Where the replicas sit on several
devices the batches stay one at a time: two programs with collectives over the same CPU
devices in flight at once can deadlock. Where the job's packing loop is chosen by measuring
(`packing="auto"` where it measures), the batch that chooses it trains on the job's own
thread first (`Cells.loop_chosen`): two measuring at once could choose two loops.

A stop signal is one for the whole job: the queue holds the job's `StopSignals` (Python
delivers signals to the main thread only), every batch reads it at its window ends, and a
job that ends on an error stops the batches still in flight the same way.
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import queue
import signal
import threading
from concurrent.futures import Future
from typing import Any, Callable, Iterator

from ..training.faults import StopSignals

#: the most batches at once: each holds its cells' states and a window of their data
MOST = 4
#: how many batches a job may train at once (unset: one). Opt-in: on JAX 0.12.1 a shard
#: process training two at once died once under load with no Python traceback (a native
#: crash, not understood yet), and on 2 cores the gain is small
ENV = "JAXSEL_BATCHES_AT_ONCE"


def batches_at_once(cfg, batch_cells: bool) -> int:
    """How many batches the job of `cfg` trains at once: as many as `JAXSEL_BATCHES_AT_ONCE`
    asks, at most one per core the process may use and `MOST`, where its replicas sit on
    one CPU device of one process; else (and unasked) 1."""
    from ..training import distributed
    from ..training.config import ConfigError
    from ..training.plan import layout_of

    asked = os.environ.get(ENV, "").strip()
    if not asked:
        return 1
    if not asked.isdigit() or int(asked) < 1:
        raise ConfigError(f"{ENV}={asked!r} must be a whole number of batches, 1 or more")
    devices = layout_of(cfg).devices
    if not batch_cells or len(devices) != 1 or devices[0].platform != "cpu" or distributed.is_multiprocess():
        return 1
    return max(1, min(int(asked), MOST, usable_cores()))


def usable_cores() -> int:
    """The cores this process may run on: its affinity where the OS keeps one (Linux: a
    SLURM task or `taskset` narrows it), else the machine's."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def together_note(width: int) -> str:
    """What the job's layout line adds where batches train at once."""
    return f"; up to {width} batches train at once ({ENV}, at most one per core)" if width > 1 else ""


@contextlib.contextmanager
def job_queue(cfg, batch_cells: bool, progress) -> Iterator["BatchQueue | None"]:
    """The queue of the job of `cfg` where it trains batches at once (None: one at a time,
    on the job's thread); `progress` shares the time left among them."""
    width = batches_at_once(cfg, batch_cells)
    if width == 1:
        yield None
        return
    progress.at_once = width
    with BatchQueue(width) as batches:
        yield batches


class BatchQueue:
    """`width` threads that train the batches `submit` hands them, in order, each in the
    job's context (its one build of each strategy: training/job_builds.py). A context
    manager: it holds the job's stop signals while open; leaving it on an error stops the
    batches in flight at their next window end and drops the ones not begun."""

    def __init__(self, width: int):
        self.width = width
        self.signals = StopSignals(checkpointing=False)
        self._todo: queue.Queue = queue.Queue()
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> "BatchQueue":
        self.signals.__enter__()
        self._threads = [threading.Thread(target=self._work, name=f"jaxsel-batch-{i}", daemon=True)
                         for i in range(self.width)]
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, kind, err, trace) -> None:
        try:
            if kind is not None and self.signals.signum is None:
                self.signals.signum = signal.SIGTERM   # the batches in flight stop at their next window end
            self._drop_waiting()
            for _ in self._threads:
                self._todo.put(None)
            if kind is not KeyboardInterrupt:   # a second Ctrl-C leaves at once (the threads are daemons)
                for thread in self._threads:
                    thread.join()
        finally:
            self.signals.__exit__(kind, err, trace)

    def submit(self, train: Callable[[], Any]) -> Future:
        """`train()`'s answer, once a thread has run it."""
        future: Future = Future()
        self._todo.put((future, contextvars.copy_context(), train))
        return future

    def _drop_waiting(self) -> None:
        while True:
            try:
                item = self._todo.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                item[0].cancel()

    def _work(self) -> None:
        while True:
            item = self._todo.get()
            if item is None:
                return
            future, context, train = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(context.run(train))
            except BaseException as err:  # noqa: BLE001 - handed to whoever waits for the batch
                future.set_exception(err)
