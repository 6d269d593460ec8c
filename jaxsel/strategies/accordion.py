"""Accordion (Agarwal et al., MLSys 2021): local SGD whose averaging period adapts,
short in critical regimes of training and long elsewhere."""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from ..core.budget import Budget
from ..core.checks import as_int
from ..core.sync import STRATEGIES
from ..core.triggers import AccordionPeriod
from .payload import ModelPayload
from .traits import method_traits
from .triggered import Triggered


@STRATEGIES.register("accordion")
@method_traits(budget=Budget("low, high", ({}, {"low": 4, "high": 32}, {"low": 8, "high": 64})))
@dataclasses.dataclass(frozen=True)
class Accordion(ModelPayload, Triggered):
    """Local SGD (the updated parameters, and by default BatchNorm statistics, aggregated
    at a sync) on Accordion's trigger: every `interval` steps the norm of each replica's
    gradient summed over the interval is compared with the previous interval's; a
    relative change >= `eta` on any replica (or the first interval) marks a critical
    regime, run with period `low`, else `high` (the trigger
    `jaxsel.core.triggers.AccordionPeriod` has the exact rule). The paper's second rule,
    a low period after every learning-rate decay, is not part of it."""

    interval: int = 100
    """steps between two looks at each replica's gradient norm summed over the interval"""
    eta: float = 0.5
    """relative change of that norm, against the previous interval's, that marks a critical regime"""
    low: int = 2
    """averaging period in a critical regime"""
    high: int = 16
    """averaging period otherwise"""
    name: ClassVar[str] = "accordion"
    sync: ClassVar[str] = "model"
    cell_options: ClassVar[tuple[str, ...]] = ("low", "high")   # the periods the trigger selects between

    @property
    def trigger(self):
        return AccordionPeriod(interval=int(self.interval), eta=float(self.eta), low=as_int(self.low),
                               high=as_int(self.high))

    def describe(self) -> str:
        return (f"{super().describe()} (interval {self.interval}, period {self.low} if the gradient's norm "
                f"moved >= {self.eta:g}, else {self.high})")
