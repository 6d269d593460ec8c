"""Datasets by name: embedded ones are built on first use, real ones come from a local
TFDS `data_dir`. Everything is read with `tfds.data_source` (ArrayRecord random access).
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Callable

import numpy as np
import tensorflow_datasets as tfds

DEFAULT_DATA_DIR = Path(os.environ.get("JAXSEL_DATA_DIR", Path.home() / ".cache" / "jaxsel" / "tfds"))


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    """How to read and normalise one dataset."""

    name: str                       # TFDS name
    input_key: str = "image"
    label_key: str = "label"
    scale: float = 255.0            # inputs are divided by this
    builder: Callable | None = None  # embedded datasets: a TFDS builder class built offline


def _embedded_builders() -> dict[str, DatasetSpec]:
    from .digits import Digits

    return {"digits": DatasetSpec("digits", scale=16.0, builder=Digits)}


EMBEDDED: dict[str, DatasetSpec] = _embedded_builders()


def register_dataset(spec: DatasetSpec) -> None:
    """Make `spec.name` known to `load_arrays` (used by the dataset catalogue)."""
    EMBEDDED[spec.name] = spec if spec.builder else EMBEDDED.get(spec.name, spec)
    KNOWN[spec.name] = spec


KNOWN: dict[str, DatasetSpec] = dict(EMBEDDED)


class DatasetNotPrepared(FileNotFoundError):
    """A real dataset is missing from the local data dir (nothing is downloaded at run time)."""


def resolve_data_dir(data_dir: str | os.PathLike | None) -> Path:
    return Path(data_dir) if data_dir else DEFAULT_DATA_DIR


def ensure_built(name: str, data_dir: str | os.PathLike | None = None) -> Path:
    """Build an embedded dataset into `data_dir` once (offline); return the data dir."""
    root = resolve_data_dir(data_dir)
    spec = EMBEDDED[name]
    builder = spec.builder(data_dir=str(root), file_format="array_record")
    if not builder.is_prepared():
        root.mkdir(parents=True, exist_ok=True)
        tfds.disable_progress_bar()
        builder.download_and_prepare(download_config=tfds.download.DownloadConfig(try_download_gcs=False))
    return root


def open_source(name: str, split: str, data_dir: str | os.PathLike | None = None):
    """`tfds.data_source` for `name`/`split`, building embedded datasets on first use."""
    if name not in KNOWN:
        raise ValueError(f"unknown dataset {name!r}; known: {', '.join(sorted(KNOWN))}")
    root = resolve_data_dir(data_dir)
    if name in EMBEDDED and EMBEDDED[name].builder is not None:
        ensure_built(name, root)
    try:
        return tfds.data_source(name, split=split, data_dir=str(root), download=False)
    except Exception as err:  # TFDS raises assorted errors for a missing dataset
        raise DatasetNotPrepared(
            f"dataset {name!r} (split {split!r}) is not prepared in data_dir {root}; prepare it "
            f"once on a machine with network access: `tfds build {name} --data_dir {root} "
            f"--file_format array_record` and copy the folder here (jaxsel never downloads at "
            f"run time). Underlying error: {type(err).__name__}: {err}"
        ) from None


def read_all(source, keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Read every record of a (small) source into stacked NumPy arrays."""
    records = source.__getitems__(list(range(len(source))))
    return {k: np.stack([np.asarray(r[k]) for r in records]) for k in keys}


def load_arrays(name: str, split: str, data_dir=None) -> dict[str, np.ndarray]:
    """A split fully in memory as {input_key, label_key} arrays (inputs still raw)."""
    spec = KNOWN[name] if name in KNOWN else None
    source = open_source(name, split, data_dir)
    return read_all(source, (spec.input_key, spec.label_key))


def num_classes(name: str, data_dir=None) -> int:
    source = open_source(name, "train", data_dir)
    feature = source.dataset_info.features[KNOWN[name].label_key]
    return int(feature.num_classes)
