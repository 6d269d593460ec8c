"""A method's budget knob: the options that set how much it communicates, and the small
grid of values `jaxsel frontier` sweeps them over.

A method is judged by its accuracy-against-bytes curve, not by one point: local SGD's
period, SelSync's delta and max_local, DiLoCo's H, a codec's fraction each trade bytes for
accuracy. Each strategy declares its knob where it is defined (`method_traits(budget=...)`), so a
new method brings its own sweep and the frontier needs no list of methods. A grid point is
the options that differ from the method's defaults ({} is the method as it comes); the
values suit runs of a few hundred to a few thousand steps (the default task: 600), from
about 1 % to 100 % of BSP's bytes where the method reaches that far. `jaxsel frontier
--grid` replaces a method's declared points with the user's.

A threshold whose scale depends on the task (SelSync's delta: `jaxsel calibrate`) is given
as `fires(F)`, the text "fires:F": the value that fires on a share F of the steps after the
warm-up on plain BSP's trajectory of the same task. The frontier works it out from its BSP
cells before the method's points run, and records it (analysis/frontier_points.py).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

#: a grid value "fires:F" (`fires`)
FIRES = "fires:"


@dataclasses.dataclass(frozen=True)
class Budget:
    """`knob`: what the grid varies, in words for tables ("period", "delta, max_local");
    `grid`: one dict of options per point."""

    knob: str
    grid: tuple[dict[str, Any], ...]

    def __post_init__(self):
        if not self.grid or not all(isinstance(p, dict) for p in self.grid):
            raise ValueError(f"a budget grid is one or more dicts of options, got {self.grid!r}")

    def __add__(self, other: "Budget") -> "Budget":
        """Two sweeps side by side (SelSync: its delta, then its max_local)."""
        return Budget(f"{self.knob}, {other.knob}", self.grid + other.grid)


def sweep(option: str, *values, **fixed) -> Budget:
    """`option` over `values` (None: the method's default), each point with `fixed` too."""
    return Budget(option, tuple({**fixed, **({} if v is None else {option: v})} for v in values))


def fires(share: float) -> str:
    """The grid value of the threshold that fires on `share` of the post-warm-up steps."""
    return f"{FIRES}{share:g}"


def fires_share(value: Any) -> float | None:
    """The share F of a "fires:F" value, None for any other value; a malformed one is a
    one-line ValueError."""
    if not (isinstance(value, str) and value.startswith(FIRES)):
        return None
    try:
        share = float(value[len(FIRES):])
    except ValueError:
        share = math.nan
    if not 0 < share <= 1:
        raise ValueError(f"{value!r}: a {FIRES}F point is a share F of steps in (0, 1], e.g. {fires(0.1)}")
    return share
