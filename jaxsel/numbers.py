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
