"""A job's batches through a queue (analysis/batch_queue.py, issue 62): where its replicas
sit on one CPU device and it has two cores, the next batch compiles while one steps, and on
request several step at once (at most one per core), to the very bits of one batch after
another on the job's thread; asked so (0), or where the replicas sit on several devices,
the job keeps its own thread; a batch's error reaches the job, and a job that ends on an
error stops the batches in flight. (A thread's quiet TFDS output: tests/test_quiet_threads.py.)"""
import contextvars
import dataclasses
import threading
import time

import pytest

from jaxsel.analysis import batch_queue
from jaxsel.analysis.batch_queue import BatchQueue, batches_at_once
from jaxsel.analysis.progress import Progress
from jaxsel.core import cell_axis
from jaxsel.training.config import TrainConfig
from test_long_jobs import COMPARE, run_main, same_job


def test_a_job_through_its_queue_ends_with_the_bits_of_one_batch_after_another(tmp_path, monkeypatch):
    monkeypatch.setattr(batch_queue.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setenv(batch_queue.ENV, "4")
    code, printed = run_main([*COMPARE, "--out", str(tmp_path / "together")])
    assert code == 0 and (f"; up to 2 batches step at once ({batch_queue.ENV}, at most one per core), "
                          "the next compiling meanwhile") in printed
    monkeypatch.delenv(batch_queue.ENV)   # unasked: one steps, the next compiles
    code, printed = run_main([*COMPARE, "--out", str(tmp_path / "ahead")])
    assert code == 0 and "; the next batch compiles while one steps" in printed
    monkeypatch.setenv(batch_queue.ENV, "0")   # no queue: the job's own thread
    code, printed = run_main([*COMPARE, "--out", str(tmp_path / "alone")])
    assert code == 0 and "at once" not in printed and "compil" not in printed
    # SelSync's matched baselines are planned from its sync count: the job waited for its batch
    same_job(tmp_path / "together", tmp_path / "alone", "results.json")
    same_job(tmp_path / "ahead", tmp_path / "alone", "results.json")


def test_how_many_batches_at_once(monkeypatch):
    from jaxsel.training.config import ConfigError

    packed = TrainConfig(devices=1, packing="vmap")
    monkeypatch.setattr(batch_queue.os, "sched_getaffinity", lambda pid: set(range(3)))
    assert batches_at_once(packed, True) == 1   # unasked: one at a time
    monkeypatch.setenv(batch_queue.ENV, "two")
    with pytest.raises(ConfigError, match=r"JAXSEL_BATCHES_AT_ONCE='two' must be a whole number of batches \(0: no queue\)"):
        batches_at_once(packed, True)
    monkeypatch.setenv(batch_queue.ENV, "8")
    assert batches_at_once(packed, True) == 3
    assert batches_at_once(packed, False) == 1   # one by one
    assert batches_at_once(dataclasses.replace(packed, devices=8, packing="auto"), True) == 1   # collectives
    monkeypatch.setattr(batch_queue.os, "sched_getaffinity", lambda pid: set(range(16)))
    assert batches_at_once(packed, True) == batch_queue.MOST


def test_where_a_job_queues_its_batches(monkeypatch):
    """Replicas on one CPU device, cells batched, two cores: the next batch compiles while one
    steps; asked not to (0), one core, one by one, or several devices: the job's own thread."""
    packed = TrainConfig(devices=1, packing="vmap")
    monkeypatch.setattr(batch_queue.os, "sched_getaffinity", lambda pid: {0, 1})
    assert batch_queue.queued(packed, True)
    assert batch_queue.together_note(packed, True) == "; the next batch compiles while one steps"
    monkeypatch.setenv(batch_queue.ENV, "0")
    assert not batch_queue.queued(packed, True) and batch_queue.together_note(packed, True) == ""
    monkeypatch.delenv(batch_queue.ENV)
    assert not batch_queue.queued(packed, False)
    assert not batch_queue.queued(dataclasses.replace(packed, devices=8, packing="auto"), True)
    monkeypatch.setattr(batch_queue.os, "sched_getaffinity", lambda pid: {0})
    assert not batch_queue.queued(packed, True) and batch_queue.together_note(packed, True) == ""


def test_a_batch_runs_in_the_jobs_context_and_its_error_reaches_the_waiter():
    job = contextvars.ContextVar("job", default=None)
    job.set("this job")
    with BatchQueue(2) as batches:
        seen = batches.submit(lambda: (job.get(), threading.current_thread().name))
        failed = batches.submit(lambda: 1 / 0)
        assert seen.result(timeout=10)[0] == "this job" and seen.result()[1].startswith("jaxsel-batch-")
        with pytest.raises(ZeroDivisionError):
            failed.result(timeout=10)


def test_a_job_that_ends_on_an_error_stops_its_batches_in_flight_and_drops_the_waiting():
    """One batch steps, the next has compiled and waits to step, a third waits for a thread:
    the job's error stops the first at its window end, the second at its first one, and the
    third never runs."""
    running, later = threading.Event(), []

    def in_flight():   # a batch reads the job's signals at each window end
        with batches.stepping:
            running.set()
            while batches.signals.signum is None or not later[0].cancelled():
                time.sleep(0.01)
            return "stopped at a window end"

    def compiled():
        with batches.stepping:
            return "stopped at its first window end" if batches.signals.signum is not None else "stepped"

    with pytest.raises(RuntimeError, match="the job's own error"):
        with BatchQueue(1) as batches:
            first, second = batches.submit(in_flight), batches.submit(compiled)
            later.append(batches.submit(lambda: "never run"))
            assert running.wait(10)
            for _ in range(1000):   # until the queue's other thread has taken it, to wait to step
                if second.running():
                    break
                time.sleep(0.01)
            raise RuntimeError("the job's own error")
    assert first.result(timeout=1) == "stopped at a window end"
    assert second.result(timeout=1) == "stopped at its first window end" and later[0].cancelled()


def test_cells_of_batches_in_flight_are_numbered_in_the_order_they_start():
    said = []
    progress = Progress(9, said.append)
    firsts = [progress.started_together(["a0", "a1", "a2"], ["a"], [0, 1, 2]),
              progress.started_together(["b0", "b1", "b2"], ["b"], [0, 1, 2])]
    progress.finished(4.0)
    progress.loaded("c0", "c/seed0")
    assert firsts + [progress.started("c1")] == [1, 4, 8]   # what a stopped batch's line names
    assert [line.split(" · ")[0] for line in said] == [
        "[cells 1-3 of 9", "[cells 4-6 of 9", "[cell 7 of 9] c0: finished earlier, loaded from c/seed0/", "[cell 8 of 9"]
    progress.at_once = 2
    assert "about 0:14 left" in progress.head()   # 7 cells left at 4 s each, two batches at once


def test_a_batch_traced_on_one_thread_is_not_seen_by_another():
    seen = []
    with cell_axis.cells_batched():
        thread = threading.Thread(target=lambda: seen.append(cell_axis._tracing.depth))
        thread.start()
        thread.join()
        assert cell_axis._tracing.depth == 1
    assert seen == [0] and cell_axis._tracing.depth == 0
