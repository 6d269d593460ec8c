"""DiLoCo (Douillard et al., 2023): an inner optimizer for H local steps, then an outer
optimizer step on the averaged pseudo-gradient.

Every replica keeps its inner optimizer (the step's optimizer) state across rounds.
After every `inner_steps`-th local step (when (t + 1) % H == 0):

    delta   = w_global - aggregate(w_i)              the pseudo-gradient
    w_global <- outer_optimizer(w_global, delta)      Nesterov SGD, lr 0.7, momentum 0.9
    w_i     <- w_global

The global weights and outer optimizer state are identical on every replica but stored
with the replica axis (`strategy_state["global"]`, `["outer"]`), like all strategy state.
With outer SGD at lr 1 and no momentum this is exactly local SGD with period H.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import optax
from jax import lax

from ..aggregate import get_aggregator
from ..state import tree_bytes
from ..triggers import Periodic
from .base import Strategy, byte_count, local_update, to_varying


@dataclasses.dataclass(frozen=True)
class DiLoCo(Strategy):
    """inner_steps: H; outer_lr / outer_momentum / nesterov: the outer SGD;
    aggregator: how local weights are combined; sync_model_state: average BatchNorm
    statistics at each outer step."""

    inner_steps: int = 500
    outer_lr: float = 0.7
    outer_momentum: float = 0.9
    nesterov: bool = True
    aggregator: Any = "mean"
    sync_model_state: bool = True
    name: str = "diloco"

    def __post_init__(self):
        Periodic(int(self.inner_steps))  # validates H >= 1
        if not float(self.outer_lr) > 0.0:
            raise ValueError(f"outer_lr must be a number > 0, got {self.outer_lr!r}")
        if not 0.0 <= float(self.outer_momentum) < 1.0:
            raise ValueError(f"outer_momentum must be in [0, 1), got {self.outer_momentum!r}")
        object.__setattr__(self, "aggregator", get_aggregator(self.aggregator))

    @property
    def outer(self) -> optax.GradientTransformation:
        momentum = float(self.outer_momentum) or None
        return optax.sgd(float(self.outer_lr), momentum=momentum, nesterov=bool(self.nesterov and momentum))

    def init(self, params, opt_state, n):
        return {"global": params, "outer": self.outer.init(params)}

    def outer_step(self, rs, ctx):
        st = rs.strategy_state
        agg = lambda tree: self.aggregator(tree, ctx.axis, ctx)
        delta = jax.tree.map(lambda g, a: g - a, st["global"], agg(rs.params))
        updates, outer = self.outer.update(delta, st["outer"], st["global"])
        global_w = optax.apply_updates(st["global"], updates)
        rs = rs.replace(params=global_w, strategy_state={**st, "global": global_w, "outer": outer})
        if self.sync_model_state:
            rs = rs.replace(model_state=agg(rs.model_state))
        return to_varying(rs, ctx.axis)

    def apply(self, rs, grads, grad_norm, ctx):
        rs = local_update(rs, grads, ctx)
        _, decide, _ = Periodic(int(self.inner_steps))({}, grad_norm, ctx.step, ctx.axis)
        rs = lax.cond(decide, lambda r: self.outer_step(r, ctx), lambda r: to_varying(r, ctx.axis), rs)
        moved = tree_bytes(rs.params) + (tree_bytes(rs.model_state) if self.sync_model_state else 0)
        return rs, {"synced": decide, "bytes_allreduced": byte_count(moved, decide), "vote_bytes": byte_count(0)}, {}

    def eval_params(self, state):
        """DiLoCo's model is the global one; the replicas' weights are its local drafts."""
        return state.strategy_state["global"]

    def describe(self) -> str:
        return f"{self.name} (H={self.inner_steps}, outer lr {self.outer_lr:g}, momentum {self.outer_momentum:g})"
