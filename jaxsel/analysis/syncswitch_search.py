"""Sync-Switch's offline policy search: the smallest BSP fraction whose final accuracy
stays within `tolerance` of pure BSP's.

Binary search over a grid of fractions (multiples of `resolution`), assuming accuracy
does not fall as the BSP share grows. Every trial is a full training run, so each
fraction is trained at most once and the reference (fraction 1 = BSP) is trained only
when `reference_accuracy` is not given.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable


@dataclasses.dataclass(frozen=True)
class FractionSearch:
    """The chosen fraction, its accuracy, BSP's, and every (fraction, accuracy) tried."""

    fraction: float
    accuracy: float
    reference_accuracy: float
    trials: tuple[tuple[float, float], ...]


def search_bsp_fraction(
    train_fn: Callable[[float], float],
    tolerance: float = 0.005,
    *,
    low: float = 0.0,
    high: float = 1.0,
    resolution: float = 1 / 64,
    reference_accuracy: float | None = None,
) -> FractionSearch:
    """Smallest fraction f in [low, high] (on the `resolution` grid) with
    `train_fn(f) >= reference - tolerance`, where reference = `train_fn(1.0)` (pure BSP)
    unless `reference_accuracy` is given. `train_fn(f)` trains with BSP for the first f
    of the steps and returns the final test accuracy (e.g. a jaxsel.training.train run with
    strategy "syncswitch" and option bsp_fraction=f). `high` is accepted without a trial
    when it is 1 (BSP itself)."""
    if not callable(train_fn):
        raise ValueError(f"train_fn must be a callable fraction -> accuracy, got {train_fn!r}")
    if not float(tolerance) >= 0.0:
        raise ValueError(f"tolerance must be a number >= 0, got {tolerance!r}")
    if not 0.0 < float(resolution) <= 1.0:
        raise ValueError(f"resolution must be in (0, 1], got {resolution!r}")
    if not 0.0 <= float(low) <= float(high) <= 1.0:
        raise ValueError(f"need 0 <= low <= high <= 1, got low={low!r}, high={high!r}")

    tried: dict[float, float] = {}

    def accuracy(f: float) -> float:
        f = min(max(f, 0.0), 1.0)
        if f not in tried:
            acc = float(train_fn(f))
            if not math.isfinite(acc):
                raise ValueError(f"train_fn({f}) returned a non-finite accuracy {acc!r}")
            tried[f] = acc
        return tried[f]

    reference = accuracy(1.0) if reference_accuracy is None else float(reference_accuracy)
    target = reference - float(tolerance)
    lo = math.ceil(float(low) / resolution - 1e-9)
    hi = top = math.floor(float(high) / resolution + 1e-9)
    grid = lambda i: min(i * resolution, float(high)) if i < top else float(high)
    if grid(hi) < 1.0 and accuracy(grid(hi)) < target:
        raise ValueError(f"even fraction high={high} misses the target accuracy {target:.4f} "
                         f"(got {tried[grid(hi)]:.4f}); raise high or the tolerance")
    while lo < hi:  # invariant: grid(hi) meets the target
        mid = (lo + hi) // 2
        if accuracy(grid(mid)) >= target:
            hi = mid
        else:
            lo = mid + 1
    best = grid(hi)
    best_acc = tried.get(best, reference if best == 1.0 else accuracy(best))
    return FractionSearch(best, best_acc, reference, tuple(sorted(tried.items())))
