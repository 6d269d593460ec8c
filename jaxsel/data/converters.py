"""TFDS builders that read the files users have instead of downloading.

Each converter subclasses the TFDS builder of the same dataset (`tfds.builder_cls`) and
replaces only where the examples come from, so the feature names, shapes, dtypes, splits,
label ids and version are the TFDS builder's own, and a dataset prepared here reads
exactly like one made by `tfds build` (the same example keys even give the same record
order). Images are handed to TFDS already encoded (PNG for arrays, the file's bytes for
image folders): TFDS encodes NumPy images with TensorFlow, which jaxsel does not need.
"""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import tensorflow_datasets as tfds

from .formats import FormatError
from .formats.cifar import CIFAR10, CIFAR100, IMAGE_SHAPE, read_cifar
from .formats.idx import read_mnist_folder
from .formats.image_folder import image_bytes, list_tree


def png(image: np.ndarray) -> bytes:
    """Lossless PNG bytes of a uint8 (H, W, C) image (C = 1 or 3)."""
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(image[..., 0] if image.shape[-1] == 1 else image).save(out, format="PNG")
    return out.getvalue()


def check_labels(labels: np.ndarray, num_classes: int, where: str) -> None:
    bad = labels[(labels < 0) | (labels >= num_classes)]
    if bad.size:
        raise FormatError(f"{where}: label {int(bad[0])} is outside 0..{num_classes - 1}")


class FromFiles:
    """Mixin: a builder that reads `source` (a user's file or folder), never the network."""

    def __init__(self, *, source, **kwargs):
        self.source = Path(source)
        super().__init__(**kwargs)


class Cifar10FromTarball(FromFiles, tfds.builder_cls("cifar10"), skip_registration=True):
    name = "cifar10"
    LAYOUT = CIFAR10

    def _split_generators(self, dl_manager):
        splits, names = read_cifar(self.source, self.LAYOUT)
        for feature, class_names in names.items():
            if class_names:
                self.info.features[feature].names = class_names
        for split, (images, labels) in splits.items():
            for feature, values in labels.items():
                check_labels(values, self.info.features[feature].num_classes, f"{self.source} ({split})")
        return {split: self._cifar_examples(split, images, labels)
                for split, (images, labels) in splits.items()}

    def _cifar_examples(self, split, images, labels):
        """TFDS's keys and ids (`train_00042`): the same record order as `tfds build`."""
        assert images.shape[1:] == IMAGE_SHAPE
        for i, image in enumerate(images):
            record = {feature: int(values[i]) for feature, values in labels.items()}
            yield i, {"id": f"{split}_{i:05d}", "image": png(image), **record}


class Cifar100FromTarball(Cifar10FromTarball, tfds.builder_cls("cifar100"), skip_registration=True):
    name = "cifar100"
    LAYOUT = CIFAR100


class MnistFromIdx(FromFiles, tfds.builder_cls("mnist"), skip_registration=True):
    name = "mnist"

    def _split_generators(self, dl_manager):
        splits = read_mnist_folder(self.source)
        num_classes = self.info.features["label"].num_classes
        for split, (images, labels) in splits.items():
            check_labels(labels, num_classes, f"{self.source} ({split})")
            if images.shape[1:] != (28, 28, 1):
                raise FormatError(f"{self.source} ({split}): images are {images.shape[1:3]}, not 28x28")
        return {split: self._idx_examples(*arrays) for split, arrays in splits.items()}

    def _idx_examples(self, images, labels):
        for i, (image, label) in enumerate(zip(images, labels)):
            yield i, {"image": png(image), "label": int(label)}


class FashionMnistFromIdx(MnistFromIdx, tfds.builder_cls("fashion_mnist"), skip_registration=True):
    name = "fashion_mnist"


class FromImageFolder(FromFiles):
    """Mixin for image-folder datasets: `SPLIT_DIRS` maps split folders to TFDS splits."""

    SPLIT_DIRS: dict[str, str] = {}
    FORMATS: tuple[str, ...] = ("JPEG",)

    def class_name(self, folder: str) -> str:
        """The TFDS class name a class folder stands for (FormatError if none)."""
        names = self.info.features["label"].names
        if folder not in names:
            raise FormatError(f"class folder {folder!r} in {self.source} is not one of the "
                              f"{len(names)} {self.name} classes (e.g. {names[0]!r})")
        return folder

    def _split_generators(self, dl_manager):
        tree = list_tree(self.source, self.SPLIT_DIRS)
        for files in tree.values():       # fail before writing anything
            for folder in sorted({c for _, c in files}):
                self.class_name(folder)
        return {split: self._folder_examples(files) for split, files in tree.items()}

    def _folder_examples(self, files):
        unique = len({p.name for p, _ in files}) == len(files)
        for path, folder in files:
            key = path.name if unique else f"{folder}/{path.name}"
            yield key, self.record(path, self.class_name(folder))


class Imagenet2012FromFolder(FromImageFolder, tfds.builder_cls("imagenet2012"), skip_registration=True):
    """Class folders are WordNet synset ids (n01440764, ...), as in the ILSVRC tarballs."""

    name = "imagenet2012"
    SPLIT_DIRS = {"train": "train", "val": "validation", "validation": "validation"}

    def record(self, path: Path, label: str) -> dict:
        return {"file_name": path.name, "image": image_bytes(path, self.FORMATS), "label": label}


class Cars196FromFolder(FromImageFolder, tfds.builder_cls("cars196"), skip_registration=True):
    """Class folders are the class names ('AM General Hummer SUV 2000'; '/' may be '-')."""

    name = "cars196"
    SPLIT_DIRS = {"train": "train", "test": "test"}
    FORMATS = ("JPEG", "PNG")

    def class_name(self, folder: str) -> str:
        names = self.info.features["label"].names
        spelled = {n.replace("/", sep): n for n in names for sep in ("-", "_")}
        return super().class_name(spelled.get(folder, folder))

    def record(self, path: Path, label: str) -> dict:
        """A folder export has no boxes: the box is the whole image."""
        whole = tfds.features.BBox(ymin=0.0, xmin=0.0, ymax=1.0, xmax=1.0)
        return {"image": image_bytes(path, self.FORMATS), "label": label, "bbox": whole, "id": path.stem}


CONVERTERS: dict[str, type] = {
    "cifar10": Cifar10FromTarball, "cifar100": Cifar100FromTarball,
    "mnist": MnistFromIdx, "fashion_mnist": FashionMnistFromIdx,
    "imagenet2012": Imagenet2012FromFolder, "cars196": Cars196FromFolder,
}
