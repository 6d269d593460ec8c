"""Post-local SGD (Lin et al., ICLR'20): BSP until `switch_step` (typically the first
learning-rate decay), then local SGD with parameter averaging every `period` steps,
counted from the switch: step t >= switch_step syncs when (t - switch_step + 1) % period == 0.

The composition `Phases(BSP(...), switch_step, LocalSGD(period, ...))`: the BSP phase
aggregates the gradients, the local phase the updated parameters, with one aggregator and
codec for both and the model state (BatchNorm statistics) averaged at every sync.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from ..core.budget import sweep
from ..core import compression
from ..core.checks import check_int
from ..core.sync import STRATEGIES, Strategy
from ..core.triggers import Periodic
from .bsp import BSP
from .localsgd import LocalSGD
from .feedback import refuse_in_composition
from .payload import ModelSync
from .phases import Phases
from .traits import method_traits


@STRATEGIES.register("postlocal")
@method_traits(budget=sweep("period", 4, 32))
@dataclasses.dataclass(frozen=True)
class PostLocalSGD(ModelSync, Strategy):
    """switch_step: first local step (None: half of `total_steps`); period: local SGD's
    averaging period after it; aggregator, sync_model_state, compress: both phases'."""

    switch_step: int | None = None
    """the first local step, BSP before it (none: half of the run)"""
    period: int = 16
    """local SGD's averaging period after the switch"""
    total_steps: int | None = None
    name: ClassVar[str] = "postlocal"
    context_fields: ClassVar[tuple[str, ...]] = ("total_steps",)
    cell_options: ClassVar[tuple[str, ...]] = ("period",)   # read only in the local phase's modulus

    def __post_init__(self):
        if self.switch_step is None:
            if self.total_steps is None:
                raise ValueError("PostLocalSGD needs switch_step (or total_steps, to switch at half of it)")
            self.settle(switch_step=int(self.total_steps) // 2)
        check_int("switch_step", self.switch_step, 0)
        self.settle(compress=self.phases.then.compress)   # checked ("none" -> None) by the phases
        refuse_in_composition(self.compress, self.name)

    @property
    def phases(self) -> Phases:
        sync = dict(aggregator=self.aggregator, sync_model_state=self.sync_model_state, compress=self.compress)
        return Phases(BSP(**sync), int(self.switch_step), LocalSGD(period=self.period, **sync))

    @property
    def trigger(self) -> Periodic:
        """The local phase's averaging (the sync-horizon warning reads its first step)."""
        return Periodic(self.period, start=int(self.switch_step))

    def init(self, params, opt_state, n):
        return self.phases.init(params, opt_state, n)

    def apply(self, rs, grads, stats, ctx):
        return self.phases.apply(rs, grads, stats, ctx)

    def describe(self) -> str:
        return f"{self.name}{compression.tags(self.compress)} (BSP until step {self.switch_step}, then period {self.period})"
