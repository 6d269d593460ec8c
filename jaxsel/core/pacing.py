"""How far a training loop may run ahead of the devices, and the wait that keeps it there.

Why: on simulated CPU devices (`JAX_NUM_CPU_DEVICES=8` on a laptop) a loop that dispatches
steps without waiting can abort the whole process inside XLA ("Termination timeout ...
only 7 of them arrived"). XLA:CPU runs every device's programs on one thread pool and
admits a bounded number of programs per device at a time (PjRt's
`max_inflight_computations_per_device`, 32, which JAX does not expose). With many steps
queued, one device's launch of a step can end up waiting for such a slot behind its own
later steps, which wait for that very step, while the other devices wait for it in the
step's collective; XLA aborts the process when a collective has waited 40 s. (Observed
with JAX 0.10.2 on 2 cores: README's example dispatching 2000 steps aborted in 1 of 3 runs;
the stuck process's stacks: 7 pool threads in `InProcessCommunicator::AllReduce`, the 8th
in `CpuPjRtRawLoadedExecutable::Execute` blocked on a `Semaphore`. JAX 0.12.0.1 held the
host back at about 10 queued steps by itself and did not abort.)

So on CPU every paced step waits, before it returns, for the step `CPU_MAX_INFLIGHT`
back: a device's queue then holds at most that many steps, far below XLA's slots, whatever
the host's speed. A multi-process CPU run (gloo) waits for every step, because programs
of consecutive steps must not overlap there. On accelerators nothing waits.

`make_train_step`'s step paces itself; a loop around any other jitted step (your own,
jaxsel's wrapped in another `jax.jit`) calls `pace(metrics)` once per step. Both share one
queue per process, as XLA's slots are per device, not per step function.

A collective can still wait too long (a device thread that gets no CPU for 40 s, a
program of your own that blocks one device). XLA then aborts from one of its own threads:
no Python error can be raised, and XLA offers no setting that turns the abort into one
(`--xla_cpu_collective_call_terminate_timeout_seconds`, default 40, only moves it; -1
makes the process hang instead, seen with 0.10.2). So a watch thread prints one line saying why and what to
do when a paced step has made no progress for three quarters of that timeout, before
XLA's abort.
"""
from __future__ import annotations

import atexit
import collections
import dataclasses
import functools
import os
import re
import sys
import threading
import time
from typing import Any, Callable, TypeVar

import jax
import numpy as np

from .parallel import CPU_MAX_INFLIGHT

T = TypeVar("T")

#: XLA's flag that sets how long a CPU collective waits for its participants (seconds)
TERMINATE_FLAG = "--xla_cpu_collective_call_terminate_timeout_seconds"
XLA_TERMINATE_DEFAULT_S = 40.0


@functools.cache
def queue_limit(platform: str) -> int | None:
    """Steps a loop may leave unfinished on `platform`'s devices: CPU_MAX_INFLIGHT on CPU,
    0 in a multi-process CPU run (each step finishes before the next), None (no bound)
    on accelerators."""
    if platform != "cpu":
        return None
    return 0 if jax.process_count() > 1 else CPU_MAX_INFLIGHT


def xla_terminate_timeout_s(flags: str | None = None) -> float | None:
    """XLA:CPU's collective termination timeout as `flags` (default: $XLA_FLAGS) set it; None
    when set negative (no timeout: a stuck collective hangs)."""
    found = re.findall(rf"{TERMINATE_FLAG}=(-?\d+)", os.environ.get("XLA_FLAGS", "") if flags is None else flags)
    seconds = float(found[-1]) if found else XLA_TERMINATE_DEFAULT_S
    return None if seconds < 0 else seconds


def _token(outputs: Any) -> jax.Array | None:
    """The array a step is waited on by: the first leaf of its outputs that is a concrete
    `jax.Array` (every output of one XLA program is ready when the program has finished).
    None under tracing or when there is none."""
    for leaf in (outputs,) if isinstance(outputs, jax.Array) else jax.tree.leaves(outputs):
        if isinstance(leaf, jax.Array):
            return None if isinstance(leaf, jax.core.Tracer) else leaf
    return None


def _check_outputs(outputs: Any) -> None:
    """TypeError unless every leaf of `outputs` is array-like (a jax.Array, a NumPy array or
    a number): what a step returns. Text or another object is no step's outputs (a mistaken
    argument), and pacing it would silently wait on nothing."""
    for leaf in jax.tree.leaves(outputs):
        if not isinstance(leaf, (jax.Array, np.ndarray, np.generic, int, float, complex)):
            shown = f"{type(leaf).__name__} {leaf!r}"[:80] if isinstance(leaf, str) else type(leaf).__name__
            raise TypeError(f"jaxsel.pace takes a step's outputs (a jax.Array, or its metrics: a pytree of arrays), "
                            f"got {shown}: nothing a step returns, and nothing to wait on")


@functools.cache
def _in_process_collectives() -> bool:
    """Collectives over this process's devices only: XLA:CPU's in-process rendezvous, the one
    with the 40 s abort (a multi-process run's peers are watched by training/distributed.py)."""
    return jax.process_count() == 1


@dataclasses.dataclass
class _Entry:
    token: jax.Array
    at: float           # when the step was paced (time.monotonic)
    devices: int
    watched: bool       # a stall can end in XLA's abort: in-process collectives over several devices


class Pacer:
    """One queue of the steps dispatched and not known to be finished (see the module).

    `limit(platform)`: the steps that may stay unfinished (default `queue_limit`);
    `stall_s`: seconds without progress before the watch thread's line (default: three
    quarters of XLA's termination timeout); `poll_s`: how often the thread looks; `stream`:
    where it prints (default stderr)."""

    def __init__(self, limit: Callable[[str], int | None] = queue_limit, stall_s: float | None = None,
                 poll_s: float = 1.0, stream=None):
        self.limit = limit
        timeout = xla_terminate_timeout_s()
        self.xla_timeout_s = timeout
        self.stall_s = float(stall_s) if stall_s is not None else 0.75 * (timeout or XLA_TERMINATE_DEFAULT_S)
        self.poll_s = float(poll_s)
        self.stream = stream
        self._queue: collections.deque[_Entry] = collections.deque()
        self._lock = threading.Lock()
        self._progress = time.monotonic()
        self._reported: _Entry | None = None
        self._closed = threading.Event()
        self._watch: threading.Thread | None = None

    def __call__(self, outputs: T) -> T:
        """Record a step by its `outputs`, then wait until at most `limit(platform)` of the
        recorded steps are unfinished. Returns `outputs`."""
        token = _token(outputs)
        if token is None:
            _check_outputs(outputs)
            return outputs
        devices = token.sharding.device_set
        limit = self.limit(next(iter(devices)).platform)
        if limit is None:
            return outputs
        watched = len(devices) > 1 and _in_process_collectives()
        with self._lock:
            self._check_not_donated()
            self._queue.append(_Entry(token, time.monotonic(), len(devices), watched))
            if self._watch is None and watched:
                self._watch = threading.Thread(target=self._watch_loop, name="jaxsel-pacing", daemon=True)
                self._watch.start()
        while True:
            with self._lock:
                if len(self._queue) <= limit:
                    return outputs
                oldest = self._queue[0]
            oldest.token.block_until_ready()
            with self._lock:
                if self._queue and self._queue[0] is oldest:
                    self._queue.popleft()
                    self._progress = time.monotonic()

    def _check_not_donated(self) -> None:
        if self._queue and self._queue[-1].token.is_deleted():
            self._queue.pop()   # it can never be waited for: the error once, not at every later step
            raise ValueError("jaxsel.pace: the array held from the previous step was donated to this one, so that "
                             "step cannot be waited for: pass each step's metrics (outputs the next step does not "
                             "take), not its state")

    def stall(self, now: float) -> str | None:
        """One look (the watch thread's, every `poll_s`): drop finished steps; the line to
        print when the oldest unfinished step is watched and has made no progress for
        `stall_s` at time `now` (once per such step), else None."""
        with self._lock:
            while self._queue and not self._queue[0].token.is_deleted() and self._queue[0].token.is_ready():
                self._queue.popleft()
                self._progress = now
            if not self._queue or self._queue[0].token.is_deleted():
                return None
            oldest = self._queue[0]
            waited = now - max(self._progress, oldest.at)
            if not oldest.watched or waited < self.stall_s or self._reported is oldest:
                return None
            self._reported = oldest
        return self._message(oldest.devices, waited)

    def _message(self, devices: int, waited: float) -> str:
        limit = (f"XLA aborts the process when a collective has waited {self.xla_timeout_s:.0f} s" if self.xla_timeout_s
                 else "XLA's collective timeout is off, so the process hangs")
        return (f"jaxsel: a step on {devices} CPU devices has made no progress for {waited:.0f} s and {limit} "
                f"(\"Termination timeout ... of them arrived\"): a device never reached a collective the others "
                f"wait in. Give this process more CPU time, pace every jitted step you dispatch with "
                f"jaxsel.pace(metrics), or let collectives wait longer with XLA_FLAGS={TERMINATE_FLAG}=SECONDS")

    def _watch_loop(self) -> None:
        while not self._closed.wait(self.poll_s):
            line = self.stall(time.monotonic())
            if line is not None:
                print(line, file=sys.stderr if self.stream is None else self.stream, flush=True)

    def close(self) -> None:
        """Stop the watch thread and wait for it (the process-wide pacer's runs as long as
        the process: `_stop_at_exit`)."""
        self._closed.set()
        watch = self._watch
        if watch is not None and watch is not threading.current_thread():
            watch.join(timeout=self.poll_s + 5.0)


_PACER = Pacer()


@atexit.register
def _stop_at_exit() -> None:
    """The watch thread is a daemon that calls into jaxlib every `poll_s`: stopped and joined
    before the interpreter finalizes, so it is never caught there mid-call (Python 3.11 ends
    a daemon thread that wakes during finalization with pthread_exit, whose unwinding
    through C++ frames aborts the process: a finished run's exit status -6)."""
    _PACER.close()


def pace(outputs: T) -> T:
    """Keep a loop of jitted steps from running too far ahead of CPU devices.

    Call it once per step with that step's outputs (its metrics: not a state that the next
    step donates) right after dispatching it. On CPU it returns once at most
    `CPU_MAX_INFLIGHT` of the steps paced in this process are unfinished (in a multi-process
    CPU run, once this step has finished); on accelerators it returns at once. Returns
    `outputs`. `make_train_step`'s step already does this; see the module for why."""
    return _PACER(outputs)
