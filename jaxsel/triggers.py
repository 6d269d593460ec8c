"""WHEN to synchronize: triggers evaluated on the device, inside the shard_map'd step.

A trigger returns a decision that must be identical on every replica (a collective
inside one branch of `lax.cond` deadlocks otherwise). Static triggers return a Python
bool; data-dependent ones reduce per-replica votes across replicas (any vote syncs).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
from jax import lax


def ewma_weights(window: int, alpha: float) -> jnp.ndarray:
    """Normalised weights (1-alpha)^k, k = 1 (newest) ... window (oldest)."""
    w = (1.0 - alpha) ** jnp.arange(1, window + 1, dtype=jnp.float32)
    return w / jnp.sum(w)


class Trigger:
    """Base: `__call__(tstate, grad_norm, step, axis) -> (tstate, decide, metrics)`."""

    #: bytes each replica contributes to the decision's own collective (a vote), per step
    vote_bytes: int = 0

    def init(self) -> Any:
        return {}

    def __call__(self, tstate, grad_norm, step, axis):
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class Always(Trigger):
    """Synchronize every step (BSP)."""

    def __call__(self, tstate, grad_norm, step, axis):
        return tstate, True, {}


@dataclasses.dataclass(frozen=True)
class Never(Trigger):
    """Never synchronize (independent replicas)."""

    def __call__(self, tstate, grad_norm, step, axis):
        return tstate, False, {}


@dataclasses.dataclass(frozen=True)
class Periodic(Trigger):
    """Synchronize when (step + 1) % period == 0: after every `period` local updates.

    PyTorch's PeriodicModelAverager averages when step % period == 0 counting from 0
    (so also right after the first step); jaxsel's count means "after `period` steps".
    """

    period: int

    def __post_init__(self):
        if int(self.period) < 1:
            raise ValueError(f"period must be an integer >= 1, got {self.period!r}")

    def __call__(self, tstate, grad_norm, step, axis):
        return tstate, (step + 1) % self.period == 0, {}


@dataclasses.dataclass(frozen=True)
class Significance(Trigger):
    """SelSync's significance test (Tyagi & Swany, CLUSTER'23).

    s_t = grad_norm (sum over tensors of per-tensor L2 norms); G_t = windowed EWMA of s
    over the last `window` values (defined for t >= W-1); Delta_t = |G_t - G_{t-1}| /
    max(G_{t-1}, eps) (t >= W); Delta_bar_t = the same windowed EWMA of Delta (t >= 2W-1).
    A replica votes while t < 2W-1 (warm-up) or when Delta_bar_t >= delta; any vote syncs.
    """

    delta: float = 0.3
    window: int = 25
    alpha: float = 0.01
    eps: float = 1e-12
    vote_bytes: int = 4  # one float32 psum per step

    def __post_init__(self):
        if not (float(self.delta) >= 0.0):
            raise ValueError(f"delta must be a number >= 0, got {self.delta!r}")
        if int(self.window) < 1:
            raise ValueError(f"window must be an integer >= 1, got {self.window!r}")
        if not (0.0 <= float(self.alpha) < 1.0):
            raise ValueError(f"alpha must be in [0, 1), got {self.alpha!r}")

    def init(self):
        w = self.window
        return {
            "t": jnp.zeros((), jnp.int32),
            "s_hist": jnp.zeros((w,), jnp.float32),   # newest first
            "g_prev": jnp.zeros((), jnp.float32),
            "d_hist": jnp.zeros((w,), jnp.float32),   # newest first
        }

    def local_vote(self, tstate, grad_norm):
        """The per-replica part: new window state, this replica's vote and Delta_bar."""
        w = self.window
        weights = ewma_weights(w, self.alpha)
        t = tstate["t"]
        s_hist = jnp.concatenate([grad_norm.astype(jnp.float32)[None], tstate["s_hist"][:-1]])
        g = jnp.dot(weights, s_hist)
        change = jnp.abs(g - tstate["g_prev"]) / jnp.maximum(tstate["g_prev"], self.eps)
        d_pushed = jnp.concatenate([change[None], tstate["d_hist"][:-1]])
        d_hist = jnp.where(t >= w, d_pushed, tstate["d_hist"])
        d_bar = jnp.dot(weights, d_hist)
        warm = t < 2 * w - 1
        vote = warm | (d_bar >= self.delta)
        new = {"t": t + 1, "s_hist": s_hist, "g_prev": g, "d_hist": d_hist}
        return new, vote, jnp.where(warm, jnp.nan, d_bar)

    def __call__(self, tstate, grad_norm, step, axis):
        new, vote, d_bar = self.local_vote(tstate, grad_norm)
        # a float32 sum, not an int32 max: XLA fuses it with the loss mean's all-reduce,
        # so a step that stays local runs one collective, as a plain local step does
        decide = lax.psum(vote.astype(jnp.float32), axis) > 0
        return new, decide, {"delta": d_bar, "vote": vote}
