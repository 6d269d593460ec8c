"""Run locks: a run owns its run directory and its checkpoint directory while it trains.

Why: two runs on one `--out` (a typo, a job launched twice) would interleave rows of two
runs in one metrics.jsonl and race on the same checkpoint steps. Each directory gets a
`.jaxsel.lock` file held with an OS lock (`flock`), which the kernel drops when the
process dies however it dies, so a lock left by a killed run never blocks the next one.
The file holds the owner's PID so the second run can name it. A run that ends removes its
lock file (a finished run directory holds only the run's own files); one killed leaves it,
harmlessly, and the next run takes it over. Removing it is safe because a lock counts only
while its file is still the one at the path: a process that locked a file just removed
opens the path again (`acquire`).
"""
from __future__ import annotations

import fcntl
import os
from contextlib import ExitStack
from pathlib import Path

from .names import LOCK_NAME


class RunLocked(ValueError):
    """Another live process owns the directory (one line, exit code 2)."""


class DirectoryLock:
    """Exclusive, non-blocking lock of one directory (created if missing)."""

    def __init__(self, directory: str | Path, what: str):
        self.directory, self.what = Path(directory), what
        self.fd: int | None = None

    def acquire(self) -> "DirectoryLock":
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / LOCK_NAME
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)   # never a link: links.py
            self._lock(fd)
            if _same_file(fd, path):
                break
            os.close(fd)   # its holder removed it as we opened it: lock the path's file now
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self.fd = fd
        return self

    def _lock(self, fd: int) -> None:
        """flock `fd` or raise RunLocked naming the holder (closing `fd`)."""
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            os.close(fd)
            who = f"process {holder}" if holder.isdigit() else "another process"
            raise RunLocked(f"{self.what} {str(self.directory)!r} is in use by {who} (a run that is still "
                            f"going); wait for it, stop it, or choose another directory") from None

    def check_free(self) -> None:
        """RunLocked if a live process holds the lock; creates nothing (a check before a run starts)."""
        try:
            fd = os.open(self.directory / LOCK_NAME, os.O_RDWR)
        except OSError:   # no lock file (or no directory): nobody holds it
            return
        self._lock(fd)
        os.close(fd)   # closing drops the probe's own lock

    def release(self) -> None:
        """Remove the lock file (while still holding it), then drop the lock."""
        if self.fd is not None:
            path = self.directory / LOCK_NAME
            if _same_file(self.fd, path):
                try:
                    path.unlink()
                except OSError:   # a read-only or vanished directory: the file stays, harmless
                    pass
            os.close(self.fd)   # closing drops the flock
            self.fd = None


def _same_file(fd: int, path: Path) -> bool:
    """Whether `path` still names the file open as `fd`."""
    try:
        here = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino)


def check_unlocked(out_dir: str | Path | None, checkpoint_dir: str | Path | None) -> None:
    """RunLocked if a live run owns either directory (creates nothing)."""
    for directory, what in ((out_dir, "run directory"), (checkpoint_dir, "checkpoint dir")):
        if directory is not None:
            DirectoryLock(directory, what).check_free()


def lock_run(out_dir: str | Path | None, checkpoint_dir: str | Path | None) -> ExitStack:
    """Lock the run's directories (those that are set); release by closing the result."""
    stack, seen = ExitStack(), set()
    try:
        for directory, what in ((out_dir, "run directory"), (checkpoint_dir, "checkpoint dir")):
            if directory is not None and Path(directory).absolute() not in seen:
                seen.add(Path(directory).absolute())
                lock = DirectoryLock(directory, what).acquire()
                stack.callback(lock.release)
    except BaseException:
        stack.close()
        raise
    return stack
