"""Projected wall-clock in every run's metrics, and `jaxsel report` replaying a run.

The live projection is checked against the ring all-reduce formula written out here, and
against an after-the-fact replay of the logged run (they must agree step for step).
"""
import json

import jax
import numpy as np
import pytest

from jaxsel import TrainConfig, train
from jaxsel.analysis.report import load_run, project
from jaxsel.cli import main
from jaxsel.strategies import build_strategy


def run(tmp_path, strategy, **kw):
    cfg = TrainConfig(strategy=strategy, steps=12, batch_size=8, log_every=4, eval_every=6, progress=False,
                      out_dir=str(tmp_path / strategy), **kw)
    return train(cfg)


def test_bsp_projection_is_the_ring_formula(tmp_path):
    result = run(tmp_path, "bsp", project_network="1gbe", project_compute_s=0.01)
    n, bandwidth, latency = 8, 1e9 / 8, 100e-6
    payload = sum(int(np.size(x)) * 4 for x in jax.tree.leaves(result.state.params)) // n
    ring = 2 * (n - 1) * latency + 2 * (n - 1) / n * payload / bandwidth
    got = [r["projected_time_s"] for r in result.records]
    np.testing.assert_allclose(got, 0.01 * np.arange(1, 13) + ring * np.arange(1, 13), rtol=1e-12)
    assert result.final["projected_time_s"] == pytest.approx(got[-1])
    assert result.evals[-1]["projected_time_s"] == pytest.approx(got[-1])


def test_two_level_projection_of_bsp_on_one_host_is_the_intra_ring(tmp_path):
    # 8 replicas on one host of 8: NVLink inside, the 1 GbE between hosts never used
    result = run(tmp_path, "bsp", project_network="1gbe", project_intra_network="nvlink", project_gpus_per_host=8,
                 project_compute_s=0.01)
    n, bandwidth, latency = 8, 200e9, 5e-6
    payload = sum(int(np.size(x)) * 4 for x in jax.tree.leaves(result.state.params)) // n
    ring = 2 * (n - 1) * latency + 2 * (n - 1) / n * payload / bandwidth
    np.testing.assert_allclose([r["projected_time_s"] for r in result.records], (0.01 + ring) * np.arange(1, 13),
                               rtol=1e-12)
    p = result.final["projection"]
    assert p["hosts"] == 1 and p["per_host"] == 8 and "nvlink" in p["network"] and "1gbe" in p["network"]


def test_live_projection_equals_replay_of_the_log(tmp_path):
    result = run(tmp_path, "selsync", strategy_options={"window": 2, "delta": 0.05},
                 project_stragglers="lognormal:sigma=0.3")
    logged = load_run(tmp_path / "selsync")
    assert all(r["vote_bytes"] == 4 for r in logged["records"])
    replay = project(logged, "10gbe", "lognormal:sigma=0.3")
    np.testing.assert_allclose([r["projected_time_s"] for r in result.records], replay, rtol=1e-9)


def test_strategy_timing_is_derived_from_what_the_strategy_declares():
    """Every registered strategy's cost-model settings (collective from aggregator and codec,
    background, staleness, groups, islands), as each strategy's own `timing()` gave them before."""
    from jaxsel.costmodel import Timing, strategy_timing
    from jaxsel.strategies import STRATEGIES

    ctx = dict(replicas=8, total_steps=100, steps_per_epoch=10)
    special = {"ssdsgd": Timing(background="overlapped"), "ssp": Timing(staleness=1),
               "hierarchical": Timing(groups=1), "islands": Timing(islands=2)}
    for name in STRATEGIES:
        assert strategy_timing(build_strategy(name, {}, **ctx)) == special.get(name, Timing()), name
    assert strategy_timing(build_strategy("ssp", {"staleness": 2}, **ctx)).staleness == 2
    assert strategy_timing(build_strategy("syncswitch", {"staleness": 3}, **ctx)).staleness == 3
    assert strategy_timing(build_strategy("localsgd", {"aggregator": "median"}, **ctx)).collective == "allgather"
    assert strategy_timing(build_strategy("ssdsgd", {"aggregator": "median"}, **ctx)) == \
        Timing(collective="allgather", background="overlapped")


@pytest.mark.slow
def test_report_command(tmp_path, capsys):
    for s in ("bsp", "localsgd"):
        run(tmp_path / "cmp", s)
    png = tmp_path / "r.png"
    assert main(["report", str(tmp_path / "cmp"), "--networks", "10gbe,1gbe", "--out", str(png)]) == 0
    printed = capsys.readouterr().out
    assert "proj. s 1gbe" in printed and "localsgd" in printed
    assert png.stat().st_size > 10_000
    rows = json.loads((tmp_path / "cmp" / "report.json").read_text())["runs"]
    by = {r["strategy"]: r for r in rows}
    # local SGD (period 50) moves no model in 12 steps, BSP one every step: its projection adds less
    assert by["localsgd"]["projected_s_1gbe"] - by["localsgd"]["measured_s"] < \
        by["bsp"]["projected_s_1gbe"] - by["bsp"]["measured_s"]


def test_report_projects_onto_hosts_and_times_a_target(tmp_path, capsys):
    """Replayed on 4 hosts of 2 (PCIe inside) with a fixed step time, BSP's log gives the
    two-level ring formula, and the time to a target is the projection at its first eval."""
    run(tmp_path / "cmp", "bsp")
    logged = load_run(tmp_path / "cmp" / "bsp")
    best = max(logged["evals"], key=lambda e: e["test_accuracy"])
    argv = ["report", str(tmp_path / "cmp"), "--networks", "1gbe", "--gpus-per-host", "2", "--intra-network",
            "pcie", "--compute-s", "0.01", "--target", str(best["test_accuracy"])]
    assert main(argv) == 0
    assert "s to " in capsys.readouterr().out
    row = json.loads((tmp_path / "cmp" / "report.json").read_text())["runs"][0]
    payload = logged["records"][-1]["bytes_allreduced"]
    ring = lambda n, b, lat: 2 * (n - 1) * lat + 2 * (n - 1) / n * payload / b
    step = 0.01 + ring(2, 25e9, 10e-6) + ring(4, 1e9 / 8, 100e-6)   # inside a host, then between hosts
    assert row["projected_s_1gbe"] == pytest.approx(12 * step, rel=1e-12)
    assert row["to_target_s_1gbe"] == pytest.approx(best["step"] * step, rel=1e-12)


@pytest.mark.parametrize("argv, message", [
    (["report", "/no/such/run"], "run dir '/no/such/run' does not exist"),
    (["report", ".", "--networks", "5g"], "unknown network preset '5g'"),
])
def test_report_bad_input(tmp_path, capsys, argv, message, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "metrics.jsonl").write_text('{"step": 0, "synced": true, "bytes_allreduced": 4, "train_time_s": 1}\n')
    assert main(argv) == 2
    assert message in capsys.readouterr().err
