"""SSD-SGD (Xu et al., several-steps-delay SGD): global weights advance synchronously,
local weights run ahead on their own gradients and are pulled back every k steps.

Warm-up (steps t < warmup_steps): plain BSP; global = local. Afterwards, at each step:

    g_i        = gradient at the local weights w_i (what the step computes)
    w_g        <- optimizer(w_g, aggregate(g))          the synchronous global update
    w_i        <- w_i + local_lr_scale * u_i + beta * (a - w_i)      (GLU)
    every k-th step after warm-up: w_i <- w_g and a <- w_g           (the pull)

where u_i is the replica's own optimizer step on g_i (separate local optimizer state, so
local_lr_scale * u_i is a step at local_lr_scale x lr; the reference scripts use 4x) and
a is the last pulled global weights. The GLU term beta * (a - w_i) corrects the local
weights toward the last global weights the replica has; beta = 0 is plain local steps
between pulls, beta = 1 restarts every local step from the last global weights (the
one-step-delay form of OD-SGD), the default beta = 1/k spreads the correction over the
period. Gradients are all-reduced every step (counted in `bytes_allreduced`), but the
local trajectory uses them only at the pull, so no replica waits on them before it:
`synced` is True on warm-up and pull steps only.

`state.params` are the local weights (where gradients are taken); the global weights
are `state.strategy_state["global"]` and equal the local ones right after each pull.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax
from jax import lax

from ..aggregate import get_aggregator
from ..state import tree_bytes
from .base import Strategy, byte_count, local_update, to_varying


@dataclasses.dataclass(frozen=True)
class SSDSGD(Strategy):
    """k: pull period; warmup_steps: BSP steps first (None: one epoch when the loop
    passes steps_per_epoch, else 0); local_lr_scale: local step size over the global
    one; glu_beta: GLU correction weight (None: 1/k); aggregator: for the gradients."""

    k: int = 5
    warmup_steps: int | None = None
    local_lr_scale: float = 4.0
    glu_beta: float | None = None
    aggregator: Any = "mean"
    steps_per_epoch: int | None = None
    name: str = "ssdsgd"

    def __post_init__(self):
        if int(self.k) < 1:
            raise ValueError(f"SSD-SGD pull period k must be an integer >= 1, got {self.k!r}")
        if self.warmup_steps is None:
            object.__setattr__(self, "warmup_steps", int(self.steps_per_epoch or 0))
        if int(self.warmup_steps) < 0:
            raise ValueError(f"warmup_steps must be an integer >= 0, got {self.warmup_steps!r}")
        if not float(self.local_lr_scale) > 0.0:
            raise ValueError(f"local_lr_scale must be a number > 0, got {self.local_lr_scale!r}")
        if self.glu_beta is None:
            object.__setattr__(self, "glu_beta", 1.0 / int(self.k))
        if not 0.0 <= float(self.glu_beta) <= 1.0:
            raise ValueError(f"glu_beta must be in [0, 1], got {self.glu_beta!r}")
        object.__setattr__(self, "aggregator", get_aggregator(self.aggregator))

    def init(self, params, opt_state, n):
        return {"global": params, "anchor": params, "local_opt": opt_state}

    def warmup(self, rs, mean_grads, ctx):
        rs = local_update(rs, mean_grads, ctx)
        st = {**rs.strategy_state, "global": rs.params, "anchor": rs.params}
        return to_varying(rs.replace(strategy_state=st), ctx.axis)

    def delayed(self, rs, grads, mean_grads, ctx):
        st = rs.strategy_state
        g_updates, g_opt = ctx.optimizer.update(mean_grads, rs.opt_state, st["global"])
        global_w = optax.apply_updates(st["global"], g_updates)
        l_updates, l_opt = ctx.optimizer.update(grads, st["local_opt"], rs.params)
        scale, beta = float(self.local_lr_scale), float(self.glu_beta)
        local_w = jax.tree.map(lambda w, u, a: (w + scale * u + beta * (a - w)).astype(w.dtype),
                               rs.params, l_updates, st["anchor"])
        pull = (ctx.step - int(self.warmup_steps) + 1) % int(self.k) == 0
        local_w, anchor = lax.cond(pull, lambda: to_varying((global_w, global_w), ctx.axis),
                                   lambda: to_varying((local_w, st["anchor"]), ctx.axis))
        st = {**st, "global": global_w, "anchor": anchor, "local_opt": l_opt}
        return to_varying(rs.replace(params=local_w, opt_state=g_opt, strategy_state=st), ctx.axis), pull

    def apply(self, rs, grads, grad_norm, ctx):
        mean_grads = self.aggregator(grads, ctx.axis, ctx)  # reduced every step
        warm = ctx.step < int(self.warmup_steps)
        rs, pull = lax.cond(
            warm,
            lambda r: (self.warmup(r, mean_grads, ctx), jnp.asarray(False)),
            lambda r: self.delayed(r, grads, mean_grads, ctx),
            rs,
        )
        shared = {
            "synced": warm | pull,
            "bytes_allreduced": byte_count(tree_bytes(grads)),
            "vote_bytes": byte_count(0),
        }
        return rs, shared, {}

    def timing(self, n: int) -> dict:
        """The every-step gradient all-reduce runs behind the next local step (the method's point)."""
        return {**super().timing(n), "collective": get_aggregator(self.aggregator).collective, "background": "overlapped"}

    def eval_params(self, state):
        """SSD-SGD's model is the global one; the replicas' weights are its local drafts."""
        return state.strategy_state["global"]

    def describe(self) -> str:
        return f"{self.name} (k={self.k}, warm-up {self.warmup_steps} BSP steps)"
