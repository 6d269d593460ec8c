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
import dataclasses
import typing
from typing import Any

from ..core.options import OptionError
from ..core.pairs import read_pairs
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
            groups[flag.group].add_argument(*flag.old, dest=f"old.{name}", default=None, help=argparse.SUPPRESS)
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
    from ..training.config_file import field_value

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
        out[name] = field_value(name, text, hints[name], f"{option} {key}")
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
    from ..training.config_file import apply_to_config
    from .strategy_args import options_from_args, strategy_entry

    values = config_values(args, args.command)
    options = options_from_args(args)
    if "strategy" in values:   # train: NAME[:KEY=VALUE...]
        values["strategy"], options = strategy_entry(values["strategy"], options)
    values["strategy_options"] = {k: v for k, v in options.items() if v is not None}
    values["batch_size"] = per_replica_batch(args)
    cfg = apply_to_config(TrainConfig(**values), getattr(args, "config_rest", None))   # --config FILE
    return dataclasses.replace(cfg, **fixed) if fixed else cfg
