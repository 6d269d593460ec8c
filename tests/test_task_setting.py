"""The jobs' one-line task descriptions, now read from sections and values handed over
(issue 59: settings read through the whole record in at most 8 modules), say exactly
what they said when each module read the whole record: every expected line below was
printed by the code before the change, for the same settings."""
import dataclasses
from types import SimpleNamespace

from jaxsel.analysis.calibrate import setting_line
from jaxsel.analysis.compare import summary_line
from jaxsel.analysis.frontier_report import task_line
from jaxsel.analysis.plots import lr_milestones, setting
from jaxsel.analysis.seed_grid import seed_range
from jaxsel.analysis.task_setting import TaskSetting
from jaxsel.training.config import TrainConfig
from jaxsel.training.tasks import DEFAULT_TASK_NAME, TASKS
from jaxsel.training.train import RunResult
from jaxsel.training.writers import run_name

INJECTED = TrainConfig(dataset="mnist1d", model="mlp", replicas=4, batch_size=16, steps=200, partition="seldp",
                       partition_options={"injection": (0.5, 0.5)}, lr=0.05, optimizer="sgd",
                       lr_schedule="milestones:0.5,0.75", strategy_options={"period": 4}, seed=3)
PLAIN = TrainConfig(dataset="digits", steps=120, seed=0)


def finished(cfg: TrainConfig) -> RunResult:
    """A finished run of `cfg` as its readers see it (no records needed here)."""
    return RunResult(cfg, [], [], {}, None, "bsp")


def task_of(cfg: TrainConfig) -> TaskSetting:
    return TaskSetting.of(cfg.data, cfg.optim, cfg.placement)


def test_calibration_s_setting_is_unchanged():
    assert setting_line(task_of(INJECTED), [3, 4]) == ("mnist1d / mlp, 4 replicas x batch 16, seldp + injection, "
                                                       "200 steps of BSP, lr x0.1 at steps 100, 150, seeds 3-4")
    assert setting_line(task_of(PLAIN), [0]) == ("digits / mlp, 8 replicas x batch 16, seldp, 120 steps of BSP, "
                                                 "constant lr, seed 0")


def test_the_frontier_s_setting_is_unchanged():
    assert task_line(task_of(INJECTED)) == ("mnist1d / mlp, 4 replicas x batch 16, 200 steps, partition seldp + "
                                            "injection, sgd lr 0.05 (lr x0.1 at steps 100, 150)")
    assert task_line(task_of(PLAIN)) == ("digits / mlp, 8 replicas x batch 16, 120 steps, partition seldp, sgd lr "
                                         "0.05 (constant lr)")


def test_the_figures_titles_and_milestones_are_unchanged():
    row = SimpleNamespace(runs=[finished(dataclasses.replace(INJECTED, seed=s)) for s in (3, 4)])
    assert setting(row) == ("mnist1d / mlp, 4 replicas x batch 16, seldp + injection, lr x0.1 at steps 100, 150, "
                            "seeds 3-4 (mean, band: min-max)")
    assert lr_milestones(row) == [100, 150]
    one = SimpleNamespace(runs=[finished(PLAIN)])
    assert setting(one) == "digits / mlp, 8 replicas x batch 16, seldp, constant lr, seed 0"
    assert lr_milestones(one) == []


def test_compare_s_closing_line_is_unchanged():
    assert summary_line(INJECTED, 2, "L", 12.6) == (
        "mnist1d / mlp: 4 replicas x batch 16, 200 steps, partition seldp, lr 0.05 (milestones:0.5,0.75), seeds "
        "3-4; strategy options for every row that takes them: period=4; L; took 13 s")
    named = TrainConfig(**TASKS[DEFAULT_TASK_NAME].settings)
    assert summary_line(named, 1, "L", 3.2) == (
        f"task {DEFAULT_TASK_NAME}: mnist1d / mlp: 8 replicas x batch 16, 600 steps, partition label_skew, lr 0.05 "
        f"(milestones), seed 0; L; took 3 s")


def test_a_job_s_seeds_run_from_the_base_s_seed():
    assert seed_range(INJECTED.optim, 3) == [3, 4, 5] and seed_range(PLAIN.optim, 1) == [0]


def test_a_run_s_dashboard_name_is_unchanged():
    def name(out_dir, group):
        cfg = dataclasses.replace(INJECTED, out_dir=out_dir, run_group=group)
        return run_name(cfg.evaluation, cfg.method.strategy)

    assert name(None, None) == "selsync"
    assert name("runs/cmp/bsp/seed0", "cmp") == "bsp/seed0"
    assert name("runs/x", "cmp") == name("runs/x", None) == "x"
