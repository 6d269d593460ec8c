"""User-given paths (`--data-dir`, `--out`, `--checkpoint-dir`, `--from`), checked up front.

A path that cannot be used is an `UnusablePath` (a ValueError) whose message is one line
naming the option, the path and what is wrong, so the CLI reports it with exit code 2 and
no traceback. Where the user names an input (`--data-dir` of a dataset to read), jaxsel
creates only the leaf directory (a typo in a parent is an error, not a silently created
tree) and says so on stderr; a run's output directory (`--out`) gets its parents too, as
`mkdir -p` would (`parents=True`). `undo_created` removes what was created again when the
work that needed it fails (`first_missing`: the outermost directory a creation adds).
"""
from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sys
import threading
from pathlib import Path
from typing import Iterator


class UnusablePath(ValueError):
    """A user-given path that cannot be created, read or written (one line, exit 2)."""


def os_reason(err: OSError) -> str:
    """The OS's words for a failed call, for a one-line message (the class name if it has none)."""
    return err.strerror or type(err).__name__


#: the name of `check_writable`'s probe file, and the pattern of every caller's: a folder other
#: processes read while one probes it (a multi-host run's checkpoint folder) shows it
WRITE_PROBE = ".jaxsel-write-test-{pid}-{thread}"
WRITE_PROBES = r"\.jaxsel-write-test-\d+-\d+"


def check_writable(path: Path, option: str) -> None:
    """Probe with a real file: os.access lies under root and on some network mounts."""
    probe = path / WRITE_PROBE.format(pid=os.getpid(), thread=threading.get_ident())   # one per caller
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        raise UnusablePath(f"{option} {str(path)!r} is not writable ({os_reason(err)}); "
                           f"choose another directory") from None


def writable_dir(path: str | os.PathLike, option: str = "--data-dir", *, quiet: bool = False,
                 parents: bool = False) -> bool:
    """Make sure `path` is a directory jaxsel can write to; return True if it was created.

    Only the leaf is created, and only when its parent is an existing directory;
    `parents=True` is for jaxsel's own defaults (e.g. ~/.cache/jaxsel/tfds), never for
    a path the user typed.
    """
    p = Path(path).expanduser()
    if p.is_dir():
        check_writable(p, option)
        return False
    if p.exists() and not p.is_dir():   # (it may have become a directory since: another process)
        raise UnusablePath(f"{option} {str(p)!r} exists and is not a directory")
    parent = p.parent
    if parents and not parent.exists():
        writable_dir(parent, option, quiet=True, parents=True)
    if not parent.is_dir():
        raise UnusablePath(f"{option} {str(p)!r} cannot be created: its parent {str(parent)!r} "
                           f"is not an existing directory (jaxsel creates only the last component)")
    try:
        p.mkdir()
    except FileExistsError:   # another process created it between the checks: fine, if a directory
        if not p.is_dir():
            raise UnusablePath(f"{option} {str(p)!r} exists and is not a directory") from None
        check_writable(p, option)
        return False
    except OSError as err:
        raise UnusablePath(f"{option} {str(p)!r} cannot be created ({os_reason(err)})") from None
    check_writable(p, option)
    if not quiet:
        print(f"jaxsel: created {option} directory {p}", file=sys.stderr)
    return True


def first_missing(path: str | os.PathLike) -> Path | None:
    """The outermost directory that creating `path` with its parents would create (None:
    `path` exists), so the whole chain can be removed again (`undo_created`)."""
    p = Path(path).expanduser()
    if p.exists():
        return None
    while not p.parent.exists() and p.parent != p:
        p = p.parent
    return p


def readable_path(path: str | os.PathLike, option: str = "--from") -> Path:
    """An existing, readable file or directory the user points jaxsel at."""
    p = Path(path).expanduser()
    if not p.exists():
        raise UnusablePath(f"{option} {str(p)!r} does not exist")
    if not os.access(p, os.R_OK | (os.X_OK if p.is_dir() else 0)):
        raise UnusablePath(f"{option} {str(p)!r} is not readable ({os.strerror(errno.EACCES)})")
    return p


def _holds_only_locks(path: Path) -> bool:
    return all(f.suffix == ".lock" for f in path.rglob("*") if not f.is_dir())


@contextlib.contextmanager
def undo_created(path: str | os.PathLike, created: bool) -> Iterator[None]:
    """Remove the directory `writable_dir` just created if the block fails before
    writing anything into it but lock files and empty folders, so a run that fails early
    leaves nothing behind."""
    try:
        yield
    except BaseException:
        p = Path(path)
        if created and p.is_dir() and _holds_only_locks(p):
            shutil.rmtree(p, ignore_errors=True)
        raise
