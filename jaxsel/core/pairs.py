"""The one KEY=VALUE grammar, wherever a setting is typed as one: `--opt`,
`--partition-opt`, `--dataset-opt`, `--project`, and a strategy's entry
`NAME:KEY=VALUE[:KEY=VALUE...]` (train's `--strategy`, compare's `--strategies`).

Each pair is split at its first '='; the key must be non-empty and given once; the value
is read by `parse_value` (integers, then floats, then true/false, else the text: a type
check of the option's own refuses what it cannot take). An entry's ':'-segment without
'=' continues the value before it (`aggregator=trimmed:2`). Every error is one
OptionError naming where the pair was typed and what is expected.
"""
from __future__ import annotations

from typing import Any, Iterable

from .checks import is_numeral
from .options import OptionError


def parse_value(raw: str):
    """A typed value's text as a number or true/false where it is one, else the text."""
    if not is_numeral(raw):   # '١', '1_0': a string, which an option's type check refuses
        return {"true": True, "false": False}.get(raw.lower(), raw)
    for cast in (int, float):
        try:
            return cast(raw)
        except ValueError:
            continue
    return {"true": True, "false": False}.get(raw.lower(), raw)


def read_pairs(pairs: Iterable[str] | None, where: str = "--opt") -> dict[str, Any]:
    """`KEY=VALUE` texts -> {key: value}; a pair without '=' or a key, or a key given twice
    (which value was meant cannot be known), is an OptionError naming `where`."""
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, raw = pair.partition("=")
        key, raw = key.strip(), raw.strip()
        if not sep or not key:
            raise OptionError(f"{where} expects key=value, got {pair!r}")
        if key in out:
            raise OptionError(f"{where} {key} is given twice ({key}={out[key]!r} and {pair!r}); give it once")
        out[key] = parse_value(raw)
    return out


def read_entry(entry: str, where: str = "--strategies entry") -> tuple[str, dict[str, Any]]:
    """`NAME[:KEY=VALUE[:KEY=VALUE...]]` -> (name, {key: value}), read by `read_pairs`;
    nothing is checked against a registry. A ':'-segment without '=' continues the value
    before it; one before any KEY=VALUE is an OptionError."""
    name, *segments = entry.strip().split(":")
    pairs: list[str] = []
    for seg in segments:
        if "=" in seg:
            pairs.append(seg)
        elif pairs:
            pairs[-1] += ":" + seg
        else:
            raise OptionError(f"{where} {entry!r}: expected NAME:KEY=VALUE after {name.strip()!r}, got {seg!r}")
    return name.strip(), read_pairs(pairs, f"{where} {entry!r}:")
