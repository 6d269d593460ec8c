"""The checks every option shares: an integer in a range, a finite number in a range.

Options arrive from flags, config files and library calls, so a bool (an int to Python)
or a NaN must not slip through; each check raises one line naming the option, what is
allowed and what was given. `error` picks the exception class of the caller's layer (a
`ConfigError` for run settings, a plain ValueError for strategies and triggers).
"""
from __future__ import annotations

import math
import numbers
import sys

#: integers reach jit as int32 (step counters, periods, windows, sizes): a larger value would
#: end in an OverflowError while tracing, after the run had started
INT32_MAX = 2**31 - 1
#: JAX's PRNG keys hold 32 bits of a seed: larger seeds would alias smaller ones
MAX_SEED = 2**32 - 1


def int_limit(option: str) -> int:
    """The largest value an integer option may take: a `seed` is 32 bits of a PRNG key,
    everything else an int32 once traced."""
    return MAX_SEED if option == "seed" else INT32_MAX


def is_traced(value) -> bool:
    """A value being traced: a cell batch's option (core/cell_options.py), checked as a
    number when its own cell's strategy was built; the checks pass it by."""
    jax = sys.modules.get("jax")   # not imported: nothing is traced
    return jax is not None and isinstance(value, jax.core.Tracer)


def as_float(value):
    """`value` as a Python float, a traced value as it is (a cell batch's option)."""
    return value if is_traced(value) else float(value)


def as_int(value):
    """`value` as a Python int, a traced value as it is (a cell batch's option)."""
    return value if is_traced(value) else int(value)


def is_int(value) -> bool:
    """An integer that is not a bool (NumPy integers included)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_numeral(text: str) -> bool:
    """Whether `text` may be read as a number by `int` or `float`: ASCII without '_'.
    Python's own readers also take other scripts' digits ('١', '１') and '1_0', which a
    record then holds as typed while the run used 1 or 10: those are no numbers here."""
    return text.isascii() and "_" not in text


def is_number(value) -> bool:
    """A finite real number that is not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(float(value))


def check_int(name: str, value, low: int, high: int | None = INT32_MAX, *, optional: bool = False,
              error: type[Exception] = ValueError) -> None:
    """`value` is an integer in [low, high] (or None where `optional`); `high` defaults to
    the int32 bound every traced integer has (None: unbounded, for host-only counts)."""
    if (optional and value is None) or is_traced(value):
        return
    if not is_int(value) or value < low or (high is not None and value > high):
        # the int32 bound every option has is named where it is the reason
        shown = high is not None and (high != INT32_MAX or (is_int(value) and value > high))
        allowed = f"an integer >= {low}" + (f" and <= {high}" if shown else "")
        raise error(f"{name} must be {allowed}{' (or unset)' if optional else ''}, got {value!r}")


def check_number(name: str, value, *, positive: bool, optional: bool = False, unit: str = "",
                 error: type[Exception] = ValueError) -> None:
    """`value` is finite and > 0 (`positive`) or >= 0 (or None where `optional`)."""
    if (optional and value is None) or is_traced(value):
        return
    if not (is_number(value) and (value > 0 if positive else value >= 0)):
        raise error(f"{name} must be a finite number {'> 0' if positive else '>= 0'}{unit}"
                    f"{' (or unset)' if optional else ''}, got {value!r}")
