"""SelSync's Delta_bar on the host, from recorded gradient norms: the calibration's one
implementation (`jaxsel calibrate`, the frontier's delta points, `jaxsel report`).

`delta_bar(s, ...)` computes, for every step and replica of a recorded trace s_t (each
replica's sum of per-tensor gradient norms, the run's `grad_norm` metric), the Delta_bar
that `core.triggers.Significance` computes on the device with the same window, alpha and
statistic, in float64 (the device works in float32; tests/test_significance_stats.py holds
the two equal, and both to the NumPy transcription of the authors' loop in
tests/reference/triggers.py). It is 0 before its window is full (`significance_fill`), as
the authors' EWMAMeter.

On a trace recorded under BSP the replicas never drift, so the Delta_bar of a SelSync run
that syncs more rarely differs: the quantiles below say at which delta a run would have
synchronized that share of its steps on this trajectory, a calibration aid, not a
prediction (every sync changes what follows).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..core.triggers import STATISTICS, significance_fill

#: the shares of post-warm-up steps whose delta `jaxsel calibrate` prints
FRACTIONS = (0.05, 0.10, 0.25, 0.50)


def recorded_grad_norms(records: list[dict]) -> np.ndarray:
    """A run's recorded s_t of every replica (its `grad_norm` metric), [steps, replicas]."""
    return np.asarray([r["grad_norm"] for r in records], dtype=np.float64).reshape(len(records), -1)


def weights(window: int, alpha: float) -> np.ndarray:
    """EWMAMeter's normalised weights (1-alpha)^k, k = 1 (newest) ... W (oldest)."""
    w = (1.0 - alpha) ** np.arange(1, window + 1, dtype=np.float64)
    return w / w.sum()


def windowed(x: np.ndarray, window: int, alpha: float) -> np.ndarray:
    """The windowed EWMA along axis 0 at every step with W values behind it (t >= W-1),
    0 before: out[t] = sum_k w_k x[t-k+1]."""
    out = np.zeros_like(x)
    if len(x) >= window:
        views = np.lib.stride_tricks.sliding_window_view(x, window, axis=0)   # [..., W], oldest first
        out[window - 1:] = views @ weights(window, alpha)[::-1]
    return out


def relative_change(curr: np.ndarray, prev: np.ndarray, eps: float) -> np.ndarray:
    return np.abs(curr - prev) / np.maximum(prev, eps)


def delta_bar(s, window: int = 25, alpha: float = 0.01, statistic: str = "smoothed",
              eps: float = 1e-12) -> np.ndarray:
    """Delta_bar of the trace `s` ([T] or [T, replicas]) under `statistic`, every step
    (`core.triggers.Significance` for the definitions): 0 where its window is not full."""
    if statistic not in STATISTICS:
        raise ValueError(f"statistic must be 'smoothed' or 'raw', got {statistic!r}")
    s = np.asarray(s, dtype=np.float64)
    if statistic == "raw":   # against s_{t-1}, and 1.0 before the first step (the authors' prev_gradnorm)
        change = relative_change(s, np.concatenate([np.ones_like(s[:1]), s[:-1]]), eps)
        return windowed(change, window, alpha)
    g = windowed(s, window, alpha)
    change = np.zeros_like(s)
    change[window:] = relative_change(g[window:], g[window - 1:-1], eps)   # from t = W: G_{t-1} is full
    out = np.zeros_like(s)
    out[window:] = windowed(change[window:], window, alpha)
    return out


class Decisions(NamedTuple):
    """What the replicas' Delta_bar decides: per step, the largest over the replicas (a
    step syncs when it reaches delta, since any vote syncs), and the forced steps."""

    value: np.ndarray     # [T], NaN on a forced step
    warmup: int           # the forced steps 0 .. warmup-1

    @property
    def decided(self) -> np.ndarray:
        """The values of the steps after the warm-up."""
        return self.value[self.warmup:]


def decisions(s, window: int = 25, alpha: float = 0.01, statistic: str = "smoothed", warmup: int | None = None,
              eps: float = 1e-12) -> Decisions:
    """`delta_bar` of every replica reduced to the step's decision value; `warmup` None:
    the statistic's default (`significance_fill`: W-1 for raw, 2W-1 for smoothed)."""
    d = delta_bar(s, window, alpha, statistic, eps)
    value = d.max(axis=1) if d.ndim == 2 else d
    warm = significance_fill(statistic, window) if warmup is None else int(warmup)
    value = value.copy()
    value[:warm] = np.nan
    return Decisions(value, min(warm, len(value)))


def fraction_deltas(values, fractions=FRACTIONS) -> dict[float, float]:
    """For each share f, the delta at which f of `values` (the steps' decision values)
    would have synced: the ceil(f * n)-th largest, so at least that many steps reach it and
    fewer reach anything above it (ties aside, exactly that many). Empty for no values."""
    v = np.sort(np.asarray(values, dtype=np.float64))[::-1]
    if not len(v):
        return {}
    return {f: float(v[max(1, math.ceil(f * len(v) - 1e-9)) - 1]) for f in fractions}


def sync_fraction(values, delta: float) -> float:
    """The share of `values` that reach `delta` (NaN: no values)."""
    v = np.asarray(values, dtype=np.float64)
    return float(np.mean(v >= delta)) if len(v) else math.nan


def summary(values) -> dict:
    """median, p90 and max of the decision values."""
    v = np.asarray(values, dtype=np.float64)
    if not len(v):
        return {"median": None, "p90": None, "max": None}
    return {"median": float(np.median(v)), "p90": float(np.quantile(v, 0.9)), "max": float(v.max())}
