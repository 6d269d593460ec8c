"""What every section's `check()` shares: the one error a bad setting raises
(`declare.ConfigError`), and the bounded-number, path and choice rules (each value is
checked once, in its own section)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from ...core.checks import INT32_MAX, check_int, check_number
from ..declare import ConfigError, Flag, declarations, named


def bounded_int(name: str, v, low: int, high: int = INT32_MAX, optional: bool = False) -> None:
    """Every integer setting is bounded: the ones that reach jit by int32, the rest alike (a
    count past 2**31 - 1 is a typo, never a run)."""
    check_int(name, v, low, high, optional=optional, error=ConfigError)


def finite_number(name: str, v, *, positive: bool, optional: bool = False, unit: str = "") -> None:
    """Finite, and > 0 (`positive`) or >= 0."""
    check_number(name, v, positive=positive, optional=optional, unit=unit, error=ConfigError)


def non_empty_text(section, name: str, what: str = "path") -> None:
    """A setting naming a path or a platform: empty is an error, never the default."""
    value = getattr(section, name)
    if value is not None and not (isinstance(value, (str, Path)) and str(value).strip()):
        raise ConfigError(f"{named(type(section), name)} must be a non-empty {what}, got {value!r}; "
                          f"leave it out for the default")


def declared_choices(section) -> None:
    """Every field of `section` declared with `choices` holds one of them."""
    for name, decl in declarations(type(section)).items():
        allowed = decl.allowed() if isinstance(decl, Flag) else None
        if allowed is not None and getattr(section, name) not in allowed:
            raise ConfigError(f"{name} must be one of {', '.join(allowed)}, got {getattr(section, name)!r}")


def known_name(what: str, value, names) -> None:
    """`value` is one of `names` (a dataset, a model, ...), listed in the order given."""
    if value not in names:
        raise ConfigError(f"unknown {what} {value!r}; choose one of {', '.join(names)}")


def field_names(cls) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))
