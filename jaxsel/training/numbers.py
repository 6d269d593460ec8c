"""Numbers as tables print them: 4 significant digits, never a negative zero."""
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


def byte_size(n: float) -> str:
    """`n` bytes for a message in the largest unit it fills: "2.50 GiB", "12.3 MiB", "0.9 KiB",
    "12 bytes" ("0.00 GiB" says nothing)."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.{2 if unit == 'GiB' else 1}f} {unit}"
    return f"{int(n)} bytes"
