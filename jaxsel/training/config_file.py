"""Config files: a run's settings in a file, under the command line's flags.

`jaxsel train --config run.toml` (or `compare --config grid.toml`) reads TOML (tomllib),
JSON (a run directory's config.json) or YAML (with PyYAML). Its keys are TrainConfig's
field names (strategy options as a `[strategy_options]` table), and for a command its own
options by their flag's name (`strategies`, `target`, ... for `compare`). The file stands
for flags typed before the command line's: a flag given explicitly wins, whatever its
value, and the flag defaults apply only to what neither sets. Explicit flags are found by
parsing the command line again with every default removed (`explicit_dests`), never by
comparing values with defaults.

Keys and values are checked against the dataclass fields and their types, and a field's
flag has the field's name as its dest and holds the field's value (training/declare.py), so
a file's value lands where its flag's would, with no second list of fields: a field added
to TrainConfig is a valid key, and a flag, at once. Every value is read by the same parser
as its flag (`field_value`, `flag_value`): `no_checkpoint = "false"` is false, a choice
outside the flag's choices or a number its flag would refuse is one line. Only a regular
UTF-8 file of JSON's types is read, and YAML without aliases (a few hundred bytes of
aliases of aliases expand to gigabytes). A run directory's config.json (it
records the `layout` beside the settings) reproduces that run bit for bit; its own
locations (out_dir, checkpoint_dir, resume) are not taken, so the reproduction gets a run
directory of its own.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import typing
from pathlib import Path
from typing import Iterable, Mapping

from ..core.options import OptionError, coerce
from .config import ConfigError, TrainConfig
from .declare import Flag, declarations

#: what a run directory's config.json records beside the settings (not settings): where the
#: replicas ran, how packed ones were computed, where its checkpoints went and its identity
RECORDED = frozenset({"layout", "packing", "checkpoint_root", "run_id"})
#: where a recorded run lived: a reproduction does not take these
RUN_LOCATION = ("out_dir", "checkpoint_dir", "resume")


def field_names() -> list[str]:
    return [f.name for f in dataclasses.fields(TrainConfig)]


def read_file(path: str | Path) -> dict:
    """The file's top-level table; a missing, unreadable or malformed file is one ConfigError."""
    p = Path(path)
    where = f"--config {str(path)!r}"
    _check_regular_file(p, where)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"{where} is not UTF-8 text (byte {err.start} is {err.object[err.start:err.start + 1]!r}); "
                          f"save it as UTF-8") from None
    kind = p.suffix.lower().lstrip(".")
    try:
        if kind == "toml":
            import tomllib

            data = tomllib.loads(text)
        elif kind == "json":
            data = json.loads(text)
        elif kind in ("yaml", "yml"):
            data = _yaml(text, where)
        else:
            raise ConfigError(f"{where}: unknown file type {p.suffix!r}; use .toml, .json or .yaml")
    except (ValueError, ImportError) as err:   # tomllib / json / yaml syntax errors are ValueErrors
        if isinstance(err, ConfigError):
            raise
        raise ConfigError(f"{where} is not valid {kind.upper()}: {' '.join(str(err).split())}") from None
    except RecursionError:   # [[[[...]]]] thousands deep: the parsers recurse
        raise ConfigError(f"{where} nests lists or tables too deeply for a config file") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{where} must hold a table of settings, got {type(data).__name__}")
    try:
        _check_plain(data, where)
    except RecursionError:
        raise ConfigError(f"{where} nests lists or tables too deeply for a config file") from None
    return data


def _check_regular_file(p: Path, where: str) -> None:
    """Only a regular file is read: a directory, a FIFO (which blocks) or a device
    (/dev/zero never ends) is named for what it is."""
    if p.is_file():
        return
    if p.is_dir():
        raise ConfigError(f"{where} is a directory, not a file; pass the config file in it")
    if p.exists():
        raise ConfigError(f"{where} is not a regular file (a FIFO, socket or device); pass a .toml, .json or "
                          f".yaml file")
    if p.is_symlink():
        raise ConfigError(f"{where} is a symbolic link to nothing (its target is missing, or a loop of links)")
    raise ConfigError(f"{where}: no such file")


#: what a setting may hold in any of the formats: JSON's types (TOML's dates, YAML's sets
#: and bytes are no setting of jaxsel's)
PLAIN = (str, int, float, bool, type(None))


def _check_plain(value, where: str, key: str = "") -> None:
    """Tables with names as keys, lists and scalars of JSON's types, all the way down: a
    YAML `1:` or `true:` key, a date or a set is one ConfigError naming where it is."""
    at = f"{where}: {key}" if key else where
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise ConfigError(f"{at}{':' if key else ''} keys must be names, got {k!r}")
            _check_plain(v, where, f"{key}.{k}" if key else k)
    elif isinstance(value, list):
        for v in value:
            _check_plain(v, where, key)
    elif not isinstance(value, PLAIN):
        raise ConfigError(f"{at} must be text, a number, true/false, a list or a table, got a "
                          f"{type(value).__name__} ({value!r})")


def _yaml(text: str, where: str):
    try:
        import yaml
    except ImportError:
        raise ConfigError("YAML config files need PyYAML: pip install pyyaml (or write the file as TOML)") from None

    class NoAliases(yaml.SafeLoader):
        """YAML without aliases: each alias is a reference that expands where it is used, so
        a few hundred bytes of aliases of aliases (a "billion laughs") expand to gigabytes;
        no setting needs one."""

        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise ConfigError(f"{where}: YAML aliases are not allowed in a config file (*{event.anchor} on "
                                  f"line {event.start_mark.line + 1}); write the value out")
            return super().compose_node(parent, index)

    try:
        return yaml.load(text, Loader=NoAliases)   # noqa: S506 - a SafeLoader (no aliases)
    except yaml.YAMLError as err:
        raise ValueError(str(err)) from None


def load_settings(path: str | Path, command_keys: Iterable[str] | Mapping[str, argparse.Action] = ()) -> dict:
    """The file's settings, checked: TrainConfig fields (values of their declared types,
    read by their flag's own parser where it has one) plus the command's own options
    `command_keys` (by name; with their argparse actions, read as their flags would read
    them, `flag_value`). An unknown key is one ConfigError naming it and the valid ones."""
    data = read_file(path)
    fields = field_names()
    valid = set(fields) | set(command_keys)
    recorded = RECORDED & data.keys()
    unknown = sorted(k for k in data if k not in valid and k not in recorded)
    if unknown:
        raise ConfigError(f"--config {str(path)!r}: unknown key {unknown[0]!r}; valid keys: {', '.join(sorted(valid))}")
    settings = {k: v for k, v in data.items() if k not in recorded}
    if recorded:   # a run directory's config.json: reproduce the run elsewhere
        settings = {k: v for k, v in settings.items() if k not in RUN_LOCATION}
    hints = typing.get_type_hints(TrainConfig)
    actions = command_keys if isinstance(command_keys, Mapping) else {}
    out = {}
    for key, value in settings.items():
        where = f"--config {str(path)!r}: {key}"
        if key in hints:
            out[key] = field_value(key, value, hints[key], where)
        elif key in actions:
            out[key] = flag_value(actions[key], value, where)
        else:
            out[key] = value
    return out


def field_value(name: str, value, hint, where: str):
    """A file's value of TrainConfig field `name`, read as its flag reads it: text through
    the flag's own parser (`--augment on`, `--inject 0.1,0.5`), anything else coerced to
    the field's type; a value outside the flag's choices is a ConfigError here."""
    decl = declarations(TrainConfig)[name]
    flag = decl if isinstance(decl, Flag) else None
    if typing.get_origin(hint) is dict or hint is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where} must be a table of KEY = VALUE, got {value!r}")
        keys = dict(flag.keys) if flag is not None else {}
        return {k: _parsed(keys[k], v, f"{where}.{k}") if k in keys and isinstance(v, str) else v
                for k, v in value.items()}
    if flag is not None and flag.parse is not None and isinstance(value, str):
        value = _parsed(flag, value, where)
    else:
        try:
            value = coerce(value, hint, where)
        except OptionError as err:
            raise ConfigError(str(err)) from None
    allowed = flag.allowed() if flag is not None else None
    if allowed is not None and value not in allowed:
        raise ConfigError(f"{where} must be one of {', '.join(map(str, allowed))}, got {value!r}")
    return value


def _parsed(flag: Flag, text: str, where: str):
    try:
        return flag.parse(text)
    except ValueError as err:
        raise ConfigError(f"{where} ({flag.names[0]}) {err}") from None


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
    """The dests the user typed in `argv`: `parser` (a fresh copy: it is changed) parses
    it again with every default removed, so only typed flags land in the namespace."""
    for sub in _parsers(parser):
        for action in sub._actions:
            action.default = argparse.SUPPRESS
        sub._defaults.clear()
    return set(vars(parser.parse_args(argv))) - {"command"}


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


def command_keys(sub: argparse.ArgumentParser, training: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """A command's own options a file may set (e.g. compare's strategies, target), by dest,
    with the argparse action that reads each (`flag_value`): its dests that are neither
    training flags (`training`) nor the run directory or --config."""
    theirs = {a.dest for a in training._actions} | {"help", "out", "config"} | set(field_names())
    return {a.dest: a for a in sub._actions if a.dest not in theirs}


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


def apply_to_config(cfg: TrainConfig, rest: dict | None) -> TrainConfig:
    """`cfg` (from the flags) with the file's remaining settings; a table (strategy,
    partition, dataset options) is merged key by key, the flags' keys winning."""
    if not rest:
        return cfg
    changes = {k: ({**v, **getattr(cfg, k)} if isinstance(v, dict) else v)
               for k, v in rest.items() if k in field_names()}
    return dataclasses.replace(cfg, **changes)
