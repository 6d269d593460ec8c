"""`train`'s and `compare`'s TrainConfig flags, generated from the fields' declarations.

Each field declared with a `Flag` (training/declare.py) becomes one argparse argument whose
dest is the field's name and whose value is already the field's value (`--augment on` is
True, `--no-progress` is False), so the namespace maps onto TrainConfig without a copy of
any default: `--help` shows the field's own default, or a command's override from its
explicit table (compare's DEFAULT_TASK, train's TRAIN_DEFAULTS), which its help names.
"""
from __future__ import annotations

import argparse
import typing
from typing import Any

from ..core.options import OptionError, parse_kv
from ..training.config import TrainConfig
from ..training.declare import Flag, default_of, flags_of

#: the argument groups of `--help`, by the declarations' `group`
GROUPS = {"training": "training",
          "dashboards": "dashboards (written at the metric reads, every --log-every steps)",
          "projection": "projected wall-clock (logged as projected_time_s; see `jaxsel report`)",
          "checkpoints": "checkpoints and faults"}


def add_config_args(p: argparse.ArgumentParser, command: str, overrides: dict | None = None) -> None:
    """`command`'s flags of TrainConfig's fields; `overrides`: field -> the command's own default."""
    hints = typing.get_type_hints(TrainConfig)
    groups: dict[str, Any] = {}
    for name, flag in flags_of(TrainConfig, command).items():
        if flag.group not in groups:
            groups[flag.group] = p.add_argument_group(GROUPS[flag.group])
        default = (overrides or {}).get(name, default_of(TrainConfig, name))
        _add(groups[flag.group], name, flag, hints[name], default)
        for key, sub in flag.keys:   # e.g. --inject: partition_options["injection"]
            _add(groups[flag.group], f"{name}.{key}", sub, Any, None)


def _add(group, dest: str, flag: Flag, hint, default) -> None:
    kw = {"dest": dest, "help": flag.help}
    if flag.pairs:   # a dict field: KEY=VALUE pairs, read by `config_values`
        group.add_argument(*flag.names, action="append", default=None, metavar=flag.metavar, **kw)
    elif hint is bool:   # --x / --no-x take no value: no metavar (deprecated in Python 3.12, gone in 3.14)
        if flag.metavar is not None:
            raise TypeError(f"{flag.names[0]} is on/off and takes no value: drop metavar={flag.metavar!r}")
        group.add_argument(*flag.names, action=argparse.BooleanOptionalAction, default=default, **kw)
    else:
        group.add_argument(*flag.names, type=_reader(flag, hint), choices=flag.allowed(),
                           default=flag.show(default) if flag.show else default, metavar=flag.metavar, **kw)


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
    """The field values `command`'s flags hold in `args` (pairs read into dicts)."""
    out = {}
    for name, flag in flags_of(TrainConfig, command).items():
        out[name] = _table(args, name, flag) if flag.pairs else getattr(args, name)
    return out


def _table(args, name: str, flag: Flag) -> dict:
    """A dict field from its KEY=VALUE pairs and its one-key flags; a key set twice is an error."""
    table = parse_kv(getattr(args, name), flag.names[0])
    for key, sub in flag.keys:
        value = getattr(args, f"{name}.{key}")
        if value is None:
            continue
        if key in table:
            raise OptionError(f"{sub.names[0]} and {flag.names[0]} {key}=... both set {key}; give it once")
        table[key] = value
    return table
