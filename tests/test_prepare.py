"""`jaxsel prepare`: synthetic files in each real format -> prepare (through the CLI) ->
`tfds.data_source` gives back the exact pixels and labels written; training runs on a
dataset prepared that way; concurrent preparers make one dataset; bad paths are one line."""
import gzip
import io
import json
import os
import pickle
import subprocess
import sys
import tarfile

import numpy as np
import pytest
import tensorflow_datasets as tfds
from PIL import Image

from jaxsel.cli import main as cli_main


def write_cifar_tarball(path, per_batch: int = 4, seed: int = 0, hundred: bool = False):
    """A `cifar-10-python.tar.gz` (or -100) of pickled batches like the real ones;
    returns {split: (data (N, 3072) uint8, {pickle key: labels})}."""
    rng = np.random.default_rng(seed)
    folder = "cifar-100-python" if hundred else "cifar-10-batches-py"
    if hundred:
        splits = {"train": ["train"], "test": ["test"]}
        meta = ("meta", {b"fine_label_names": [f"f{i}".encode() for i in range(100)],
                         b"coarse_label_names": [f"k{i}".encode() for i in range(20)]})
        keys = {b"fine_labels": 100, b"coarse_labels": 20}
    else:
        splits = {"train": [f"data_batch_{i}" for i in range(1, 6)], "test": ["test_batch"]}
        meta = ("batches.meta", {b"label_names": [f"class{i}".encode() for i in range(10)]})
        keys = {b"labels": 10}
    written = {}
    with tarfile.open(path, "w:gz") as tar:
        def add(name, obj):
            raw = pickle.dumps(obj, protocol=2)
            info = tarfile.TarInfo(f"{folder}/{name}")
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))

        add(*meta)
        for split, names in splits.items():
            parts = []
            for name in names:
                batch = {b"data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8),
                         **{k: [int(v) for v in rng.integers(0, n, per_batch)] for k, n in keys.items()}}
                add(name, batch)
                parts.append(batch)
            written[split] = (np.concatenate([b[b"data"] for b in parts]),
                              {k.decode(): sum((b[k] for b in parts), []) for k in keys})
    return written


def by_id(source) -> dict[int, dict]:
    records = source.__getitems__(list(range(len(source))))
    return {int(r["id"].decode().split("_")[1]): r for r in records}


def prepare(*args) -> int:
    return cli_main(["prepare", *map(str, args), "--no-progress"])


@pytest.mark.parametrize("hundred", [False, True])
def test_cifar_tarball_round_trip(tmp_path, hundred):
    name = "cifar100" if hundred else "cifar10"
    written = write_cifar_tarball(tmp_path / "cifar-python.tar.gz", hundred=hundred)
    assert prepare(name, "--from", tmp_path / "cifar-python.tar.gz", "--data-dir", tmp_path / "data") == 0
    for split, (data, labels) in written.items():
        source = tfds.data_source(name, split=split, data_dir=str(tmp_path / "data"))
        records = by_id(source)
        assert sorted(records) == list(range(len(data)))
        for i, r in records.items():
            assert r["image"].shape == (32, 32, 3) and r["image"].dtype == np.uint8
            np.testing.assert_array_equal(r["image"], data[i].reshape(3, 32, 32).transpose(1, 2, 0))
            if hundred:
                assert (r["label"], r["coarse_label"]) == (labels["fine_labels"][i], labels["coarse_labels"][i])
            else:
                assert r["label"] == labels["labels"][i]
    label = source.dataset_info.features["label"]
    assert label.names[:2] == (["f0", "f1"] if hundred else ["class0", "class1"])


def write_idx(path, array: np.ndarray, compress: bool) -> None:
    code = {1: 0x08}[array.dtype.itemsize]
    header = bytes([0, 0, code, array.ndim]) + np.asarray(array.shape, ">u4").tobytes()
    raw = header + array.tobytes()
    path.write_bytes(gzip.compress(raw) if compress else raw)


@pytest.mark.parametrize("name,compress", [("mnist", True), ("fashion_mnist", False)])
def test_idx_round_trip(tmp_path, name, compress):
    rng = np.random.default_rng(1)
    src = tmp_path / "idx"
    src.mkdir()
    written = {}
    for split, prefix, n in (("train", "train", 7), ("test", "t10k", 3)):
        images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, n).astype(np.uint8)
        suffix = ".gz" if compress else ""
        write_idx(src / f"{prefix}-images-idx3-ubyte{suffix}", images, compress)
        write_idx(src / f"{prefix}-labels-idx1-ubyte{suffix}", labels, compress)
        written[split] = (images, labels)
    assert prepare(name, "--from", src, "--data-dir", tmp_path / "data") == 0
    for split, (images, labels) in written.items():
        source = tfds.data_source(name, split=split, data_dir=str(tmp_path / "data"))
        got = source.__getitems__(list(range(len(source))))
        # records are shuffled by key as TFDS does: match them by content
        want = sorted((labels[i], images[i].tobytes()) for i in range(len(images)))
        have = sorted((r["label"], r["image"][..., 0].tobytes()) for r in got)
        assert [r["image"].shape for r in got] == [(28, 28, 1)] * len(images)
        assert want == have


def write_image(path, rng, size=(40, 56), fmt="JPEG") -> np.ndarray:
    """Write a random RGB image; return the pixels a decoder reads back from the file."""
    pixels = rng.integers(0, 256, (*size, 3), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels).save(path, format=fmt)
    return np.asarray(Image.open(path).convert("RGB"))


def test_imagenet_style_folder_round_trip(tmp_path):
    synsets = tfds.builder_cls("imagenet2012")(data_dir=str(tmp_path / "probe")).info.features["label"].names
    rng = np.random.default_rng(2)
    written = {}
    for folder, split in (("train", "train"), ("val", "validation")):
        for label in (0, 7):
            for k in range(2):
                fname = f"{synsets[label]}_{folder}{k}.JPEG"
                written[fname] = (split, label, write_image(tmp_path / "imnet" / folder / synsets[label] / fname, rng))
    assert prepare("imagenet2012", "--from", tmp_path / "imnet", "--data-dir", tmp_path / "data") == 0
    for split in ("train", "validation"):
        source = tfds.data_source("imagenet2012", split=split, data_dir=str(tmp_path / "data"))
        records = source.__getitems__(list(range(len(source))))
        assert len(records) == 4
        for r in records:
            want_split, label, pixels = written[r["file_name"].decode()]
            assert want_split == split and r["label"] == label
            np.testing.assert_array_equal(r["image"], pixels)   # the JPEG bytes are stored as-is


def test_cars_folder_keeps_png_pixels_and_maps_class_names(tmp_path):
    rng = np.random.default_rng(3)
    pixels = write_image(tmp_path / "cars" / "train" / "Ram C-V Cargo Van Minivan 2012" / "00001.png", rng, fmt="PNG")
    write_image(tmp_path / "cars" / "test" / "AM General Hummer SUV 2000" / "00002.jpg", rng)
    assert prepare("cars196", "--from", tmp_path / "cars", "--data-dir", tmp_path / "data") == 0
    source = tfds.data_source("cars196", split="train", data_dir=str(tmp_path / "data"))
    (r,) = source.__getitems__([0])
    names = source.dataset_info.features["label"].names
    assert names[r["label"]] == "Ram C/V Cargo Van Minivan 2012" and r["id"] == b"00001"
    np.testing.assert_array_equal(r["image"], pixels)
    np.testing.assert_allclose(r["bbox"], [0, 0, 1, 1])


def test_image_folder_with_an_unknown_class_is_one_line(tmp_path, capsys):
    write_image(tmp_path / "imnet" / "train" / "cats" / "a.jpg", np.random.default_rng(0))
    assert prepare("imagenet2012", "--from", tmp_path / "imnet", "--data-dir", tmp_path / "data") == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(err) == 1 and "'cats'" in err[0] and "n01440764" in err[0], err
    assert not (tmp_path / "data").exists()   # the data dir it created is gone again


def test_train_runs_on_a_prepared_cifar10(tmp_path):
    write_cifar_tarball(tmp_path / "cifar-10-python.tar.gz", per_batch=8)
    data = tmp_path / "data"
    assert prepare("cifar10", "--from", tmp_path / "cifar-10-python.tar.gz", "--data-dir", data) == 0
    out = tmp_path / "run"
    code = cli_main(["train", "--dataset", "cifar10", "--data-dir", str(data), "--steps", "20",
                     "--replicas", "2", "--batch-size", "4", "--model", "mlp", "--strategy", "bsp",
                     "--eval-every", "10", "--log-every", "10", "--out", str(out),
                     "--checkpoint-dir", str(tmp_path / "ck"), "--no-progress"])
    assert code == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert max(r.get("step", 0) for r in rows) >= 19


@pytest.mark.slow
def test_four_processes_preparing_digits_at_once_make_one_dataset(tmp_path):
    data = tmp_path / "fresh"
    cmd = [sys.executable, "-m", "jaxsel.cli", "prepare", "digits", "--data-dir", str(data)]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) for _ in range(4)]
    results = [(p.wait(timeout=240), p.stderr.read().decode()) for p in procs]
    assert [code for code, _ in results] == [0] * 4, results
    assert [p.name for p in (data / "digits").iterdir()] == ["1.0.0"]
    source = tfds.data_source("digits", split="train", data_dir=str(data))
    assert len(source) == 1437


@pytest.mark.parametrize("make_bad,expect", [
    (lambda tmp: "/proc/jaxsel-nope", ["cannot be created"]),
    (lambda tmp: tmp / "no" / "such" / "dir", ["its parent", "is not an existing directory"]),
    (lambda tmp: (tmp / "f").write_text("") or tmp / "f", ["exists and is not a directory"]),
    (lambda tmp: (tmp / "f").write_text("") or tmp / "f" / "sub", ["is not an existing directory"]),
])
@pytest.mark.parametrize("dataset", ["digits", "cifar10"])
def test_unusable_data_dir_is_one_line_exit_2(tmp_path, capsys, make_bad, expect, dataset):
    write_cifar_tarball(tmp_path / "c.tar.gz", per_batch=1)
    bad = make_bad(tmp_path)
    source = ["--from", tmp_path / "c.tar.gz"] if dataset == "cifar10" else []
    assert prepare(dataset, *source, "--data-dir", bad) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("jaxsel prepare: error: --data-dir") and str(bad) in err
    assert all(e in err for e in expect), err
    assert not (tmp_path / "no").exists()


def test_missing_source_and_missing_from_are_one_line(tmp_path, capsys):
    assert prepare("cifar10", "--from", tmp_path / "nope.tar.gz", "--data-dir", tmp_path / "d") == 2
    assert prepare("cifar10", "--data-dir", tmp_path / "d") == 2
    (tmp_path / "junk.tar.gz").write_bytes(b"not a tarball")
    assert prepare("cifar10", "--from", tmp_path / "junk.tar.gz", "--data-dir", tmp_path / "d") == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(lines) == 3
    assert "--from" in lines[0] and "does not exist" in lines[0]
    assert "needs --from PATH" in lines[1] and "cifar-10-python.tar.gz" in lines[1]
    assert "junk.tar.gz is not a readable tarball" in lines[2]
    assert not (tmp_path / "d").exists()


def test_only_the_leaf_is_created_and_announced(tmp_path, capsys):
    assert prepare("digits", "--data-dir", tmp_path / "leaf") == 0
    assert (tmp_path / "leaf" / "digits" / "1.0.0").is_dir()
    assert f"created --data-dir directory {tmp_path / 'leaf'}" in capsys.readouterr().err


def test_datasets_prints_a_working_prepare_command_and_the_tensorflow_route(tmp_path, capsys):
    assert cli_main(["datasets", "--data-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("cifar10 "))
    assert f"jaxsel prepare cifar10 --from cifar-10-python.tar.gz --data-dir {tmp_path}" in line
    assert 'pip install "jaxsel[tfds-build]"' in line and "tfds build cifar10" in line


@pytest.mark.parametrize("junk", ["not a tarball", None])   # a broken tarball, a folder without the IDX files
def test_a_failed_prepare_leaves_the_data_dir_as_it_was(tmp_path, junk, capsys):
    """One line, and no dataset folder, downloads/ or extracted files left behind (the lock
    files stay: another preparer may be waiting on one)."""
    data = tmp_path / "data"
    data.mkdir()
    if junk:
        (tmp_path / "junk.tar.gz").write_text(junk)
        assert prepare("cifar10", "--from", tmp_path / "junk.tar.gz", "--data-dir", data) == 2
    else:
        (tmp_path / "idx").mkdir()
        assert prepare("mnist", "--from", tmp_path / "idx", "--data-dir", data) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1, errors
    assert {p.relative_to(data).parts[0] for p in data.rglob("*")} <= {".jaxsel-locks"}


def test_first_use_of_a_generated_dataset_size_prints_no_tfds_warnings(tmp_path, caplog):
    from jaxsel.data import load_arrays

    caplog.set_level("WARNING")
    arrays = load_arrays("mnist1d", "train", data_dir=tmp_path, num_samples=100)
    assert len(arrays["label"]) == 80
    assert [r.getMessage() for r in caplog.records] == []   # e.g. TFDS's "Using custom data configuration"


def test_the_help_names_every_dataset_prepare_takes(capsys):
    """The parser imports no JAX and no TFDS, so `prepare NAME`'s help cannot be filled from
    the catalogue (which builds the embedded sets' TFDS builders): this keeps its list
    equal to what `prepare` takes, the sources it converts and the embedded sets."""
    import re

    from jaxsel.cli.command import build_parser
    from jaxsel.data.prepare import SOURCES
    from jaxsel.data.sources import KNOWN

    with pytest.raises(SystemExit):
        build_parser().parse_args(["prepare", "--help"])
    words = set(re.findall(r"[a-z][a-z0-9_]*", capsys.readouterr().out))
    embedded = {n for n, spec in KNOWN.items() if spec.builder is not None and spec.source_name == n}
    assert words & set(KNOWN) == set(SOURCES) | embedded
