"""Decoded in-memory splits, read once per process.

A comparison trains many runs (rows x seeds) on the same dataset in one process, and each
run used to read and decode its train and test split again: for MNIST-1D that is most of a
run's start-up (measured: `jaxsel compare`, 24 reads, 10 s of 95 s). The decoded arrays are
kept here, keyed by what determines their content: the prepared dataset's directory, the
split, the keys read and each record file's path, size and modification time (a dataset
rebuilt in place is read anew). The kept arrays are read-only, so no caller can change
what the next run reads; a source whose files cannot be named (a test's mock) is read
every time, never kept.
"""
from __future__ import annotations

import os
from typing import Callable, Hashable

import numpy as np

Arrays = dict[str, np.ndarray]

_CACHE: dict[Hashable, Arrays] = {}


def source_fingerprint(source) -> tuple | None:
    """What a TFDS data source reads, as a hashable key: (data dir, split, (path, size,
    mtime) of each record file); None when it cannot be told (then nothing is cached)."""
    try:
        if getattr(source, "decoders", None) is not None:
            return None   # decoded differently from the default: not the same arrays
        info = source.dataset_info
        files = tuple(str(p) for p in info.splits[source.split].filepaths)
        stats = tuple((f, st.st_size, st.st_mtime_ns) for f, st in ((f, os.stat(f)) for f in files))
        return (type(source).__name__, str(info.data_dir), str(source.split), stats)
    except Exception:  # noqa: BLE001  (mocks, remote paths, sources without split files)
        return None


def cached_arrays(source, keys: tuple[str, ...], read: Callable[[object, tuple[str, ...]], Arrays]) -> Arrays:
    """`read(source, keys)`, from the cache when the same files were read before in this
    process; the arrays returned are read-only (copy one to change it)."""
    fingerprint = source_fingerprint(source)
    if fingerprint is None:
        return read(source, keys)
    key = (fingerprint, tuple(keys))
    if key not in _CACHE:
        _CACHE[key] = {k: _read_only(v) for k, v in read(source, keys).items()}
    return dict(_CACHE[key])


def clear() -> None:
    """Forget every kept split (frees their memory; the next run reads from disk)."""
    _CACHE.clear()


def _read_only(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x)
    x.setflags(write=False)
    return x
