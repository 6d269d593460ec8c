"""TFDS's output hidden for the thread that opens a dataset, and only for it.

TFDS prints to stdout ("Downloading and preparing dataset ...", though jaxsel downloads
nothing) and logs absl warnings while jaxsel probes a data dir. Both go to process-wide
places: `contextlib.redirect_stdout` replaces `sys.stdout` for every thread, so while one
of a job's batch threads (analysis/batch_queue.py) opened its dataset, the progress line
another thread printed went into the discarded buffer (a test's captured output lost it).
Here `sys.stdout` is replaced, while any thread is quiet, by a stream that drops only the
quiet threads' writes and passes every other thread's on; the absl verbosity is lowered on
the first thread's entry and put back on the last one's exit.

Every stream installed is kept for the process's life (`_kept`, one per stream it
replaced): CPython's `print()` holds `sys.stdout`'s object without a reference of its own
while it writes, so a stream put back and freed while another thread printed through it
crashed the process (SIGSEGV, no Python traceback: seen in a job's batch threads, and in
tests/test_quiet_threads.py within seconds).
"""
from __future__ import annotations

import contextlib
import sys
import threading
from typing import Iterator


class _QuietThreads:
    """`sys.stdout` while threads are quiet: their writes are dropped, the rest pass to
    `target` (the stream it replaced)."""

    def __init__(self, target):
        self.target = target
        self.depth: dict[int, int] = {}   # quiet thread -> how many quiet blocks it is in

    def write(self, text: str) -> int:
        if threading.get_ident() in self.depth:
            return len(text)
        return self.target.write(text)

    def flush(self) -> None:
        self.target.flush()

    def __getattr__(self, name: str):   # encoding, isatty, fileno, ...: the real stream's
        return getattr(self.target, name)


_lock = threading.Lock()
_kept: dict[int, _QuietThreads] = {}   # id of the stream replaced -> its quiet stream, never freed
_held: list = []   # [the installed _QuietThreads, the absl verbosity to put back] while any thread is quiet


@contextlib.contextmanager
def quiet_here() -> Iterator[None]:
    """Within the block, this thread's stdout is dropped and absl logs only errors."""
    from absl import logging

    me = threading.get_ident()
    with _lock:
        if not _held:
            if id(sys.stdout) not in _kept:   # (the quiet stream holds the one it replaced: ids stay unique)
                _kept[id(sys.stdout)] = _QuietThreads(sys.stdout)
            stream = _kept[id(sys.stdout)]
            _held.extend([stream, logging.get_verbosity()])
            sys.stdout = stream
            logging.set_verbosity(logging.ERROR)
        stream = _held[0]
        stream.depth[me] = stream.depth.get(me, 0) + 1
    try:
        yield
    finally:
        with _lock:
            stream.depth[me] -= 1
            if not stream.depth[me]:
                del stream.depth[me]
            if not stream.depth:
                if sys.stdout is stream:   # (else someone replaced it since: theirs stays)
                    sys.stdout = stream.target
                logging.set_verbosity(_held[1])
                _held.clear()
