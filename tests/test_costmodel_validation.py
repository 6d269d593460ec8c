"""experiments/costmodel_validation.py: the ring-model fit recovers a known network, and the
2-process script runs end to end at a tiny size (figures finite; no timing assertions)."""
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "experiments" / "costmodel_validation.py"
sys.path.insert(0, str(ROOT))

from experiments.costmodel_validation import fit_network  # noqa: E402
from jaxsel.costmodel import Network, allreduce_time  # noqa: E402


def test_fit_recovers_the_network_that_made_the_timings():
    true = Network(bandwidth=2e9, latency=30e-6)
    sizes = [4, 65536, 2**20, 2**22, 2**24]
    net, fitted = fit_network(sizes, [allreduce_time(b, 8, true) for b in sizes], replicas=8)
    assert net.bandwidth == pytest.approx(true.bandwidth, rel=1e-6)
    assert net.latency == pytest.approx(true.latency, rel=1e-6)
    np.testing.assert_allclose(fitted, [allreduce_time(b, 8, true) for b in sizes], rtol=1e-6)


def test_fit_keeps_latency_non_negative():
    sizes = [4, 2**20, 2**24]
    net, _ = fit_network(sizes, [1e-9 + b / 1e9 for b in sizes], replicas=8)   # no fixed cost
    assert net.latency >= 0 and net.bandwidth > 0


@pytest.mark.slow
def test_script_runs_two_processes_end_to_end(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--steps", "4", "--warmup", "1", "--sizes", "4,4096", "--repeats", "2",
         "--hidden", "16", "--features", "32", "--out", str(tmp_path), "--no-plot"],
        capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "results.json").read_text())
    assert {r["strategy"] for r in result["strategies"]} == {"local", "local_cond", "bsp", "localsgd4", "selsync"}
    figures = [result["network"]["bandwidth_bytes_per_s"], result["network"]["latency_s"],
               *result["compute_ms"].values(), result["model_tree_allreduce"]["residual_pct"]]
    for r in result["strategies"]:
        figures += [r["measured_ms"], *r["projected_ms"].values(), *r["error_pct"].values()]
    figures += [c["residual_pct"] for c in result["calibration"]]
    assert all(math.isfinite(x) for x in figures), figures
    assert all(len(r["records"]) == 4 for r in result["strategies"])
    assert "projected ms" in done.stdout and "fitted network" in done.stdout
