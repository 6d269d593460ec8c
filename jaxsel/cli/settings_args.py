"""The one way from the command line to a run's settings: argv, a `--config FILE`, the
record of the run a `--resume` continues and a `--task`, into one TrainConfig.

The parsers (`task_args`, `strategy_args`, `task_flag`, `deprecated`) only declare flags;
every value they hold becomes a setting here: a field's flag holds the field's value
(training/declare.py), a section's KEY=VALUE flag (`--project`) and a dict field's pairs
are read by the one grammar (core/pairs.py) and each key as its field's value
(`declare.field_value`, as a config file's), a strategy's entry and `--opt` into its
options, last release's strategy flags as `--opt`. A file's or a record's settings are
applied as if typed before the flags: a flag given explicitly wins, whatever its value,
and the flag defaults apply only to what neither sets. Explicit flags are found by parsing
the command line again with every default removed (`explicit_dests`), never by comparing
values with defaults. A file's value of a command's own option is read as its flag would
read it (`flag_value`). Every value is checked once, where its section checks it.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import typing
from typing import Callable

from ..core.options import OptionError, coerce
from ..core.pairs import read_entry, read_pairs
from ..training.config import ConfigError, TrainConfig
from ..training.config_file import Reader, field_names, load_settings
from ..training.declare import Flag, default_of, field_value, flags_of
from .deprecated import old_strategy_options
from .task_args import keyed_dest


def config_values(args: argparse.Namespace, command: str) -> dict:
    """The field values `command`'s flags hold in `args` (pairs read into dicts, a section
    flag's keys into their fields)."""
    out, keyed = {}, {}
    for name, flag in flags_of(TrainConfig, command).items():
        if flag.key_in is not None:
            keyed.setdefault(flag.key_in[0], {})[flag.key_in[1]] = name
        else:
            out[name] = _table(args, name, flag) if flag.pairs else getattr(args, name)
    for option, fields in keyed.items():
        out.update(_keyed_values(args, option, fields))
    return out


def _keyed_values(args, option: str, fields: dict[str, str]) -> dict:
    """Each key of `OPTION KEY=VALUE` as its field's value (read as a config file's, by
    the field's type and choices), over a config file's value (`args.file_fields`) and the
    default; a key's last-release flag (`--project-network`) counts as the key, given once.
    An unknown key names the valid ones."""
    hints = typing.get_type_hints(TrainConfig)
    given = read_pairs(getattr(args, keyed_dest(option), None), option)
    unknown = sorted(set(given) - set(fields))
    if unknown:
        raise OptionError(f"{option} has no key {unknown[0]!r}; its keys: {', '.join(fields)}")
    for key, name in fields.items():
        old = getattr(args, f"old.{name}", None)
        if old is not None:
            if key in given:
                spelt = " / ".join(flags_of(TrainConfig, args.command)[name].old)
                raise OptionError(f"{spelt} and {option} {key}= both set {name}; give {option} {key}= only")
            given[key] = old
    file_fields = getattr(args, "file_fields", {})
    out = {name: file_fields.get(name, default_of(TrainConfig, name)) for name in fields.values()}
    for key, value in given.items():
        name = fields[key]
        text = str(value) if isinstance(value, (int, float)) and hints[name] is str else value
        out[name] = field_value(TrainConfig, name, text, f"{option} {key}")
    return out


def _table(args, name: str, flag: Flag) -> dict:
    """A dict field from its KEY=VALUE pairs and its one-key flags; a key set twice is an error."""
    table = read_pairs(getattr(args, name), flag.names[0])
    for key, sub in flag.keys:
        value = getattr(args, f"{name}.{key}")
        if value is None:
            continue
        if key in table:
            raise OptionError(f"{sub.names[0]} and {flag.names[0]} {key}=... both set {key}; give it once")
        table[key] = value
    return table


def per_replica_batch(args) -> int:
    """--batch-size, or --global-batch-size split evenly over the replicas."""
    total = getattr(args, "global_batch_size", None)
    if total is None:
        return args.batch_size
    if total < 1 or args.replicas < 1 or total % args.replicas:
        raise OptionError(f"--global-batch-size {total} must be a positive multiple of --replicas "
                          f"{args.replicas} (each replica gets an equal share)")
    return total // args.replicas


def config_from_args(args, **fixed) -> TrainConfig:
    """The TrainConfig of `args`: its command's flags (train's `--strategy` entry split into
    the name and its options, with `--opt`), then `--config FILE`'s remaining settings,
    then `fixed`, the fields the command sets itself (compare's placeholder strategy,
    train's run directory)."""

    values = config_values(args, args.command)
    options = options_from_args(args)
    if "strategy" in values:   # train: NAME[:KEY=VALUE...]
        values["strategy"], options = strategy_entry(values["strategy"], options)
    values["strategy_options"] = {k: v for k, v in options.items() if v is not None}
    values["batch_size"] = per_replica_batch(args)
    cfg = apply_to_config(TrainConfig(**values), getattr(args, "config_rest", None))   # --config FILE
    return dataclasses.replace(cfg, **fixed) if fixed else cfg


def options_from_args(args) -> dict:
    """The strategy options of `--opt` and the old flags (a key set by both is an error)."""
    opts = read_pairs(getattr(args, "opt", None), "--opt")
    old = old_strategy_options(args)
    both = sorted(set(old) & set(opts))
    if both:
        key = both[0]
        raise OptionError(f"--{key.replace('_', '-')} {old[key]} and --opt {key}={opts[key]} both set {key}; "
                          f"give it once")
    return {**old, **opts}


def strategy_entry(text: str, given: dict) -> tuple[str, dict]:
    """Train's `--strategy NAME[:KEY=VALUE...]` -> (name, options), with `given` (--opt):
    an option in both is an error naming both."""
    name, options = read_entry(text, "--strategy")
    both = sorted(set(options) & set(given))
    if both:
        key = both[0]
        raise OptionError(f"--strategy {text!r} and --opt {key}={given[key]} both set {key}; give it once")
    return name, {**options, **given}


def apply_task(args: argparse.Namespace, kept: set[str]) -> None:
    """Set `args.task`'s settings on the flags not in `kept` (typed, or set by --config)."""
    from ..training.tasks import task_named

    name = getattr(args, "task", None)
    if name is None:
        return
    for field, value in task_named(name).settings.items():
        if field not in kept:
            setattr(args, field, value)


def apply_to_config(cfg: TrainConfig, rest: dict | None) -> TrainConfig:
    """`cfg` (from the flags) with the file's remaining settings; a table (strategy,
    partition, dataset options) is merged key by key, the flags' keys winning."""
    if not rest:
        return cfg
    changes = {k: ({**v, **getattr(cfg, k)} if isinstance(v, dict) else v)
               for k, v in rest.items() if k in field_names()}
    return dataclasses.replace(cfg, **changes)



def apply_settings(args: argparse.Namespace, settings: dict, explicit: set[str]) -> None:
    """`settings` (a file's, checked) on `args` where no flag was typed (`explicit`: the
    dests typed, `explicit_dests`): a field with a flag of this command into its dest, a key
    of a section's flag (`--project network=`) as the default its typed keys override
    (`args.file_fields`), the rest (tables, fields without a flag here) kept for the
    TrainConfig (`args.config_rest`); a file's `out_dir` is train's --out."""
    settings = dict(settings)
    if args.command == "train" and "out_dir" in settings:
        settings["out"] = settings.pop("out_dir")
    keyed = {name for name, flag in flags_of(TrainConfig, args.command).items() if flag.key_in}
    args.file_fields = {k: settings.pop(k) for k in list(settings) if k in keyed}
    args.config_rest = apply_to_args(args, settings, explicit)
    args.config_set = set(settings)   # a --task leaves these as the file set them


def file_settings(parser: argparse.ArgumentParser, args: argparse.Namespace, path, training, flag: str) -> dict:
    """The settings of file `path` for `args.command` (`training`: a parser holding the
    command's task and strategy flags, which are no command keys)."""
    return load_settings(path, command_keys(subcommand(parser, args.command), training), flag)


def flag_value(action: argparse.Action, value, where: str):
    """A file's value of a command's own option, read as its flag would read it: a switch
    (`--no-checkpoint`, `--match-budget/--no-match-budget`) takes true or false only (the
    text "false" is false, never a true non-empty string), a typed flag's text goes through
    its type (`--peer-timeout abc` is refused, so is `peer_timeout = "abc"`), a number
    given to a text flag is its text, a list to a comma-separated one is joined; then the
    flag's choices. Anything else is one ConfigError naming the key and the value."""
    try:
        if action.nargs == 0:   # a switch
            return coerce(value, bool, where)
        if isinstance(value, list) and action.type is None and isinstance(action.default, str):
            if not all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value):
                raise ConfigError(f"{where} must be a list of text, got {value!r}")
            value = ",".join(map(str, value))   # e.g. strategies = ["bsp", "localsgd"]
        elif isinstance(value, (list, dict)):
            raise ConfigError(f"{where} must be text, a number or true/false, got {value!r}")
        if action.type in (int, float) and not isinstance(value, str):
            value = coerce(value, action.type, where)
        elif action.type is not None and isinstance(value, str):
            value = _typed(action.type, value, where)
        elif action.type is None and isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)   # `target = 0.5` is `--target 0.5`
    except OptionError as err:
        raise ConfigError(str(err)) from None
    if action.choices is not None and value not in action.choices:
        raise ConfigError(f"{where} must be one of {', '.join(map(str, action.choices))}, got {value!r}")
    return value


def _typed(read, text: str, where: str):
    """`text` through a flag's argparse type, as the command line would read it."""
    try:
        return read(text)
    except (ValueError, TypeError, argparse.ArgumentTypeError):
        kind = {int: "an integer", float: "a number"}.get(read, f"a valid {getattr(read, '__name__', 'value')}")
        raise ConfigError(f"{where} must be {kind}, got {text!r}") from None


def explicit_dests(parser: argparse.ArgumentParser, argv: list[str]) -> set[str]:
    """The dests the user typed in `argv`: `parser` parses it again with every default
    removed, so only typed flags land in the namespace (its defaults are put back after)."""
    parsers = _parsers(parser)
    actions = [(a, a.default) for sub in parsers for a in sub._actions]
    kept = [(sub, dict(sub._defaults)) for sub in parsers]
    try:
        for action, _ in actions:
            action.default = argparse.SUPPRESS
        for sub, _ in kept:
            sub._defaults.clear()
        return set(vars(parser.parse_args(argv))) - {"command"}
    finally:
        for action, default in actions:
            action.default = default
        for sub, defaults in kept:
            sub._defaults.update(defaults)


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    out = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out += _parsers(sub)
    return out


def subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    """The parser of command `name`."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[name]
    raise KeyError(name)


def command_keys(sub: argparse.ArgumentParser, training: argparse.ArgumentParser) -> dict[str, Reader]:
    """A command's own options a file may set (e.g. compare's strategies, target), by dest,
    with a reader each that reads a value as the flag would (`flag_value`): its dests that
    are neither training flags (`training`) nor the run directory or --config."""
    theirs = {a.dest for a in training._actions} | {"help", "out", "config"} | set(field_names())
    return {a.dest: functools.partial(flag_value, a) for a in sub._actions if a.dest not in theirs}


def apply_to_args(args: argparse.Namespace, settings: dict, explicit: set[str]) -> dict:
    """Set the file's values on `args` where the user typed no flag for them (a field's
    flag has the field's name as its dest and holds the field's value: training/declare.py);
    return the rest (tables, fields without a flag in this command), for `apply_to_config`."""
    rest = {}
    for name, value in settings.items():
        if isinstance(value, dict) or not hasattr(args, name):
            rest[name] = value
        elif name not in explicit:
            current = getattr(args, name)
            setattr(args, name, ",".join(map(str, value)) if isinstance(value, list) and
                    isinstance(current, str) else value)
    return rest


def settings_from_argv(args, argv: list[str], build_parser: Callable[[], argparse.ArgumentParser]) -> None:
    """The parsed command's `args` with its config file, the resumed run's record and its
    task applied, in that order (each only where nothing before it set the value);
    `build_parser`: the command line's parser, built afresh (`explicit_dests` edits it)."""
    if getattr(args, "config", None):
        apply_config_file(args, argv, build_parser)
    if args.command == "train" and args.resume:
        apply_recorded(args, argv, build_parser)
    apply_named_task(args, argv, build_parser)


def apply_config_file(args, argv: list[str], build_parser: Callable[[], argparse.ArgumentParser]) -> None:
    """--config FILE: its settings as if typed before the flags."""
    from .strategy_args import add_strategy_args
    from .task_args import add_task_args

    training = argparse.ArgumentParser(add_help=False)
    add_strategy_args(add_task_args(training, args.command)["strategy"])
    settings = file_settings(build_parser(), args, args.config, training, "--config")
    apply_settings(args, settings, explicit_dests(build_parser(), argv))


def apply_recorded(args, argv: list[str], build_parser: Callable[[], argparse.ArgumentParser]) -> None:
    """train --resume: the run's own settings (RUN_DIR/config.json, training/recorded.py)
    as if typed before the flags; `args.recorded` keeps them for what the flags change.
    With --config FILE the file's settings are the run's (last release's way to resume:
    the checkpoint's identity check refuses a difference)."""
    from ..training.recorded import recorded_settings

    recorded = recorded_settings(args.out) if args.out is not None and not args.config else None
    if recorded is None:   # no record (yet), or --config's: the flags and the file alone
        return
    apply_settings(args, recorded, explicit_dests(build_parser(), argv))
    args.recorded = recorded


def apply_named_task(args, argv: list[str], build_parser: Callable[[], argparse.ArgumentParser]) -> None:
    """--task NAME: its settings where neither a typed flag nor --config (nor the record of
    the run a --resume continues) set the field."""
    if getattr(args, "task", None) is None:
        return
    apply_task(args, explicit_dests(build_parser(), argv) | getattr(args, "config_set", set()))

