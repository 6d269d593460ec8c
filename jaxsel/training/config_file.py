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
to TrainConfig is a valid key, and a flag, at once. A run directory's config.json (it
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
from typing import Iterable

from ..core.options import OptionError, coerce
from .config import ConfigError, TrainConfig

#: what a run directory's config.json records beside the settings (not settings): where the
#: replicas ran, how packed ones were computed and where its checkpoints went
RECORDED = frozenset({"layout", "packing", "checkpoint_root"})
#: where a recorded run lived: a reproduction does not take these
RUN_LOCATION = ("out_dir", "checkpoint_dir", "resume")


def field_names() -> list[str]:
    return [f.name for f in dataclasses.fields(TrainConfig)]


def read_file(path: str | Path) -> dict:
    """The file's top-level table; a missing file or a syntax error is one ConfigError."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"--config {str(path)!r}: no such file")
    text = p.read_text(encoding="utf-8")
    kind = p.suffix.lower().lstrip(".")
    try:
        if kind == "toml":
            import tomllib

            data = tomllib.loads(text)
        elif kind == "json":
            data = json.loads(text)
        elif kind in ("yaml", "yml"):
            data = _yaml(text)
        else:
            raise ConfigError(f"--config {str(path)!r}: unknown file type {p.suffix!r}; use .toml, .json or .yaml")
    except (ValueError, ImportError) as err:   # tomllib / json / yaml syntax errors are ValueErrors
        if isinstance(err, ConfigError):
            raise
        raise ConfigError(f"--config {str(path)!r} is not valid {kind.upper()}: {' '.join(str(err).split())}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--config {str(path)!r} must hold a table of settings, got {type(data).__name__}")
    return data


def _yaml(text: str):
    try:
        import yaml
    except ImportError:
        raise ConfigError("YAML config files need PyYAML: pip install pyyaml (or write the file as TOML)") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ValueError(str(err)) from None


def load_settings(path: str | Path, command_keys: Iterable[str] = ()) -> dict:
    """The file's settings, checked: TrainConfig fields (values of their declared types)
    plus the command's own options `command_keys`. An unknown key is one ConfigError
    naming it and the valid ones."""
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
    return {k: _checked(k, v, hints[k], path) if k in hints else v for k, v in settings.items()}


def _checked(name: str, value, hint, path):
    if typing.get_origin(hint) is dict or hint is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"--config {str(path)!r}: {name} must be a table of KEY = VALUE, got {value!r}")
        return value
    try:
        return coerce(value, hint, f"--config {str(path)!r}: {name}")
    except OptionError as err:
        raise ConfigError(str(err)) from None


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


def command_keys(sub: argparse.ArgumentParser, training: argparse.ArgumentParser) -> set[str]:
    """A command's own options a file may set (e.g. compare's strategies, target): its
    dests that are neither training flags (`training`) nor the run directory or --config."""
    mine = {a.dest for a in sub._actions} - {a.dest for a in training._actions}
    return mine - {"help", "out", "config"} - set(field_names())


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
