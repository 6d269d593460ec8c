"""Ctrl-C (SIGINT) and SIGTERM while the `jaxsel` command starts up, before a run trains.

Why: Python's own Ctrl-C raises KeyboardInterrupt wherever the main thread happens to be.
During start-up that is an import (a traceback, then death by signal), or a callback JAX
runs from the garbage collector, which swallows it ("Exception ignored") so that the run
then trains in full. So the command installs this handler first, before JAX is imported
(the package imports nothing heavy until used): a signal only sets a flag, which the
command reads at fixed points (`check`: before anything is written) and which the training
loop's handlers (`faults.StopSignals`) inherit once they take over. The process ends with
one line and exit code 128 + the signal's number (130 for Ctrl-C). A second Ctrl-C aborts
at once. No JAX here: this module must import in milliseconds.
"""
from __future__ import annotations

import signal
import threading

SIGNALS = (signal.SIGTERM, signal.SIGINT)

_pending: int | None = None


class StoppedEarly(Exception):
    """A stop signal arrived before the run started training: nothing was written."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"received {signal.Signals(signum).name} while starting up; stopped before "
                         f"training, nothing written")

    @property
    def exit_code(self) -> int:
        return 128 + int(self.signum)


def _record(signum, frame) -> None:
    global _pending
    if _pending is not None and signum == signal.SIGINT:
        raise KeyboardInterrupt   # a second Ctrl-C: abort now
    if _pending is None:
        _pending = signum


def pending() -> int | None:
    """The stop signal received while this handler was installed (None: none)."""
    return _pending


def check() -> None:
    """Raise StoppedEarly if a stop signal arrived (call only where nothing is half-written)."""
    if _pending is not None:
        raise StoppedEarly(_pending)


class StartupSignals:
    """Context manager: SIGINT/SIGTERM are recorded instead of raising until `release()`
    or the end of the block, which put the previous handlers back (main thread only)."""

    def __init__(self):
        self._previous: dict = {}

    def __enter__(self) -> "StartupSignals":
        global _pending
        _pending = None
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, _record) for sig in SIGNALS}
        return self

    def release(self) -> None:
        """Leave signals to the previous handlers (a command that does not train)."""
        for sig, handler in self._previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        self._previous.clear()

    def __exit__(self, *exc) -> None:
        global _pending
        self.release()
        _pending = None
