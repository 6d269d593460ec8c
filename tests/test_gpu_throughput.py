"""experiments/gpu_throughput.py without a GPU and without torch: options, rows, FLOP/MFU columns,
and the PyTorch anchor's bookkeeping (its measurements run on a GPU session only)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
sys.path.insert(0, str(EXPERIMENTS))
import gpu_throughput as gt  # noqa: E402


def test_importing_the_script_imports_neither_torch_nor_tfds():
    code = ("import sys; sys.path.insert(0, %r); import gpu_throughput; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'tensorflow_datasets', 'tensorflow')]; "
            "assert not bad, bad" % str(EXPERIMENTS))
    subprocess.run([sys.executable, "-c", code], check=True)


def test_defaults_and_one_line_errors(capsys):
    args = gt.parse_args([])
    assert args.names == ["resnet18", "resnet50"] and args.modes == ["max-autotune", "default"]
    assert (args.steps, args.warmup, args.repeats) == (50, 10, 5)
    assert gt.parse_args(["--no-compile"]).modes == ["eager"]
    for bad, says in ((["--models", "vgg"], "unknown model(s) ['vgg']"),
                      (["--torch-modes", "turbo"], "unknown --torch-modes ['turbo']"),
                      (["--repeats", "0"], "--repeats must be an integer >= 1, got 0")):
        assert gt.main(bad) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("gpu_throughput: error: ") and says in err[0], err


def test_anchor_configuration_is_stated():
    best = gt.anchor_config("max-autotune", "cuda", fused=True)
    assert "mode='max-autotune'" in best and "dynamic=False" in best and "CUDA graphs" in best
    assert "channels_last" in best and "bf16 autocast" in best and "fused=True" in best and "static shapes" in best
    assert "CUDA graphs" not in gt.anchor_config("default", "cuda", fused=True)
    assert "CUDA graphs" not in gt.anchor_config("max-autotune", "cpu", fused=False)
    assert gt.anchor_config("eager", "cuda", fused=True).startswith("eager")
    bounded = gt.anchor_config(gt.BOUNDED, "cuda", fused=True)   # the session's anchor: max-autotune, convs cuDNN's
    assert "mode='max-autotune'" in bounded and "CUDA graphs" in bounded and "convolutions not autotuned" in bounded
    assert gt.parse_args(["--torch-modes", gt.BOUNDED]).modes == [gt.BOUNDED]


def test_an_earlier_sessions_anchor_is_shown_only_where_it_was_measured():
    row = {"model": "resnet18", "device_kind": "NVIDIA H100 80GB HBM3", "batch": 256}
    assert "64,393 img/s" in gt.cached_anchor(row) and "issue 34" in gt.cached_anchor(row)
    assert gt.cached_anchor({**row, "batch": 128}) is None and gt.cached_anchor({**row, "device_kind": "cpu"}) is None


def test_rates_and_mfu():
    entry = gt.add_rates({"steps_per_s": 40.0}, flops=3.1e12, peak=989e12, images_per_step=128)
    assert entry["images_per_s"] == 40.0 * 128
    assert entry["mfu"] == pytest.approx(3.1e12 * 40.0 / 989e12)
    assert gt.add_rates({"steps_per_s": 40.0}, flops=3.1e12, peak=None, images_per_step=1)["mfu"] is None
    failed = gt.add_rates({"error": "recompiled"}, flops=3.1e12, peak=989e12, images_per_step=128)
    assert failed["images_per_s"] is None and failed["mfu"] is None
    assert gt.peak_flops("NVIDIA H100 80GB HBM3", None) == 989e12
    assert gt.peak_flops("NVIDIA H100 PCIe", None) == 756e12 and gt.peak_flops("cpu", 2.0) == 2e12


def _fake_jax(name, input_shape, classes, batch, steps, warmup, repeats, replicas):
    return {"params": 11, "flops_per_step": 1e12, "xla_flops_per_step": None, "device_kind": "NVIDIA H100 80GB HBM3",
            "platform": "gpu", "jax_steps_per_s": 100.0, "jaxsel_steps_per_s": 98.0}


def _fake_anchor(name, input_shape, classes, batch, steps, warmup, repeats, mode):
    out = {"mode": mode, "config": gt.anchor_config(mode, "cuda", True), "torch_params": 11,
           "compiles_warmup": {"graphs": 2, "recompiles": 0, "graph_breaks": 0},
           "compiles_timing": {"graphs": 0, "recompiles": 0, "graph_breaks": 0}, "recompiles": 0}
    if mode == "default":   # as bench_torch_mode reports a row that recompiled while timed
        out["compiles_timing"] = {"graphs": 1, "recompiles": 1, "graph_breaks": 0}
        out["error"] = "recompiled while timed (1 new graphs, 1 recompiles): shapes were not static; figure discarded"
        return out
    return {**out, "steps_per_s": 80.0}


def test_rows_are_written_as_each_measurement_finishes(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(gt, "bench_jax", _fake_jax)
    monkeypatch.setattr(gt, "bench_torch_mode", _fake_anchor)
    monkeypatch.setattr(gt, "torch_missing", lambda: None)
    out = tmp_path / "gpu.json"
    assert gt.main(["--models", "resnet50", "--json", str(out)]) == 0
    row = json.loads(out.read_text())["rows"][0]
    assert row["jax"]["images_per_s"] == 100.0 * 128 and row["jaxsel"]["mfu"] == pytest.approx(1e12 * 98 / 989e12)
    best, fallback = row["torch"]
    assert best["mode"] == "max-autotune" and best["images_per_s"] == 80.0 * 128
    assert fallback["images_per_s"] is None and "recompiled while timed" in fallback["error"]
    printed = capsys.readouterr().out
    assert "torch max-autotune" in printed and "mode='max-autotune', dynamic=False, CUDA graphs" in printed
    assert "FAILED: recompiled while timed" in printed
    assert "jaxsel BSP / best PyTorch anchor (max-autotune): 1.225x images/s" in printed
    assert "10.1%" in printed and "8.1%" in printed         # MFU of jax (100 steps/s) and of the anchor (80)


def test_without_torch_the_row_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(gt, "bench_jax", _fake_jax)
    monkeypatch.setattr(gt, "torch_missing", lambda: "torch is not importable")
    assert gt.main(["--models", "resnet18"]) == 0
    assert "torch: torch is not importable" in capsys.readouterr().out
