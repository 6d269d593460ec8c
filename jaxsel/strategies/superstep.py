"""Superstep averaging (the student slides' study): every replica trains on its own for
E epochs, then the parameters are replaced by their aggregate (mean, median, min, max,
trimmed:K, weighted, random); period = E x steps_per_epoch."""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from ..core.budget import sweep
from ..core.sync import STRATEGIES
from ..core.triggers import Periodic
from .payload import ModelPayload
from .traits import method_traits
from .triggered import Triggered


@STRATEGIES.register("superstep")
@method_traits(budget=sweep("epochs", 0.25, 1.0, 4.0))
@dataclasses.dataclass(frozen=True)
class Superstep(ModelPayload, Triggered):
    """Sync every `epochs` epochs (fractions allowed; at least every step). The training
    loop passes `steps_per_epoch`; syncs fall after step t with (t + 1) % period == 0."""

    epochs: float = 1.0
    """epochs between two averagings (fractions allowed; at least one step)"""
    steps_per_epoch: int | None = None
    period: int = dataclasses.field(init=False, default=1)
    """the steps between two averagings, settled from `epochs` (not an option of its own)"""
    name: ClassVar[str] = "superstep"
    sync: ClassVar[str] = "model"
    context_fields: ClassVar[tuple[str, ...]] = ("steps_per_epoch",)
    # the period, read only in the trigger's modulus, and the epochs it is settled from (read
    # on the host only): the budget points of one run length train as one program
    cell_options: ClassVar[tuple[str, ...]] = ("epochs", "period")

    def __post_init__(self):
        if self.steps_per_epoch is None or int(self.steps_per_epoch) < 1:
            raise ValueError(f"Superstep needs steps_per_epoch >= 1 (the training loop passes it), "
                             f"got {self.steps_per_epoch!r}")
        if not float(self.epochs) > 0:
            raise ValueError(f"Superstep epochs must be a number > 0, got {self.epochs!r}")
        self.settle(period=max(1, int(round(float(self.epochs) * int(self.steps_per_epoch)))))
        super().__post_init__()

    @property
    def trigger(self):
        return Periodic(self.period)

    def describe(self) -> str:
        return f"{super().describe()} (every {self.epochs:g} epochs = {self.period} steps)"
