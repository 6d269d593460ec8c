"""Embedded offline dataset `digits`: scikit-learn's bundled 8x8 handwritten digits.

Written once into a local TFDS data dir as an ArrayRecord dataset, then read back with
`tfds.data_source` like any other TFDS dataset: no TensorFlow, no network. The split is
fixed (stratified, seed 0): 1437 train / 360 test images of shape (8, 8, 1), uint8 0..16.
"""
from __future__ import annotations

import numpy as np
import tensorflow_datasets as tfds

TEST_FRACTION = 0.2
SPLIT_SEED = 0


def digits_arrays() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The fixed train/test split as (images uint8 [n,8,8,1], labels int64 [n])."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    images = d.images.astype(np.uint8)[..., None]
    labels = d.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(
        images, labels, test_size=TEST_FRACTION, random_state=SPLIT_SEED, stratify=labels
    )
    return {"train": (x_tr, y_tr), "test": (x_te, y_te)}


class Digits(tfds.core.GeneratorBasedBuilder):
    """scikit-learn digits (UCI ML hand-written digits, 8x8, 10 classes)."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            description="scikit-learn's bundled 8x8 digits, fixed stratified split (seed 0).",
            features=tfds.features.FeaturesDict({
                "image": tfds.features.Tensor(shape=(8, 8, 1), dtype=np.uint8),
                "label": tfds.features.ClassLabel(num_classes=10),
            }),
            supervised_keys=("image", "label"),
            disable_shuffling=True,
        )

    def _split_generators(self, dl_manager):
        arrays = digits_arrays()
        return {split: self._generate_examples(*arrays[split]) for split in arrays}

    def _generate_examples(self, images, labels):
        for i, (x, y) in enumerate(zip(images, labels)):
            yield i, {"image": x, "label": int(y)}
