"""Packed replicas' last release's names (issue 59: one name per concept), read until
`REMOVED_IN` with one note each.

How a device loops over the k replicas packed on it (unroll, vmap, map, auto) is "packing":
the setting `packing` (`--packing`, `TrainConfig(packing=)`, `[replicas] packing`), the
run records' `packing_choice` (what "auto" measured). Last release called the setting
`local_replicas` (`--local-replicas`), and bench's count of replicas packed on one device
`--packed-row` (before that `--packed`): that count is another concept, how many are
packed, now `--packed-replicas`. A user's spelling is read here, noted; a run's records
of before are read for ever, silently (training/old_records.py); the device core's
`make_train_step(local_replicas=)` notes itself (core cannot import this package).
"""
from __future__ import annotations

import functools
import warnings
from typing import Mapping, TypeVar

from ..core.choices import OLD_PACKING_NAME, renamed_packing_note
from .notes import NotedDeprecation

#: the release that no longer reads the old names
REMOVED_IN = "0.2.0"
#: the setting's name now
PACKING = "packing"
#: the setting's flag in the last release (`jaxsel train`, `compare`, `bench`)
OLD_PACKING_FLAGS = ("--local-replicas",)
#: bench's count of replicas packed on one device: its old flags -> its flag now
OLD_PACKED_COUNT_FLAGS = {"--packed-row": "--packed-replicas", "--packed": "--packed-replicas"}

T = TypeVar("T", bound=type)


class PackingNameWarning(NotedDeprecation):
    """Packing given by its last release's name; the command line prints it as a note."""


def read_old_name(settings: Mapping, where: str, stacklevel: int = 2, error: type[Exception] = TypeError) -> dict:
    """`settings` (keyword arguments, a config file's table) with `local_replicas` read as
    `packing`, at the top level or in the `[replicas]` table, one PackingNameWarning each;
    both names at once is an `error` naming both (a config file's reader: its ConfigError).
    `stacklevel`: counted from the caller."""
    out = dict(settings)
    table = out.get("replicas")
    if isinstance(table, dict) and OLD_PACKING_NAME in table:
        out["replicas"] = read_old_name(table, f"{where} [replicas]", stacklevel + 1, error)
    if OLD_PACKING_NAME not in out:
        return out
    value = out.pop(OLD_PACKING_NAME)
    if PACKING in out:
        raise error(f"{where}: {OLD_PACKING_NAME}={value!r} and {PACKING}={out[PACKING]!r} both set "
                          f"{PACKING} ({OLD_PACKING_NAME} is its old name); give it once, as {PACKING}")
    warnings.warn(f"{where}: {renamed_packing_note(value, f'jaxsel {REMOVED_IN}')}", PackingNameWarning,
                  stacklevel=stacklevel + 1)
    return {**out, PACKING: value}


def reads_old_name(cls: T) -> T:
    """Class decorator, above `@dataclasses.dataclass`: `cls(local_replicas=...)` builds it
    with `packing=...`, noted. The constructor stays the dataclass's own (`__wrapped__`), so
    `inspect.signature` and `help()` show its fields."""
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        if OLD_PACKING_NAME in kwargs:
            kwargs = read_old_name(kwargs, f"{cls.__name__}(...)", stacklevel=2)
        init(self, *args, **kwargs)

    cls.__init__ = __init__
    return cls


def old_flag_note(old_flag: str, value) -> str:
    """The one note for an old flag of packing (`OLD_PACKING_FLAGS`) or of bench's count of
    packed replicas (`OLD_PACKED_COUNT_FLAGS`), naming the flag that replaces it."""
    new = OLD_PACKED_COUNT_FLAGS.get(old_flag, "--packing")
    return f"{old_flag} is deprecated and read until jaxsel {REMOVED_IN}; write {new} {value}"
