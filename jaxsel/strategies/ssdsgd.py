"""SSD-SGD (Xu et al., several-steps-delay SGD): global weights advance synchronously,
local weights run ahead on their own gradients and are pulled back every k steps (`period`).

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
are `state.strategy_state.global_params` and equal the local ones right after each pull.
The pull is a trigger: `Before(warmup_steps) | Periodic(k, start=warmup_steps)`.
"""
from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, NamedTuple

import jax

from ..compat.renamed_options import renamed
from ..core.budget import sweep
from ..core.checks import as_float, as_int
from ..core.aggregate import get_aggregator
from ..core.sync import STRATEGIES, Strategy, local_cond, local_update, tree_where
from ..core.triggers import AnyOf, Before, Periodic
from .payload import Aggregated
from .traits import method_traits


class SSDState(NamedTuple):
    global_params: Any   # the synchronously updated model (what the run is evaluated on)
    anchor: Any          # the last global weights this replica pulled
    local_opt: Any       # the local steps' own optimizer state


@STRATEGIES.register("ssdsgd")
# the every-step all-reduce runs behind the next local step: "overlapped"
@method_traits(budget=sweep("period", None, 20), background="overlapped")
@renamed(k="period")   # the last release's name of the pull period
@dataclasses.dataclass(frozen=True)
class SSDSGD(Aggregated, Strategy):
    """period: k, the pull period (the last release's `k` still sets it, warned); warmup_steps: BSP steps first (None: one epoch when the loop
    passes steps_per_epoch, else 0); local_lr_scale: local step size over the global
    one; glu_beta: GLU correction weight (None: 1/k); aggregator: for the gradients."""

    period: int = 5
    """k, the pull period: the global weights are pulled every k steps"""
    warmup_steps: int | None = None
    """BSP steps first (none: one epoch)"""
    local_lr_scale: float = 4.0
    """local step size over the global one"""
    glu_beta: float | None = None
    """weight of the GLU correction (none: 1/k)"""
    steps_per_epoch: int | None = None
    name: ClassVar[str] = "ssdsgd"
    context_fields: ClassVar[tuple[str, ...]] = ("steps_per_epoch",)
    # the pull period, read only in the trigger's modulus, and the GLU weight (1/k unless
    # given), read only in arithmetic: the budget points train as one program
    cell_options: ClassVar[tuple[str, ...]] = ("period", "glu_beta")

    def __post_init__(self):
        if isinstance(self.period, bool) or int(self.period) < 1:
            raise ValueError(f"SSD-SGD pull period (period, the paper's k) must be an integer >= 1, got {self.period!r}")
        if self.warmup_steps is None:
            self.settle(warmup_steps=int(self.steps_per_epoch or 0))
        if int(self.warmup_steps) < 0:
            raise ValueError(f"warmup_steps must be an integer >= 0, got {self.warmup_steps!r}")
        if not float(self.local_lr_scale) > 0.0:
            raise ValueError(f"local_lr_scale must be a number > 0, got {self.local_lr_scale!r}")
        if self.glu_beta is None:
            self.settle(glu_beta=1.0 / int(self.period))
        if not 0.0 <= float(self.glu_beta) <= 1.0:
            raise ValueError(f"glu_beta must be in [0, 1], got {self.glu_beta!r}")
        self.settle(aggregator=get_aggregator(self.aggregator))

    @property
    def pull(self) -> AnyOf:
        """Warm-up steps and every k-th step after them set the local weights to the global ones."""
        return AnyOf((Before(int(self.warmup_steps)), Periodic(as_int(self.period), start=int(self.warmup_steps))))

    def init(self, params, opt_state, n):
        return SSDState(params, params, opt_state)

    def local_step(self, grads, params, local_opt, anchor, ctx):
        """The replica's own step at local_lr_scale x lr, with the GLU pull toward `anchor`."""
        updates, local_opt = ctx.optimizer.update(grads, local_opt, params)
        scale, beta = float(self.local_lr_scale), as_float(self.glu_beta)
        local = jax.tree.map(lambda w, u, a: (w + scale * u + beta * (a - w)).astype(w.dtype), params, updates, anchor)
        return local, local_opt

    def apply(self, rs, grads, stats, ctx):
        st: SSDState = rs.strategy_state
        _, pulled, _ = self.pull(((), ()), stats, ctx.axis)
        # every step, but the replicas wait on it only where they pull the global weights
        mean_grads = ctx.sync(True, grads, self.aggregator, blocking=pulled)
        global_w, opt_state = local_update(st.global_params, rs.opt_state, mean_grads, ctx.optimizer)
        warm = stats.step < int(self.warmup_steps)
        params, local_opt = local_cond(warm, lambda p, o, a: (p, o),
                                       lambda p, o, a: self.local_step(grads, p, o, a, ctx),
                                       rs.params, st.local_opt, st.anchor)
        params, anchor = tree_where(pulled, (global_w, global_w), (params, st.anchor))
        return rs.replace(params=params, opt_state=opt_state, strategy_state=SSDState(global_w, anchor, local_opt))


    def eval_params(self, state):
        """SSD-SGD's model is the global one; the replicas' weights are its local drafts."""
        return state.strategy_state.global_params

    def describe(self) -> str:
        return f"{self.name} (k={self.period}, warm-up {self.warmup_steps} BSP steps)"
