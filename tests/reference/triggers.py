"""SelSync's significance rule with `max_local=K`, and Accordion's adaptive period
(issue 25, items 4 and 6). Both step one step at a time (`step(...) -> sync?`), so they run
open loop on recorded statistics or inside a closed-loop simulation.

Significance, written from the authors' code (github sahiltyagi4/SelSync, selsync_py3/:
helper/helper_fns.py `EWMAMeter` and `TrackModelStats.compute_gradnorm`,
selsync/selsync_imgclassifier.py `start_training`), per replica:
    EWMAMeter(W, alpha): a list of values; each new value is appended, and once W values
        are held, ewma = sum_k (1-alpha)^k v_k / sum_k (1-alpha)^k, k = 1 for the newest
        ... W for the oldest, then the oldest is dropped; its value is 0. until then.
    globalstep g = 1, 2, ... (t = g - 1); prev_gradnorm = 1.0 before the first step.
    statistic "raw" (compute_gradnorm's commented `# return total_gnorm`): curr = s_t.
    statistic "smoothed" (what it returns): curr = norm_meter's value after s_t (0. until
        W norms). The released loop then divides 0 by 0 at g = 2; jaxsel's definition,
        transcribed here: the change enters the delta meter only from t = W on (once
        the previous curr is a full window's).
    change = |curr - prev_gradnorm| / max(prev_gradnorm, eps) (eps: jaxsel's guard);
        delta_meter.smoothendata(change); smooth_delta = delta_meter's value.
    The replica votes when t < warmup or smooth_delta >= delta; warmup None is the
        authors' rule for "raw" (smooth_delta is None while g < W: W - 1 steps) and
        jaxsel's for "smoothed" (2W - 1 steps, until the delta meter is full).
    prev_gradnorm = curr. The step syncs when any replica votes (their all-reduced sum > 0).
max_local=K (K >= 1; None: the paper's rule alone): step t also syncs when the K steps
    before it were all local, i.e. when the run of local steps just before t has length
    >= K. So at most K local steps run in a row; the significance state advances every step
    whatever was decided.

Accordion (Agarwal et al., MLSys 2021; their code's auto_scale.py / main.py), with
    `interval` I, eta (0.5), low (2), high (16):
    interval k is the steps k*I ... (k+1)*I - 1; its period p_k.
    step t of interval k syncs when (t - k*I + 1) % p_k == 0 (the count restarts at each
        interval; the same as (t + 1) % p_k == 0 when I is a multiple of p_k).
    A_{i,k} = sum over interval k's steps of replica i's gradient (the vector sum, all
        floating tensors flattened together), n_{i,k} = ||A_{i,k}||_2.
    p_0 = low (training starts in a critical regime). At the end of interval k (after its
        last step's decision):
        k = 0: critical (no previous interval; the authors' code does the same);
        k >= 1: replica i votes critical when |n_{i,k} - n_{i,k-1}| / n_{i,k-1} >= eta,
            or when n_{i,k-1} = 0;
        critical when any replica votes; p_{k+1} = low if critical else high.
"""
from __future__ import annotations

import math

import numpy as np


#: jaxsel's default statistic (`jaxsel.SelSync().statistic`), which the references follow
DEFAULT_STATISTIC = "raw"


class EWMAMeter:
    """The authors' `EWMAMeter`, as written (a list window, float64)."""

    def __init__(self, windowsize: int = 25, alpha: float = 0.01):
        self.windowsize, self.alpha = windowsize, alpha
        self.window: list[float] = []
        self.ewma_val = 0.0

    def smoothendata(self, val: float) -> None:
        sum_val, count = 0.0, 0.0
        self.window.append(val)
        if len(self.window) == self.windowsize:
            for index, datum in reversed(list(enumerate(self.window))):
                pow_ix = len(self.window) - index
                sum_val += math.pow(1 - self.alpha, pow_ix) * datum
                count += math.pow(1 - self.alpha, pow_ix)
            self.ewma_val = sum_val / count
            self.window.pop(0)

    def smooth_val(self) -> float:
        return self.ewma_val


class Significance:
    """One replica's significance test, the authors' loop (module docstring)."""

    def __init__(self, delta: float = 0.3, window: int = 25, alpha: float = 0.01, eps: float = 1e-12,
                 statistic: str = DEFAULT_STATISTIC, warmup: int | None = None):
        if statistic not in ("raw", "smoothed"):
            raise ValueError(f"statistic must be 'raw' or 'smoothed', got {statistic!r}")
        self.delta, self.window, self.eps, self.statistic = delta, window, eps, statistic
        self.warmup = (window - 1 if statistic == "raw" else 2 * window - 1) if warmup is None else warmup
        self.norm_meter, self.delta_meter = EWMAMeter(window, alpha), EWMAMeter(window, alpha)
        self.t, self.prev_gradnorm = 0, 1.0

    def step(self, s: float) -> tuple[bool, float]:
        """(vote, Delta_bar; NaN on a forced step)."""
        if self.statistic == "raw":
            curr = float(s)
            self.delta_meter.smoothendata(abs(curr - self.prev_gradnorm) / max(self.prev_gradnorm, self.eps))
        else:
            self.norm_meter.smoothendata(float(s))
            curr = self.norm_meter.smooth_val()
            if self.t >= self.window:
                self.delta_meter.smoothendata(abs(curr - self.prev_gradnorm) / max(self.prev_gradnorm, self.eps))
        smooth_delta = self.delta_meter.smooth_val()
        forced = self.t < self.warmup
        self.t, self.prev_gradnorm = self.t + 1, curr
        return forced or smooth_delta >= self.delta, (float("nan") if forced else smooth_delta)


class SelSync:
    """N replicas' significance votes, any vote syncs, plus the max_local cap."""

    def __init__(self, n: int, max_local: int | None = None, **significance):
        if max_local is not None and not (isinstance(max_local, int) and max_local >= 1):
            raise ValueError(f"max_local must be an integer >= 1 or None, got {max_local!r}")
        self.replicas = [Significance(**significance) for _ in range(n)]
        self.max_local = max_local
        self.local_run = 0   # local steps in a row just before this one

    def step(self, stats) -> bool:
        """stats: this step's statistic s_t of each replica."""
        votes = [rep.step(float(s))[0] for rep, s in zip(self.replicas, stats)]
        capped = self.max_local is not None and self.local_run >= self.max_local
        sync = any(votes) or capped
        self.local_run = 0 if sync else self.local_run + 1
        return sync


def significance_trace(s, **significance) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The authors' loop on a recorded trace s [T, N] (each replica's own test):
    (the step's sync [T], each replica's vote [T, N], its Delta_bar [T, N], NaN where forced)."""
    s = np.asarray(s, np.float64)
    replicas = [Significance(**significance) for _ in range(s.shape[1])]
    out = [[rep.step(x) for rep, x in zip(replicas, row)] for row in s]
    votes = np.array([[v for v, _ in row] for row in out], bool)
    return votes.any(axis=1), votes, np.array([[d for _, d in row] for row in out])


class Accordion:
    """N replicas' Accordion votes on the period of the next interval."""

    def __init__(self, n: int, interval: int, eta: float = 0.5, low: int = 2, high: int = 16):
        for name, v in (("interval", interval), ("low", low), ("high", high)):
            if not (isinstance(v, int) and v >= 1):
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        self.interval, self.eta, self.low, self.high = interval, eta, low, high
        self.t = 0
        self.period = low
        self.acc = [None] * n          # A_{i,k} of the current interval
        self.prev_norms = None         # n_{i,k-1}
        self.periods = [low]           # p_k of every interval begun so far

    def step(self, grads) -> bool:
        """grads: this step's gradient of each replica (any arrays; flattened together)."""
        start = self.t - self.t % self.interval
        sync = (self.t - start + 1) % self.period == 0
        for i, g in enumerate(grads):
            g = _flat(g)
            self.acc[i] = g if self.acc[i] is None else self.acc[i] + g
        self.t += 1
        if self.t % self.interval == 0:
            self._end_interval()
        return sync

    def critical(self, norms: np.ndarray) -> bool:
        if self.prev_norms is None:
            return True
        prev = self.prev_norms
        votes = [(p == 0) or abs(c - p) / p >= self.eta for c, p in zip(norms, prev)]
        return any(votes)

    def _end_interval(self) -> None:
        norms = np.array([np.linalg.norm(a) for a in self.acc])
        self.period = self.low if self.critical(norms) else self.high
        self.periods.append(self.period)
        self.prev_norms, self.acc = norms, [None] * len(self.acc)


def _flat(g) -> np.ndarray:
    """One replica's gradient (an array or a list of tensors) as one float64 vector."""
    parts = g if isinstance(g, (list, tuple)) else [g]
    return np.concatenate([np.ravel(np.asarray(x, np.float64)) for x in parts])


def run(trigger, per_step) -> list[bool]:
    """The trigger's decision at each step of `per_step` (one entry per step, each holding
    every replica's statistic or gradient)."""
    return [trigger.step(x) for x in per_step]
