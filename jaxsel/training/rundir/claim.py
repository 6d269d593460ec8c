"""Claiming a new run directory: jaxsel's default run directories (runs/<what>-<time>) are
created by `mkdir`, which either creates the directory or fails because it exists, so two
runs started in the same second never share one (the next free name, NAME-2, -3, ..., is
taken instead).

Why here: claiming is about run directories, so it lives in their home; the path checks it
builds on (`writable_dir`, `check_writable`, `UnusablePath`) are the data layer's
`data/paths.py`, which the user's data directories use too and which may not import
training/.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

from ...data.paths import UnusablePath, check_writable, os_reason, writable_dir


def claim_new_dir(path: str | os.PathLike, option: str = "--out") -> str:
    """Create a new directory named `path`, or `path`-2, -3, ... when that name is taken,
    and return the one created: jaxsel's default run directories (runs/<what>-<time>), so
    that two runs started in the same second never share one. `mkdir` either creates the
    directory or fails because it exists, so two processes never claim the same name. The
    parents are jaxsel's own defaults (runs/), created as needed."""
    p = Path(path).expanduser()
    writable_dir(p.parent, option, quiet=True, parents=True)
    for candidate in numbered(p):
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        except OSError as err:
            raise UnusablePath(f"{option} {str(candidate)!r} cannot be created ({os_reason(err)})") from None
        check_writable(candidate, option)
        return str(candidate)
    raise UnusablePath(f"{option}: every name {str(p)!r}-N is taken; choose a directory with {option}")


def free_name(path: str | os.PathLike) -> str:
    """The name `claim_new_dir(path)` would claim now (checked before anything is created;
    a run that takes it meanwhile moves the claim on to the next)."""
    return str(next(p for p in numbered(Path(path)) if not p.exists()))


def numbered(path: Path) -> Iterator[Path]:
    """`path`, then `path`-2, -3, ..."""
    yield path
    for n in range(2, 10**6):
        yield path.with_name(f"{path.name}-{n}")
