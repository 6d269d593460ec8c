"""The CIFAR-10 / CIFAR-100 "python version" (`cifar-10-python.tar.gz`,
`cifar-100-python.tar.gz`, or the folder they extract to).

Each batch is a pickled dict: `data` (N, 3072) uint8, each row one image as 1024 red,
then 1024 green, then 1024 blue values in row-major order, and `labels` (CIFAR-10) or
`fine_labels` / `coarse_labels` (CIFAR-100). Pickles can run code, so they are read with
an unpickler that only rebuilds dicts, lists, strings and NumPy arrays.

A compressed tarball can inflate far beyond its size (a few MB of gzip can declare a member
of a GiB): each file is read only if the size its tar header declares is one the format
allows (`CifarLayout.limit`: a batch's images, labels and file names, a meta file's class
names), and a tarball of more members than any CIFAR one has is refused, so memory and time
stay bounded by what a real CIFAR file needs.
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import lzma
import pickle
import tarfile
import zlib
from pathlib import Path

import numpy as np

from . import FormatError

IMAGE_SHAPE = (32, 32, 3)


@dataclasses.dataclass(frozen=True)
class CifarLayout:
    """Where a CIFAR variant keeps its batches, labels and class names."""

    folder: str                            # folder inside the tarball
    splits: dict[str, tuple[str, ...]]     # split -> batch files
    meta: str                              # file with the class names
    labels: dict[str, str]                 # TFDS feature -> pickle key
    names: dict[str, str]                  # TFDS feature -> meta key of its class names
    images: dict[str, int]                 # batch file -> the images it holds in the real dataset

    def limit(self, name: str) -> int:
        """The most bytes file `name` can hold: its images (3072 bytes each, with their
        labels and file names) with room to spare, or `META_BYTES` for the meta file."""
        return self.images.get(name, 0) * IMAGE_RECORD_BYTES + META_BYTES

    def largest(self) -> int:
        return max(self.limit(name) for name in (self.meta, *self.images))


#: a pickled image: 3072 bytes of pixels, its labels and its file name (about 40 bytes),
#: rounded up; and the room for a meta file (class names: about 1.5 KB for CIFAR-100)
IMAGE_RECORD_BYTES, META_BYTES = 3072 + 256, 1 << 20
#: a CIFAR tarball holds its folder and 8 (CIFAR-10) or 4 (CIFAR-100) files
MAX_MEMBERS = 64

CIFAR10 = CifarLayout(
    "cifar-10-batches-py",
    {"train": tuple(f"data_batch_{i}" for i in range(1, 6)), "test": ("test_batch",)},
    "batches.meta", {"label": "labels"}, {"label": "label_names"},
    {**{f"data_batch_{i}": 10_000 for i in range(1, 6)}, "test_batch": 10_000})
CIFAR100 = CifarLayout(
    "cifar-100-python", {"train": ("train",), "test": ("test",)}, "meta",
    {"label": "fine_labels", "coarse_label": "coarse_labels"},
    {"label": "fine_label_names", "coarse_label": "coarse_label_names"}, {"train": 50_000, "test": 10_000})

_NUMPY_MODULES = {"numpy", "numpy.core.multiarray", "numpy._core.multiarray",
                  "numpy.core.numeric", "numpy._core.numeric"}
_NUMPY_NAMES = {"_reconstruct", "ndarray", "dtype", "scalar", "_frombuffer"}


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if module in _NUMPY_MODULES and name in _NUMPY_NAMES:
            return super().find_class(module, name)
        if module in ("builtins", "__builtin__", "copy_reg", "copyreg") and name in (
                "dict", "list", "set", "tuple", "_reconstructor", "object"):
            return super().find_class(module, name)
        if (module, name) == ("_codecs", "encode"):   # protocol-2 pickles of bytes
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def _unpickle(raw: bytes, where: str) -> dict:
    try:
        obj = _SafeUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except Exception as err:  # noqa: BLE001  (any corrupt pickle)
        raise FormatError(f"{where} is not a CIFAR python batch ({type(err).__name__}: {err})") from None
    if not isinstance(obj, dict):
        raise FormatError(f"{where} is not a CIFAR python batch (a pickled dict)")
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in obj.items()}


def _reader(source: Path, layout: CifarLayout):
    """A function file name -> raw bytes, over the tarball or the extracted folder."""
    if source.is_dir():
        folder = source / layout.folder if (source / layout.folder).is_dir() else source

        def read(name: str) -> bytes:
            path = folder / name
            if not path.is_file():
                raise FormatError(f"{source} has no {layout.folder}/{name} (is it the python version?)")
            _check_size(str(path), path.stat().st_size, layout.limit(name))
            return path.read_bytes()
        return read
    try:
        tar = tarfile.open(source)
    except (tarfile.TarError, OSError) as err:
        raise FormatError(f"{source} is not a readable tarball ({err})") from None
    members = _members(tar, source, layout)

    def read(name: str) -> bytes:
        member = members.get(f"{layout.folder}/{name}")
        if member is None:
            raise FormatError(f"{source} has no {layout.folder}/{name} (is it the python version?)")
        _check_size(f"{source}:{member.name}", member.size, layout.limit(name))
        with _damaged(source):
            return tar.extractfile(member).read()
    return read


def _members(tar: tarfile.TarFile, source: Path, layout: CifarLayout) -> dict[str, tarfile.TarInfo]:
    """The tarball's files by path, listed without inflating a member no CIFAR file could be
    (its declared size is checked before the listing skips over its data)."""
    members = {}
    with _damaged(source):
        for count, member in enumerate(tar, 1):
            if count > MAX_MEMBERS:
                raise FormatError(f"{source} holds more than {MAX_MEMBERS} members; a CIFAR python tarball holds "
                                  f"its folder and {len(layout.images) + 1} files (is it the python version?)")
            if member.isfile():
                _check_size(f"{source}:{member.name}", member.size, layout.largest())
                members[Path(member.name).as_posix().lstrip("./")] = member
    return members


def _check_size(where: str, size: int, limit: int) -> None:
    if size > limit:
        raise FormatError(f"{where} declares {size} bytes, more than the {limit} a file of the CIFAR python version "
                          f"can hold; it is not one (a damaged or crafted archive?)")


#: what reading a cut or corrupted tarball raises, by layer: tarfile, gzip/bz2/lzma
#: (EOFError: "Compressed file ended before the end-of-stream marker"), zlib, the OS
DAMAGED = (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, OSError)


@contextlib.contextmanager
def _damaged(source: Path):
    """A tarball that ends early or holds garbage is one FormatError naming it."""
    try:
        yield
    except DAMAGED as err:
        raise FormatError(f"{source} is truncated or damaged ({type(err).__name__}: {err}); download it "
                          f"again") from None


def _images(data, where: str) -> np.ndarray:
    data = np.asarray(data)
    if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        raise FormatError(f"{where}: 'data' must be uint8 of shape (N, 3072), got {data.dtype} {data.shape}")
    return data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)


def read_cifar(source: Path, layout: CifarLayout) -> tuple[dict, dict[str, list[str]]]:
    """({split: (images uint8 [N,32,32,3], {feature: labels int64 [N]})}, {feature: class names})."""
    read = _reader(Path(source), layout)
    meta = _unpickle(read(layout.meta), f"{source}:{layout.meta}")
    names = {f: [n.decode() if isinstance(n, bytes) else str(n) for n in meta.get(k, [])]
             for f, k in layout.names.items()}
    splits = {}
    for split, files in layout.splits.items():
        images, labels = [], {f: [] for f in layout.labels}
        for name in files:
            where = f"{source}:{name}"
            batch = _unpickle(read(name), where)
            images.append(_images(batch.get("data"), where))
            for feature, key in layout.labels.items():
                if key not in batch:
                    raise FormatError(f"{where} has no {key!r} (keys: {', '.join(map(str, batch))})")
                labels[feature].append(np.asarray(batch[key], np.int64))
        splits[split] = (np.concatenate(images), {f: np.concatenate(v) for f, v in labels.items()})
    return splits, names
