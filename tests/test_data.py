"""Datasets by name through jaxsel's pipeline (TFDS mocked, no TensorFlow, no network),
the embedded offline sets, the clear error for a missing set, `jaxsel datasets`, the
random-access path, token windows, device prefetch and the on-device augmentation."""
import socket
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow_datasets as tfds
from tensorflow_datasets.testing import mocking

import jaxsel
from jaxsel import TrainConfig
from jaxsel.cli import main as cli_main
from jaxsel.data import DatasetNotPrepared, Loader, load_arrays, open_source, seldp
from jaxsel.data.augment import make_device_transform, normalize_np, random_crop_flip
from jaxsel.data.catalog import CATALOG
from jaxsel.data.prefetch import prefetch_to_device
from jaxsel.data.text import TokenWindows
from jaxsel.training.plan import run_input


def _getitems(record_keys, generator, serialized=False):
    return [generator[k] for k in record_keys]


@pytest.fixture
def mock_tfds():
    """tfds.testing.mock_data for data sources. TFDS 4.9.10's mock installs its batched
    `__getitems__` without binding `self`, so batched reads (what our loader uses) fail;
    the patch supplies the same fake examples through a correctly shaped function."""
    with mock.patch.object(mocking, "_getitems", _getitems), \
            tfds.testing.mock_data(num_examples=48, policy=tfds.testing.MockPolicy.USE_CODE):
        yield


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("tfds")


EXPECTED = {  # name: (input key, per-example shape, dtype, classes)
    "cifar10": ("image", (32, 32, 3), np.uint8, 10),
    "cifar100": ("image", (32, 32, 3), np.uint8, 100),
    "mnist": ("image", (28, 28, 1), np.uint8, 10),
    "fashion_mnist": ("image", (28, 28, 1), np.uint8, 10),
    "imagenet2012": ("image", (224, 224, 3), np.uint8, 1000),
    "cars196": ("image", (224, 224, 3), np.uint8, 196),
    "lm1b": ("tokens", (32,), np.int32, 256),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_named_dataset_loads_through_the_pipeline(name, mock_tfds, mesh, tmp_path):
    key, shape, dtype, classes = EXPECTED[name]
    cfg = TrainConfig(dataset=name, replicas=8, batch_size=2, data_dir=str(tmp_path),
                      dataset_options={"seq_len": 32} if name == "lm1b" else {})
    data = run_input(cfg, mesh)
    assert data.input_shape == shape and data.num_classes == classes
    batch = data.loader.batch(5)
    label_key = data.spec.label_key
    assert batch[key].shape == (16, *shape) and batch[key].dtype == dtype
    assert batch[label_key].shape == ((16, 32) if name == "lm1b" else (16,))
    assert batch[label_key].max() < classes
    test_inputs = data.test[key][0:4]
    assert test_inputs.shape == (4, *shape)
    if name == "lm1b":
        assert data.device_transform is None
        assert np.array_equal(batch["tokens"][:, 1:], batch["targets"][:, :-1])
    else:
        assert test_inputs.dtype == np.float32                    # normalised on the host
        out = data.device_transform(jaxsel.global_batch(batch, mesh), jnp.int32(5))
        assert out[key].shape == (16, *shape) and out[key].dtype == jnp.float32
        assert np.array_equal(np.asarray(out[label_key]), batch[label_key])


def test_random_access_path_matches_the_in_memory_one(mock_tfds, mesh, tmp_path):
    base = dict(dataset="cifar10", replicas=8, batch_size=3, data_dir=str(tmp_path))
    in_mem = run_input(TrainConfig(**base), mesh)
    per_batch = run_input(TrainConfig(**base, dataset_options={"in_memory": False}), mesh)
    assert type(per_batch.loader.table).__name__ == "RecordTable"
    for step in (0, 7):
        a, b = in_mem.loader.batch(step), per_batch.loader.batch(step)
        assert all(np.array_equal(a[k], b[k]) for k in ("image", "label"))
    assert np.array_equal(in_mem.test["image"][0:10], per_batch.test["image"][0:10])


def test_label_aware_partition_on_a_big_set_reads_labels_once(mock_tfds, mesh, tmp_path):
    cfg = TrainConfig(dataset="cars196", replicas=8, batch_size=2, data_dir=str(tmp_path),
                      partition="label_skew", partition_options={"injection": (0.01, 0.5)})
    data = run_input(cfg, mesh)
    assert list(tmp_path.glob("jaxsel_cache/cars196-train-48-labels.npy"))
    assert data.loader.rows_per_replica == 2 + 1 * 1
    assert data.loader.batch(0)["image"].shape == (24, 224, 224, 3)


@pytest.mark.parametrize("name", ["cifar10", "imagenet2012", "cars196", "lm1b", "mnist"])
def test_missing_dataset_names_the_dir_and_the_fix(name, tmp_path):
    with pytest.raises(DatasetNotPrepared) as err:
        open_source(name, "train", tmp_path)
    msg = str(err.value)
    assert f"dataset {name!r} is not prepared" in msg and str(tmp_path) in msg
    assert f"tfds build {name} --data_dir {tmp_path} --file_format array_record" in msg
    if name == "imagenet2012":
        assert "downloads/manual" in msg
    if name != "lm1b":   # the TensorFlow-free route first
        assert f"jaxsel prepare {name} --from " in msg


def test_unknown_dataset_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown dataset 'wikitext103'; known: .*cifar10"):
        open_source("wikitext103", "train")


def test_cli_datasets_lists_ready_and_missing(data_dir, capsys):
    load_arrays("digits", "test", data_dir)
    assert cli_main(["datasets", "--data-dir", str(data_dir)]) == 0
    out = capsys.readouterr().out
    table, footer = out.split("\n\n", 1)
    lines = {line.split()[0]: line for line in table.splitlines()[2:]}
    assert "jaxsel prepare NAME --from PATH" in footer and "cifar-10-python.tar.gz" in footer
    assert set(CATALOG) <= set(lines)
    assert "ready (1437 train / 360 test)" in lines["digits"]
    assert "not prepared: jaxsel prepare cifar10 --from cifar-10-python.tar.gz" in lines["cifar10"]
    assert "tfds build cifar10" in lines["cifar10"] and "jaxsel[tfds-build]" in lines["cifar10"]


def test_cli_train_on_a_missing_dataset_is_one_line(tmp_path, capsys):
    code = cli_main(["train", "--dataset", "cifar100", "--data-dir", str(tmp_path / "none"),
                     "--out", str(tmp_path / "run"), "--steps", "1"])
    assert code == 2
    assert "is not prepared" in capsys.readouterr().err


def _no_network():
    def refuse(*args, **kwargs):
        raise AssertionError("network access attempted")
    return mock.patch.multiple(socket.socket, connect=refuse, connect_ex=refuse)


def test_digits_builds_offline_into_a_data_dir(data_dir):
    with _no_network():
        train, test = load_arrays("digits", "train", data_dir), load_arrays("digits", "test", data_dir)
    assert train["image"].shape == (1437, 8, 8, 1) and test["image"].shape == (360, 8, 8, 1)
    assert train["image"].dtype == np.uint8 and train["label"].dtype == np.int64
    assert (data_dir / "digits" / "1.0.0").is_dir()
    assert len(open_source("digits", "train", data_dir)) == 1437


def test_mnist1d_builds_offline_with_the_published_defaults(data_dir):
    before = np.random.get_state()[1].copy()
    with _no_network():
        train, test = load_arrays("mnist1d", "train", data_dir), load_arrays("mnist1d", "test", data_dir)
    assert np.array_equal(np.random.get_state()[1], before), "global RNG disturbed"
    assert train["x"].shape == (4000, 40) and test["x"].shape == (1000, 40)
    assert train["x"].dtype == np.float32 and train["label"].dtype == np.int64
    assert set(np.unique(train["label"])) == set(range(10))
    both = np.concatenate([train["x"], test["x"]])
    assert abs(both.mean()) < 1e-3 and abs(both.std() - 1) < 1e-3   # the generator standardises
    assert (data_dir / "mnist1d" / "default" / "1.0.0").is_dir()


def test_mnist1d_size_is_configurable(data_dir, mesh):
    small = load_arrays("mnist1d", "train", data_dir, num_samples=200)
    assert small["x"].shape == (160, 40)
    assert len(open_source("mnist1d", "test", data_dir, num_samples=200)) == 40
    cfg = TrainConfig(dataset="mnist1d", replicas=8, batch_size=4, data_dir=str(data_dir),
                      dataset_options={"num_samples": 200})
    data = run_input(cfg, mesh)
    assert data.input_shape == (40,) and data.num_classes == 10 and len(data.loader.table) == 160
    with pytest.raises(ValueError, match="multiple of 10"):
        load_arrays("mnist1d", "train", data_dir, num_samples=205)


def test_in_memory_splits_are_read_once_per_process(data_dir, mesh):
    """A comparison's runs share one decoded copy of each split (array_cache.py): read-only,
    keyed by the files read, so another size or another split is read on its own."""
    from jaxsel.data import array_cache, sources

    array_cache.clear()
    cfg = TrainConfig(dataset="mnist1d", replicas=8, batch_size=4, data_dir=str(data_dir),
                      dataset_options={"num_samples": 300})
    with mock.patch.object(sources, "read_all", wraps=sources.read_all) as reads:
        first, again = run_input(cfg, mesh), run_input(cfg, mesh)
        assert reads.call_count == 2   # train and test, once each
        x = first.loader.table.column("x")
        assert again.loader.table.column("x") is x and not x.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            x[0, 0] = 1.0
        mine = load_arrays("mnist1d", "train", data_dir, num_samples=300)   # the caller's own copy
        assert reads.call_count == 2 and mine["x"].flags.writeable and np.array_equal(mine["x"], x)
        mine["x"][0, 0] += 1.0
        assert not np.array_equal(mine["x"], x)
        other = load_arrays("mnist1d", "train", data_dir, num_samples=200)
        assert reads.call_count == 3 and other["x"].shape == (160, 40)
    array_cache.clear()


@pytest.mark.parametrize("replicas", [8, 16])
def test_global_batch_is_device_put(replicas):
    """`global_batch` places each device's rows itself: the same global arrays (values,
    dtypes after JAX's canonicalisation, shardings) as one `jax.device_put` of the batch."""
    mesh = jaxsel.data_mesh(replicas=replicas, devices=8)
    rng = np.random.default_rng(0)
    batch = {"x": rng.normal(size=(replicas * 3, 5)).astype(np.float32), "wide": rng.normal(size=(replicas * 3,)),
             "label": rng.integers(0, 10, replicas * 3), "mask": rng.random((replicas * 3, 2)) > 0.5,
             "placed": jnp.arange(replicas * 3)}
    got = jaxsel.global_batch(batch, mesh)
    want = jax.device_put(batch, jaxsel.core.parallel.replica_sharding(mesh))
    for k in batch:
        assert got[k].aval == want[k].aval and got[k].sharding == want[k].sharding, k
        assert np.array_equal(np.asarray(got[k]), np.asarray(want[k])), k


def test_loader_workers_and_device_prefetch_keep_the_batches(mesh):
    arrays = {"x": np.arange(400, dtype=np.float32)[:, None], "label": np.arange(400) % 10}
    part = seldp(400, 8, seed=2)
    one = Loader(arrays, part, 4)
    many = Loader(arrays, part, 4, workers=3)
    on_device = Loader(arrays, part, 4, mesh=mesh, workers=2)
    expect = [one.batch(t)["x"] for t in range(3, 9)]
    assert [t for t, _ in many.iterate(3, 9)] == list(range(3, 9))
    assert all(np.array_equal(b["x"], e) for (_, b), e in zip(many.iterate(3, 9), expect))
    got = list(on_device.iterate(3, 9))
    assert [t for t, _ in got] == list(range(3, 9))
    for (_, b), e in zip(got, expect):
        assert isinstance(b["x"], jax.Array) and b["x"].sharding.spec[0] == "data"
        assert np.array_equal(np.asarray(b["x"]), e)
    assert [t for t, _ in prefetch_to_device(((t, {"x": np.zeros((8, 1))}) for t in range(3)), mesh, 5)] == [0, 1, 2]


def test_augmentation_is_a_crop_and_flip_of_the_padded_image():
    rng = np.random.default_rng(0)
    images = rng.integers(1, 255, size=(6, 8, 8, 3)).astype(np.uint8)
    out = np.asarray(random_crop_flip(jnp.asarray(images), jax.random.key(3), padding=2))
    padded = np.pad(images, ((0, 0), (2, 2), (2, 2), (0, 0)))
    for img, aug in zip(padded, out):
        crops = [img[y:y + 8, x:x + 8] for y in range(5) for x in range(5)]
        assert any(np.array_equal(aug, c) or np.array_equal(aug, c[:, ::-1]) for c in crops)


def test_device_transform_is_reproducible_per_step_and_normalises(mesh):
    spec = CATALOG["cifar10"]   # crop padding 4, flip, CIFAR-10 mean/std; small images keep it fast
    images = np.random.default_rng(1).integers(0, 256, size=(16, 8, 8, 3)).astype(np.uint8)
    batch = jaxsel.global_batch({"image": images, "label": np.arange(16)}, mesh)
    aug = make_device_transform(spec, mesh, seed=0)
    a, b, c = (np.asarray(aug(batch, jnp.int32(s))["image"]) for s in (4, 4, 5))
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    other_seed = np.asarray(make_device_transform(spec, mesh, seed=1)(batch, jnp.int32(4))["image"])
    assert not np.array_equal(a, other_seed)
    plain = np.asarray(make_device_transform(spec, mesh, augment=False)(batch, jnp.int32(4))["image"])
    np.testing.assert_allclose(plain, normalize_np(images, spec), rtol=1e-5, atol=1e-5)
    mean_pixel = np.round(np.asarray(spec.mean) * 255).astype(np.uint8).reshape(1, 1, 1, 3)
    assert abs(normalize_np(mean_pixel, spec)).max() < 0.01


class _Texts:
    """A random-access text source like TFDS's: records b"record-000", ..., the last b"x"."""

    def __init__(self, n):
        self.records = [{"text": f"record-{i:03d}".encode()} for i in range(n - 1)] + [{"text": b"x"}]

    def __len__(self):
        return len(self.records)

    def __getitems__(self, keys):
        return [self.records[k] for k in keys]


def test_token_windows_are_byte_windows_of_the_joined_records():
    source = _Texts(40)                       # each record 10 bytes + separator
    win = TokenWindows(source, "text", seq_len=20)
    assert win.k == 2 and len(win) == 20      # ceil(21 / 11) records per window
    batch = win.take(np.array([3, 0]))
    text = b"\n".join(r["text"] for r in source.records[6:8]) + b"\n" + source.records[8]["text"]
    expect = np.frombuffer(text[:21], np.uint8)
    assert np.array_equal(batch["tokens"][0], expect[:-1]) and np.array_equal(batch["targets"][0], expect[1:])
    assert batch["tokens"].dtype == np.int32 and batch["tokens"].shape == (2, 20)
    last = win.take(np.array([19]))["tokens"][0]          # end of the source: padded with 0
    assert bytes(last[:12].astype(np.uint8)) == b"record-038\nx" and not last[12:].any()


def test_each_process_builds_only_its_replicas_rows():
    """Multi-host: a process feeds its own replicas; together the rows are the global batch."""
    arrays = {"x": np.arange(300)[:, None], "label": np.arange(300) % 10}
    part = seldp(300, 4, seed=0)
    whole = Loader(arrays, part, 5).batch(9)["x"]
    first, second = Loader(arrays, part, 5, replica_ids=[0, 1]), Loader(arrays, part, 5, replica_ids=[2, 3])
    assert np.array_equal(np.concatenate([first.batch(9)["x"], second.batch(9)["x"]]), whole)
