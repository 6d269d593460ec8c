"""Named tasks (training/tasks.py): `--task NAME` on compare, frontier, calibrate and train
sets the task's settings where no typed flag or --config file does; a bad name is one
line, exit 2; the header names the task the run's settings are (and what differs)."""
import dataclasses
import json

import pytest

from jaxsel.cli import calibrate as cli_calibrate
from jaxsel.cli import compare as cli_compare
from jaxsel.cli import frontier as cli_frontier
from jaxsel.cli import train as cli_train
from jaxsel.cli.settings_args import config_from_args
from jaxsel.cli import main
from jaxsel.training.config import TrainConfig
from jaxsel.training.tasks import DEFAULT_TASK_NAME, LABEL_SKEW, PAPER, TASKS, describe, task_named, task_of

COMMANDS = ("compare", "frontier", "calibrate", "train")


@pytest.fixture
def configs(monkeypatch):
    """`configs(argv)`: the TrainConfig the command would run, by the real command line
    (`jaxsel.cli.main`: parse, --config, --task), its training replaced."""
    seen = []

    def record(args, **_):
        seen.append(config_from_args(args, **({} if args.command == "train" else {"strategy": "bsp"})))
        return 0

    for module, name in ((cli_compare, "cmd_compare"), (cli_train, "cmd_train"), (cli_frontier, "cmd_frontier"),
                         (cli_calibrate, "cmd_calibrate")):
        monkeypatch.setattr(module, name, record)

    def run(argv):
        seen.clear()
        assert main(list(argv)) == 0
        (cfg,) = seen
        return cfg

    return run


def settings(cfg, task):
    return {k: getattr(cfg, k) for k in task.settings}


@pytest.mark.parametrize("cmd", COMMANDS)
def test_each_command_takes_both_tasks(configs, cmd):
    for task in TASKS.values():
        cfg = configs([cmd, "--task", task.name])
        assert settings(cfg, task) == dict(task.settings) and task_of(cfg) == task.name
    assert task_of(configs([cmd])) == DEFAULT_TASK_NAME   # without --task: the default task, train's too


def test_train_and_compare_train_one_default_task(configs):
    """Issue 46 item 3: without flags `jaxsel train` trains what each row of `jaxsel compare`
    trains; they differ only where the commands do (train's strategy and checkpoints,
    compare's evaluations for time-to-accuracy), not in the task."""
    train, compare = configs(["train"]), configs(["compare"])
    differ = {f.name for f in dataclasses.fields(TrainConfig) if getattr(train, f.name) != getattr(compare, f.name)}
    assert differ == {"strategy", "checkpoint_every", "eval_every"}
    assert train == TrainConfig(**cli_train.TRAIN_DEFAULTS) and task_of(train) == DEFAULT_TASK_NAME


def test_the_tasks_are_the_two_regimes():
    assert set(TASKS) == {"label-skew", "paper"}
    assert (PAPER.settings["partition"], PAPER.settings["replicas"], PAPER.settings["batch_size"]) == ("seldp", 10, 32)
    assert (LABEL_SKEW.settings["partition"], LABEL_SKEW.settings["replicas"],
            LABEL_SKEW.settings["batch_size"]) == ("label_skew", 8, 16)
    shared = {k for k in PAPER.settings if PAPER.settings[k] == LABEL_SKEW.settings.get(k)}
    assert shared == {"dataset", "model", "steps", "optimizer", "lr", "momentum", "lr_schedule"}
    assert cli_compare.DEFAULT_TASK == {**TASKS[DEFAULT_TASK_NAME].settings, "eval_every": 25}


def test_typed_flags_then_the_config_file_win_over_the_task(configs, tmp_path):
    cfg = configs(["compare", "--task", "paper", "--replicas", "8", "--inject", "0.1,0.5"])
    assert (cfg.replicas, cfg.batch_size, cfg.partition) == (8, 32, "seldp")
    line = describe(cfg, "paper")
    assert line.startswith("paper with replicas=8, partition_options={'injection': ") and task_of(cfg) is None
    file = tmp_path / "c.json"
    file.write_text(json.dumps({"batch_size": 8, "partition": "label_skew"}))
    cfg = configs(["frontier", "--task", "paper", "--config", str(file), "--partition", "dirichlet"])
    assert (cfg.replicas, cfg.batch_size, cfg.partition, cfg.eval_every) == (10, 8, "dirichlet", 100)
    cfg = configs(["train", "--task", "label-skew", "--config", str(file)])
    assert (cfg.dataset, cfg.batch_size, cfg.lr_schedule) == ("mnist1d", 8, "milestones")
    file.write_text(json.dumps({"task": "paper", "steps": 50}))
    cfg = configs(["compare", "--config", str(file), "--batch-size", "4"])
    assert (cfg.replicas, cfg.batch_size, cfg.steps, cfg.partition) == (10, 4, 50, "seldp")
    assert configs(["train", "--config", str(file)]) == dataclasses.replace(   # the file's task in both
        configs(["compare", "--config", str(file)]), strategy="selsync", checkpoint_every=100, eval_every=50)


@pytest.mark.parametrize("cmd", COMMANDS)
def test_a_task_that_is_none_is_one_line_exit_2(capsys, cmd):
    with pytest.raises(SystemExit) as exit_:   # argparse's refusal: the usage, then one line
        main([cmd, "--task", "iid"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--task" in err and "'iid'" in err and "'label-skew', 'paper'" in err
    with pytest.raises(ValueError, match="--task 'iid' is not a task; the tasks are label-skew, paper"):
        task_named("iid")


@pytest.mark.slow
def test_the_header_names_the_task(tmp_path, capsys):
    """A real (2-step) comparison on the paper's task, its 10 replicas packed on 2 of the
    test's CPU devices: the header says the task and the one setting changed."""
    out = tmp_path / "run"
    assert main(["compare", "--task", "paper", "--devices", "2", "--steps", "2", "--eval-every", "2",
                 "--strategies", "bsp", "--seeds", "1", "--no-match-budget", "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert f"task: paper with steps=2 (the task: {PAPER.summary})" in " ".join(printed.split())   # wrapped
    assert "layout: 10 replicas on 2 x CPU (cpu), 5 per device" in printed
    config = json.loads((out / "bsp" / "seed0" / "config.json").read_text())
    assert (config["partition"], config["replicas"], config["batch_size"]) == ("seldp", 10, 32)


def test_train_s_header_names_its_task_and_its_summary_prints_bytes_readably(tmp_path, capsys, monkeypatch):
    """Issue 46 item 3, in process, nothing trained: `jaxsel train`'s header always says the
    task (its dataset and partition among it) and each setting typed away from it; the
    summary prints a byte count readably and exactly (final.json keeps the integer)."""
    from types import SimpleNamespace

    import jaxsel.training.train as train_module

    headers = []
    projection = {"network": "10gbe", "stragglers": "none", "compute": 1.0, "waiting": 0.0, "communication": 0.5}

    def planned_only(plan):
        headers.append(plan.announce)
        return SimpleNamespace(final={"bytes_allreduced": 79390200, "projection": projection})

    monkeypatch.setattr(train_module, "train", planned_only)
    for flags, task in (([], f"task: label-skew: {LABEL_SKEW.summary}"),
                        (["--dataset", "digits", "--partition", "seldp"],
                         f"task: label-skew with dataset=digits, partition=seldp (the task: {LABEL_SKEW.summary})")):
        assert main(["train", "--no-progress", "--no-checkpoint", "--out", str(tmp_path / "r"), *flags]) == 0
        head, layout = headers.pop()
        assert " ".join(head.split()) == task and layout == "layout: 8 replicas on 8 x CPU (cpu), 1 per device"
    assert "bytes_allreduced: 79.4 MB (79390200 bytes)" in capsys.readouterr().out
