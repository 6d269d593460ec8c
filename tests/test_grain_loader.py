"""Grain worker processes feed image sets decoded on the host (the default for them): on a
tiny image folder (the imagenet2012 layout, prepared by `jaxsel prepare`, 8x8 images) they
build exactly the threaded loader's batches (label-skewed shards with data injection),
train to exactly its parameters, and a run killed with SIGKILL mid-training leaves no
worker behind and resumes from its checkpoint to the same parameters and log."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow_datasets as tfds
from PIL import Image

from run_hooks import trees_equal

from jaxsel import TrainConfig, train
from jaxsel.core.parallel import data_mesh
from jaxsel.data import sources
from jaxsel.training.config_file import load_settings
from jaxsel.training.plan import run_input

pytest.importorskip("grain")

PLUGIN = '''
"""The tiny image-folder dataset (and, for the kill test, a stall after a checkpoint)."""
import os
import time
from pathlib import Path

from jaxsel.data.catalog import IMAGENET_MEAN, IMAGENET_STD, DatasetSpec
from jaxsel.data.sources import register_dataset

SPEC = DatasetSpec("tiny_folder", tfds_name="imagenet2012", mean=IMAGENET_MEAN, std=IMAGENET_STD,
                   image_size=(8, 8), augment=True, crop_padding=1, in_memory=False, test_split="validation")
register_dataset(SPEC)

MARKER = os.environ.get("JAXSEL_TEST_STALL_MARKER")
if MARKER:
    from jaxsel.training.checkpoint import Checkpointer

    save = Checkpointer.save

    def save_then_stall(self, step, state, meta):
        save(self, step, state, meta)
        if step == 4:
            self.wait()
            Path(MARKER).write_text(str(step))
            time.sleep(600)   # the test kills the process group here

    Checkpointer.save = save_then_stall
'''

RUN_TOML = """
[strategy]
strategy = "selsync"
[strategy.strategy_options]
window = 3
delta = 0.2
[data]
dataset = "tiny_folder"
data_dir = "{data_dir}"
partition = "label_skew"
loader_workers = 2
[data.partition_options]
injection = [0.2, 0.5]
[optim]
model = "mlp"
batch_size = 2
steps = 12
lr = 0.05
lr_schedule = "constant"
seed = 5
[replicas]
replicas = 8
[eval]
log_every = 4
eval_every = 8
progress = false
[checkpoints]
checkpoint_every = 4
"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A prepared image folder (4 classes x 6 train, 1 validation each) and the plugin."""
    from jaxsel.data.prepare import prepare

    root = tmp_path_factory.mktemp("grain")
    synsets = tfds.builder_cls("imagenet2012")(data_dir=str(root / "probe")).info.features["label"].names
    rng = np.random.default_rng(0)
    for split, per_class in (("train", 6), ("val", 1)):
        for c in range(4):
            d = root / "images" / split / synsets[c * 10]
            d.mkdir(parents=True)
            for i in range(per_class):
                Image.fromarray(rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)).save(d / f"{c}_{i}.JPEG")
    prepare("imagenet2012", root / "images", root / "data", progress=False, quiet=True)
    (root / "tiny_folder_plugin.py").write_text(PLUGIN)
    (root / "run.toml").write_text(RUN_TOML.format(data_dir=root / "data"))
    return root


@pytest.fixture
def tiny_folder(folder, monkeypatch):
    """The dataset registered in this process (as the plugin does in a CLI process)."""
    namespace = {}
    exec(compile(PLUGIN.replace("register_dataset(SPEC)", ""), "plugin", "exec"), namespace)
    monkeypatch.setitem(sources.KNOWN, "tiny_folder", namespace["SPEC"])
    return folder


def config(folder, tmp, **kw) -> TrainConfig:
    settings = load_settings(folder / "run.toml")
    return TrainConfig(**{**settings, "out_dir": str(tmp / "out"), "checkpoint_dir": str(tmp / "ckpt"), **kw})


def test_grain_is_the_default_and_builds_the_threaded_loaders_batches(tiny_folder, tmp_path):
    mesh = data_mesh(8, devices=8)
    grain_input = run_input(config(tiny_folder, tmp_path), mesh)
    threads = run_input(config(tiny_folder, tmp_path, loader="threads"), mesh).loader
    loader = grain_input.loader
    assert loader.processes and loader.describe() == "2 Grain worker processes"
    assert not threads.processes and loader.rows_per_replica == 2 + 2   # injection: 1 class x 2 samples
    got, want = list(loader.host_batches(3, 9)), list(threads.host_batches(3, 9))
    assert [t for t, _ in got] == [t for t, _ in want] == list(range(3, 9))
    for (_, a), (_, b) in zip(got, want):
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
        assert a["image"].shape == (8 * 4, 8, 8, 3)


@pytest.fixture
def reference(tiny_folder, tmp_path):
    """The threaded loader's uninterrupted run."""
    return train(config(tiny_folder, tmp_path / "threads", loader="threads"))


def rows(run_dir):
    recs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in ("train_time_s", "projected_time_s")} for r in recs]


def test_grain_trains_to_the_threaded_loaders_parameters(tiny_folder, tmp_path, reference):
    run = train(config(tiny_folder, tmp_path / "grain"))
    assert trees_equal(run.state.params, reference.state.params)
    assert rows(tmp_path / "grain" / "out") == rows(tmp_path / "threads" / "out")


def children(pid: int) -> set[int]:
    """Live processes whose parent is `pid` (Linux /proc)."""
    out = set()
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and int((p / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.add(int(p.name))
        except (OSError, ValueError):
            pass
    return out


def alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the workers in /proc")
@pytest.mark.slow
def test_a_run_killed_mid_training_leaves_no_worker_and_resumes_bit_for_bit(tiny_folder, tmp_path, reference):
    cut = tmp_path / "cut"
    cut.mkdir()
    marker = tmp_path / "stalled"
    env = {**os.environ, "JAXSEL_TEST_STALL_MARKER": str(marker)}
    proc = subprocess.Popen([sys.executable, "-m", "jaxsel.cli", "train", "--plugin",
                             str(tiny_folder / "tiny_folder_plugin.py"), "--config", str(tiny_folder / "run.toml"),
                             "--out", str(cut / "out"), "--checkpoint-dir", str(cut / "ckpt")],
                            env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert marker.exists(), proc.communicate(timeout=5)[0].decode()[-3000:] if proc.poll() is not None else ""
        helpers = children(proc.pid)   # Grain's 2 workers (still building steps up to 12) and more
        assert len(helpers) >= 2
        proc.kill()   # SIGKILL the training process alone, as the OOM killer does, mid-run
        proc.wait(timeout=60)
        deadline = time.monotonic() + 60
        while any(alive(p) for p in helpers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(alive(p) for p in helpers)   # the workers follow it: none is left behind
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)   # whatever of its group is left (nothing, normally)
        except ProcessLookupError:
            pass
    done = train(config(tiny_folder, cut, resume=True))
    assert done.final["resumed_from_step"] == 4
    assert trees_equal(done.state.params, reference.state.params)
    assert rows(cut / "out") == rows(tmp_path / "threads" / "out")
