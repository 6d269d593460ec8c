"""What it takes for SelSync's Delta_bar to reach delta, computed with the trigger itself.

This is about `statistic="smoothed"` (what the authors' released code computes): there
Delta_bar is a W-step average of the relative step-to-step change of G, itself a W-step
average of the gradient norm s. A W-step average moves by at most about s_new / W per
step, so Delta_bar stays small unless s changes by a large factor within a window: delta
= 0.3, the authors' setting, cannot fire on ordinary training. Two reference numbers make
a smoothed run's Delta_bar readable:

* `fall_peak`: the highest Delta_bar a sudden fall of s to zero produces (about H_W / W,
  0.153 for W = 25) -- no decrease of the gradient norm can reach a delta above it;
* `jump_needed`: the factor by which s must jump up in one step for Delta_bar to reach
  delta (about 105x for delta = 0.3, W = 25). Sustained growth by a factor r per step
  settles at Delta_bar = r - 1, the other way up.

`statistic="raw"` (the form the authors' code keeps commented out) averages the relative
step-to-step change of s itself, whose minibatch noise alone is tens of percent: there
delta = 0.3 fires on a real share of steps, and `jaxsel calibrate` gives its distribution.
"""
from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..core.triggers import Significance, significance_fill
from .significance_stats import FRACTIONS, fraction_deltas


@lru_cache(maxsize=16)
def _peak_fn(window: int, alpha: float):
    """max Delta_bar (smoothed) over a run of s = `before` for 2W steps, then `after` for 2W steps."""
    trig = Significance(delta=0.0, window=window, alpha=alpha, statistic="smoothed")

    @jax.jit
    def peak(before, after):
        s = jnp.concatenate([jnp.full(2 * window, before), jnp.full(2 * window, after)])

        def body(st, x):
            st, _, d_bar = trig.local_vote(st, x)
            return st, d_bar

        _, d_bars = jax.lax.scan(body, trig.init(), s)
        return jnp.nanmax(d_bars)

    return peak


@lru_cache(maxsize=16)
def fall_peak(window: int = 25, alpha: float = 0.01) -> float:
    """The smoothed Delta_bar's peak when the gradient norm falls at once from 1 to (almost) zero."""
    return float(_peak_fn(window, alpha)(1.0, 1e-9))


@lru_cache(maxsize=16)
def jump_needed(delta: float = 0.3, window: int = 25, alpha: float = 0.01) -> float:
    """The smallest one-step jump factor of the gradient norm that makes the smoothed
    Delta_bar >= delta."""
    peak = _peak_fn(window, alpha)
    lo, hi = 1.0, 2.0
    while float(peak(1.0, hi)) < delta:
        lo, hi = hi, hi * 2
        if hi > 1e12:
            return float("inf")
    for _ in range(24):   # to 2**-24 relative: plenty for a factor quoted to 3 digits
        mid = float(np.sqrt(lo * hi))
        lo, hi = (mid, hi) if float(peak(1.0, mid)) < delta else (lo, mid)
    return hi


class SignificanceOptions(NamedTuple):
    """A run's significance test: its options over the defaults."""

    delta: float
    window: int
    alpha: float
    statistic: str
    warmup: int | None

    @property
    def warmup_steps(self) -> int:
        """The forced steps (`Significance.warmup_steps`)."""
        return significance_fill(self.statistic, self.window) if self.warmup is None else int(self.warmup)


def significance_options(run) -> SignificanceOptions:
    """The options of a run's significance trigger: its options over the defaults."""
    from ..strategies.build import strategy_options

    opts = {**strategy_options(run.method.strategy), **run.method.strategy_options}
    opts = {**Significance().__dict__, **(opts.get("trigger_options") or {}), **opts}
    return SignificanceOptions(float(opts["delta"]), int(opts["window"]), float(opts["alpha"]), str(opts["statistic"]),
                               None if opts["warmup"] is None else int(opts["warmup"]))


def after_warmup(records: list[dict], warmup: int) -> dict:
    """The syncs of the warm-up (steps t < `warmup`, forced), the syncs after it and the
    peak Delta_bar (max over replicas) after it."""
    later = [r for r in records if r["step"] >= warmup and "delta" in r]
    peaks = [np.nanmax(np.asarray(r["delta"], float)) for r in later
             if np.any(np.isfinite(np.asarray(r["delta"], float)))]
    return {"warmup_steps": warmup, "warmup_syncs": sum(bool(r["synced"]) for r in records if r["step"] < warmup),
            "syncs_after_warmup": sum(bool(r["synced"]) for r in later),
            "max_delta_bar_after_warmup": float(max(peaks)) if peaks else None}


def quiet_note(label: str, stats: dict, opts: SignificanceOptions) -> str | None:
    """Why a significance-triggered run never synchronized after its warm-up (None if it did)."""
    if stats["syncs_after_warmup"] or stats["max_delta_bar_after_warmup"] is None:
        return None
    delta, window, alpha = opts.delta, opts.window, opts.alpha
    head = (f"{label} synchronized only in its warm-up (steps 0-{stats['warmup_steps'] - 1}): after it, "
            f"Delta_bar peaked at {stats['max_delta_bar_after_warmup']:.3g} < delta = {delta:g}.")
    if opts.statistic == "raw":
        return (f"{head} With statistic=raw, Delta_bar is a {window}-step average of the gradient norm's relative "
                f"step-to-step change; `jaxsel calibrate` gives its distribution on this task")
    return (f"{head} With the smoothed statistic and W = {window}, reaching {delta:g} takes a "
            f"{jump_needed(delta, window, alpha):.3g}x one-step jump of the gradient norm (or growth by {delta:.0%} "
            f"per step for a whole window); a fall to zero peaks at {fall_peak(window, alpha):.3g} "
            f"(sync_timeline.png)")


def warmup_note(label: str, stats: dict, syncs: float) -> str | None:
    """How many of a significance-triggered row's syncs were its forced warm-up (None
    without a warm-up)."""
    if not stats["warmup_steps"]:
        return None
    return (f"{label}: {stats['warmup_syncs']:.4g} of its {syncs:.4g} syncs were its forced warm-up (steps "
            f"0-{stats['warmup_steps'] - 1})")


CALIBRATION_FRACTIONS = FRACTIONS


def decision_statistic(records: list[dict]) -> np.ndarray:
    """Per step after the warm-up (where Delta_bar decided), the largest Delta_bar over
    the replicas: the step syncs when it is >= delta, since any replica's vote syncs."""
    out = []
    for r in records:
        values = np.asarray(r.get("delta", np.nan), dtype=float)   # None (JSON null) -> nan
        if np.any(np.isfinite(values)):
            out.append(float(np.nanmax(values)))
    return np.asarray(out)


def delta_for_fractions(records: list[dict], fractions=CALIBRATION_FRACTIONS) -> dict[float, float]:
    """For each fraction f, the delta at which f of the post-warm-up steps of this
    recorded Delta_bar trace would have synced (`significance_stats.fraction_deltas`).
    Empty when the trace has no such step.

    A calibration aid, not a prediction: every sync changes the trajectory, so a run at
    that delta sees a different Delta_bar after its first sync."""
    return fraction_deltas(decision_statistic(records), fractions)


CALIBRATION_HEAD = ("delta that would have synced 5% / 10% / 25% / 50% of the steps after the warm-up, from "
                    "each run's recorded Delta_bar (max over replicas):")
CALIBRATION_CAVEAT = ("(a calibration aid, not a prediction: every sync changes the trajectory, and so the "
                      "Delta_bar after it)")


def calibration_line(name: str, records: list[dict]) -> str | None:
    """`jaxsel report`'s line for one run: the deltas of `delta_for_fractions` and what
    the run did after its warm-up (None: no Delta_bar recorded)."""
    deltas = delta_for_fractions(records)
    if not deltas:
        return None
    later = [r for r in records if np.any(np.isfinite(np.asarray(r.get("delta", np.nan), dtype=float)))]
    synced = sum(bool(r["synced"]) for r in later)
    return (f"  {name}: {' / '.join(f'{v:.3g}' for v in deltas.values())} ({len(later)} steps after the "
            f"warm-up, {synced} synced in this run)")
