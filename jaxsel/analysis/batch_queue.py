"""A job's batches trained on background threads where its cells run on one CPU device: the
next batch compiles while one steps, and on request several step at once.

A batch of cells (training/cell_batch.py) keeps about one core busy while it steps: its
program is one small vmapped step after another on one device, the host's records of
each window written while the next one runs. Compiling its programs (about 2 s a batch
of the frontier's 36) took the job's thread, and the devices idled meanwhile. So a job
whose replicas are packed on one CPU device (analysis/job_layout.py), on a machine that
gives it two cores or more, hands each batch to a queue: a batch builds its cells and
compiles its programs (`cell_batch.compile_windows`) on one of the queue's threads while
the batch before it steps, and steps once that one is done (`stepping`); the job's own
thread plans the cells after them meanwhile. A cell it needs before planning on (a
budget-matched baseline is planned from its method's sync count) it waits for
(`Cells.need`), as it waits for another shard's.

`JAXSEL_BATCHES_AT_ONCE=N` lets N batches step at once (at most one per core and `MOST`;
on 2 cores it gains little: BENCHMARKS.md, "Batches at once on one CPU device"); 0 keeps
every batch on the job's own thread, one after another.

Nothing a cell computes depends on what trains beside it: each batch is its own program on
its own state and data, so a job's records are the same bits through the queue as one
batch after another on the job's thread (tests/test_batch_queue.py). Where the replicas
sit on several devices the job keeps its batches on its own thread: two programs with
collectives over the same CPU devices in flight at once can deadlock. Where the job's
packing loop is chosen by measuring (`packing="auto"` where it measures), the batch that
chooses it trains on the job's own thread first (`Cells.loop_chosen`): two measuring at
once could choose two loops.

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

#: the most batches stepping at once: each holds its cells' states and a window of their data
MOST = 4
#: how many batches of a job step at once through its queue, one more compiling meanwhile
#: (unset: 1; 0: no queue, one batch after another on the job's thread)
ENV = "JAXSEL_BATCHES_AT_ONCE"


def asked() -> int:
    """How many batches `JAXSEL_BATCHES_AT_ONCE` asks to step at once (unset: 1)."""
    from ..training.config import ConfigError

    value = os.environ.get(ENV, "").strip()
    if not value:
        return 1
    if not value.isdigit():
        raise ConfigError(f"{ENV}={value!r} must be a whole number of batches (0: no queue)")
    return int(value)


def queued(cfg, batch_cells: bool) -> bool:
    """Whether the job of `cfg` trains its batches through a queue: its cells batched, its
    replicas on one CPU device of one process, two cores or more for it, and not asked
    otherwise (`JAXSEL_BATCHES_AT_ONCE=0`)."""
    from ..training import distributed
    from ..training.plan import layout_of

    if asked() == 0 or not batch_cells:
        return False
    devices = layout_of(cfg).devices
    return (len(devices) == 1 and devices[0].platform == "cpu" and not distributed.is_multiprocess()
            and usable_cores() > 1)


def batches_at_once(cfg, batch_cells: bool) -> int:
    """How many batches of the job of `cfg` step at once: as many as `JAXSEL_BATCHES_AT_ONCE`
    asks (unset: 1), at most one per core the process may use and `MOST`, where the job is
    `queued`; else 1."""
    if not queued(cfg, batch_cells):
        return 1
    return max(1, min(asked(), MOST, usable_cores()))


def usable_cores() -> int:
    """The cores this process may run on: its affinity where the OS keeps one (Linux: a
    SLURM task or `taskset` narrows it), else the machine's."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def together_note(cfg, batch_cells: bool) -> str:
    """What the job's layout line adds where its batches go through a queue."""
    if not queued(cfg, batch_cells):
        return ""
    width = batches_at_once(cfg, batch_cells)
    if width == 1:
        return "; the next batch compiles while one steps"
    return f"; up to {width} batches step at once ({ENV}, at most one per core), the next compiling meanwhile"


@contextlib.contextmanager
def job_queue(cfg, batch_cells: bool, progress) -> Iterator["BatchQueue | None"]:
    """The queue of the job of `cfg` where it is `queued` (None: its batches train one
    after another on the job's thread); `progress` shares the time left among the batches
    stepping at once."""
    if not queued(cfg, batch_cells):
        yield None
        return
    width = batches_at_once(cfg, batch_cells)
    progress.at_once = width
    with BatchQueue(width) as batches:
        yield batches


class BatchQueue:
    """Threads that train the batches `submit` hands them, in order, each in the job's
    context (its one build of each strategy: training/job_builds.py): `width` of them step
    at once (`stepping`, held by a batch while it steps), one more builds and compiles the
    next meanwhile. A context manager: it holds the job's stop signals while open; leaving
    it on an error stops the batches in flight at their next window end and drops the ones
    not begun."""

    def __init__(self, width: int):
        self.width = width
        self.stepping = threading.BoundedSemaphore(width)
        self.signals = StopSignals(checkpointing=False)
        self._todo: queue.Queue = queue.Queue()
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> "BatchQueue":
        self.signals.__enter__()
        self._threads = [threading.Thread(target=self._work, name=f"jaxsel-batch-{i}", daemon=True)
                         for i in range(self.width + 1)]
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
