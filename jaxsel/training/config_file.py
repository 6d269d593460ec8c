"""Config files: a run's settings in a file.

`jaxsel train --config run.toml` (or `compare --config grid.toml`) reads TOML (tomllib),
JSON (a run directory's config.json) or YAML (with PyYAML). A run's settings are in the
tables of their sections (training/sections/: `[data]`, `[optim]`, ...; the strategy's
options as `[strategy.strategy_options]`), by their field names; a command's own options
at the top level by their flag's name (`strategies`, `target`, ... for `compare`), each
read by the reader the command gives (`load_settings`). Last release's flat files, every
setting at the top level, are read for one more release with one note
(compat/flat_settings.py); a run directory's config.json records them flat, unnoted. How
the file stands under the flags typed is the command line's business (cli/settings_args.py):
this module knows no argparse.

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

import dataclasses
import json
import typing
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from ..compat.flat_settings import note_flat_keys
from ..compat.packing_names import read_old_name
from .config import ConfigError, TrainConfig
from .declare import LOCATION, SECTIONS, field_value, section_of, with_effect
from .old_records import as_it_ran, renamed_keys
from .rundir import CONFIG_FILE

#: what a run directory's config.json records beside the settings (not settings): where the
#: replicas ran, the packing "auto" chose, where its checkpoints went and its identity
RECORDED = frozenset({"layout", "packing_choice", "checkpoint_root", "run_id"})
#: where a recorded run lived: a reproduction does not take these (`effect=LOCATION`)
RUN_LOCATION = with_effect(TrainConfig, LOCATION)
#: how a command reads a file's value of one of its own options: (value, where) -> value
Reader = Callable[[Any, str], Any]


def field_names() -> list[str]:
    return [f.name for f in dataclasses.fields(TrainConfig)]


def read_file(path: str | Path, flag: str = "--config") -> dict:
    """The file's top-level table; a missing, unreadable or malformed file is one ConfigError
    (naming `flag`, the option that named the file)."""
    p = Path(path)
    where = f"{flag} {str(path)!r}"
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
    return checked_table(data, where)


def checked_table(data, where: str) -> dict:
    """`data`, a file's parsed top level, if it is a table of plain settings (`_check_plain`);
    otherwise one ConfigError naming `where`."""
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


def load_settings(path: str | Path, command_keys: Iterable[str] | Mapping[str, Reader] = (),
                  flag: str = "--config", data: dict | None = None) -> dict:
    """The file's settings, checked: TrainConfig fields (values of their declared types,
    read by their flag's own parser where it has one) plus the command's own options
    `command_keys` (by name; with a reader each, `(value, where) -> value`, that reads a
    value as the option's flag would). An unknown key is one ConfigError naming it and the
    valid ones; `flag` names the option that named the file. A run directory's config.json
    is read as the run ran (`old_records.as_it_ran`). `data`: the file's table, read already
    (a run's config.json on a resume, read by rundir/records.py)."""
    data = read_file(path, flag) if data is None else checked_table(data, f"{flag} {str(path)!r}")
    fields = field_names()
    valid = set(fields) | set(command_keys)
    is_record = bool(RECORDED & data.keys()) or Path(path).name == CONFIG_FILE
    # a record's names of before, silently (old_records.py); a user's, noted (compat/packing_names.py)
    data = renamed_keys(data) if is_record else read_old_name(data, f"{flag} {str(path)!r}", 2, ConfigError)
    recorded = RECORDED & data.keys()
    data, flat = from_sections(data, f"{flag} {str(path)!r}")
    if is_record:   # a run's record holds its settings flat: no note
        flat = {}
    unknown = sorted(k for k in data if k not in valid and k not in recorded)
    if unknown:
        raise ConfigError(f"{flag} {str(path)!r}: unknown key {unknown[0]!r}; valid keys: {', '.join(sorted(valid))}")
    settings = {k: v for k, v in data.items() if k not in recorded}
    if recorded:   # a run directory's config.json: reproduce the run elsewhere
        settings = {k: v for k, v in settings.items() if k not in RUN_LOCATION}
    hints = typing.get_type_hints(TrainConfig)
    readers = command_keys if isinstance(command_keys, Mapping) else {}
    out = {}
    for key, value in settings.items():
        where = f"{flag} {str(path)!r}: {key}"
        if key in hints:
            out[key] = field_value(TrainConfig, key, value, where)
        elif key in readers:
            out[key] = readers[key](value, where)
        else:
            out[key] = value
    note_flat_keys(flat, f"{flag} {str(path)!r}")   # once the file is read: a bad one is its error alone
    return as_it_ran(out) if recorded else out   # a run's record: the run as it ran (old_records.py)


def from_sections(data: dict, where: str) -> tuple[dict, dict]:
    """A file's table with each section's table (`[data]`, ...) read into its fields, and
    the settings outside their sections kept (last release's flat files), with the table
    each of those belongs in (`compat.flat_settings` notes them). A
    key of a section's table that is no field of it is one ConfigError naming the section's
    fields. A field named like its section (`strategy`, `replicas`) is its table when it
    holds one."""
    out, flat = {}, {}
    for key, value in data.items():
        if key in SECTIONS and isinstance(value, dict):
            out.update(_section_table(key, value, where))
        else:
            if key in field_names():
                flat[key] = section_of(TrainConfig, key)
            out[key] = value
    return out, flat


def _section_table(table: str, values: dict, where: str) -> dict:
    own = [name for name in field_names() if section_of(TrainConfig, name) == table]
    unknown = sorted(set(values) - set(own))
    if unknown:
        raise ConfigError(f"{where}: [{table}] has no setting {unknown[0]!r}; it holds {', '.join(own)}")
    return values


