"""Datasets by name: embedded ones are built on first use, real ones come from a local
TFDS `data_dir`. Everything is read with TFDS data sources (ArrayRecord random access);
TensorFlow is never needed and nothing is downloaded at run time.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import tensorflow_datasets as tfds

from .array_cache import cached_arrays
from .catalog import CATALOG, DatasetSpec  # noqa: F401  (DatasetSpec re-exported)
from .locking import dataset_lock, remove_stale_incomplete
from .paths import writable_dir
from .quiet import quiet_here

DEFAULT_DATA_DIR = Path(os.environ.get("JAXSEL_DATA_DIR", Path.home() / ".cache" / "jaxsel" / "tfds"))

KNOWN: dict[str, DatasetSpec] = dict(CATALOG)
EMBEDDED: dict[str, DatasetSpec] = {k: s for k, s in KNOWN.items() if s.builder is not None}


def register_dataset(spec: DatasetSpec) -> None:
    """Make `spec.name` known to `open_source`/`load_arrays` and the training loop."""
    KNOWN[spec.name] = spec
    if spec.builder is not None:
        EMBEDDED[spec.name] = spec


class DatasetNotPrepared(FileNotFoundError):
    """A real dataset is missing from the local data dir (nothing is downloaded at run time)."""


def quiet_tfds():
    """Hide TFDS's absl warnings (e.g. 'no dataset_info.json') while we probe a data dir,
    and its stdout lines "Downloading and preparing dataset ...": jaxsel downloads
    nothing and says what it builds in its own words. Only this thread's output is
    hidden (quiet.py): a job's other threads print on."""
    return quiet_here()


def resolve_data_dir(data_dir: str | os.PathLike | None) -> Path:
    return Path(data_dir) if data_dir else DEFAULT_DATA_DIR


def ensure_data_dir(data_dir: str | os.PathLike | None, *, quiet: bool = True) -> Path:
    """Make the data dir a writable directory and return it.

    jaxsel's own default (~/.cache/jaxsel/tfds, or JAXSEL_DATA_DIR) is created with its
    parents: a new machine has no ~/.cache. A directory the user typed keeps the rule of
    `jaxsel.data.paths.writable_dir`: only its last component is created. The default may
    arrive already resolved (the CLI passes paths on), so it is recognised by value.
    """
    root = resolve_data_dir(data_dir)
    own = root.expanduser().absolute() == DEFAULT_DATA_DIR.expanduser().absolute()
    writable_dir(root, "--data-dir", quiet=quiet or own, parents=own)
    return root


def spec_of(name: str) -> DatasetSpec:
    if name not in KNOWN:
        raise ValueError(f"unknown dataset {name!r}; known: {', '.join(sorted(KNOWN))}")
    return KNOWN[name]


def embedded_builder(name: str, data_dir=None, **options):
    """The TFDS builder of an embedded dataset (mnist1d takes num_samples / seed)."""
    spec = spec_of(name)
    kwargs = {"data_dir": str(resolve_data_dir(data_dir)), "file_format": "array_record"}
    if options:
        from .mnist1d import Mnist1D, config_for

        if spec.builder is not Mnist1D:
            raise ValueError(f"dataset {name!r} takes no options, got {sorted(options)}")
        kwargs["config"] = config_for(**options)
    return spec.builder(**kwargs)


def ensure_built(name: str, data_dir: str | os.PathLike | None = None, **options) -> Path:
    """Build an embedded dataset into `data_dir` once (offline); return the data dir.

    Safe when several processes call it at once (a file lock; see locking.py). A data dir
    that cannot be created or written raises `jaxsel.data.paths.UnusablePath` (one line).
    """
    root = resolve_data_dir(data_dir)
    with quiet_tfds():   # a first look at an empty data dir is no cause for a warning
        if embedded_builder(name, root, **options).is_prepared():
            return root
    ensure_data_dir(root, quiet=False)
    with dataset_lock(root, name, quiet=True):
        with quiet_tfds():   # TFDS would say "downloading": nothing is, it is generated here, quietly
            builder = embedded_builder(name, root, **options)   # re-read: another process may have built it
            if not builder.is_prepared():
                remove_stale_incomplete(Path(builder.data_dir).parent)
                tfds.disable_progress_bar()
                builder.download_and_prepare(
                    download_config=tfds.download.DownloadConfig(try_download_gcs=False))
    return root


def _diagnose(spec: DatasetSpec, split: str, root: Path, err: Exception) -> str:
    """One clear sentence on why a real dataset cannot be opened, and what fixes it."""
    how = spec.prepare_hint(root)
    try:
        with quiet_tfds():
            builder = tfds.builder(spec.source_name, data_dir=str(root))
            prepared = builder.is_prepared()
    except Exception:  # noqa: BLE001  (an unknown TFDS name or an unreadable dir)
        builder, prepared = None, False
    where = Path(builder.data_dir) if builder is not None else root / spec.source_name
    if not prepared:
        return (f"dataset {spec.name!r} is not prepared: no {spec.source_name} ArrayRecord files "
                f"in data_dir {root} (looked for {where}/dataset_info.json). Prepare it once "
                f"(jaxsel never downloads at run time): {how}")
    fmt = builder.info.file_format
    if fmt is not None and fmt.value not in ("array_record", "parquet"):
        return (f"dataset {spec.name!r} in {where} was prepared as {fmt.value}, which has no random "
                f"access; rebuild it as ArrayRecord: `{how}`")
    if split not in builder.info.splits:
        return (f"dataset {spec.name!r} in {where} has no split {split!r}; it has "
                f"{', '.join(builder.info.splits)}")
    return f"dataset {spec.name!r} in {where} could not be opened: {type(err).__name__}: {err}"


def open_source(name: str, split: str, data_dir: str | os.PathLike | None = None,
                decoders=None, **options):
    """A TFDS random-access data source for `name`/`split`.

    Embedded datasets are built on first use; a real dataset that is not in `data_dir`
    raises `DatasetNotPrepared` naming the directory searched and the command that
    prepares it.
    """
    spec = spec_of(name)
    root = resolve_data_dir(data_dir)
    if spec.builder is not None:
        ensure_built(name, root, **options)
        with quiet_tfds():   # TFDS logs "Using custom data configuration" for every mnist1d size
            builder = embedded_builder(name, root, **options)
        return builder.as_data_source(split=split, decoders=decoders)
    if options:
        raise ValueError(f"dataset {name!r} takes no options, got {sorted(options)}")
    try:
        with quiet_tfds():
            return tfds.data_source(spec.source_name, split=split, data_dir=str(root), download=False,
                                    decoders=decoders)
    except Exception as err:  # TFDS raises assorted errors for a missing dataset
        raise DatasetNotPrepared(_diagnose(spec, split, root, err)) from None


def check_prepared(name: str, data_dir=None) -> None:
    """DatasetNotPrepared (naming the command that prepares it) unless dataset `name` is
    prepared in the data dir: checked before a run creates or prints anything (a cheap
    look at its dataset_info.json; opening it is the run's). Embedded datasets are built on
    first use."""
    spec = spec_of(name)
    if spec.builder is not None:
        return
    root = resolve_data_dir(data_dir)
    try:
        with quiet_tfds():
            prepared = tfds.builder(spec.source_name, data_dir=str(root)).is_prepared()
    except Exception:  # noqa: BLE001  (an unknown TFDS name or an unreadable dir)
        prepared = False
    if not prepared:
        raise DatasetNotPrepared(_diagnose(spec, spec.train_split, root, FileNotFoundError(str(root))))


def status(name: str, data_dir=None) -> str:
    """'ready (...)', 'embedded (built on first use)' or 'not prepared: <how>' for listings."""
    spec = spec_of(name)
    root = resolve_data_dir(data_dir)
    try:
        with quiet_tfds():
            builder = (embedded_builder(name, root) if spec.builder is not None
                       else tfds.builder(spec.source_name, data_dir=str(root)))
            prepared = builder.is_prepared()
    except Exception as err:  # noqa: BLE001
        return f"unavailable ({type(err).__name__}: {err})"
    if not prepared:
        return "embedded (built on first use)" if spec.builder is not None else f"not prepared: {spec.prepare_hint(root)}"
    splits = builder.info.splits
    counts = " / ".join(f"{splits[s].num_examples} {s}" for s in (spec.train_split, spec.test_split) if s in splits)
    fmt = builder.info.file_format
    if fmt is not None and fmt.value not in ("array_record", "parquet"):
        return f"prepared as {fmt.value} (needs array_record): {spec.prepare_hint(root)}"
    return f"ready ({counts})"


def read_all(source, keys: tuple[str, ...], chunk: int = 4096) -> dict[str, np.ndarray]:
    """Read every record of a (small) source into stacked NumPy arrays."""
    out: dict[str, list] = {k: [] for k in keys}
    for start in range(0, len(source), chunk):
        records = source.__getitems__(list(range(start, min(start + chunk, len(source)))))
        for k in keys:
            out[k].extend(np.asarray(r[k]) for r in records)
    return {k: np.stack(v) for k, v in out.items()}


def read_split(source, keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    """`read_all`, once per process for the same files (array_cache.py): every run of a
    comparison trains on the same split. The arrays are read-only."""
    return cached_arrays(source, keys, read_all)


def load_arrays(name: str, split: str, data_dir=None, **options) -> dict[str, np.ndarray]:
    """A split fully in memory as {input_key, label_key} arrays (inputs still raw).

    For small sets only; big ones are read per batch (see records.py). Read from disk
    once per process (`read_split`); the arrays returned are the caller's own copies.
    """
    spec = spec_of(name)
    if spec.tokens:
        raise ValueError(f"{name!r} is a language-modelling set; read it with "
                         f"jaxsel.data.pipeline.open_table (token windows), not load_arrays")
    source = open_source(name, split, data_dir, **options)
    return {k: v.copy() for k, v in read_split(source, (spec.input_key, spec.label_key)).items()}


def num_classes(name: str, data_dir=None) -> int:
    spec = spec_of(name)
    if spec.vocab_size:
        return spec.vocab_size
    source = open_source(name, spec.train_split, data_dir)
    return int(source.dataset_info.features[spec.label_key].num_classes)
