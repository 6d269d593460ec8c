"""The main job's parts: LR milestones, time-to-accuracy, table numbers, the never-sync
warning (per level of a two-level method), and why SelSync's Delta_bar rarely reaches delta = 0.3."""
import math

import numpy as np
import pytest

import jaxsel
from jaxsel.analysis.significance_reach import (SignificanceOptions, after_warmup, fall_peak, jump_needed,
                                                quiet_note, warmup_note)
from jaxsel.analysis.time_to_accuracy import parse_target, resolve_target, speedups, time_to_target
from jaxsel.strategies import build_strategy
from jaxsel.training.config import ConfigError, TrainConfig, check_config
from jaxsel.training.lr_schedule import build_lr_schedule, describe_lr_schedule, parse_lr_schedule
from jaxsel.training.numbers import significant
from jaxsel.training.sync_horizon import never_syncs_warning


def test_milestones_decay_at_fractions_and_steps():
    lr = build_lr_schedule("milestones", 0.1, total_steps=600)
    assert [round(float(lr(s)), 6) for s in (0, 299, 300, 449, 450)] == [0.1, 0.1, 0.01, 0.01, 0.001]
    lr = build_lr_schedule("milestones:100@0.5", 0.2)
    assert float(lr(99)) == pytest.approx(0.2) and float(lr(100)) == pytest.approx(0.1)
    assert build_lr_schedule("constant", 0.3) == 0.3
    assert describe_lr_schedule("milestones", 600) == "lr x0.1 at steps 300, 450"


@pytest.mark.parametrize("spec", ["cosine", "milestones:1.5", "milestones:0.5@0", "milestones:a", "constant:1"])
def test_bad_lr_schedule_is_one_config_error(spec):
    with pytest.raises(ValueError, match="lr_schedule must be"):
        parse_lr_schedule(spec)
    with pytest.raises(ConfigError, match="lr_schedule"):
        check_config(TrainConfig(lr_schedule=spec))


def evals(accs, step=10, mb=1_000_000, sec=0.5):
    return [{"step": i * step, "test_accuracy": a, "bytes_allreduced": i * mb, "projected_time_s": i * sec,
             "train_time_s": i * sec / 2} for i, a in enumerate(accs)]


def test_time_to_target_and_speedup():
    bsp = {"strategy": "bsp", **time_to_target(evals([0.1, 0.5, 0.8, 0.9]), 0.8)}
    fast = {"strategy": "localsgd", **time_to_target(evals([0.1, 0.85], step=10, sec=0.25), 0.8)}
    never = {"strategy": "selsync", **time_to_target(evals([0.1, 0.7, 0.79]), 0.8)}
    rows = [bsp, fast, never]
    speedups(rows)
    assert (bsp["steps_to_target"], bsp["bytes_to_target"], bsp["time_to_target_s"]) == (20, 2_000_000, 1.0)
    assert bsp["speedup_vs_bsp"] == 1.0 and fast["speedup_vs_bsp"] == 4.0
    assert never["reached_target"] is False and never["steps_to_target"] is None and never["speedup_vs_bsp"] is None


def test_targets_absolute_or_share_of_bsp():
    assert parse_target("99%") == ("share", 0.99) and parse_target("0.6") == ("absolute", 0.6)
    t = resolve_target("99%", {"bsp": 0.5, "localsgd": 0.9})
    assert t.accuracy == pytest.approx(0.495) and "bsp" in t.description
    assert resolve_target("50%", {"a": 0.5, "b": 0.8}).accuracy == pytest.approx(0.4)   # no BSP: the best
    for bad in ("0", "1.5", "120%", "x"):
        with pytest.raises(ValueError, match="--target"):
            parse_target(bad)


def test_table_numbers_have_four_significant_digits_and_no_negative_zero():
    assert significant(0.9694444444444444) == "0.9694"
    assert significant(-0.0) == "0" and significant(-0.00001234) == "-1.234e-05"
    assert significant(62.7e6 / 1e6) == "62.7" and significant(12345.6) == "12350"
    assert significant(None) == "-" and significant(None, missing="never") == "never"


def test_periodic_strategy_longer_than_the_run_warns_in_one_line():
    line = never_syncs_warning(build_strategy("diloco", {}, total_steps=200), 200)
    assert line and "\n" not in line and "diloco" in line and "initialization" in line
    assert line.endswith("lower its period (diloco:period=... in its entry, or --opt period=...) "
                         "or raise --steps")
    assert never_syncs_warning(build_strategy("superstep", {"steps_per_epoch": 1000}), 200).endswith(
        "lower its epochs (superstep:epochs=... in its entry, or --opt epochs=...) or raise --steps")   # not period
    assert never_syncs_warning(build_strategy("diloco", {"period": 50}), 200) is None
    assert "localsgd" in never_syncs_warning(build_strategy("localsgd", {"period": 300}), 200)
    for name in ("bsp", "selsync", "localsgd"):   # syncing, or data-dependent: no warning
        assert never_syncs_warning(build_strategy(name, {}), 200) is None


def test_a_two_level_method_is_warned_per_level():
    """Hierarchical: each level that would never sync in the run is named, with what it means."""
    outer_only = jaxsel.Hierarchical(inner=jaxsel.LocalSGD(4), outer=jaxsel.LocalSGD(1000), groups=2)
    line = never_syncs_warning(outer_only, 200)
    assert "outer level's trigger first fires after step 1000" in line and "inner level" not in line
    both = build_strategy("hierarchical", {"inner": "localsgd", "outer": "localsgd",
                                           "inner.period": 300, "outer.period": 500, "groups": 2})
    line = never_syncs_warning(both, 200)
    assert "inner level's trigger first fires after step 300" in line and "after step 500" in line
    assert never_syncs_warning(jaxsel.Hierarchical(groups=2), 200) is None   # SelSync outer: data-dependent


def test_selsync_delta_needs_a_hundredfold_jump_and_no_fall_reaches_it():
    """Why SelSync (delta = 0.3, W = 25) does not sync after its warm-up in the default job:
    Delta_bar averages W relative changes of a W-step average, so a fall of the gradient
    norm to zero peaks near H_W / W, and reaching 0.3 takes a ~100x jump within one step."""
    assert 0.14 < fall_peak(25, 0.01) < 0.2 < 0.3
    factor = jump_needed(0.3, 25, 0.01)
    assert 80 < factor < 130
    assert jump_needed(0.05, 25, 0.01) < 5   # a small delta is reached by ordinary changes


def test_quiet_note_explains_a_selsync_run_without_later_syncs():
    recs = [{"step": t, "synced": t < 49, "delta": [math.nan] * 2 if t < 49 else [0.05, 0.1]} for t in range(80)]
    stats = after_warmup(recs, 49)
    assert stats == {"warmup_steps": 49, "warmup_syncs": 49, "syncs_after_warmup": 0,
                     "max_delta_bar_after_warmup": 0.1}
    smoothed = SignificanceOptions(0.3, 25, 0.01, "smoothed", None)
    note = quiet_note("selsync", stats, smoothed)
    assert "only in its warm-up" in note and "one-step jump" in note
    raw = quiet_note("selsync", stats, SignificanceOptions(0.3, 25, 0.01, "raw", 49))
    assert "only in its warm-up" in raw and "one-step jump" not in raw and "jaxsel calibrate" in raw
    assert warmup_note("selsync", stats, 49) == "selsync: 49 of its 49 syncs were its forced warm-up (steps 0-48)"
    recs[60]["synced"] = True
    assert quiet_note("selsync", after_warmup(recs, 49), smoothed) is None
    assert np.isfinite(stats["max_delta_bar_after_warmup"])
    assert smoothed.warmup_steps == 49 and SignificanceOptions(0.3, 25, 0.01, "raw", None).warmup_steps == 24


def test_train_diloco_with_defaults_warns_when_the_run_is_built():
    """`jaxsel train --strategy diloco --steps 200` would end at chance with H = 500: the run's
    plan (`run.start_warnings`, printed once its checks pass) says so in one line."""
    from jaxsel.training.run import make_strategy, start_warnings

    cfg = TrainConfig(strategy="diloco", steps=200)
    (line,) = start_warnings(cfg, make_strategy(cfg, steps_per_epoch=10))
    assert "warning: diloco (H=500" in line and "beyond this 200-step run" in line and "\n" not in line
    cfg = TrainConfig(strategy="diloco", steps=600, strategy_options={"period": 100})
    assert start_warnings(cfg, make_strategy(cfg, steps_per_epoch=10)) == ()
