"""The comparison's time columns (issue 61 item 4): the cost model's time to target and its
"vs BSP" do not move with the machine's noise; a measured speed-up comes with its 95%
interval and is marked within noise where the interval holds 1.0x."""
from types import SimpleNamespace

import numpy as np
import pytest

from jaxsel.analysis.compare_table import format_table
from jaxsel.analysis.time_spread import add_time_columns, measured_speedup, window_step_times
from jaxsel.costmodel.projector import project_run
from jaxsel.training.config import TrainConfig
from jaxsel.training.train import RunResult


def records(step_times, synced_every=1, window=4, nbytes=1_000_000):
    """A run's log: `step_times[k]` seconds per step in window k of `window` steps."""
    out, clock = [], 0.0
    for k, per_step in enumerate(step_times):
        clock += per_step * window
        for t in range(k * window, (k + 1) * window):
            synced = (t + 1) % synced_every == 0
            out.append({"step": t, "synced": synced, "bytes_allreduced": nbytes if synced else 0,
                        "train_time_s": clock})
    return out


def test_one_sample_per_log_window():
    assert window_step_times(records([0.5, 0.25, 1.0])) == pytest.approx([0.5, 0.25, 1.0])


def test_the_measured_speed_up_and_its_interval_against_numpy():
    base, other = np.array([1.0, 1.2, 0.8, 1.1]), np.array([0.5, 0.7, 0.6, 0.4])
    got = measured_speedup(base, 100, other, 150)
    ratio = 100 * base.mean() / (150 * other.mean())
    se = np.sqrt(base.var(ddof=1) / (4 * base.mean() ** 2) + other.var(ddof=1) / (4 * other.mean() ** 2))
    assert got["measured_speedup_vs_bsp"] == pytest.approx(ratio)
    assert got["measured_speedup_ci"] == pytest.approx([ratio * np.exp(-1.959964 * se), ratio * np.exp(1.959964 * se)])
    assert got["measured_speedup_within_noise"] is (got["measured_speedup_ci"][0] <= 1 <= got["measured_speedup_ci"][1])
    noisy = measured_speedup(np.array([1.0, 3.0, 0.5]), 100, np.array([0.4, 2.0, 1.0]), 100)
    assert noisy["measured_speedup_vs_bsp"] > 1 and noisy["measured_speedup_within_noise"] is True
    tight = measured_speedup(np.array([1.0, 1.01, 0.99]), 100, np.array([0.5, 0.51, 0.49]), 100)
    assert tight["measured_speedup_within_noise"] is False
    assert measured_speedup(np.array([1.0]), 10, np.array([0.5]), 10)["measured_speedup_ci"] is None


def _row(label, logs, steps_to_target):
    cfg = TrainConfig(steps=len(logs[0]))
    runs = [RunResult(cfg, log, [], {}, None, label) for log in logs]
    result = {"strategy": label, "entry": label, "steps_to_target": steps_to_target}
    return SimpleNamespace(runs=runs), result


def test_vs_bsp_is_the_cost_model_s_and_ignores_which_run_the_machine_slowed():
    """Two rows that sync alike: their cost-model times differ by their steps to the target
    alone, however differently their steps measured."""
    bsp = _row("bsp", [records([1.0, 1.0, 1.0, 1.0])], 16)
    slow_machine = _row("localsgd", [records([3.0, 2.5, 4.0, 3.5])], 8)
    rows = [bsp[1], slow_machine[1]]
    cfg = TrainConfig(steps=16)
    add_time_columns([bsp[0], slow_machine[0]], rows, cfg.projection)
    common = float(np.median([1.0] * 4 + [3.0, 2.5, 4.0, 3.5]))
    reference, _ = project_run(records([1.0] * 4), "10gbe", cfg.replicas, common)
    assert rows[0]["model_time_to_target_s"] == pytest.approx(reference[15])
    assert rows[1]["model_time_to_target_s"] == pytest.approx(reference[7])
    assert rows[1]["speedup_vs_bsp"] == pytest.approx(reference[15] / reference[7])
    assert rows[0]["speedup_vs_bsp"] == 1.0
    measured = rows[1]["measured_speedup_vs_bsp"]
    assert measured == pytest.approx(16 * 1.0 / (8 * 3.25)) and rows[1]["measured_speedup_within_noise"] is False


def test_a_measured_speed_up_inside_its_noise_is_marked_in_the_table():
    rows = [{"strategy": "bsp", "entry": "bsp", "final_test_accuracy": 0.6, "measured_speedup_vs_bsp": 1.0},
            {"strategy": "localsgd", "entry": "localsgd", "final_test_accuracy": 0.6,
             "measured_speedup_vs_bsp": 1.44, "measured_speedup_ci": [0.81, 2.55],
             "measured_speedup_within_noise": True}]
    text = " ".join(format_table(rows).split())
    assert "localsgd 1.44x [0.81-2.55], within noise" in text and "bsp 1.00x" not in text
