"""The one writer of a run directory's JSON records: `write_record(path, value)`.

Why one writer: config.json, evals.json, final.json, strategy.json and environment.json (a
run's), results.json (a comparison's), job.json and cell.json (a long job's), and the
owner file of a checkpoint folder were each written by the module that made them, so how
a record is written (atomically, with which JSON layout, naming the file on a full disk)
was decided in several places. Here every record is written through a temporary file and
`os.replace`: a reader (`records.py`), a resume or a crash sees the old record or the new
one, never half of one. metrics.jsonl, appended to row by row, is written by
`metrics_file.py`.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
from pathlib import Path

import jax
import numpy as np

from .links import open_own


def jsonable(x):
    """Plain JSON values of a pytree of arrays and numbers (non-finite floats -> None)."""
    if isinstance(x, dict):
        return {k: jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, (np.ndarray, jax.Array)):
        return jsonable(np.asarray(x).tolist())
    if isinstance(x, (np.floating, float)):
        return None if not math.isfinite(float(x)) else float(x)
    if isinstance(x, (np.bool_, bool)):
        return bool(x)
    if isinstance(x, np.integer):
        return int(x)
    return x


def write_record(path: str | os.PathLike, value) -> None:
    """`value` as indented JSON (`jsonable`: arrays as lists, non-finite floats as null) at
    `path`, atomically."""
    write_text(path, json.dumps(jsonable(value), indent=2))


def write_text(path: str | os.PathLike, text: str, temporary: str | None = None) -> None:
    """`text` at `path`, atomically: written to `temporary` (a name beside it; by default
    `.NAME.tmp`) and renamed over it. A failed write (a full disk) names the file: the OS
    error of a write to an open file names none."""
    path = Path(path)
    tmp = path.with_name(temporary or f".{path.name}.tmp")
    try:
        write_new(tmp, text.encode())
        os.replace(tmp, path)   # replaces a link at `path` itself, never writes through it
    except OSError as err:
        if err.filename is not None:
            raise
        raise OSError(err.errno, err.strerror, str(path)) from None


def write_new(path: Path, data: bytes) -> None:
    """`data` as the file `path`, created anew (a leftover of an interrupted write, or a
    link planted there, is removed first, never written through: links.py)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    fd = open_own(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
