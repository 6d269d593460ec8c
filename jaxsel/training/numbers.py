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


def byte_size(n: float, exact: bool = False) -> str:
    """`n` bytes in the largest decimal unit it fills, to 3 significant figures: "79.4 MB",
    "510 kB", "2.50 GB", "12 bytes"; `exact` adds the count itself, "79.4 MB (79390200
    bytes)", where a reader may want to compare it with a record. Decimal units (1 MB =
    10**6 bytes) because the tables' and pictures' "MB" columns are, so one run's figure
    reads the same in `train`'s summary and in `compare`'s table. Every printed byte count
    goes through here; records (JSON) keep the integers."""
    rounded = abs(float(f"{n:.3g}"))   # 999999 is "1.00 MB", not "1000 kB"
    for unit, size in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if rounded >= size:
            shown = f"{figures(n / size)} {unit}"
            return f"{shown} ({int(n)} bytes)" if exact else shown
    return f"{int(n)} byte{'' if int(n) == 1 else 's'}"
