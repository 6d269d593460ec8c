"""`--strategies` entries: a strategy name, or a variant `NAME:KEY=VALUE[:KEY=VALUE...]`.

A comparison puts variants of one strategy side by side (`selsync,selsync:delta=0.05`),
so an entry carries its own options. Values may themselves hold ':' and ','
(`aggregator=trimmed:2`): a ','-piece that does not start with a registered strategy name
(followed by ':' or nothing) continues the value before it, and so does a ':'-segment
without '='. Pairs are read by the one KEY=VALUE grammar (`core/pairs.py`), as `--opt`'s are. The global
options (`--opt KEY=VALUE`) are defaults for every entry that takes them; an entry's own
options win.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any

from ..core.options import OptionError, option_names
from ..core.pairs import read_entry
from ..strategies.build import options_for, takes


@dataclasses.dataclass(frozen=True)
class Variant:
    """One row of a comparison: a registered strategy and the options its entry sets."""

    name: str
    options: dict                      # the entry's own options (over the global flags)
    entry: str                         # as written in --strategies (e.g. "selsync:delta=0.05")

    def effective(self, global_options: dict) -> dict:
        """The options the row trains with: the global ones it takes, then its own (an own
        option set to None unsets a global one: a budget-matched row's `period`)."""
        merged = {**options_for(self.name, global_options), **self.options}
        return {k: v for k, v in merged.items() if v is not None}

    def label(self, description: str, order: str = "") -> str:
        """The row's name in tables and pictures: the strategy as built (`describe()`) for
        a plain entry, else the name and the options the entry sets, then `order` (which
        order its syncs ran in: an option can change it, and it changes what trains)."""
        if not self.options:
            return description
        shown = ', '.join(f'{k}={_shown(v)}' for k, v in self.options.items())
        return f"{self.name} ({shown}{'; ' + order if order else ''})"

    def slug(self) -> str:
        """A file-system-safe directory name for the row's runs."""
        text = self.entry.replace(":", "_").replace(",", "+")
        return re.sub(r"[^A-Za-z0-9._=+-]", "-", text)[:100]


def entry_of(name: str, options: dict) -> str:
    """A `--strategies` entry for strategy `name` with `options` (values as they read back)."""
    return ":".join([name, *(f"{k}={v}" for k, v in options.items())])


def _shown(value: Any) -> str:
    """A value as labels show it: short (`0.05`, `1e-05`, `2`), yet never two values alike
    (0.1000001 and 0.1000002 would both be `0.1` at 6 digits): the shortest text that
    reads back as the same float."""
    if not isinstance(value, float):
        return str(value)
    short = f"{value:g}"
    return short if float(short) == value else repr(value)


def registered() -> dict:
    from ..strategies import STRATEGIES

    return STRATEGIES


def _starts_entry(piece: str, previous: str | None) -> bool:
    """Whether a ','-piece starts a new entry rather than continuing a value of the
    previous entry (possible only when that entry sets an option)."""
    if previous is None or "=" not in previous or not piece.strip():
        return True   # (an empty piece is an empty entry, never part of a value)
    name = piece.split(":", 1)[0].strip()
    return name in registered()


def split_entries(text: str) -> list[str]:
    """`--strategies` text -> entries (see the module docstring); an empty list or an
    empty entry is an OptionError."""
    allowed = f"give one or more of: {', '.join(registered())} (a variant: NAME:KEY=VALUE)"
    if not text.strip(" ,"):
        raise OptionError(f"--strategies {text!r} names no strategy; {allowed}")
    entries: list[str] = []
    for piece in text.split(","):
        if entries and not _starts_entry(piece, entries[-1]):
            entries[-1] += "," + piece
            continue
        if not piece.strip():
            raise OptionError(f"--strategies {text!r} has an empty entry (two commas, or one at an end); {allowed}")
        entries.append(piece.strip())
    return entries


def parse_entry(entry: str) -> Variant:
    """`NAME` or `NAME:KEY=VALUE[:KEY=VALUE...]` -> Variant; a bad name or key is an
    OptionError naming the entry and what is allowed."""
    name, options = read_entry(entry)
    strategies = registered()
    if name not in strategies:
        raise OptionError(f"--strategies entry {entry!r}: unknown strategy {name!r}; choose from "
                          f"{', '.join(strategies)}")
    for key in options:
        if not takes(strategies[name], key):
            raise OptionError(f"--strategies entry {entry!r}: strategy {name!r} has no option {key!r}; its "
                              f"options: {', '.join(option_names(strategies[name])) or 'none'}")
    return Variant(name, options, entry.strip())


def parse_strategies(strategies: str | list[str]) -> list[Variant]:
    """A `--strategies` text, or a list of entries (one each), as Variants."""
    entries = split_entries(strategies) if isinstance(strategies, str) else list(strategies)
    if not entries:
        raise OptionError("no strategy to compare; give one or more entries")
    return [parse_entry(e) for e in entries]


def check_globals_reach(variants: list[Variant], options: dict) -> None:
    """A global strategy option (flag or --opt) must be taken by some entry that does not
    set it itself: otherwise it would change nothing, silently."""
    for key in options:
        takers = [v for v in variants if key in options_for(v.name, {key: None})]
        if not takers:
            from ..core.options import option_names

            valid = sorted({o for v in variants for o in option_names(registered()[v.name])})
            raise OptionError(f"no strategy of {', '.join(v.entry for v in variants)} has option {key!r}; "
                              f"their options: {', '.join(valid)}")
        if all(key in v.options for v in takers):
            raise OptionError(f"the global option {key}={options[key]!r} reaches no row: every entry that "
                              f"takes it ({', '.join(v.entry for v in takers)}) sets its own; drop one")
