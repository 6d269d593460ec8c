"""`jaxsel bench` at the tiny size: every ratio comes back and the JSON is written."""
import json
import math

import pytest

from jaxsel import bench
from jaxsel.cli import main


def test_bench_command_tiny(tmp_path, capsys):
    """Packed (8 replicas, 4 on each of 2 devices): the bench's steps and its hand-written
    baseline both handle packing."""
    out = tmp_path / "bench.json"
    assert main(["bench", "--size", "tiny", "--replicas", "8", "--devices", "2", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    for key in bench.RATIOS + bench.INFO_RATIOS:
        value = result["ratios"][key]
        assert isinstance(value, float) and math.isfinite(value) and value > 0, (key, value)
    assert bench.ratios_ok(result)
    assert result["replicas"] == 8 and result["device_kind"] and result["size"] == "tiny"
    printed = capsys.readouterr().out
    assert "bsp_over_minimal" in printed and "replicas=8" in printed and "targets:" in printed
    assert result["layout"] == "8 replicas on 2 x CPU (cpu), 4 per device"
    assert "layout: 8 replicas on 2 x CPU (cpu), 4 per device" in printed


def test_bench_command_bad_input_is_one_line(capsys):
    assert main(["bench", "--size", "tiny", "--repeats", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["jaxsel bench: error: repeats must be an integer >= 1, got 0"]


def test_run_bench_rejects_bad_arguments():
    with pytest.raises(ValueError, match="size must be one of"):
        bench.run_bench(size="huge")
    with pytest.raises(ValueError, match="repeats must be an integer >= 1, got 0"):
        bench.run_bench(size="tiny", repeats=0)


def test_packing_bench_refuses_an_unknown_model():
    """(The script's side-by-side run compiles 12 steps: measured by hand, see BENCHMARKS.md.)"""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
    import packing_bench

    assert packing_bench.main(["--models", "nope"]) == 2
