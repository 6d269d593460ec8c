"""One preparer per dataset: a file lock in the data dir around "check, then build".

TFDS writes a dataset into `incomplete.*` and renames it into place at the end, so a
half-written dataset is never mistaken for a complete one; but two processes building at
once both write and the second rename fails. Holding this lock while checking
`is_prepared()` and building makes N concurrent preparers produce one dataset: the first
builds, the others wait and then find it ready. The lock is an OS-level lock
(`filelock`), released if its holder dies, so a crashed preparer never wedges the rest.
"""
from __future__ import annotations

import contextlib
import shutil
import sys
from pathlib import Path
from typing import Iterator

from filelock import FileLock, Timeout

LOCK_DIR = ".jaxsel-locks"


def lock_path(root: Path, name: str) -> Path:
    return Path(root) / LOCK_DIR / f"{name}.lock"


@contextlib.contextmanager
def dataset_lock(root: Path, name: str, *, quiet: bool = False) -> Iterator[None]:
    """Hold the preparation lock of `name` in data dir `root` (waiting, and saying so once)."""
    path = lock_path(root, name)
    path.parent.mkdir(exist_ok=True)
    lock = FileLock(str(path))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        if not quiet:
            print(f"jaxsel: another process is preparing {name} in {root}; waiting for it "
                  f"(lock {path})", file=sys.stderr, flush=True)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def remove_stale_incomplete(dataset_dir: Path) -> None:
    """Delete `incomplete.*` folders a killed preparer left (call only under the lock)."""
    if dataset_dir.is_dir():
        for stale in dataset_dir.glob("incomplete.*"):
            shutil.rmtree(stale, ignore_errors=True)
