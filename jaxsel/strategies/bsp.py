"""BSP: average gradients over all replicas on every step, then apply the optimizer."""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from ..core.budget import sweep
from ..core.sync import STRATEGIES
from ..core.triggers import Always
from .payload import GradientPayload
from .traits import method_traits
from .triggered import Triggered


@STRATEGIES.register("bsp")
@method_traits(budget=sweep("compress", None, "topk:0.1", "topk:0.01"))
@dataclasses.dataclass(frozen=True)
class BSP(GradientPayload, Triggered):
    """Bulk-synchronous parallel. With N replicas on batches of b it equals one device
    on the concatenated N*b batch (for a loss that is a mean over examples)."""

    name: ClassVar[str] = "bsp"
    sync: ClassVar[str] = "grads"

    @property
    def trigger(self):
        return Always()
