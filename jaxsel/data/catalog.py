"""The dataset catalogue: every dataset jaxsel knows by name and how to read it.

A `DatasetSpec` says which TFDS dataset holds the examples, which keys are inputs and
labels, how inputs are scaled and normalised, whether they are augmented, and whether a
split is small enough to hold in memory (else batches are read record by record). Real
datasets come from a local TFDS data dir; embedded ones are built offline on first use.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

KINDS = ("image", "sequence", "text", "pixel_tokens")

TFDS_BUILD = "tfds build {tfds} --data_dir {root} --file_format array_record"
TFDS_ROUTE = 'with TensorFlow: pip install "jaxsel[tfds-build]" && ' + TFDS_BUILD


def jaxsel_prepare(source: str) -> str:
    """The hint for a dataset `jaxsel prepare` makes from the user's files (see prepare.py)."""
    return "jaxsel prepare {tfds} --from " + source + " --data-dir {root} (or, " + TFDS_ROUTE + ")"



@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    """How to read and normalise one dataset.

    Normalisation is `(x / scale - mean) / std` per channel (mean/std None: only the
    scale). `image_size` resizes variable-size images on the host (shorter side, then
    centre crop) so batches stack. `augment` turns on the on-device random crop
    (`crop_padding` pixels each side, zero fill) and horizontal flip by default.
    """

    name: str
    input_key: str = "image"
    label_key: str = "label"
    scale: float = 255.0
    builder: Callable | None = None          # embedded: a TFDS builder class built offline
    tfds_name: str | None = None             # TFDS dataset holding the examples (default: name)
    kind: str = "image"                      # see KINDS
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    image_size: tuple[int, int] | None = None
    augment: bool = False
    crop_padding: int = 4
    in_memory: bool = True                   # False: random access per batch (big sets)
    train_split: str = "train"
    test_split: str = "test"
    text_key: str = "text"                   # kind "text": the raw text feature
    seq_len: int | None = None               # token kinds: tokens per window
    vocab_size: int | None = None            # token kinds: the model's output classes
    num_classes: int | None = None           # label classes, for checks before any data is read (None: unknown)
    prepare: str = TFDS_ROUTE                # shown when the dataset is missing
    description: str = ""

    @property
    def source_name(self) -> str:
        return self.tfds_name or self.name

    @property
    def tokens(self) -> bool:
        """Language-model data: batches are {"tokens", "targets"} int windows."""
        return self.kind in ("text", "pixel_tokens")

    def prepare_hint(self, root) -> str:
        return self.prepare.format(tfds=self.source_name, root=root)


CIFAR10_MEAN, CIFAR10_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
CIFAR100_MEAN, CIFAR100_STD = (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
IMAGENET_PREPARE = (
    "jaxsel prepare {tfds} --from IMAGENET_DIR "
    "--data-dir {root} (or, with TensorFlow: put ILSVRC2012_img_train.tar and "
    "ILSVRC2012_img_val.tar in {root}/downloads/manual, then "
    'pip install "jaxsel[tfds-build]" && ' + TFDS_BUILD + ")"
)
TOKENS = {"input_key": "tokens", "label_key": "targets", "scale": 1.0}


def _specs() -> list[DatasetSpec]:
    from .digits import Digits
    from .mnist1d import Mnist1D

    return [
        DatasetSpec("digits", num_classes=10, scale=16.0, builder=Digits, prepare="built offline on first use",
                    description="scikit-learn 8x8 digits, 1437/360, embedded"),
        DatasetSpec("mnist1d", num_classes=10, input_key="x", scale=1.0, kind="sequence", builder=Mnist1D,
                    prepare="built offline on first use",
                    description="MNIST-1D, 4000/1000 length-40 signals, generated offline"),
        DatasetSpec("digits_tokens", tfds_name="digits", kind="pixel_tokens", seq_len=63,
                    vocab_size=17, builder=Digits, prepare="built offline on first use",
                    description="digits as 64-token sequences of 17 intensities (tiny LM)", **TOKENS),
        DatasetSpec("mnist", num_classes=10, mean=(0.1307,), std=(0.3081,), prepare=jaxsel_prepare("MNIST_IDX_DIR"),
                    description="MNIST 28x28x1"),
        DatasetSpec("fashion_mnist", num_classes=10, mean=(0.2860,), std=(0.3530,),
                    prepare=jaxsel_prepare("FASHION_MNIST_IDX_DIR"), description="Fashion-MNIST 28x28x1"),
        DatasetSpec("cifar10", num_classes=10, mean=CIFAR10_MEAN, std=CIFAR10_STD, augment=True,
                    prepare=jaxsel_prepare("cifar-10-python.tar.gz"),
                    description="CIFAR-10 32x32x3, 50000/10000"),
        DatasetSpec("cifar100", num_classes=100, mean=CIFAR100_MEAN, std=CIFAR100_STD, augment=True,
                    prepare=jaxsel_prepare("cifar-100-python.tar.gz"),
                    description="CIFAR-100 32x32x3 (fine labels), 50000/10000"),
        DatasetSpec("imagenet2012", num_classes=1000, mean=IMAGENET_MEAN, std=IMAGENET_STD, image_size=(224, 224),
                    augment=True, crop_padding=28, in_memory=False, test_split="validation",
                    prepare=IMAGENET_PREPARE, description="ImageNet-1k, resized to 224x224"),
        DatasetSpec("cars196", num_classes=196, mean=IMAGENET_MEAN, std=IMAGENET_STD, image_size=(224, 224),
                    augment=True, crop_padding=28, in_memory=False,
                    prepare=jaxsel_prepare("CARS_DIR"),
                    description="Stanford Cars 196 classes, resized to 224x224"),
        DatasetSpec("lm1b", kind="text", seq_len=128, vocab_size=256, in_memory=False, prepare=TFDS_ROUTE,
                    description="One Billion Word benchmark, byte-level 128-token windows", **TOKENS),
    ]


CATALOG: dict[str, DatasetSpec] = {s.name: s for s in _specs()}
