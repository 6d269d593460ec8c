"""MNIST-style IDX files (`train-images-idx3-ubyte[.gz]`, ...), as MNIST and
Fashion-MNIST ship them.

An IDX file is a big-endian header (two zero bytes, a type code, the number of
dimensions, then one uint32 per dimension) followed by the values in row-major order.

A gzip file can inflate far beyond its size, so a compressed IDX file is inflated only as
far as its header says it holds, and a header may announce at most `MAX_DATA_BYTES` (five
times MNIST's largest file): memory stays bounded by what the file should need.
"""
from __future__ import annotations

import gzip
import math
import zlib
from pathlib import Path
from typing import BinaryIO

import numpy as np

from . import FormatError

#: the most data bytes an IDX file jaxsel prepares may hold (MNIST's train images: 47 MB)
MAX_DATA_BYTES = 256 << 20

_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}

# split -> (images file, labels file), as the MNIST and Fashion-MNIST downloads name them
MNIST_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
               "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}


def parse_idx(raw: bytes, where: str) -> np.ndarray:
    """The array an IDX file of bytes `raw` holds."""
    import io

    return read_stream(io.BytesIO(raw), where)


def read_stream(stream: BinaryIO, where: str) -> np.ndarray:
    """The array of the IDX file `stream` reads, reading no more than its header announces
    (and at most `MAX_DATA_BYTES`)."""
    magic = stream.read(4)
    if len(magic) < 4 or magic[0] or magic[1] or magic[2] not in _DTYPES:
        raise FormatError(f"{where} is not an IDX file (bad magic number)")
    ndim = magic[3]
    header = 4 + 4 * ndim
    dims = stream.read(4 * ndim)
    if len(dims) < 4 * ndim:
        raise FormatError(f"{where} is cut short: its header announces {ndim} dimensions ({header} bytes), "
                          f"the file has {4 + len(dims)} bytes")
    shape = tuple(int(d) for d in np.frombuffer(dims, ">u4"))
    dtype = np.dtype(_DTYPES[magic[2]])
    expected = math.prod(shape) * dtype.itemsize
    if expected > MAX_DATA_BYTES:
        raise FormatError(f"{where}: header says shape {shape} ({expected} bytes), more than the {MAX_DATA_BYTES} "
                          f"bytes an IDX file of MNIST can hold; it is not one (a damaged or crafted file?)")
    data = stream.read(expected + 1)
    if len(data) != expected:
        found = f"has {len(data)} bytes of data" if len(data) < expected else "holds more data than that"
        raise FormatError(f"{where}: header says shape {shape} ({expected} bytes), file {found}")
    return np.frombuffer(data, dtype).reshape(shape).astype(dtype.newbyteorder("="))


def read_idx(path: Path) -> np.ndarray:
    """The array of IDX file `path`, gzip-compressed or not (told by its magic number)."""
    with open(path, "rb") as raw:
        compressed = raw.read(2) == b"\x1f\x8b"
        raw.seek(0)
        if not compressed:
            return read_stream(raw, str(path))
        try:
            with gzip.GzipFile(fileobj=raw) as inflated:
                return read_stream(inflated, str(path))
        except (OSError, EOFError, zlib.error) as err:
            raise FormatError(f"{path} is a broken gzip file ({err})") from None


def _find(folder: Path, stem: str) -> Path:
    """`stem` or `stem.gz`; also the `stem.idx3-ubyte` spelling some mirrors use."""
    for name in (stem, stem + ".gz", stem.replace("-idx", ".idx"), stem.replace("-idx", ".idx") + ".gz"):
        if (folder / name).is_file():
            return folder / name
    raise FormatError(f"{folder} has no {stem}[.gz] (expected the four MNIST IDX files: "
                      f"{', '.join(f for pair in MNIST_FILES.values() for f in pair)})")


def read_mnist_folder(folder: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{split: (images uint8 [N,28,28,1], labels int64 [N])} from a folder of IDX files."""
    if not Path(folder).is_dir():
        raise FormatError(f"{folder} is not a folder (expected one holding the MNIST IDX files)")
    out = {}
    for split, (images_file, labels_file) in MNIST_FILES.items():
        images, labels = read_idx(_find(folder, images_file)), read_idx(_find(folder, labels_file))
        if images.ndim != 3 or images.dtype != np.uint8 or labels.ndim != 1 or len(images) != len(labels):
            raise FormatError(f"{folder}: {split} images {images.dtype}{images.shape} and labels "
                              f"{labels.shape} do not pair up (need uint8 [N,H,W] and [N])")
        out[split] = (images[..., None], labels.astype(np.int64))
    return out
