"""Post-local SGD (Lin et al., ICLR'20): BSP until `switch_step` (typically the first
learning-rate decay), then local SGD with parameter averaging every `period` steps,
counted from the switch: step t >= switch_step syncs when (t - switch_step + 1) % period == 0.

Two phase triggers on one step: `Before(switch_step)` aggregates the gradients (BSP),
`Periodic(period, start=switch_step)` the updated parameters (local SGD).
"""
from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import jax.numpy as jnp

from ..core import compression
from ..core.aggregate import Bound, get_aggregator
from ..core.sync import STRATEGIES
from ..core.triggers import Before, Periodic
from .triggered import Triggered, TriggeredState, sample_weight, sync_after_update, sync_before_update, update


@STRATEGIES.register("postlocal")
@dataclasses.dataclass(frozen=True)
class PostLocalSGD(Triggered):
    """switch_step: first local step (None: half of `total_steps`); period: local SGD's
    averaging period after it; aggregator: used by both phases."""

    switch_step: int | None = None
    period: int = 16
    aggregator: Any = "mean"
    sync_model_state: bool = True
    total_steps: int | None = None
    compress: str | None = None
    name: ClassVar[str] = "postlocal"
    sync: ClassVar[str] = "model"
    context_fields: ClassVar[tuple[str, ...]] = ("total_steps",)

    def __post_init__(self):
        if self.switch_step is None:
            if self.total_steps is None:
                raise ValueError("PostLocalSGD needs switch_step (or total_steps, to switch at half of it)")
            object.__setattr__(self, "switch_step", int(self.total_steps) // 2)
        if isinstance(self.switch_step, bool) or int(self.switch_step) < 0:
            raise ValueError(f"switch_step must be an integer >= 0, got {self.switch_step!r}")
        self.trigger  # validates the period
        get_aggregator(self.aggregator)
        self.check_compress()

    @property
    def trigger(self):
        """The local phase's trigger (the BSP phase's is `Before(switch_step)`)."""
        return Periodic(self.period, start=int(self.switch_step))

    def apply(self, rs, grads, stats, ctx):
        st: TriggeredState = rs.strategy_state
        bsp_phase = Before(int(self.switch_step))((), stats, ctx.axis)[1]
        _, averaging, _ = self.trigger((), stats, ctx.axis)
        combiner = self.combiner()

        def agg(mode):
            weight = ctx.weight if st.samples is None else sample_weight(mode, st.samples, ctx.weight)
            return Bound(combiner, ctx.axis, dataclasses.replace(ctx, weight=weight))

        rs, grads = sync_before_update(rs, grads, bsp_phase, ctx, agg("grads"), what="grads",
                                            model_state=self.sync_model_state, compress=self.compress)
        rs = update(rs, grads, ctx)
        rs = sync_after_update(rs, averaging, ctx, agg("model"), model_state=self.sync_model_state,
                                      compress=self.compress)
        samples = st.samples   # counted in the local phase only, from 0 at each sync
        if samples is not None:
            samples = jnp.where(bsp_phase | averaging, 0.0, samples + ctx.weight)
        return rs.replace(strategy_state=TriggeredState((), samples))

    def init(self, params, opt_state, n):
        return super().init(params, opt_state, n)._replace(trigger=())


    def describe(self) -> str:
        return f"{self.name}{compression.tags(self.compress)} (BSP until step {self.switch_step}, then period {self.period})"
