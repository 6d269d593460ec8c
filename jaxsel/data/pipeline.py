"""The input side of a training run, built from its `[data]` section (training/sections/data.py).

Dataset by name -> train/test tables (in memory for small sets, record by record for big
ones) -> partition (+ data injection) -> a loader that feeds this process's replicas and
prefetches to the devices -> the on-device augment/normalise transform fused into the
step. Also the facts the model needs: input shape and number of classes, read from the
dataset's metadata (never by scanning the data).
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Mapping

import numpy as np
import tensorflow_datasets as tfds

from ..core import parallel
from ..core.checks import check_int
from ..core.choices import LOADERS  # noqa: F401  (how batches are built, TrainConfig.loader: see `uses_processes`)
from .augment import make_device_transform, normalize_np, with_device_transform
from .catalog import DatasetSpec
from .injection import Injection, parse_injection
from .loader import Loader
from .partition import make_partition, needs_labels
from .records import ArrayTable, RecordTable, SplitView, Subset
from .sources import open_source, read_split, resolve_data_dir, spec_of
from .text import PixelTokens, TokenWindows

DATASET_OPTIONS = ("seq_len", "in_memory", "records_per_window", "num_samples", "seed")
#: threads building in-memory batches when loader_workers is unset
DEFAULT_THREADS = 2


@dataclasses.dataclass
class Input:
    spec: DatasetSpec
    loader: Loader
    test: Mapping                    # evaluation split: normalised inputs and labels
    input_shape: tuple[int, ...]
    num_classes: int
    device_transform: Callable | None
    mesh: Any

    def wrap_step(self, step_fn):
        """The train step with the on-device augment/normalise transform in front."""
        return with_device_transform(step_fn, self.device_transform, self.mesh)


def _takes(spec: DatasetSpec, option: str) -> bool:
    """Which datasets an option applies to: token windows (text), holding a split in memory
    (labelled sets), the generator's settings (mnist1d)."""
    from .mnist1d import Mnist1D

    if option in ("seq_len", "records_per_window"):
        return spec.kind == "text"
    if option == "in_memory":
        return not spec.tokens
    return spec.builder is Mnist1D


def check_dataset_options(spec: DatasetSpec, options: dict) -> None:
    """ValueError naming an option `spec` does not take or a bad value (before any data is read)."""
    from .mnist1d import check_generator_options

    unknown = sorted(set(options) - set(DATASET_OPTIONS))
    if unknown:
        raise ValueError(f"unknown dataset option(s) {', '.join(map(repr, unknown))}; allowed: "
                         f"{', '.join(DATASET_OPTIONS)}")
    foreign = [k for k in options if not _takes(spec, k)]
    if foreign:
        takes = [k for k in DATASET_OPTIONS if _takes(spec, k)]
        raise ValueError(f"dataset {spec.name!r} takes no option {', '.join(map(repr, foreign))}; its options: "
                         f"{', '.join(takes) or 'none'}")
    for key in ("seq_len", "records_per_window"):
        check_int(f"dataset option {key}", options.get(key, 1), 1)
    if not isinstance(options.get("in_memory", True), bool):
        raise ValueError(f"dataset option in_memory must be true or false, got {options['in_memory']!r}")
    generator = {k: options[k] for k in ("num_samples", "seed") if k in options}
    if generator:
        check_generator_options(**generator)


def _split_options(spec: DatasetSpec, options: dict) -> tuple[dict, dict]:
    """(how the split is read, how a generated set is built): options the data section
    checked (`check_dataset_options`)."""
    read = {k: options[k] for k in ("seq_len", "in_memory", "records_per_window") if k in options}
    build = {k: options[k] for k in ("num_samples", "seed") if k in options}
    return read, build


def open_table(spec: DatasetSpec, split: str, data_dir=None, options: dict | None = None):
    """A split as a table the loader can `take(indices)` from. In-memory splits are read
    once per process (`sources.read_split`: a comparison's runs share them, read-only)."""
    read, build = _split_options(spec, dict(options or {}))
    source = open_source(spec.name, split, data_dir, **build)
    if spec.kind == "pixel_tokens":
        return PixelTokens(read_split(source, ("image",))["image"])
    if spec.kind == "text":
        return TokenWindows(source, spec.text_key, read.get("seq_len", spec.seq_len),
                            read.get("records_per_window"))
    if read.get("in_memory", spec.in_memory):
        return ArrayTable(read_split(source, (spec.input_key, spec.label_key)))
    return RecordTable(source, spec)


def label_column(spec: DatasetSpec, split: str, table, data_dir=None) -> np.ndarray:
    """Every training label (label-aware partitions, injection).

    In-memory tables have them; for record tables one pass reads the labels with the
    images left encoded, cached as .npy under the data dir for later runs.
    """
    if isinstance(table, ArrayTable):
        return table.column(spec.label_key)
    cache = resolve_data_dir(data_dir) / "jaxsel_cache" / f"{spec.source_name}-{split}-{len(table)}-labels.npy"
    if cache.exists():
        return np.load(cache)
    try:
        raw = open_source(spec.name, split, data_dir, decoders={spec.input_key: tfds.decode.SkipDecoding()})
        labels = RecordTable(raw, spec).column(spec.label_key)
    except Exception:  # noqa: BLE001  (sources that must decode, e.g. TFDS's mock, which needs TF to re-encode)
        labels = table.column(spec.label_key)
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        np.save(cache, labels)
    except OSError:
        pass
    return labels


def input_shape_and_classes(spec: DatasetSpec, table, data_dir=None, options: dict | None = None):
    """(input shape without the batch dim, number of classes) from metadata."""
    if spec.tokens:
        seq = (options or {}).get("seq_len", spec.seq_len)
        return (int(seq),), int(spec.vocab_size)
    _, build = _split_options(spec, dict(options or {}))
    features = open_source(spec.name, spec.train_split, data_dir, **build).dataset_info.features
    shape = tuple(features[spec.input_key].shape)
    if spec.image_size is not None:
        shape = (*spec.image_size, shape[-1])
    if any(d is None for d in shape):
        raise ValueError(f"dataset {spec.name!r} has variable input shape {shape}; give its spec an image_size")
    return shape, int(features[spec.label_key].num_classes)


def eval_split(spec: DatasetSpec, table, limit: int | None = None) -> Mapping:
    """The test split as the evaluator's {key: array} mapping, inputs normalised on the host."""
    if limit is not None:
        table = Subset(table, limit)
    keys = ("tokens", "targets") if spec.tokens else (spec.input_key, spec.label_key)

    def transform(batch):
        if spec.tokens:
            return batch
        return {**batch, spec.input_key: normalize_np(batch[spec.input_key], spec)}

    if isinstance(table, (ArrayTable, PixelTokens)) or (isinstance(table, Subset) and
                                                        isinstance(table.table, (ArrayTable, PixelTokens))):
        return transform(table.take(np.arange(len(table))))
    return SplitView(table, keys, transform)


def decoded_on_host(spec: DatasetSpec, table) -> bool:
    """Image records read and decoded per batch (imagenet2012, cars196, image folders)."""
    return spec.kind == "image" and isinstance(table, RecordTable)


def uses_processes(loader: str, spec: DatasetSpec, table) -> bool:
    """Grain worker processes, or threads. `auto`: processes where batches are decoded on
    the host (decoding holds the GIL: threads stay near one core's rate), threads for
    in-memory tables, where a batch is a gather and processes only add copies
    (BENCHMARKS.md, "Input pipeline on JPEG-encoded records")."""
    return loader == "grain" or (loader == "auto" and decoded_on_host(spec, table))


def default_workers(processes: bool) -> int:
    """All cores this process may use but one (the training loop's) for worker
    processes; DEFAULT_THREADS threads otherwise."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores - 1) if processes else DEFAULT_THREADS


def build_input(data, mesh, *, replicas: int, batch_size: int, seed: int = 0,
                eval_examples: int | None = None) -> Input:
    """Everything on the data side of a run: `data`, the run's `[data]` section
    (training/sections/data.py, checked there: options are not checked again here), and the
    few facts of the other sections a pipeline needs (the replicas the partition shards for,
    their batch, the seed of the data's order and augmentation, the test examples used)."""
    spec = spec_of(data.dataset)
    options = dict(data.dataset_options or {})
    train = open_table(spec, spec.train_split, data.data_dir, options)
    test = open_table(spec, spec.test_split, data.data_dir, options)
    popts = dict(data.partition_options or {})
    inject = parse_injection(popts.pop("injection", None))
    labels = None
    if needs_labels(data.partition) or inject:
        if spec.tokens:
            raise ValueError(f"partition {data.partition!r} / injection need class labels; "
                             f"{spec.name!r} is a language-modelling set")
        labels = label_column(spec, spec.train_split, train, data.data_dir)
    partition = make_partition(data.partition, labels, replicas, seed=seed, num_examples=len(train), **popts)
    injection = Injection.build(partition, labels, batch_size, *inject, seed=seed) if inject else None
    processes = uses_processes(data.loader, spec, train)
    loader = Loader(train, partition, batch_size, parallel.local_replica_ids(mesh, replicas),
                    injection=injection, mesh=mesh, workers=data.loader_workers or default_workers(processes),
                    device_prefetch=data.prefetch, processes=processes)
    shape, classes = input_shape_and_classes(spec, train, data.data_dir, options)
    transform = make_device_transform(spec, mesh, seed, data.augment, replicas=replicas)
    return Input(spec, loader, eval_split(spec, test, eval_examples), shape, classes, transform, mesh)
