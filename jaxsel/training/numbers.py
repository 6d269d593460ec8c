"""Numbers as tables print them: significant digits, never a negative zero."""
from __future__ import annotations

import math


def significant(x, digits: int = 4, missing: str = "-") -> str:
    """`x` to `digits` significant digits ("0.9694", "62.7", "12350"); "-0" prints as "0"."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return missing
    value = float(f"{float(x):.{digits}g}") + 0.0   # + 0.0 turns -0.0 into 0.0
    if abs(value) >= 10 ** digits and math.isfinite(value):
        return str(int(value))
    return f"{value:.{digits}g}"


def figures(x, digits: int = 3, missing: str = "-") -> str:
    """`x` to exactly `digits` significant figures, trailing zeros kept, so that a column
    reads alike ("0.200", "1.00", "18.4", "125", "12300"); "-0" prints as "0"."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return missing
    value = float(f"{float(x):.{digits}g}") + 0.0   # + 0.0 turns -0.0 into 0.0
    if not math.isfinite(value) or value == 0:
        return f"{value:g}"
    if 10 ** (digits - 1) <= abs(value) < 10 ** 15:
        return str(int(value))
    return f"{value:#.{digits}g}".rstrip(".")


def plus_minus(mean, std, digits: int = 3) -> str:
    """"0.599 ± 0.009": the mean to `digits` significant figures (`figures`), the spread to
    the mean's last decimal (one significant digit where that rounds it to 0: "0.451 ±
    0.0004"), so a column of them reads alike; the mean alone when `std` is None."""
    m = figures(mean, digits)
    if std is None or m == "-":
        return m
    decimals = len(m.partition(".")[2]) if "e" not in m else digits
    s = f"{float(std):.{decimals}f}"
    return f"{m} ± {s if float(s) != 0 or std == 0 else significant(std, 1)}"


def byte_size(n: float) -> str:
    """`n` bytes for a message in the largest unit it fills: "2.50 GiB", "12.3 MiB", "0.9 KiB",
    "12 bytes" ("0.00 GiB" says nothing)."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.{2 if unit == 'GiB' else 1}f} {unit}"
    return f"{int(n)} bytes"
