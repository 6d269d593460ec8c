"""One declaration per option: every TrainConfig field has its flag (or says why not), the
`train`, `compare`, `frontier` and `calibrate` parsers and `--help` show the field's own default (or the command's
explicit override), and every strategy option is a flag naming the strategies that take it
(or, where a command flag has its name, reachable with --opt only)."""
import argparse
import re
import typing
import warnings

import pytest

from jaxsel.cli import main as cli_main
from jaxsel.cli.command import DEFAULT_TASK, TRAIN_DEFAULTS, build_parser, config_from_args
from jaxsel.cli.config_args import config_values
from jaxsel.cli.frontier import frontier_task
from jaxsel.cli.strategy_args import HelpFormatter, strategy_flags
from jaxsel.core.options import accepts
from jaxsel.strategies import STRATEGIES
from jaxsel.training.config import MAX_SEED, TrainConfig
from jaxsel.training.declare import Flag, NoFlag, declarations, default_of, flag_name, flags_of

OVERRIDES = {"train": TRAIN_DEFAULTS, "compare": DEFAULT_TASK, "frontier": frontier_task(DEFAULT_TASK),
             "calibrate": DEFAULT_TASK}
#: fields a command sets itself rather than by a flag: command -> field -> why
SET_BY_COMMAND = {"compare": {"strategy": "each row's", "out_dir": "each run's folder under --out",
                              "checkpoint_dir": "no checkpoints", "checkpoint_every": "no checkpoints",
                              "keep": "no checkpoints", "resume": "no checkpoints",
                              "nonfinite": "a diverging row stops"}}
SET_BY_COMMAND["frontier"] = {**SET_BY_COMMAND["compare"], "strategy": "each point's",
                              "nonfinite": "a diverging cell is recorded as failed"}
SET_BY_COMMAND["calibrate"] = {**SET_BY_COMMAND["compare"], "strategy": "the probe's: bsp"}
COMMANDS = ["train", "compare", "frontier", "calibrate"]


def subparser(command: str) -> argparse.ArgumentParser:
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return sub.choices[command]


def help_text(command: str) -> str:
    """`jaxsel COMMAND --help`, each flag and its help on one line."""
    parser = subparser(command)
    parser.formatter_class = lambda prog: HelpFormatter(prog, max_help_position=100, width=1000)
    return parser.format_help()


def test_every_field_has_its_flag_or_says_why_not():
    for name, decl in declarations(TrainConfig).items():
        assert isinstance(decl, (Flag, NoFlag)), name
        if isinstance(decl, NoFlag):
            assert len(decl.why) > 20, name
        else:
            assert decl.names and decl.help and set(decl.commands) <= set(COMMANDS), name
    flagless = {n for n, d in declarations(TrainConfig).items() if isinstance(d, NoFlag)}
    assert flagless == {"strategy_options", "lr_schedule_steps"}
    for command in COMMANDS:   # a field without this command's flag is set by the command
        assert set(declarations(TrainConfig)) - set(flags_of(TrainConfig, command)) - flagless == \
            set(SET_BY_COMMAND.get(command, {}))


@pytest.mark.parametrize("command", COMMANDS)
def test_the_parser_defaults_are_the_fields_own(command):
    args = build_parser().parse_args([command])
    values = config_values(args, command)
    expected = {name: OVERRIDES[command].get(name, default_of(TrainConfig, name)) for name in values}
    assert values == expected
    assert set(OVERRIDES[command]) <= set(values)   # an override names a flag of its command
    fixed = {"strategy": "bsp"} if command != "train" else {}
    assert config_from_args(args, **fixed) == TrainConfig(**{**OVERRIDES[command], **fixed})


@pytest.mark.parametrize("command", COMMANDS)
def test_help_shows_each_flags_default(command):
    text = help_text(command)
    for name, flag in flags_of(TrainConfig, command).items():
        default = OVERRIDES[command].get(name, default_of(TrainConfig, name))
        (line,) = [ln for ln in text.splitlines() if re.match(rf"  {re.escape(flag.names[0])}[ ,]", ln)]
        shown = flag.show(default) if flag.show else default
        shown = None if shown == {} else shown   # a table's flag: no KEY=VALUE pairs by default
        if not line.endswith(f"(default: {shown})"):   # only None may be said in words: "(default: all)"
            assert shown is None and "(default" in line, line
    if OVERRIDES[command]:   # the description names the command's own defaults (where a TrainConfig's differ)
        assert all(f"--{k.replace('_', '-')} {v}" in text for k, v in OVERRIDES[command].items()
                   if v != default_of(TrainConfig, k))


def test_on_off_flags_show_both_spellings_and_pass_argparse_nothing_deprecated():
    """An on/off field's flag reads `--x, --no-x  help (default: ...)`, and building the
    parsers passes argparse nothing it deprecates (a metavar for BooleanOptionalAction:
    deprecated in Python 3.12, refused in 3.14; argparse's warning names argparse itself,
    so pytest's filter for jaxsel's own modules would not see it)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        build_parser()
    hints = typing.get_type_hints(TrainConfig)
    for command in ("train", "compare"):
        text = help_text(command)
        on_off = {n: f for n, f in flags_of(TrainConfig, command).items() if hints[n] is bool}
        assert {"progress", "resume", "tensorboard"} & set(on_off)
        for name, flag in on_off.items():
            (first,) = flag.names
            spellings = f"  {first}, --no-{first[2:]} "
            (line,) = [ln for ln in text.splitlines() if ln.startswith(spellings)]
            assert line[len(spellings):].strip().startswith(flag.help), line
            assert flag.metavar is None, name


def test_strategy_flags_name_the_strategies_that_take_them():
    text = help_text("train")
    flags = strategy_flags()
    assert {"period", "delta", "window", "alpha", "aggregator", "compress"} <= set(flags)
    for name, flag in flags.items():
        takers = tuple(n for n, cls in STRATEGIES.items() if accepts(cls, name))
        assert flag.takers == takers, name
        spelt = flag_name(name)
        if name in ("lr", "momentum", "seed", "weight_decay"):   # the optimizer's and the run's flags
            assert "--opt only: lr, momentum, seed, weight_decay)" in text
            assert f"{spelt} " not in text.split("strategy options")[1]
        else:
            assert re.search(rf"\n  {spelt} {name.upper()} +taken by {', '.join(takers)} \(", text), name
    assert not any(name.endswith("_options") for name in flags)   # tables: --opt PREFIX.FIELD=VALUE


def test_a_strategy_flag_reads_its_type_and_reaches_the_options():
    args = build_parser().parse_args(["train", "--strategy", "diloco", "--period", "7", "--outer-lr", "0.5",
                                      "--outer-optimizer", "sgd", "--aggregator", "trimmed:1"])
    cfg = config_from_args(args)
    assert cfg.strategy_options == {"period": 7, "outer_lr": 0.5, "outer_optimizer": "sgd", "aggregator": "trimmed:1"}
    args = build_parser().parse_args(["train", "--augment", "off", "--no-progress", "--inject", "0.1,0.5"])
    cfg = config_from_args(args)
    assert (cfg.augment, cfg.progress, cfg.partition_options) == (False, False, {"injection": (0.1, 0.5)})


def test_check_config_runs_once_per_run_and_once_per_compared_variant(tmp_path, monkeypatch):
    import jaxsel.training.config as config
    import jaxsel.training.run as run
    import jaxsel.training.train as train

    calls = []

    def counting(cfg, check=config.check_config):
        calls.append(cfg.strategy)
        check(cfg)

    for module in (config, run, train):
        monkeypatch.setattr(module, "check_config", counting)
    tiny = ["--steps", "2", "--eval-every", "2", "--log-every", "2", "--no-progress"]
    assert cli_main(["train", "--strategy", "bsp", *tiny, "--no-checkpoint", "--out", str(tmp_path / "t")]) == 0
    assert calls == ["bsp"]
    calls.clear()
    assert cli_main(["compare", "--strategies", "bsp,localsgd", "--seeds", "2", "--no-match-budget", *tiny,
                     "--dataset", "digits", "--partition", "seldp", "--out", str(tmp_path / "c")]) == 0
    assert calls == ["bsp", "localsgd"]   # the seeds' runs differ only in the seed, range-checked once
    assert cli_main(["compare", "--seed", str(MAX_SEED), "--seeds", "2", "--out", str(tmp_path / "d")]) == 2
    assert not (tmp_path / "d").exists()
