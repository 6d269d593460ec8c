"""A run's settings as flags, in sections: generated from TrainConfig's declarations.

Each field declared with a `Flag` (training/declare.py) becomes one argparse argument in
its section's group (`declare.SECTIONS`: strategy, data, model and optimizer, replicas and
devices, evaluation and logging, projection, checkpoints), whose dest is the field's name
and whose value is already the field's value (`--augment on` is True, `--no-progress` is
False), so the namespace maps onto TrainConfig without a copy of any default: `--help`
shows the field's own default, or a command's override from its explicit table (compare's
DEFAULT_TASK, train's TRAIN_DEFAULTS), which its help names. Fields that are keys of one
section's flag (`--project network=25gbe`) share it. A field's names of the last release
(`Flag.old`) are still read for one more, hidden from `--help`; `deprecated.py` notes each use.
"""
from __future__ import annotations

import argparse
import typing
from typing import Any

from ..training.config import TrainConfig
from ..training.declare import SECTIONS, Flag, default_of, flags_of


def section_groups(p: argparse.ArgumentParser) -> dict[str, Any]:
    """One argument group per section, in `--help`'s order (an empty one is not shown)."""
    return {key: p.add_argument_group(title) for key, title in SECTIONS.items()}


def add_task_args(p: argparse.ArgumentParser, command: str, overrides: dict | None = None) -> dict[str, Any]:
    """`command`'s flags of TrainConfig's fields, in their sections, and --global-batch-size;
    `overrides`: field -> the command's own default. Returns the section groups."""
    hints = typing.get_type_hints(TrainConfig)
    groups = section_groups(p)
    keyed: dict[str, list[tuple[str, Flag, Any]]] = {}
    for name, flag in flags_of(TrainConfig, command).items():
        default = (overrides or {}).get(name, default_of(TrainConfig, name))
        if flag.key_in is not None:
            keyed.setdefault(flag.key_in[0], []).append((name, flag, default))
        else:
            _add(groups[flag.group], name, flag, hints[name], default)
            for key, sub in flag.keys:   # e.g. --inject: partition_options["injection"]
                _add(groups[flag.group], f"{name}.{key}", sub, Any, None)
        if flag.old:   # last release's spellings, read for one more (deprecated.py notes them)
            _add_old(groups[flag.group], name, flag, hints[name])
    for option, fields in keyed.items():
        _add_keyed(groups[fields[0][1].group], option, fields)
    groups["optim"].add_argument("--global-batch-size", type=int, default=None, metavar="N",
                                 help="total batch over all replicas, instead of --batch-size")
    return groups


def _add(group, dest: str, flag: Flag, hint, default) -> None:
    kw = {"dest": dest, "help": flag.help}
    if flag.pairs:   # a dict field: KEY=VALUE pairs, read by `config_values`
        group.add_argument(*flag.names, action="append", default=None, metavar=flag.metavar, **kw)
    elif hint is bool:   # --x / --no-x take no value: no metavar (deprecated in Python 3.12, gone in 3.14)
        if flag.metavar is not None:
            raise TypeError(f"{flag.names[0]} is on/off and takes no value: drop metavar={flag.metavar!r}")
        group.add_argument(*flag.names, action=argparse.BooleanOptionalAction, default=default, **kw)
    else:
        read = _reader(flag, hint)
        metavar = flag.metavar or ("N" if read is int and not flag.allowed() else None)
        group.add_argument(*flag.names, type=read, choices=flag.allowed(),
                           default=flag.show(default) if flag.show else default, metavar=metavar, **kw)


def _add_old(group, name: str, flag: Flag, hint) -> None:
    """A flag's last release's spellings, hidden from `--help`: a key of a section's flag
    holds its value apart (`settings_args` reads it as the key); any other flag's sets the
    field as the flag does (same parser, same choices) and is kept for its note."""
    if flag.key_in is not None:
        group.add_argument(*flag.old, dest=f"old.{name}", default=None, help=argparse.SUPPRESS)
    else:
        group.add_argument(*flag.old, dest=name, type=_reader(flag, hint), choices=flag.allowed(),
                           action=OldSpelling, default=argparse.SUPPRESS, help=argparse.SUPPRESS)


class OldSpelling(argparse.Action):
    """Sets the field, and `old.FIELD` too: `deprecated.notes` names the spelling typed."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        setattr(namespace, f"old.{self.dest}", values)


def _add_keyed(group, option: str, fields: list[tuple[str, Flag, Any]]) -> None:
    """One `OPTION KEY=VALUE` flag for the fields that are its keys; its help lists each key,
    its meaning and its default."""
    keys = "; ".join(f"{flag.key_in[1]}={flag.metavar or 'VALUE'}: {flag.help} (default {_shown(default)})"
                     for _, flag, default in fields)
    group.add_argument(option, dest=keyed_dest(option), action="append", default=None, metavar="KEY=VALUE",
                       help=f"repeatable; {keys}")


def keyed_dest(option: str) -> str:
    """`--project` -> `project`: the dest of a section's KEY=VALUE flag."""
    return option.lstrip("-").replace("-", "_")


def _shown(value) -> str:
    return "none" if value is None else str(value)


def _reader(flag: Flag, hint):
    """The flag's text -> the field's value: its own parser, or the field's plain type."""
    if flag.parse is None:
        plain = [t for t in typing.get_args(hint) or (hint,) if t in (int, float)]
        return plain[0] if plain else None

    def read(text: str):
        try:
            return flag.parse(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    read.__name__ = flag.names[0]
    return read


