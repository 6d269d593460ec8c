"""bench.run_bench at the tiny size: all four ratios come back and the JSON is written."""
import json
import math

import pytest

from jaxsel import bench


def test_run_bench_tiny(tmp_path, capsys):
    out = tmp_path / "bench.json"
    result = bench.run_bench(model="mlp", replicas=8, size="tiny", out_json=str(out))
    for key in bench.RATIOS:
        value = result["ratios"][key]
        assert isinstance(value, float) and math.isfinite(value) and value > 0, (key, value)
    assert bench.ratios_ok(result)
    assert result["replicas"] == 8 and result["device_kind"]
    saved = json.loads(out.read_text())
    assert set(saved["ratios"]) == set(bench.RATIOS)
    printed = capsys.readouterr().out
    assert "bsp_over_minimal" in printed and "replicas=8" in printed


def test_run_bench_rejects_bad_arguments():
    with pytest.raises(ValueError, match="size must be one of"):
        bench.run_bench(size="huge")
    with pytest.raises(ValueError, match="repeats must be an integer >= 1, got 0"):
        bench.run_bench(size="tiny", repeats=0)
