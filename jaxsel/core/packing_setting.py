"""$JAXSEL_PACKING_MEASURE: whether "auto" measures its packed-replica loops (core/packing.py).

Its own module, free of JAX, because the command line checks the variable before a run
starts, also in a multi-host run's supervisor, which must not import JAX (a second of
start-up per process, for a process that never computes).
"""
from __future__ import annotations

import os

#: "1": measure on every platform (a CPU too); "0": never (the static default everywhere)
MEASURE_ENV = "JAXSEL_PACKING_MEASURE"


def measure_setting() -> bool | None:
    """$JAXSEL_PACKING_MEASURE: True ("1"), False ("0") or None (unset); any other value is
    a ValueError naming it (the command line checks it before a run starts)."""
    value = os.environ.get(MEASURE_ENV, "").strip()
    if value in ("1", "0"):
        return value == "1"
    if value:
        raise ValueError(f"{MEASURE_ENV} must be 1 (measure everywhere) or 0 (never), got {value!r}; set it so, "
                         f"or unset it (measure on accelerators only)")
    return None
