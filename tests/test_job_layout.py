"""A job that batches its cells packs the replicas on one CPU device (analysis/job_layout.py,
issue 62 item 1): where it does, where the layout stands, what the job prints and records,
and that a cell of such a batch is still its lone run."""
import dataclasses
import json
import os
import subprocess
import sys

import pytest

from jaxsel.analysis.job_layout import has_convolution, job_layout, packs_before_start, why_kept, why_not_packed
from jaxsel.cli import main
from jaxsel.training.config import TrainConfig
from jaxsel.training.rundir import CELL_FILE

from test_cell_batch import lone_and_batched, same_cell

MLP = TrainConfig(progress=False)   # mnist1d, an MLP, 8 replicas on the suite's 8 CPU devices


def test_a_job_that_batches_packs_an_mlp_on_one_cpu_device():
    assert why_not_packed(MLP) is None
    packed = job_layout(MLP, batch_cells=True)
    assert (packed.placement.devices, packed.placement.packing) == (1, "vmap")
    assert dataclasses.replace(packed, devices=None, packing="auto") == MLP   # nothing else changes


@pytest.mark.parametrize("given, why", [
    (dict(devices=8), "the layout was given"),
    (dict(packing="unroll"), "the layout was given"),
    (dict(replicas=1), "not several CPU devices"),
    (dict(model="cnn", dataset="digits"), "the model has a convolution"),
])
def test_the_layout_stands_where_given_single_or_convolutional(given, why):
    cfg = dataclasses.replace(MLP, **given)
    assert why_not_packed(cfg) == why
    assert job_layout(cfg, batch_cells=True) is cfg


def test_one_by_one_keeps_the_layout_as_set():
    assert job_layout(MLP, batch_cells=False) is MLP


def convolutional(**given) -> bool:
    cfg = dataclasses.replace(MLP, **given)
    return has_convolution(cfg.data, cfg.optim)


def test_convolutions_are_found_in_the_model_built_abstractly():
    assert not convolutional()
    assert convolutional(model="cnn", dataset="digits") and convolutional(model="resnet20", dataset="digits")


@pytest.mark.parametrize("strategy, options", [("bsp", {}), ("selsync", {"delta": 0.3, "window": 5})])
def test_a_cell_of_a_packed_batch_is_its_lone_packed_run(tmp_path, strategy, options):
    lone, batched = lone_and_batched(tmp_path, strategy, options, devices=1, packing="vmap")
    for a, b in zip(lone, batched):
        same_cell(a, b)
        assert b.final["layout"] == a.final["layout"] and "8 per device, packed by vmap" in a.final["layout"]


@pytest.mark.parametrize("flags, packed", [([], True), (["--no-batch-cells"], False), (["--devices", "8"], False)])
def test_the_job_prints_and_records_the_layout_its_cells_ran(tmp_path, capsys, flags, packed):
    out = tmp_path / "job"
    assert main(["compare", "--strategies", "bsp", "--seeds", "2", "--steps", "10", "--eval-every", "10",
                 "--no-match-budget", "--no-progress", "--out", str(out), *flags]) == 0
    printed = capsys.readouterr().out
    line = next(line for line in printed.splitlines() if line.startswith("layout: "))
    config = json.loads((out / "bsp" / "seed0" / "config.json").read_text())
    if packed:
        assert line.startswith("layout: 8 replicas on 1 x CPU (cpu), 8 per device, packed by vmap (a job that "
                               "batches its cells packs its replicas on one CPU device; --devices 8 or "
                               "--no-batch-cells put one on each of 8)")
        assert (config["devices"], config["packing"]) == (1, "vmap")
        assert config["layout"] == "8 replicas on 1 x CPU (cpu), 8 per device, packed by vmap (forced)"
    else:
        assert line == "layout: 8 replicas on 8 x CPU (cpu), 1 per device"
        assert config["layout"] == "8 replicas on 8 x CPU (cpu), 1 per device"


# ------------------------------------ a packing job's process starts with one CPU device

@pytest.mark.parametrize("given, packs", [
    ({}, True),
    (dict(devices=8), False),
    (dict(packing="vmap"), False),
    (dict(replicas=1), False),
    (dict(platform="gpu"), False),
    (dict(model="cnn", dataset="digits"), False),
])
def test_a_job_that_will_pack_is_told_from_its_settings_before_jax_starts(given, packs):
    assert packs_before_start(dataclasses.replace(MLP, **given), batch_cells=True) is packs
    assert packs_before_start(dataclasses.replace(MLP, **given), batch_cells=False) is False


def test_one_cpu_device_asked_for_packing_counts_as_the_devices_a_run_would_spread_over(monkeypatch):
    from jaxsel.core import parallel
    from jaxsel.training.plan import layout_of

    one = layout_of(dataclasses.replace(MLP, devices=1))   # 8 replicas on the first CPU device
    assert why_kept(MLP.placement, one, lambda: False) == "not several CPU devices"
    monkeypatch.setattr(parallel, "_one_for_packing", True)
    assert why_kept(MLP.placement, one, lambda: False) is None


def compare_subprocess(out, devices: str | None) -> str:
    """A small `jaxsel compare` in a fresh process (`devices`: its JAX_NUM_CPU_DEVICES, None
    unset: jaxsel chooses); its printed layout line."""
    env = {k: v for k, v in os.environ.items() if k != "JAX_NUM_CPU_DEVICES"}
    if devices is not None:
        env["JAX_NUM_CPU_DEVICES"] = devices
    done = subprocess.run([sys.executable, "-m", "jaxsel.cli", "compare", "--strategies", "selsync", "--seeds", "2",
                           "--steps", "20", "--eval-every", "10", "--no-match-budget", "--no-progress", "--out",
                           str(out)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return next(line for line in done.stdout.splitlines() if line.startswith("layout: "))


@pytest.mark.slow
def test_a_packing_job_runs_on_one_cpu_device_to_the_bits_of_eight(tmp_path):
    """Unset, a packing job's process has one CPU device (XLA's execution pool then has a
    thread per core, not 8: BENCHMARKS.md, "Where the frontier's time goes"); its layout
    line and every cell's state are those of the same job on jaxsel's 8."""
    lines = [compare_subprocess(tmp_path / name, devices) for name, devices in (("one", None), ("eight", "8"))]
    assert lines[0] == lines[1] and "8 replicas on 1 x CPU (cpu), 8 per device, packed by vmap" in lines[0]
    record = lambda name, seed, file: json.loads((tmp_path / name / "selsync" / f"seed{seed}" / file).read_text())
    assert len(record("one", 0, "environment.json")["devices"]) == 1
    assert len(record("eight", 0, "environment.json")["devices"]) == 8
    for seed in (0, 1):
        assert record("one", seed, CELL_FILE)["state_sha256"] == record("eight", seed, CELL_FILE)["state_sha256"]
