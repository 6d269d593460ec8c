"""Language-model data: text or pixel sequences as fixed-length token windows.

A window is `seq_len + 1` consecutive tokens; the batch holds `tokens` (the first
`seq_len`) and `targets` (the same shifted by one), so the classification loss applies
position by position. Text is tokenised as UTF-8 bytes (vocabulary 256, honest and
dependency-free: no learned vocabulary to ship or mismatch).

Windows are random access without a pass over the corpus: window j starts at record
`j * k` (k = records per window, estimated from the first records' mean length so a
window is rarely short), joins records with a newline, reads further records when it
needs more bytes, and cuts at `seq_len + 1`. When records run shorter than the estimate a
window may end with the first bytes of the next window's records; the last window of a
split is padded with byte 0, which never occurs in text.
"""
from __future__ import annotations

import math

import numpy as np

PAD = 0
SEPARATOR = b"\n"


def encode_bytes(text) -> np.ndarray:
    """UTF-8 bytes as int32 tokens in [0, 256)."""
    raw = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    return np.frombuffer(raw, dtype=np.uint8).astype(np.int32)


def _as_bytes(value) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, np.ndarray):
        value = value.item()
    return value if isinstance(value, bytes) else str(value).encode("utf-8")


def windows_to_batch(windows: np.ndarray) -> dict[str, np.ndarray]:
    return {"tokens": windows[:, :-1].astype(np.int32), "targets": windows[:, 1:].astype(np.int32)}


class TokenWindows:
    """Byte-level `seq_len`-token windows over a text data source (see module doc)."""

    def __init__(self, source, text_key: str, seq_len: int, records_per_window: int | None = None,
                 sample: int = 256):
        self.source, self.text_key, self.seq_len = source, text_key, int(seq_len)
        if records_per_window is None:
            head = self._texts(range(min(sample, len(source))))
            mean = max(1.0, np.mean([len(t) + len(SEPARATOR) for t in head])) if head else 1.0
            records_per_window = max(1, math.ceil((self.seq_len + 1) / mean))
        self.k = int(records_per_window)
        self._n = len(source) // self.k
        if self._n == 0:
            raise ValueError(f"text source has {len(source)} records, fewer than one window's {self.k}")

    def _texts(self, idx) -> list[bytes]:
        return [_as_bytes(r[self.text_key]) for r in self.source.__getitems__([int(i) for i in idx])]

    def __len__(self) -> int:
        return self._n

    def window(self, j: int, first: list[bytes]) -> np.ndarray:
        need, data, nxt = self.seq_len + 1, SEPARATOR.join(first), (j + 1) * self.k
        while len(data) < need and nxt < len(self.source):
            more = self._texts(range(nxt, min(nxt + self.k, len(self.source))))
            data += SEPARATOR + SEPARATOR.join(more)
            nxt += self.k
        out = np.full(need, PAD, np.int32)
        tokens = encode_bytes(data[:need])
        out[: len(tokens)] = tokens
        return out

    def take(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        idx = [int(j) for j in idx]
        starts = [j * self.k + i for j in idx for i in range(self.k)]
        texts = self._texts(starts)
        windows = np.stack([self.window(j, texts[n * self.k:(n + 1) * self.k]) for n, j in enumerate(idx)])
        return windows_to_batch(windows)


class PixelTokens:
    """An in-memory image set read as token sequences: each image's pixels in raster
    order, one token per intensity level (digits: 64 tokens of 17 levels). A tiny,
    fully offline language-modelling task for tests and `--tiny` runs."""

    def __init__(self, images: np.ndarray):
        self.rows = images.reshape(len(images), -1).astype(np.int32)

    def __len__(self) -> int:
        return len(self.rows)

    def take(self, idx: np.ndarray) -> dict[str, np.ndarray]:
        return windows_to_batch(self.rows[idx])
