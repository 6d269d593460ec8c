"""A fingerprint of the data a run reads: part of its identity, so a resume on other data is
refused (training/checkpoint.py's identity check).

Why: `--data-dir` says where a dataset is, not what it holds, so it may change on a resume
(the same data moved); but a resume whose directory held another preparation (other
images, another order) trained its later steps on other data, silently. The fingerprint
is of what is read, not of where: a split held in memory is hashed whole (every key, its
dtype, shape and bytes: a pass over memory, about 0.1 s for MNIST); one read from records
on disk by `SAMPLED` rows spread evenly over it, and its length (a whole pass would read the
dataset once more).
"""
from __future__ import annotations

import hashlib

import numpy as np

#: how many rows of a split read from disk the fingerprint reads
SAMPLED = 64


def data_fingerprint(table) -> str:
    """A SHA-256 (hex, 32 digits) of split `table` (an `ArrayTable`, or anything with
    `len` and `take(indices)`)."""
    h = hashlib.sha256()
    arrays = getattr(table, "arrays", None)
    if arrays is None:
        h.update(f"rows {len(table)}".encode())
        arrays = table.take(np.unique(np.linspace(0, len(table) - 1, SAMPLED).astype(np.int64)))
    for key in sorted(arrays):
        value = np.ascontiguousarray(arrays[key])
        h.update(f"{key} {value.dtype.str} {value.shape}\0".encode())
        h.update(memoryview(value).cast("B") if value.dtype != object else repr(value.tolist()).encode())
    return h.hexdigest()[:32]
