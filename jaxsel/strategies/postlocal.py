"""Post-local SGD (Lin et al., ICLR'20): BSP until `switch_step` (typically the first
learning-rate decay), then local SGD with parameter averaging every `period` steps,
counted from the switch: step t >= switch_step syncs when (t - switch_step + 1) % period == 0."""
from __future__ import annotations

import dataclasses
from typing import Any

from jax import lax

from .base import Strategy, to_varying
from .bsp import BSP
from .localsgd import LocalSGD


@dataclasses.dataclass(frozen=True)
class PostLocalSGD(Strategy):
    """switch_step: first local step (None: half of `total_steps`); period: local SGD's
    averaging period after it; aggregator: used by both phases."""

    switch_step: int | None = None
    period: int = 16
    aggregator: Any = "mean"
    sync_model_state: bool = True
    total_steps: int | None = None
    name: str = "postlocal"

    def __post_init__(self):
        if self.switch_step is None:
            if self.total_steps is None:
                raise ValueError("PostLocalSGD needs switch_step (or total_steps, to switch at half of it)")
            object.__setattr__(self, "switch_step", int(self.total_steps) // 2)
        if int(self.switch_step) < 0:
            raise ValueError(f"switch_step must be an integer >= 0, got {self.switch_step!r}")
        self.phases  # validates period and aggregator

    @property
    def phases(self):
        bsp = BSP(aggregator=self.aggregator, sync_model_state=self.sync_model_state)
        local = LocalSGD(period=self.period, aggregator=self.aggregator, sync_model_state=self.sync_model_state)
        return bsp, local

    def init(self, params, opt_state, n):
        bsp, local = self.phases
        return {"bsp": bsp.init(params, opt_state, n), "local": local.init(params, opt_state, n)}

    def apply(self, rs, grads, grad_norm, ctx):
        bsp, local = self.phases
        start = int(self.switch_step)

        def run(phase, key, phase_ctx):
            def branch(r):
                st = r.strategy_state
                r, shared, _ = phase.apply(r.replace(strategy_state=st[key]), grads, grad_norm, phase_ctx)
                return to_varying(r.replace(strategy_state={**st, key: r.strategy_state}), ctx.axis), shared
            return branch

        return (*lax.cond(ctx.step < start, run(bsp, "bsp", ctx),
                          run(local, "local", dataclasses.replace(ctx, step=ctx.step - start)), rs), {})

    def timing(self, n: int) -> dict:
        return self.phases[1].timing(n)

    def describe(self) -> str:
        return f"{self.name} (BSP until step {self.switch_step}, then period {self.period})"
