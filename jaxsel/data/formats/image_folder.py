"""An image-folder tree: one sub-folder per split, one sub-sub-folder per class.

    ROOT/train/<class>/*.jpg|*.jpeg|*.png
    ROOT/val/<class>/...          (ImageNet-style; `validation` is accepted too)
    ROOT/test/<class>/...         (Stanford Cars as users export it)

Images are stored as the bytes of their file when these are already RGB JPEG (or PNG
where the dataset allows it), so preparing never re-compresses; anything else (CMYK or
greyscale JPEG, palette PNG, ...) is converted to RGB once. An image whose header announces
more pixels than Pillow's decompression-bomb limit (`PIL.Image.MAX_IMAGE_PIXELS`, about 89
million: 9459 x 9459) is refused before it is decoded: a 70000 x 70000 PNG of a few KB
would need 14 GiB.
"""
from __future__ import annotations

import io
import warnings
from pathlib import Path

from . import FormatError

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png"}


def list_split(split_dir: Path) -> list[tuple[Path, str]]:
    """(image path, class folder name) pairs, sorted by class then file name."""
    classes = sorted(d for d in split_dir.iterdir() if d.is_dir())
    if not classes:
        raise FormatError(f"{split_dir} has no class sub-folders (expected {split_dir}/<class>/*.jpg)")
    files = [(f, c.name) for c in classes
             for f in sorted(c.iterdir()) if f.suffix.lower() in IMAGE_SUFFIXES and f.is_file()]
    if not files:   # a split without examples: TFDS would fail to finalise it
        raise FormatError(f"{split_dir} holds no images: none of its {len(classes)} class sub-folders has a "
                          f"{', '.join(sorted(IMAGE_SUFFIXES))} file")
    return files


def list_tree(root: Path, split_dirs: dict[str, str]) -> dict[str, list[tuple[Path, str]]]:
    """{split: [(path, class name)]} for the split folders of `split_dirs` (folder -> split)."""
    root = Path(root)
    if not root.is_dir():
        raise FormatError(f"{root} is not a folder (expected {root}/<split>/<class>/<image>)")
    out: dict[str, list] = {}
    for folder, split in split_dirs.items():
        if (root / folder).is_dir() and split not in out:
            out[split] = list_split(root / folder)
    if not out:
        raise FormatError(f"{root} has none of the split folders {', '.join(split_dirs)} "
                          f"(expected {root}/<split>/<class>/<image>)")
    return out


def image_bytes(path: Path, allowed: tuple[str, ...] = ("JPEG",)) -> bytes:
    """The file's bytes if it is an RGB image in an `allowed` format, else an RGB re-encode
    in the first allowed format (JPEG at quality 95, or lossless PNG)."""
    from PIL import Image, UnidentifiedImageError

    raw = path.read_bytes()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)   # past the limit: an error too
            with Image.open(io.BytesIO(raw)) as im:
                if im.format in allowed and im.mode == "RGB":
                    return raw
                rgb = im.convert("RGB")
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as err:
        raise FormatError(f"{path} is too large an image to prepare ({err}); remove it or scale it down") from None
    except (UnidentifiedImageError, OSError) as err:
        raise FormatError(f"{path} is not a readable image ({err})") from None
    out = io.BytesIO()
    rgb.save(out, format=allowed[0], **({"quality": 95} if allowed[0] == "JPEG" else {}))
    return out.getvalue()
