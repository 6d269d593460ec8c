"""One declaration per option: every TrainConfig field has its flag in its section (or says
why not), the `train`, `compare`, `frontier` and `calibrate` parsers and `--help` show the
field's own default (or the command's explicit override), in sections; no strategy option
is a flag of its own (the entry or --opt sets it; last release's flags still work, noted),
and `jaxsel strategies NAME` lists every option of every strategy from its declaration."""
import argparse
import dataclasses
import re
import typing
import warnings

import pytest

from jaxsel.cli import main as cli_main
from jaxsel.cli.command import build_parser
from jaxsel.cli.common import HelpFormatter
from jaxsel.cli.compare import DEFAULT_TASK
from jaxsel.cli.deprecated import OLD_STRATEGY_FLAGS
from jaxsel.cli.frontier import frontier_task
from jaxsel.cli.settings_args import config_from_args, config_values
from jaxsel.cli.train import TRAIN_DEFAULTS
from jaxsel.core.options import option_names
from jaxsel.strategies import STRATEGIES, catalog
from jaxsel.training.config import MAX_SEED, TrainConfig
from jaxsel.training.declare import SECTIONS, Flag, NoFlag, declarations, default_of, flags_of

OVERRIDES = {"train": TRAIN_DEFAULTS, "compare": DEFAULT_TASK, "frontier": frontier_task(DEFAULT_TASK),
             "calibrate": DEFAULT_TASK}
#: fields a command sets itself rather than by a flag: command -> field -> why
SET_BY_COMMAND = {"compare": {"strategy": "each row's", "checkpoint_dir": "no checkpoints",
                              "checkpoint_every": "no checkpoints", "keep": "no checkpoints",
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
            assert (decl.names or decl.key_in) and decl.help, name
            assert set(decl.commands) <= set(COMMANDS) and decl.group in SECTIONS, name
    flagless = {n for n, d in declarations(TrainConfig).items() if isinstance(d, NoFlag)}
    assert flagless == {"strategy_options", "lr_schedule_steps", "out_dir", "resume"}   # the last two: job flags
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
        shown = flag.show(default) if flag.show else default
        shown = None if shown == {} else shown   # a table's flag: no KEY=VALUE pairs by default
        if flag.key_in:   # a key of a section's flag: its help lists each key's default
            (line,) = [ln for ln in text.splitlines() if ln.startswith(f"  {flag.key_in[0]} KEY=VALUE")]
            assert f"{flag.key_in[1]}={flag.metavar}: {flag.help} (default {'none' if shown is None else shown})" \
                in line, line
            continue
        (line,) = [ln for ln in text.splitlines() if re.match(rf"  {re.escape(flag.names[0])}[ ,]", ln)]
        if not line.endswith(f"(default: {shown})"):   # None: nothing, or said in words ("(default: all)")
            assert shown is None, line
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


@pytest.mark.parametrize("command, limit", [("train", 60), ("compare", 51), ("frontier", 50)])
def test_help_is_in_sections_with_no_strategy_option_flags(command, limit):
    """Issue 44/46: compare <= 50 flags (51 since issue 62's job flag --no-batch-cells),
    train <= 60, each section a group; no option of any strategy is a flag (the last
    release's are hidden: they still work, noted)."""
    parser = subparser(command)
    shown = [a for a in parser._actions if a.option_strings and a.help != argparse.SUPPRESS]
    assert len(shown) <= limit, len(shown)
    spelt = {s for a in shown for s in a.option_strings}
    every_option = {o for cls in STRATEGIES.values() for o in option_names(cls)}
    own = {"--seed", "--lr", "--momentum", "--weight-decay"}   # the run's own, which strategies may take too
    assert not {"--" + o.replace("_", "-") for o in every_option} & spelt - own
    titles = [g.title for g in parser._action_groups if g._group_actions]
    assert [t for t in titles if t in SECTIONS.values()] == [t for t in SECTIONS.values() if t in titles]
    assert {SECTIONS["strategy"], SECTIONS["data"], SECTIONS["optim"], SECTIONS["replicas"]} <= set(titles)
    hidden = {s for a in parser._actions if a.help == argparse.SUPPRESS for s in a.option_strings}
    assert {"--" + n.replace("_", "-") for n in OLD_STRATEGY_FLAGS} <= hidden


def test_every_strategy_option_has_its_meaning_in_its_declaration():
    """`jaxsel strategies NAME` is generated: every option of every strategy has a type, a
    default and a line of meaning (the string under its field, or the shared one)."""
    for name, cls in STRATEGIES.items():
        listed = catalog.options(name)
        assert [o.name for o in listed] == option_names(cls), name
        for o in listed:
            assert len(o.meaning) > 10 and o.kind, (name, o)
        assert catalog.summary(name).endswith(".") or catalog.summary(name).endswith('"'), name


def test_the_payload_options_are_declared_once_and_keyword_only():
    """Issue 44 item 4: aggregator, sync_model_state, compress and error_feedback are
    declared in strategies/payload.py alone, keyword-only (a strategy's own options keep
    their positions); a strategy redeclares one only to set another default (FedAvg's
    weighted aggregator), and every strategy lists the one meaning."""
    import jaxsel
    from jaxsel.core.options import option_docs
    from jaxsel.strategies import payload

    shared = ("aggregator", "sync_model_state", "compress", "error_feedback")
    meanings = option_docs(payload.GradientPayload)
    redeclared = set()
    for name, cls in STRATEGIES.items():
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for option in set(shared) & set(fields):
            assert fields[option].kw_only, (name, option)
            (info,) = [o for o in catalog.options(name) if o.name == option]
            assert info.meaning.startswith(meanings[option]), (name, option)
        redeclared |= {(klass.__name__, option) for klass in cls.__mro__
                       if klass.__module__ != payload.__name__ and "__dataclass_fields__" in vars(klass)
                       for option in set(shared) & set(vars(klass).get("__annotations__", {}))}
    assert redeclared == {("FedAvg", "aggregator")}
    assert jaxsel.LocalSGD(4).period == 4 and jaxsel.SelSync(0.2).delta == 0.2
    assert jaxsel.FedAvg(8).period == 8 and jaxsel.FedAvg().aggregator.uses_sample_weights


def test_the_accordion_strategy_and_its_trigger_have_a_name_each():
    """Issue 44 item 6: `jaxsel.Accordion` is the strategy, its trigger
    `triggers.AccordionPeriod` (registered as "accordion", as before: `--opt
    trigger=accordion` reads the same); last release's `jaxsel.triggers.Accordion` still
    works for one release, warned."""
    import jaxsel
    from jaxsel.core.triggers import TRIGGERS, AccordionPeriod

    assert TRIGGERS["accordion"] is AccordionPeriod and jaxsel.Accordion().trigger == AccordionPeriod()
    with pytest.warns(DeprecationWarning, match="jaxsel.triggers.Accordion is renamed AccordionPeriod"):
        assert jaxsel.triggers.Accordion is AccordionPeriod
    with pytest.raises(AttributeError, match="has no attribute 'Acordion'"):
        jaxsel.triggers.Acordion


def test_jaxsel_strategies_lists_the_methods_and_one_methods_options(capsys):
    assert cli_main(["strategies"]) == 0
    out = capsys.readouterr().out
    assert all(re.search(rf"^  {n} +\S", out, re.M) for n in STRATEGIES)
    assert cli_main(["strategies", "selsync"]) == 0
    out = capsys.readouterr().out
    for o in catalog.options("selsync"):
        assert re.search(rf"^  {o.name} +{re.escape(o.kind)} +", out, re.M), o.name
    assert re.search(r"^  delta +float +0\.3 +sync when Delta_bar", out, re.M)
    assert cli_main(["strategies", "nope"]) == 2
    assert "unknown strategy 'nope'" in capsys.readouterr().err


def test_an_entry_and_opt_reach_the_options_and_old_flags_still_work_noted(capsys):
    args = build_parser().parse_args(["train", "--strategy", "diloco:period=7:outer_lr=0.5", "--opt",
                                      "outer_optimizer=sgd", "--opt", "aggregator=trimmed:1"])
    cfg = config_from_args(args)
    assert cfg.strategy == "diloco"
    assert cfg.strategy_options == {"period": 7, "outer_lr": 0.5, "outer_optimizer": "sgd", "aggregator": "trimmed:1"}
    old = ["train", "--strategy", "diloco", "--period", "7", "--outer-lr", "0.5", "--project-network", "25gbe"]
    args = build_parser().parse_args(old)
    cfg = config_from_args(args)
    assert cfg.strategy_options == {"period": 7, "outer_lr": 0.5} and cfg.project_network == "25gbe"
    from jaxsel.cli.deprecated import notes

    lines = notes(args, old)
    assert lines == [
        "jaxsel: note: --period is deprecated and goes in the next release; write the option in the strategy's "
        "entry (--strategy diloco:period=7) or as --opt period=7",
        "jaxsel: note: --outer-lr is deprecated and goes in the next release; write the option in the strategy's "
        "entry (--strategy diloco:outer_lr=0.5) or as --opt outer_lr=0.5",
        "jaxsel: note: --project-network is deprecated and goes in the next release; write --project network=25gbe"]
    args = build_parser().parse_args(["train", "--strategy", "selsync:delta=0.1", "--opt", "delta=0.2"])
    with pytest.raises(ValueError, match="both set delta"):
        config_from_args(args)
    args = build_parser().parse_args(["train", "--gpus-per-host", "2", "--project", "gpus_per_host=4"])
    with pytest.raises(ValueError, match="both set project_gpus_per_host"):
        config_from_args(args)
    args = build_parser().parse_args(["train", "--augment", "off", "--no-progress", "--inject", "0.1,0.5"])
    cfg = config_from_args(args)
    assert (cfg.augment, cfg.progress, cfg.partition_options) == (False, False, {"injection": (0.1, 0.5)})


def test_check_config_runs_once_per_run_and_once_per_compared_variant(tmp_path, monkeypatch):
    """Once in each run's plan (training/plan.py), and once per entry of a comparison before
    any of its cells trains."""
    import jaxsel.training.config as config
    import jaxsel.training.plan as plan
    import jaxsel.training.run as run
    import jaxsel.training.train as train

    calls = []

    def counting(cfg, check=config.check_config):
        calls.append(cfg.strategy)
        check(cfg)

    for module in (config, plan, run, train):
        monkeypatch.setattr(module, "check_config", counting, raising=False)
    tiny = ["--steps", "2", "--eval-every", "2", "--log-every", "2", "--no-progress"]
    assert cli_main(["train", "--strategy", "bsp", *tiny, "--no-checkpoint", "--out", str(tmp_path / "t")]) == 0
    assert calls == ["bsp"]
    calls.clear()
    assert cli_main(["compare", "--strategies", "bsp,localsgd", "--seeds", "2", "--no-match-budget", *tiny,
                     "--dataset", "digits", "--partition", "seldp", "--out", str(tmp_path / "c")]) == 0
    assert calls == ["bsp", "localsgd", "bsp", "bsp", "localsgd", "localsgd"]   # the entries, then each cell's plan
    assert cli_main(["compare", "--seed", str(MAX_SEED), "--seeds", "2", "--out", str(tmp_path / "d")]) == 2
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("argv", [["--help"], ["compare", "--help"], ["train", "--help"], ["frontier", "--help"]])
def test_help_imports_neither_jax_nor_numpy(argv):
    """Issue 46 item 5: `--help` is immediate because nothing heavy is imported before argparse
    has parsed (measured as Python measures imports, `-X importtime`, not by a clock)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "jaxsel.cli", *argv], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and "usage: jaxsel" in done.stdout
    imported = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    heavy = {m for m in imported if m.split(".")[0] in ("jax", "jaxlib", "numpy", "tensorflow_datasets", "optax",
                                                      "flax", "orbax")}
    assert not heavy, sorted(heavy)[:5]
