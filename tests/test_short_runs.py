"""Runs too short to show their method say so, one line each (issue 61): a run no longer
than the method's forced warm-up (a 20-step SelSync run is all warm-up), and an adaptive
method that never synced after it (its result is local training's)."""
import pytest

from jaxsel.strategies import build_strategy
from jaxsel.training.config import TrainConfig
from jaxsel.training.run import make_strategy, start_warnings
from jaxsel.training.sync_horizon import all_warmup_warning, no_sync_after_warmup_warning, warmup_length


@pytest.mark.parametrize("name, options, warm", [
    ("selsync", {}, 24),                                  # W - 1 forced syncs, statistic raw
    ("selsync", {"statistic": "smoothed"}, 49),           # 2W - 1
    ("selsync", {"warmup": 7, "max_local": 4}, 7),        # capped: the inner test's warm-up
    ("ssdsgd", {"warmup_steps": 30, "period": 4}, 30),    # Before(w) | Periodic(k, start=w)
    ("postlocal", {"switch_step": 100}, 100),             # its BSP phase
    ("bsp", {}, 0), ("localsgd", {"period": 8}, 0), ("hierarchical", {}, 0),
])
def test_the_warm_up_each_method_forces(name, options, warm):
    assert warmup_length(build_strategy(name, options)) == warm


def test_a_run_no_longer_than_the_warm_up_is_one_warning_line():
    strategy = build_strategy("selsync", {})
    line = all_warmup_warning(strategy, 20)
    assert line == ("jaxsel: warning: selsync (delta=0.3, W=25, raw, averages before the update): its first 24 "
                    "steps are a warm-up that the method "
                    "does not decide, and this run has 20: its result is the warm-up's, not the method's; raise "
                    "--steps past 24")
    assert all_warmup_warning(strategy, 24) is not None and all_warmup_warning(strategy, 25) is None
    assert all_warmup_warning(build_strategy("bsp", {}), 1) is None


def test_the_run_plan_holds_it_once():
    cfg = TrainConfig(strategy="selsync", steps=20)
    (line,) = start_warnings(cfg, make_strategy(cfg, steps_per_epoch=10))
    assert "its first 24 steps are a warm-up" in line and "this run has 20" in line
    cfg = TrainConfig(strategy="diloco", steps=10)   # the never-syncs line alone
    (line,) = start_warnings(cfg, make_strategy(cfg, steps_per_epoch=10))
    assert "beyond this 10-step run" in line


def _records(synced_steps, steps=60):
    return [{"step": t, "synced": t in synced_steps} for t in range(steps)]


def test_an_adaptive_method_that_never_synced_after_its_warm_up_says_so():
    strategy = build_strategy("selsync", {"delta": 50})
    line = no_sync_after_warmup_warning(strategy, _records(set(range(24))), 60)
    assert line.startswith("jaxsel: warning: selsync (delta=50, W=25, raw, averages before the update): no sync "
                           "after its 24-step warm-up in "
                           "this 60-step run: from step 24 on the replicas never averaged") and "\n" not in line
    assert no_sync_after_warmup_warning(strategy, _records({*range(24), 40}), 60) is None
    assert no_sync_after_warmup_warning(strategy, _records(set(range(20)), 20), 20) is None   # all warm-up: above
    periodic = build_strategy("localsgd", {"period": 100})   # not adaptive: the never-syncs line judges it
    assert no_sync_after_warmup_warning(periodic, _records(set()), 60) is None


def test_a_job_notes_the_seeds_that_never_synced_after_the_warm_up_once():
    """compare's cells keep the after-run warning for the table (one note per row, naming
    the seeds), instead of one stderr line per seed before it."""
    from jaxsel.training.sync_horizon import late_note
    strategy = build_strategy("selsync", {"delta": 50})
    quiet, synced = _records(set(range(24))), _records({*range(24), 40})
    assert late_note("selsync", strategy, {0: quiet, 1: synced, 2: quiet}, 60) == (
        "selsync: no sync after its 24-step warm-up in seeds 0, 2 of 3: there the replicas never averaged after it, "
        "so the result is local training's, not the method's")
    assert "in every seed:" in late_note("selsync", strategy, {0: quiet, 1: quiet}, 60)
    assert late_note("selsync", strategy, {0: synced}, 60) is None


@pytest.mark.parametrize("late_warning", [True, False])
def test_the_after_run_warning_is_printed_unless_the_plan_leaves_it_to_its_job(late_warning, capfd):
    import dataclasses
    from jaxsel.training.train import plan_run, train
    cfg = TrainConfig(strategy="selsync", strategy_options={"delta": 50}, steps=30, eval_every=30, log_every=10, progress=False,
                      replicas=2, devices=2)
    train(dataclasses.replace(plan_run(cfg), late_warning=late_warning))
    printed = "no sync after its 24-step warm-up" in capfd.readouterr().err
    assert printed == late_warning
