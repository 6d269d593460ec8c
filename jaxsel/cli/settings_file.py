"""A settings file under the command line: `--config FILE`, and the run a `--resume`
continues (RUN_DIR/config.json), as if its settings were typed before the flags.

A flag given explicitly wins, whatever its value, and the flag defaults apply only to what
neither sets. Explicit flags are found by parsing the command line again with every
default removed (`explicit_dests`), never by comparing values with defaults. A file's value
of a command's own option is read as its flag would read it (`flag_value`); a TrainConfig
field's, by training/config_file.py, which knows no argparse: this module is the command
line's side of it.
"""
from __future__ import annotations

import argparse
import functools

from ..core.options import OptionError, coerce
from ..training.config import ConfigError, TrainConfig
from ..training.config_file import Reader, field_names, load_settings
from ..training.declare import flags_of


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


