"""A run directory holds its own files: symbolic links in it are refused before a run writes.

Why: `cp -rs runA runB` (a cheap copy) makes every file of runB a link into runA, and a
resume of runB appended its rows to runA/metrics.jsonl through the link, so runA's log no
longer matched its final.json. A planted link (metrics.jsonl.bad -> a file elsewhere) let
a resume append outside the run directory. Following links into the directory is refused,
not resolved: copying the linked bytes would hide from the user that runB shares runA's
files, and `cp -r` is the copy that makes a run directory of its own. The writers open with
`O_NOFOLLOW` too (`open_own`), so a link planted after this check still fails the write,
never writes through it. A link to the run directory itself (`--out` naming a link) is the
user's own choice of path and is followed.
"""
from __future__ import annotations

import errno
import os
from pathlib import Path

from ...data.paths import UnusablePath


class LinkedRunDir(UnusablePath):
    """A run directory holding symbolic links (one line, exit code 2)."""


def links_in(directory: str | os.PathLike) -> list[Path]:
    """The symbolic links at any depth under `directory` (links to folders not entered)."""
    found = []
    for top, dirs, files in os.walk(directory):
        found += [Path(top, name) for name in dirs + files if os.path.islink(os.path.join(top, name))]
    return sorted(found)


def refuse_links(directory: str | os.PathLike, what: str = "run directory") -> None:
    """LinkedRunDir naming the first link in `directory` and where it points."""
    linked = links_in(directory) if Path(directory).is_dir() else []
    if linked:
        more = f" and {len(linked) - 1} more" if len(linked) > 1 else ""
        raise LinkedRunDir(f"{what} {str(directory)!r} holds symbolic links ({str(linked[0])!r} -> "
                           f"{os.readlink(linked[0])!r}{more}): a run writes only files of its own, never "
                           f"through a link into another directory; copy a run directory with cp -r, not cp -rs")


def open_own(path: str | os.PathLike, flags: int, mode: int = 0o666) -> int:
    """`os.open(path, flags | O_NOFOLLOW)`: a file descriptor of a file in the run directory
    itself; a symbolic link at `path` is an OSError naming it."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), mode)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "a symbolic link: jaxsel writes no file through a link", str(path)) from None
        raise
