"""MNIST-style IDX files (`train-images-idx3-ubyte[.gz]`, ...), as MNIST and
Fashion-MNIST ship them.

An IDX file is a big-endian header (two zero bytes, a type code, the number of
dimensions, then one uint32 per dimension) followed by the values in row-major order.
"""
from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from . import FormatError

_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}

# split -> (images file, labels file), as the MNIST and Fashion-MNIST downloads name them
MNIST_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
               "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}


def parse_idx(raw: bytes, where: str) -> np.ndarray:
    """The array an IDX file holds."""
    if len(raw) < 4 or raw[0] or raw[1] or raw[2] not in _DTYPES:
        raise FormatError(f"{where} is not an IDX file (bad magic number)")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise FormatError(f"{where} is cut short: its header announces {ndim} dimensions ({header} bytes), "
                          f"the file has {len(raw)} bytes")
    shape = tuple(int(d) for d in np.frombuffer(raw[4:header], ">u4"))
    dtype = np.dtype(_DTYPES[raw[2]])
    expected = int(np.prod(shape)) * dtype.itemsize
    if len(raw) - header != expected:
        raise FormatError(f"{where}: header says shape {shape} ({expected} bytes), "
                          f"file has {len(raw) - header} bytes of data")
    return np.frombuffer(raw, dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def read_idx(path: Path) -> np.ndarray:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as err:
            raise FormatError(f"{path} is a broken gzip file ({err})") from None
    return parse_idx(raw, str(path))


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
