"""Embedded offline dataset `mnist1d`: the MNIST-1D benchmark (Greydanus & Steinbach).

Generated procedurally with the `mnist1d` package's own generator (`make_dataset`, never
its downloader), then written into the local TFDS data dir as ArrayRecord and read back
with TFDS like any other dataset. The published defaults give 4000 train / 1000 test
length-40 float signals (standardised to mean 0, std 1) in 10 classes; other sizes are
builder configs named `n<num_samples>`.
"""
from __future__ import annotations

import random

import numpy as np
import tensorflow_datasets as tfds

from ..core.checks import INT32_MAX

DEFAULT_SAMPLES = 5000  # the package's default: 80 % train -> 4000 / 1000


def check_generator_options(num_samples: int = DEFAULT_SAMPLES, seed: int = 42) -> None:
    """ValueError naming a bad generator setting (the 80/20 split needs multiples of 10)."""
    def integer(v) -> bool:
        return isinstance(v, (int, np.integer)) and not isinstance(v, bool)

    if not (integer(num_samples) and 20 <= num_samples <= INT32_MAX and num_samples % 10 == 0):
        raise ValueError(f"mnist1d num_samples must be a multiple of 10, >= 20 and <= {INT32_MAX}, "
                         f"got {num_samples!r}")
    if not (integer(seed) and 0 <= seed < 2**32):
        raise ValueError(f"mnist1d seed must be an integer in 0..{2**32 - 1}, got {seed!r}")


class Mnist1DConfig(tfds.core.BuilderConfig):
    """Generator settings; everything else keeps the package's published defaults."""

    def __init__(self, *, num_samples: int = DEFAULT_SAMPLES, seed: int = 42, **kwargs):
        check_generator_options(num_samples, seed)
        super().__init__(**kwargs)
        self.num_samples, self.seed = int(num_samples), int(seed)


def config_for(num_samples: int = DEFAULT_SAMPLES, seed: int = 42) -> Mnist1DConfig:
    """The builder config for a dataset of `num_samples` (the default one is named "default")."""
    if num_samples == DEFAULT_SAMPLES and seed == 42:
        return Mnist1D.BUILDER_CONFIGS[0]
    name = f"n{num_samples}" + (f"_s{seed}" if seed != 42 else "")
    return Mnist1DConfig(name=name, num_samples=num_samples, seed=seed,
                         description=f"{num_samples} samples, seed {seed}")


def mnist1d_arrays(num_samples: int = DEFAULT_SAMPLES, seed: int = 42) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Train/test (x float32 [n, 40], y int64 [n]) from the package's generator.

    The generator seeds NumPy's and Python's global RNGs; both are restored afterwards so
    building the dataset leaves the caller's random state untouched.
    """
    from mnist1d.data import get_dataset_args, make_dataset

    args = get_dataset_args()
    args.num_samples, args.seed = int(num_samples), int(seed)
    np_state, py_state = np.random.get_state(), random.getstate()
    try:
        d = make_dataset(args)
    finally:
        np.random.set_state(np_state)
        random.setstate(py_state)
    return {"train": (d["x"].astype(np.float32), d["y"].astype(np.int64)),
            "test": (d["x_test"].astype(np.float32), d["y_test"].astype(np.int64))}


class Mnist1D(tfds.core.GeneratorBasedBuilder):
    """MNIST-1D: ten 1-D digit templates, randomly padded, translated, sheared, scaled and noised."""

    name = "mnist1d"
    VERSION = tfds.core.Version("1.0.0")
    BUILDER_CONFIGS = [Mnist1DConfig(name="default", description="published defaults: 4000 / 1000")]

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            description="MNIST-1D generated offline with the mnist1d package's make_dataset.",
            features=tfds.features.FeaturesDict({
                "x": tfds.features.Tensor(shape=(40,), dtype=np.float32),
                "label": tfds.features.ClassLabel(num_classes=10),
            }),
            supervised_keys=("x", "label"),
            disable_shuffling=True,
        )

    def _split_generators(self, dl_manager):
        arrays = mnist1d_arrays(self.builder_config.num_samples, self.builder_config.seed)
        return {split: self._generate_examples(*arrays[split]) for split in arrays}

    def _generate_examples(self, xs, ys):
        for i, (x, y) in enumerate(zip(xs, ys)):
            yield i, {"x": x, "label": int(y)}
