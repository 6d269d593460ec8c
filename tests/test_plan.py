"""One plan per run (issue 44 item 2, issue 46 item 2): a run's layout, strategy and paths
are built once, whoever starts it (`jaxsel train`, a comparison's cell, a library user);
`jaxsel train --out RUN_DIR --resume` continues the run with the settings it records, the
flags given naming what they change, a flag that would change its results refused."""
import dataclasses
import json
import warnings

import pytest

import jaxsel.core.parallel as parallel
import jaxsel.training.plan as plan_module
import jaxsel.training.run as run_module
import jaxsel.training.train as train_module
import jaxsel.training.cell_batch as cell_batch
from jaxsel.cli import main as cli_main
from jaxsel.training.config import TrainConfig

TINY = ["--steps", "4", "--eval-every", "2", "--log-every", "2", "--no-progress"]


@pytest.fixture
def builds(monkeypatch):
    """Counts of every build and check of a run, by what it builds."""
    counts = {"layout": 0, "strategy": 0, "paths planned": 0, "dirs created": 0, "paths checked": 0,
              "config checked": 0, "resume resolved": 0}

    def counting(key, fn):
        def wrapped(*args, **kwargs):
            counts[key] += 1
            return fn(*args, **kwargs)
        return wrapped

    monkeypatch.setattr(parallel, "choose_layout", counting("layout", parallel.choose_layout))
    monkeypatch.setattr(run_module, "build_strategy", counting("strategy", run_module.build_strategy))
    monkeypatch.setattr(plan_module, "RunPaths", counting("paths planned", plan_module.RunPaths))
    for module in (train_module, cell_batch):   # a lone run's, a batch of cells' (training/cell_batch.py)
        monkeypatch.setattr(module, "created_dirs", counting("dirs created", plan_module.created_dirs))
    for module in (plan_module, train_module, cell_batch):
        monkeypatch.setattr(module, "check_paths", counting("paths checked", run_module.check_paths))
    monkeypatch.setattr(plan_module, "check_config", counting("config checked", plan_module.check_config))
    monkeypatch.setattr(plan_module, "resumed_settings", counting("resume resolved", plan_module.resumed_settings))
    return counts


ONCE = {"layout": 1, "strategy": 1, "paths planned": 1, "dirs created": 1, "config checked": 1,
        "resume resolved": 1,
        "paths checked": 2}   # in the plan, and again under the run's lock (a run that wrote there since)


def test_jaxsel_train_builds_its_layout_strategy_and_paths_once(builds, tmp_path):
    assert cli_main(["train", "--strategy", "localsgd:period=2", *TINY, "--no-checkpoint",
                     "--out", str(tmp_path / "run")]) == 0
    assert builds == ONCE


def test_a_library_train_builds_them_once_too(builds, tmp_path):
    train_module.train(TrainConfig(strategy="bsp", steps=2, eval_every=2, log_every=2, progress=False,
                                   out_dir=str(tmp_path / "lib")))
    assert builds == ONCE


def test_each_cell_of_a_comparison_builds_them_once(builds, tmp_path, monkeypatch):
    """2 entries x 2 seeds: 4 runs, each planned once. The job asks the plan for the rest
    (issue 59 item 2): each layout once, for the layout line and every cell (was one per
    cell and one more for the line); one strategy per cell (its seed and its data's steps per epoch)
    and one per entry, built to check the entries before anything trains, which the row's
    label and record (the order it averages in: issue 58) reuse (were built again: 8). Two
    layouts: the one the settings give, whose devices the job reads, and the job's own, its
    replicas packed on one CPU device (analysis/job_layout.py), which every cell runs."""
    assert cli_main(["compare", "--strategies", "bsp,localsgd:period=2", "--seeds", "2", "--no-match-budget",
                     "--dataset", "digits", "--partition", "seldp", *TINY, "--out", str(tmp_path / "c")]) == 0
    cells, entries = 4, 2
    assert builds == {"layout": 2, "strategy": cells + entries, "paths planned": cells, "dirs created": cells,
                      "paths checked": 2 * cells, "config checked": cells, "resume resolved": cells}


def test_a_frontier_plan_builds_each_point_s_strategy_once_per_job(builds):
    """plan_frontier fits, derives and checks every point (frontier.py, frontier_points.py,
    variants.py): each asks the plan, which builds a point's strategy once per job (22 builds
    for its 22 points, where each ask built one: 49); a second plan in the same job builds
    nothing, one outside a job builds them again."""
    from jaxsel.analysis.frontier import plan_frontier
    from jaxsel.analysis.frontier_points import stand_in
    from jaxsel.analysis.cells import row_config
    from jaxsel.training.job_builds import one_job

    task = TrainConfig(dataset="mnist1d", partition="label_skew", steps=600)
    with one_job():
        plan = plan_frontier(task, "bsp,localsgd,selsync", None, 2)
        once = builds["strategy"]
        assert plan_frontier(task, "bsp,localsgd,selsync", None, 2) == plan and builds["strategy"] == once
    points = {repr(run_module.strategy_inputs(row_config(task, stand_in(v)))) for v in plan.variants}
    assert not plan.unfit and len(plan.variants) > 10 and once == len(points)
    plan_frontier(task, "bsp,localsgd,selsync", None, 2)   # outside a job: each ask builds (49 for 22 points)
    assert builds["strategy"] - once > once and builds["layout"] == 0


def test_outside_a_job_each_ask_builds_and_a_failed_build_is_not_kept(builds):
    """The plan's answers are kept for one job only (never across jobs, tests or a library
    user's runs), and a refused strategy is refused again, not remembered as built."""
    from jaxsel.training.config import ConfigError
    from jaxsel.training.job_builds import one_job
    from jaxsel.training.plan import layout_of, strategy_of

    cfg = TrainConfig(strategy="localsgd", strategy_options={"period": 4})
    assert strategy_of(cfg) == strategy_of(cfg) and builds["strategy"] == 2
    with one_job():
        first = strategy_of(cfg)
        with one_job():   # a job inside a job shares its builds
            assert strategy_of(cfg) is first and layout_of(cfg) is layout_of(cfg)
        assert strategy_of(cfg, steps_per_epoch=5) is not first   # another build input, another build
        bad = dataclasses.replace(cfg, strategy_options={"period": 0})
        for _ in range(2):
            with pytest.raises(ConfigError, match="period"):
                strategy_of(bad)
    assert builds["strategy"] == 2 + 2 + 2 and builds["layout"] == 1


def test_train_of_a_built_run_still_works_and_warns():
    """The last release's `train(cfg, run=build_run(cfg))`: it trains that run's plan."""
    cfg = TrainConfig(strategy="bsp", steps=2, eval_every=2, log_every=2, progress=False)
    run = train_module.build_run(cfg)
    with pytest.warns(DeprecationWarning, match=r"train\(plan_run\(cfg\)\)"):
        done = train_module.train(cfg, run=run)
    assert done.final["steps"] == 2


def started(tmp_path, *flags):
    """A run of 4 steps in RUN_DIR with settings other than train's defaults, checkpointed."""
    out = tmp_path / "X"
    assert cli_main(["train", "--strategy", "localsgd:period=3", "--lr", "0.1", "--partition", "seldp",
                     *TINY, "--checkpoint-every", "2", "--checkpoint-dir", str(tmp_path / "ck"), "--out", str(out),
                     *flags]) == 0
    return out


@pytest.mark.slow
def test_resume_needs_no_other_flag_and_names_what_the_flags_change(tmp_path, capsys):
    """Issue 46 item 2: `jaxsel train --out runs/X --resume` resumes with no other flag; a
    flag that changes only how long it runs or how it reports is taken and named."""
    out = started(tmp_path)
    capsys.readouterr()
    assert cli_main(["train", "--out", str(out), "--resume", "--steps", "6"]) == 0
    printed = capsys.readouterr().out
    assert f"resumed: with the settings {out}/config.json records; the flags given change steps (--steps) 4 -> 6" \
        in printed
    config = json.loads((out / "config.json").read_text())
    assert (config["strategy"], config["strategy_options"], config["lr"], config["partition"], config["steps"]) == \
        ("localsgd", {"period": 3}, 0.1, "seldp", 6)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(6))   # continued from step 4's checkpoint, none twice
    assert cli_main(["train", "--out", str(out), "--resume"]) == 0   # no flag at all
    assert "no flag given changes them" in capsys.readouterr().out


@pytest.fixture(scope="module")
def refused_run(tmp_path_factory):
    """One started run for the refusals below: each leaves it as it was (checked), so they
    share it."""
    return started(tmp_path_factory.mktemp("refused"))


def files(folder) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("flags, named", [
    (["--lr", "0.2"], "lr (--lr) 0.1 -> 0.2"),
    (["--strategy", "localsgd:period=4"], "strategy_options {'period': 3} -> {'period': 4}"),
    (["--partition", "label_skew"], "partition (--partition) 'seldp' -> 'label_skew'"),
])
def test_a_flag_that_would_change_the_results_is_refused_in_one_line(refused_run, capsys, flags, named):
    out = refused_run
    before = files(out.parent)   # the run directory and its checkpoints
    capsys.readouterr()
    assert cli_main(["train", "--out", str(out), "--resume", *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and named in err[0] and "would change the results" in err[0], err
    assert files(out.parent) == before   # nothing touched


def test_an_old_selsync_record_resumes_as_the_smoothed_statistic_it_ran(tmp_path):
    """A config.json written before issue 42 (no clip_at) of a SelSync run: it ran the
    smoothed statistic with the 2W-1 warm-up, and resumes so (old_records.py)."""
    from jaxsel.training.old_records import today
    from jaxsel.training.recorded import recorded_settings

    out = tmp_path / "old"
    out.mkdir()
    old = {k: v for k, v in dataclasses.asdict(TrainConfig(strategy="selsync", strategy_options={"window": 5}))
           .items() if k != "clip_at"}
    (out / "config.json").write_text(json.dumps(old))
    assert recorded_settings(out)["strategy_options"] == {"window": 5, "statistic": "smoothed", "warmup": 9}
    new = dataclasses.asdict(TrainConfig(strategy="selsync", strategy_options={"window": 5}))
    assert today(new) == new   # a record of today's jaxsel is read as it is
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert today({**old, "strategy": "bsp"})["strategy_options"] == {"window": 5}


@pytest.mark.slow
def test_a_record_of_train_s_old_defaults_resumes_as_it_ran(tmp_path, capsys):
    """Issue 46 item 3: train's defaults became the default task (MNIST-1D, label skew,
    milestones); a run recorded under the old ones (digits, SelDP, constant lr) whose
    config.json predates a setting (`lr_schedule`) resumes at TrainConfig's default of it,
    as it ran, not at train's default of today (which the resume would refuse as a change
    of its results, or, unchecked, train on)."""
    from jaxsel.training.config_file import load_settings
    from jaxsel.training.recorded import recorded_settings

    from jaxsel.cli.train import TRAIN_DEFAULTS
    from jaxsel.training.old_records import TRAIN_DEFAULTS_BEFORE_46

    library = TrainConfig()   # train's defaults before issue 46; those today's differ from are translated
    assert TRAIN_DEFAULTS_BEFORE_46 == {k: getattr(library, k) for k, v in TRAIN_DEFAULTS.items()
                                        if v != getattr(library, k) and k != "checkpoint_every"}
    out = started(tmp_path, "--dataset", "digits", "--lr-schedule", "constant")
    record = json.loads((out / "config.json").read_text())
    old = {k: v for k, v in record.items() if k not in ("lr_schedule", "lr_schedule_steps")}
    (out / "config.json").write_text(json.dumps(old))
    assert recorded_settings(out)["lr_schedule"] == "constant"
    assert load_settings(out / "config.json")["lr_schedule"] == "constant"   # --config RUN_DIR/config.json too
    capsys.readouterr()
    assert cli_main(["train", "--out", str(out), "--resume", "--steps", "6"]) == 0
    said = " ".join(capsys.readouterr().out.split())   # the header wraps to the terminal's width
    assert "task: label-skew with dataset=digits, steps=6, lr=0.1, lr_schedule=constant, partition=seldp" in said
    config = json.loads((out / "config.json").read_text())
    assert (config["dataset"], config["partition"], config["lr_schedule"], config["steps"]) == \
        ("digits", "seldp", "constant", 6)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(6))


@pytest.mark.parametrize("claim", [False, True])
def test_the_plan_s_run_directory_is_its_settings_one(tmp_path, claim):
    """`jaxsel train` names the run directory in a stop's message from `plan.paths.out_dir`
    (issue 59: it holds the plan, not its settings): the same value the settings hold."""
    plan = plan_module.plan_run(TrainConfig(strategy="bsp", steps=2, eval_every=2, log_every=2, progress=False,
                                            out_dir=str(tmp_path / "run")), claim=claim)
    assert plan.paths.out_dir == plan.cfg.evaluation.out_dir == str(tmp_path / "run")
