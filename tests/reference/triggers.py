"""SelSync's significance rule with `max_local=K`, and Accordion's adaptive period
(issue 25, items 4 and 6). Both step one step at a time (`step(...) -> sync?`), so they run
open loop on recorded statistics or inside a closed-loop simulation.

Significance (jaxsel/triggers.py `Significance`, transcribed as it is at main 5b69bb5):
    per replica, step t = 0, 1, ...; s_t = its gradient statistic (jaxsel: the sum over
    tensors of each tensor's L2 norm); W = window; weights w_k = (1-alpha)^k / sum_j
    (1-alpha)^j for k = 1 (newest) ... W (oldest).
    s_hist <- [s_t, s_hist[:-1]]   (starts as W zeros)
    G_t = w . s_hist
    if t >= W: d_hist <- [|G_t - G_{t-1}| / max(G_{t-1}, eps), d_hist[:-1]]   (starts as W zeros)
    D_t = w . d_hist
    vote_t = (t < 2W - 1) or (D_t >= delta)
    G_{t-1} for the next step <- G_t (G_{-1} = 0).
    The step syncs when any replica votes.
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

import numpy as np


def ewma_weights(window: int, alpha: float) -> np.ndarray:
    w = (1.0 - alpha) ** np.arange(1, window + 1, dtype=np.float64)
    return w / w.sum()


class Significance:
    """One replica's significance test."""

    def __init__(self, delta: float = 0.3, window: int = 25, alpha: float = 0.01, eps: float = 1e-12):
        self.delta, self.window, self.eps = delta, window, eps
        self.weights = ewma_weights(window, alpha)
        self.t, self.g_prev = 0, 0.0
        self.s_hist, self.d_hist = np.zeros(window), np.zeros(window)

    def step(self, s: float) -> tuple[bool, float]:
        """(vote, D_t; NaN during the warm-up)."""
        w = self.window
        self.s_hist = np.concatenate([[s], self.s_hist[:-1]])
        g = float(self.weights @ self.s_hist)
        if self.t >= w:
            change = abs(g - self.g_prev) / max(self.g_prev, self.eps)
            self.d_hist = np.concatenate([[change], self.d_hist[:-1]])
        d_bar = float(self.weights @ self.d_hist)
        warm = self.t < 2 * w - 1
        self.t, self.g_prev = self.t + 1, g
        return warm or d_bar >= self.delta, (float("nan") if warm else d_bar)


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
