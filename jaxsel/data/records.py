"""Tables: a split as something the loader can `take(indices)` from.

`ArrayTable` holds a small split in memory (digits, mnist1d, CIFAR). `RecordTable` reads
each batch's records from the TFDS data source with one `__getitems__` call, so ImageNet-
sized sets never have to fit in memory; variable-size images are resized on the host so
batches stack. Both return raw inputs (uint8 images): scaling and normalisation happen on
the device (augment.py), which also quarters the bytes sent to it.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from .catalog import DatasetSpec


class ArrayTable:
    """A split held in memory as equal-length NumPy arrays."""

    def __init__(self, arrays: Mapping[str, np.ndarray]):
        self.arrays = dict(arrays)
        self._n = len(next(iter(self.arrays.values())))

    def __len__(self) -> int:
        return self._n

    def take(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        return {k: v[idx] for k, v in self.arrays.items()}

    def column(self, key: str) -> np.ndarray:
        return self.arrays[key]


def resize_shorter_and_crop(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Scale so the shorter side fits `size`, then centre-crop to exactly `size` (H, W)."""
    from PIL import Image

    h, w = image.shape[:2]
    th, tw = size
    if (h, w) == (th, tw):
        return image
    scale = max(th / h, tw / w)
    nh, nw = max(th, round(h * scale)), max(tw, round(w * scale))
    squeeze = image.ndim == 3 and image.shape[2] == 1
    pil = Image.fromarray(image[..., 0] if squeeze else image).resize((nw, nh), Image.BILINEAR)
    out = np.asarray(pil)
    top, left = (nh - th) // 2, (nw - tw) // 2
    out = out[top:top + th, left:left + tw]
    return out[..., None] if squeeze else out


class RecordTable:
    """A split read per batch from a TFDS data source (random access, nothing cached)."""

    def __init__(self, source, spec: DatasetSpec, keys: Sequence[str] | None = None):
        self.source, self.spec = source, spec
        self.keys = tuple(keys or (spec.input_key, spec.label_key))

    def __len__(self) -> int:
        return len(self.source)

    def _records(self, idx) -> list:
        return self.source.__getitems__([int(i) for i in idx])

    def _input(self, x) -> np.ndarray:
        x = np.asarray(x)
        if self.spec.image_size is not None and x.ndim == 3:
            x = resize_shorter_and_crop(x, self.spec.image_size)
        return x

    def take(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        records = self._records(idx)
        out = {}
        for k in self.keys:
            conv = self._input if k == self.spec.input_key else np.asarray
            out[k] = np.stack([conv(r[k]) for r in records])
        return out

    def column(self, key: str, chunk: int = 4096) -> np.ndarray:
        """One feature over the whole split (labels for label-aware partitions): one pass."""
        parts = []
        for start in range(0, len(self), chunk):
            records = self._records(range(start, min(start + chunk, len(self))))
            parts.append(np.asarray([r[key] for r in records]))
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)


class Subset:
    """The first `n` examples of a table (bounded evaluation on huge test splits)."""

    def __init__(self, table, n: int):
        self.table, self._n = table, min(int(n), len(table))

    def __len__(self) -> int:
        return self._n

    def take(self, idx):
        return self.table.take(idx)

    def column(self, key: str) -> np.ndarray:
        return self.table.column(key)[: self._n]


class SplitView(Mapping):
    """A table seen as the `{key: array}` mapping the evaluator slices (`v[i:j]`).

    Each slice reads its records once (one cached slice shared by all keys) and applies
    `transform` (host normalisation for evaluation); nothing else is held in memory.
    """

    def __init__(self, table, keys: Sequence[str], transform=None):
        self.table, self.keys, self.transform = table, tuple(keys), transform
        self._cache: tuple[tuple[int, int], dict] | None = None

    def _slice(self, start: int, stop: int) -> dict:
        if self._cache is None or self._cache[0] != (start, stop):
            batch = self.table.take(np.arange(start, stop))
            self._cache = ((start, stop), self.transform(batch) if self.transform else batch)
        return self._cache[1]

    def __getitem__(self, key):
        if key not in self.keys:
            raise KeyError(key)
        return _Column(self, key)

    def __iter__(self):
        return iter(self.keys)

    def __len__(self) -> int:
        return len(self.keys)


class _Column:
    def __init__(self, view: SplitView, key: str):
        self.view, self.key = view, key

    def __len__(self) -> int:
        return len(self.view.table)

    def __getitem__(self, s):
        if not isinstance(s, slice) or s.step not in (None, 1):
            raise TypeError("split columns support contiguous slices only")
        start, stop, _ = s.indices(len(self))
        return self.view._slice(start, stop)[self.key]
