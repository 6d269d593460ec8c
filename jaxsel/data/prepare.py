"""`jaxsel prepare NAME --from PATH`: a real dataset from the user's files, once, safely.

Writes the TFDS ArrayRecord dataset that `tfds.data_source(NAME, data_dir=...)` reads,
with no TensorFlow and no network (converters.py). TFDS builds into `incomplete.*` and
renames into place only when every split is written, so an interrupted preparation is
never mistaken for a complete one; the file lock (locking.py) makes concurrent preparers
of one dataset produce it once, all succeeding.
"""
from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import tensorflow_datasets as tfds

from .locking import dataset_lock, remove_stale_incomplete
from .paths import readable_path, undo_created
from .sources import quiet_tfds, ensure_built, ensure_data_dir, resolve_data_dir, spec_of

# what --from points at, per dataset (shown in errors and in `jaxsel datasets`)
SOURCES = {
    "cifar10": "cifar-10-python.tar.gz (or the cifar-10-batches-py folder)",
    "cifar100": "cifar-100-python.tar.gz (or the cifar-100-python folder)",
    "mnist": "a folder with the 4 MNIST IDX files (train-images-idx3-ubyte[.gz], ...)",
    "fashion_mnist": "a folder with the 4 Fashion-MNIST IDX files (train-images-idx3-ubyte[.gz], ...)",
    "imagenet2012": "a folder with train/ and val/, one sub-folder per synset (n01440764/...)",
    "cars196": "a folder with train/ and test/, one sub-folder per class name",
}


class CannotPrepare(ValueError):
    """`jaxsel prepare` was asked for something it cannot do (one line, exit 2)."""


def _say(quiet: bool, text: str) -> None:
    if not quiet:
        print(text, file=sys.stderr, flush=True)


def prepare(name: str, source: str | os.PathLike | None = None, data_dir=None, *,
            progress: bool = True, quiet: bool = False) -> Path:
    """Prepare dataset `name` in `data_dir` (from `source` for real ones); return the
    folder holding it. Already prepared: nothing is read or written."""
    try:
        spec = spec_of(name)
    except ValueError as err:
        raise CannotPrepare(str(err)) from None
    root = resolve_data_dir(data_dir)
    if spec.builder is not None:           # embedded: built offline, `source` not needed
        if source is not None:
            raise CannotPrepare(f"{name!r} is embedded (built offline); drop --from")
        ensure_built(name, root)
        return root / spec.source_name
    if spec.source_name not in SOURCES:
        raise CannotPrepare(f"jaxsel cannot prepare {name!r} from local files (it can: "
                         f"{', '.join(SOURCES)}); {spec.prepare_hint(root)}")
    if source is None:
        raise CannotPrepare(f"preparing {name!r} needs --from PATH: {SOURCES[spec.source_name]}")
    source = readable_path(source, "--from")
    existed = root.is_dir()
    ensure_data_dir(root, quiet=quiet)
    # what this preparation creates, removed again if it fails (empty but for lock files, which
    # stay: another preparer may be waiting on one)
    fresh = [p for p in (root / "downloads", root / spec.source_name) if not p.exists()]
    with contextlib.ExitStack() as undo:
        undo.enter_context(undo_created(root, not existed))
        for path in fresh:
            undo.enter_context(undo_created(path, True))
        return _build(spec.source_name, source, root, progress=progress, quiet=quiet)


def _build(name: str, source: Path, root: Path, *, progress: bool, quiet: bool) -> Path:
    from .converters import CONVERTERS

    with dataset_lock(root, name, quiet=quiet), quiet_tfds():
        builder = CONVERTERS[name](source=source, data_dir=str(root), file_format="array_record")
        where = Path(builder.data_dir)
        if builder.is_prepared():
            _say(quiet, f"{name} is already prepared in {where}")
            return where
        remove_stale_incomplete(where.parent)
        (tfds.enable_progress_bar if progress else tfds.disable_progress_bar)()
        _say(quiet, f"preparing {name} from {source} into {where}")
        builder.download_and_prepare(
            download_dir=str(root / "downloads"),
            download_config=tfds.download.DownloadConfig(try_download_gcs=False))
    counts = ", ".join(f"{s.num_examples} {s.name}" for s in builder.info.splits.values())
    _say(quiet, f"prepared {name} ({counts}) in {where}")
    return where
